"""Trace draft-method names -> torch-engine drafters, built once per worker.

The method names are `simctl.policies.draft_methods.DraftMethod`'s. Where the live
backend has no faithful drafter for a method it substitutes the closest one and says so:
the executor counts every substitution in run.json's "approximated".

Parameters of the model-free drafters live here (the n-gram match lengths in
`policies.suffix_tree`, which the simulator's exact replay shares), because
`live.acceptance` replays the same drafters offline over recorded tokens and must propose
exactly what the engine would.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from simctl.policies.draft_methods import ALL_METHODS, DraftMethod
from simctl.policies.suffix_tree import NGRAM_MAX_MATCH, NGRAM_MIN_MATCH

if TYPE_CHECKING:
    from simctl.live.torch_engine import Drafter

# The drafters live in the torch engine, which imports torch: they are imported where they
# are built, so that this module (and the recorder that reads MODEL_FREE) imports without it.

# vLLM's usual n-gram settings (prompt_lookup_min 2, max 4): a 1-token match proposes
# too often at low acceptance, which costs verify width on every iteration.
NGRAM_MIN_N = NGRAM_MIN_MATCH  # policies.suffix_tree: the simulator replays the same
NGRAM_MAX_N = NGRAM_MAX_MATCH
SUFFIX_MAX_DEPTH = 32
# the methods `model_free_drafter` builds (history runs as suffix: `DrafterSet.get`)
MODEL_FREE = (DraftMethod.NGRAM.value, DraftMethod.SUFFIX.value)
KNOWN = ALL_METHODS


class UnknownMethodError(ValueError):
    pass


def model_free_drafter(method: str) -> Drafter:
    from simctl.live.torch_engine import NgramDrafter, SuffixDrafter

    if method == "ngram":
        return NgramDrafter(NGRAM_MIN_N, NGRAM_MAX_N)
    if method == "suffix":
        return SuffixDrafter(SUFFIX_MAX_DEPTH)
    raise UnknownMethodError(f"'{method}' is not a model-free draft method ({', '.join(MODEL_FREE)})")


@dataclass
class DrafterSet:
    """Lazily built drafters shared by one worker's requests (one object per method, so the
    engine batches model drafters across the worker's requests).

    `target` is the rollout model: the W4 self-drafter is a fake-quantised copy of it, built
    once per run (`shared` is the cache shared by all workers' sets).
    """

    target: Any
    small: Any | None = None
    shared: dict[str, Any] = field(default_factory=dict)
    _built: dict[str, Drafter] = field(default_factory=dict)

    def get(self, method: str) -> tuple[Drafter, str | None]:
        """(drafter, approximation note or None) for a trace draft method."""
        if method not in KNOWN:
            raise UnknownMethodError(f"unknown draft method '{method}'; known: {', '.join(KNOWN)}")
        note = None
        actual = method
        if method == "history":
            actual, note = "suffix", "history drafter -> suffix tree over the request and its group"
        elif method == "eagle":
            actual, note = "w4_self", "eagle drafter -> W4 self-drafter (no trained EAGLE head)"
        elif method in ("draft_small", "draft_medium") and self.small is None:
            actual, note = "w4_self", f"{method} -> W4 self-drafter (no small draft model given)"
        elif method == "draft_medium":
            note = "draft_medium -> the one small draft model given"
        if actual not in self._built:
            self._built[actual] = self._build(actual)
        return self._built[actual], note

    def _build(self, method: str) -> Drafter:
        from simctl.live.torch_engine import ModelDrafter, quantize_w4_rtn

        if method in MODEL_FREE:
            return model_free_drafter(method)
        if method == "w4_self":
            if "w4" not in self.shared:
                self.shared["w4"] = quantize_w4_rtn(self.target)
            return ModelDrafter(self.shared["w4"])
        assert self.small is not None  # get() runs draft_small/medium as w4_self without one
        return ModelDrafter(self.small)
