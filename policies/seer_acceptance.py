"""Seer Table 2: grouped suffix-tree acceptance by number of sibling references.

The table (Qwen2-VL-72B task, compressed suffix tree, at most 8 draft tokens per step)
gives the mean acceptance length tau, bonus token included, for n other responses of the
group in the tree and for linear or multi-path (top-k) drafting. Used twice: by Seer's
adaptive draft-length choice as its prior, and by the simulator's acceptance model for
traces without token ids (sim/token_replay.py), where n is the number of siblings whose
tokens the request's drafter can see.
"""

from __future__ import annotations

import math

TABLE2_DRAFT = 8  # "maximum draft length of 8 tokens per step"
TABLE2_REFS = (0, 1, 5, 15)
TABLE2_TAU: dict[int, tuple[float, ...]] = {  # paths k -> tau at n = 0, 1, 5, 15
    1: (1.70, 2.04, 2.32, 2.53),
    2: (1.77, 2.14, 2.44, 2.69),
    4: (1.85, 2.25, 2.59, 2.85),
}


def table2_tau(refs: float, paths: int = 1) -> float:
    """tau at `refs` sibling references, linear in log2(1 + n) between rows (each doubling
    of references adds a roughly constant amount), flat beyond n = 15; paths between the
    table's columns use the next lower column.

    >>> round(table2_tau(15, 1), 2), round(table2_tau(0, 4), 2)
    (2.53, 1.85)
    """
    col = TABLE2_TAU[max(k for k in TABLE2_TAU if k <= max(1, paths))]
    xs = [math.log2(1 + r) for r in TABLE2_REFS]
    x = min(math.log2(1 + max(0.0, refs)), xs[-1])
    for i in range(1, len(xs)):
        if x <= xs[i]:
            return col[i - 1] + (col[i] - col[i - 1]) * (x - xs[i - 1]) / (xs[i] - xs[i - 1])
    return col[-1]


def per_token_acceptance(tau: float, gamma: int) -> float:
    """p with (1 - p^(gamma+1)) / (1 - p) == tau: the i.i.d. acceptance that reproduces a
    mean acceptance length at a draft length (bisection; tau is monotone in p).

    >>> round(per_token_acceptance(1.0, 8), 3), round(per_token_acceptance(9.0, 8), 3)
    (0.0, 1.0)
    """
    tau = min(max(tau, 1.0), gamma + 1.0)
    lo, hi = 0.0, 1.0
    for _ in range(50):
        mid = (lo + hi) / 2
        val = (1.0 - mid ** (gamma + 1)) / (1.0 - mid)
        lo, hi = (mid, hi) if val < tau else (lo, mid)
    return (lo + hi) / 2


def expected_accept_len(p: float, gamma: int) -> float:
    """E[tokens per verify iteration] for per-token acceptance p and draft length gamma."""
    if gamma <= 0:
        return 1.0
    if p >= 1.0:
        return gamma + 1.0
    return (1.0 - p ** (gamma + 1)) / (1.0 - p)
