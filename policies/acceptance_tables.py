"""Per-token acceptance from tokens per verify iteration, fast: the i.i.d. model's
expected_accept_len(p, depth) inverted by a table search that returns exactly what a
16-step bisection would (`p_from_tau`), for the best-drafter part, which converts every
request's evidence at every worker configuration.

>>> p_from_tau(1.0, 4) == p_from_tau_bisect(1.0, 4)
True
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from itertools import pairwise

from simctl.policies.seer_acceptance import expected_accept_len

BISECTION_STEPS = 16  # p_from_tau resolves p to 2**-16
_GRID = 1 << BISECTION_STEPS
_BLOCK = 256  # tau_table entries per block of p_from_tau's two-level search
# depth -> (every _BLOCK-th entry of the table, the table), see tau_table
_TAU_TABLES: dict[int, tuple[list[float], array[float]] | None] = {}


def p_from_tau(tau: float, depth: int) -> float:
    """Per-token acceptance with expected_accept_len(p, depth) == tau: the result of a
    16-step bisection (`p_from_tau_bisect`), found by a binary search of `tau_table`.

    Why this is the bisection's result exactly: the bisection only ever probes grid points
    k / 2**16 and keeps `lo` at the largest probed point with expected_accept_len below
    tau. Where expected_accept_len is non-decreasing over the grid (checked when the
    table is built), that predicate is monotone, so the bisection ends at lo = j / 2**16
    with j the number of grid points (0 < k < 2**16) below tau, and returns the midpoint
    (j + 1/2) / 2**16; `bisect_left` counts j directly, first among every _BLOCK-th entry
    (a short list that stays in the CPU cache), then within the one block that holds j.
    It runs for every request's evidence at every worker configuration, where the
    bisection's 16 power evaluations dominated, and one search of the whole table missed
    the cache at nearly every step."""
    tables = _TAU_TABLES.get(depth) or tau_table(depth)
    if tables is None:
        return p_from_tau_bisect(tau, depth)
    coarse, table = tables
    # tau = min(max(tau, 1.0), depth + 1.0), without the builtins' call overhead
    if tau < 1.0:
        tau = 1.0
    elif tau > depth + 1.0:
        tau = depth + 1.0
    # coarse[b - 1] = table[b * _BLOCK - 1] < tau <= coarse[b] = table[b * _BLOCK + _BLOCK - 1]
    lo = bisect_left(coarse, tau) * _BLOCK
    return (bisect_left(table, tau, lo, min(lo + _BLOCK - 1, len(table))) + 0.5) / _GRID


def p_from_tau_bisect(tau: float, depth: int) -> float:
    """The reference definition of `p_from_tau`: bisection over p in [0, 1]."""
    tau = min(max(tau, 1.0), depth + 1.0)
    lo, hi = 0.0, 1.0
    for _ in range(BISECTION_STEPS):
        mid = (lo + hi) / 2
        if expected_accept_len(mid, depth) < tau:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def tau_table(depth: int) -> tuple[list[float], array[float]] | None:
    """expected_accept_len(k / 2**16, depth) for k = 1 .. 2**16 - 1 (an array: 512 kB per
    depth), with every _BLOCK-th entry (table[_BLOCK - 1::_BLOCK]), built on first use
    (about 30 ms per depth); None for depths below 1 or where floating-point rounding
    makes the table decrease somewhere (p_from_tau then bisects: a search could differ)."""
    if depth in _TAU_TABLES:
        return _TAU_TABLES[depth]
    tables: tuple[list[float], array[float]] | None = None
    if depth >= 1:
        table = array("d", [expected_accept_len(k / _GRID, depth) for k in range(1, _GRID)])
        if all(a <= b for a, b in pairwise(table)):
            tables = (table[_BLOCK - 1 :: _BLOCK].tolist(), table)
    _TAU_TABLES[depth] = tables
    return tables
