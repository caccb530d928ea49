"""The drafting methods, listed once for traces, the simulator, live backends and policies.

A method name appears in three places that must agree: a trace's ``accept_<method>``
column, the simulator's drafter pricing, and the live backends' drafters. Each is keyed by
:class:`DraftMethod`; a string that is not a member is not a method.

>>> DraftMethod("ngram").model_free
True
>>> DraftMethod.W4_SELF.value
'w4_self'
"""

from __future__ import annotations

from enum import StrEnum


class DraftMethod(StrEnum):
    """A way of proposing draft tokens. Values are the names used in traces and on the CLI."""

    NGRAM = "ngram"
    SUFFIX = "suffix"
    HISTORY = "history"
    DRAFT_SMALL = "draft_small"
    DRAFT_MEDIUM = "draft_medium"
    W4_SELF = "w4_self"
    EAGLE = "eagle"

    @property
    def description(self) -> str:
        """One line for help texts and the trace schema."""
        return _DESCRIPTIONS[self]

    @property
    def model_free(self) -> bool:
        """True where drafts come from tokens alone (no draft model runs), so a trace's
        token ids replay acceptance exactly."""
        return self in _MODEL_FREE


_DESCRIPTIONS: dict[DraftMethod, str] = {
    DraftMethod.NGRAM: "prompt-lookup n-gram drafter over the request's own tokens",
    DraftMethod.SUFFIX: "suffix-tree drafter over the request's and its group's tokens (Seer)",
    DraftMethod.HISTORY: "suffix tree over the previous epoch's responses to the prompt (RhymeRL)",
    DraftMethod.DRAFT_SMALL: "small draft model, ~0.5B for a 32B target (SpecActor)",
    DraftMethod.DRAFT_MEDIUM: "medium draft model, ~1.5B for a 32B target (SpecActor)",
    DraftMethod.W4_SELF: "W4 RTN quantized copy of the target (EfficientRollout)",
    DraftMethod.EAGLE: "single-layer EAGLE-style drafter trained on the target (TLT)",
}
_MODEL_FREE = frozenset({DraftMethod.NGRAM, DraftMethod.SUFFIX, DraftMethod.HISTORY})

#: Every method's value, in declaration order.
ALL_METHODS: tuple[str, ...] = tuple(m.value for m in DraftMethod)
