"""Per-token draft acceptance from a request's counters, in the unit SpecActor plans with.

SpecActor (Fast LLM Post-training via Decoupled and Fastest-of-N Speculation,
arXiv:2511.16193, §4.1) models a draft window with "the probability of accepting one token
p", profiled "from previous steps", and Algorithm 2 reads each request's p. What an
executor counts is different: drafted and accepted tokens, and verify iterations. Their
ratio accepted / drafted is p only for a one-token window; at a window of w it is
p(1 - p^w) / ((1 - p) w), lower than p (0.77 at p = 0.9, w = 4), so planning with the raw
ratio shrinks windows step after step. Here p is recovered by inverting the expected tokens
per verification at the window the tokens were drafted with: `tokens_coupled` (accepted
drafts plus the verifier's own token), rising with p. It holds for decoupled windows too:
a request counts a verification only where it was verified; the verification it sits out
after a rejection while the drafter redrafts (§4.1) costs time, not a count.

The inverse is a lookup in a table of the function on a fine grid of p (bisect, then linear
interpolation): Algorithm 2 asks for every running request of a worker at every
reconfiguration tick.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence
from functools import lru_cache

from simctl.policies.speactor_model import tokens_coupled

GRID = 4000  # p = i / GRID: a table step of 0.00025


@lru_cache(maxsize=128)
def _table(window: int) -> tuple[float, ...]:
    """`tokens_coupled` at p = i / GRID, i = 0 .. GRID - 1 (rising)."""
    return tuple(tokens_coupled(i / GRID, window) for i in range(GRID))


def _inverse(table: tuple[float, ...], y: float) -> float:
    i = bisect_left(table, y)
    if i <= 0:
        return 0.0
    if i >= len(table):
        return (len(table) - 1) / GRID
    lo, hi = table[i - 1], table[i]
    frac = (y - lo) / (hi - lo) if hi > lo else 0.0
    return (i - 1 + frac) / GRID


def acceptance_of(tokens: float, verifications: float, window: int) -> float | None:
    """Per-token p of a request that produced `tokens` in `verifications` at `window`
    drafted tokens each (None: it was never verified)."""
    if verifications <= 0:
        return None
    return _inverse(_table(max(1, window)), tokens / verifications)


def pooled_acceptance(counts: Mapping[int, Sequence[float]]) -> float | None:
    """The one p whose expected tokens match what every window produced together:
    sum over windows of verifications * tokens_coupled(p, window) = sum of tokens, with
    `counts` mapping each window to (verifications, tokens). The sum rises with p, so the
    root is found by bisection over the grid (None: no verifications at all)."""
    items = [(_table(max(1, w)), it, tok) for w, (it, tok) in counts.items() if it > 0]
    if not items:
        return None
    target = sum(tok for _, _, tok in items)

    def excess(i: int) -> float:
        return sum(it * table[i] for table, it, _ in items) - target

    lo, hi = 0, GRID - 1
    if excess(lo) >= 0:
        return 0.0
    if excess(hi) <= 0:
        return hi / GRID
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if excess(mid) < 0:
            lo = mid
        else:
            hi = mid
    e_lo, e_hi = excess(lo), excess(hi)
    return (lo + (-e_lo) / (e_hi - e_lo)) / GRID
