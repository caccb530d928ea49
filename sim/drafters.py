"""Which cost-model drafter prices each drafting method.

Keyed by the one list of methods, :class:`~simctl.policies.draft_methods.DraftMethod`
(a trace's ``accept_<method>`` columns use the same names). Drafter sizes are those for a
~32B target (SpecActor §5.1).
"""

from __future__ import annotations

from collections.abc import Mapping

from simctl.policies.draft_methods import DraftMethod

# Typed by str keys so that a method name read from a trace or the CLI looks it up directly
# (a DraftMethod is a str: equal names hash alike).
DRAFTERS: Mapping[str, str] = {
    DraftMethod.NGRAM: "ngram",
    DraftMethod.SUFFIX: "suffix",
    DraftMethod.HISTORY: "history",
    DraftMethod.DRAFT_SMALL: "model:qwen2.5-0.5b",
    DraftMethod.DRAFT_MEDIUM: "model:qwen2.5-1.5b",
    DraftMethod.W4_SELF: "w4-self",
    DraftMethod.EAGLE: "eagle",
}
assert set(DRAFTERS) == set(DraftMethod), "every DraftMethod needs a cost-model drafter"
