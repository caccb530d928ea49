"""How a model-free draft method drafts (`DraftRule`), shared by a policy and the executor
that replays it, so the simulator reproduces exactly what the policy would draft live.

A policy hands its rules to the executor through `Policy.draft_rules`; the suffix tree that
drafts by them is `policies/suffix_tree.py`, the simulator's exact replay of it
`sim/token_replay.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Aimd:
    """RhymeRL §5.4 draft window: start at `start`, +`step` after a fully accepted draft up
    to `maximum`, back to `start` on any rejection (TCP's additive increase, reset)."""

    start: int = 2
    step: int = 2
    maximum: int = 32

    def next(self, window: int, accepted: int, drafted: int) -> int:
        """Window for the next iteration after `accepted` of `drafted` tokens were accepted.

        >>> Aimd().next(2, 2, 2), Aimd().next(4, 3, 4), Aimd().next(32, 32, 32)
        (4, 2, 32)
        """
        if drafted and accepted < drafted:
            return self.start
        if drafted and accepted == drafted:
            return min(window + self.step, self.maximum)
        return window


@dataclass(frozen=True)
class DraftRule:
    """How a model-free draft method drafts.

    source: which sequences the tree indexes for a request. "group": every response of
        the request's prompt group in this step, siblings' tokens visible in batches of
        `append_tokens` (Seer §4.4 batched appends) and its own tokens at once; "own":
        only the request itself (Seer's no-group-context ablation, Table 2's n = 0);
        "history": the prompt's responses in the previous epoch (RhymeRL §5.3);
        "lookup": prompt lookup (the `ngram` method): the most recent earlier occurrence
        in the request's own prompt + output of its last n tokens, n from `max_match`
        down to `min_match`, proposes what followed it.
    weight: "count" (Seer's suffix frequencies) or "reward" (RhymeRL's branch priority;
        a count tie-breaker of 1e-3 per occurrence keeps all-zero-reward groups usable).
    aimd: per-request AIMD draft window (RhymeRL); None = the SpecConfig's fixed gamma.
    """

    source: Literal["group", "own", "history", "lookup"]
    min_match: int = 3
    max_match: int = 7
    weight: Literal["count", "reward"] = "count"
    aimd: Aimd | None = None
    append_tokens: int = 16

    def __post_init__(self) -> None:
        assert 1 <= self.min_match <= self.max_match, "need 1 <= min_match <= max_match"
        assert self.append_tokens >= 1
