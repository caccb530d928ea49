"""The simulator's hot integer loops compiled with numba, each the same integers as the
numpy form it replaces (which stays the fallback and the form the tests hold it to):

- `step_block`: one request's block under the exact grouped drafter (Seer's), as the numpy
  form of `sim.group_step.step_block` computes it (`sim.group_table` holds the plain
  statement of the drafter), each query answered where it is made instead of precomputed
  in bulk. That form pays a fixed cost of a few dozen array calls per request and block,
  and on token traces that is most of a Seer replay (~20k requests stepped per step of the
  bundled token sample).
- `block_counts`: a speculative block's finishes and progress (`sim.spec_planner.
  block_counts`): the running sums, finish columns, capped progress and column sums that
  numpy computes in four passes over every (request, iteration) cell, in one loop nest (a
  row's sums up to its finish, then its capped progress).

Integers only (counts, ranks, token ids, tokens), so bit-identical, not merely close.
This module needs numba (the `fast` extra); `sim.compiled` imports it on first use, and
the numpy forms run when numba is missing or SIMCTL_NO_NUMBA=1 is set.
"""

from __future__ import annotations

import numba
import numpy as np

# sim.group_table.ABSENT and sim.group_step.NO_MATCH, as module constants the compiled code
# reads at compile time (tests/sim/test_group_table_fast.py checks that they agree)
ABSENT = 1 << 30
NO_MATCH = -1

_jit = numba.njit(cache=True)  # cache: compiled once per machine, not per process

# a group table (GroupIndex): (seen, start, pair_tok, cnt)
Table = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
# a member's SeqIds as the kernel reads them: (cid, prev)
Seq = tuple[np.ndarray, np.ndarray]


@_jit
def _count_of(pair_tok: np.ndarray, cnt: np.ndarray, a: int, b: int, tok: int) -> int:
    """Count of `tok` among the table children in pair ids a..b-1 (sorted by token)."""
    lo, hi = a, b
    while lo < hi:
        mid = (lo + hi) >> 1
        if pair_tok[mid] < tok:
            lo = mid + 1
        else:
            hi = mid
    if lo < b and pair_tok[lo] == tok:
        return int(cnt[lo])
    return 0


@_jit
def _merged_rank(pair_tok: np.ndarray, cnt: np.ndarray, a: int, b: int, own: np.ndarray, tok: int) -> int:
    """Rank of `tok` (count desc, token asc) among the table children a..b-1 (a == b: none)
    with one more count per entry of `own` (the request's own occurrences, sorted):
    sim.group_table's merged + rank. ABSENT when `tok` has no count."""
    n = len(own)
    w = _count_of(pair_tok, cnt, a, b, tok)
    for x in range(n):
        if own[x] == tok:
            w += 1
    if w == 0:
        return ABSENT
    ahead = 0
    for p in range(a, b):  # children untouched by `own`
        t = pair_tok[p]
        if n:
            x = np.searchsorted(own, t)
            if x < n and own[x] == t:
                continue
        c = cnt[p]
        if c > w or (c == w and t < tok):
            ahead += 1
    x = 0
    while x < n:  # each distinct token of `own`, with its table count
        t = own[x]
        m = 0
        while x < n and own[x] == t:
            m += 1
            x += 1
        if t != tok:
            c = _count_of(pair_tok, cnt, a, b, t) + m
            if c > w or (c == w and t < tok):
                ahead += 1
    return ahead


@_jit
def _rank_at(
    table: Table, seq: Seq, toks: np.ndarray, orders: int, vis: int, q: int, i: int, buf: np.ndarray
) -> int:
    """Rank of toks[q] under its longest context with a child in the table or in the own
    window (window indices < i): sim.group_table.lookup + rank. NO_MATCH: no context."""
    seen, start, pair_tok, cnt = table
    cid, prev = seq
    vis_e = vis * orders  # sequence entry of window index 0
    stop = vis_e + i * orders  # the own window's end
    entry = vis_e + q * orders
    for j in range(orders):  # longest order first
        c = cid[entry + j]
        n = 0
        f = prev[entry + j]  # the sequence's earlier occurrences of this context
        while f >= vis_e:
            if f < stop:
                if n == len(buf):  # (rare: a context repeated more often than buf holds)
                    wider = np.empty(2 * n, np.int64)
                    wider[:n] = buf
                    buf = wider
                buf[n] = toks[(f - vis_e) // orders]
                n += 1
            f = prev[f]
        if seen[c]:
            return _merged_rank(pair_tok, cnt, start[c], start[c + 1], _sorted(buf, n), toks[q])
        if n:  # the own window alone holds this context
            return _merged_rank(pair_tok, cnt, 0, 0, _sorted(buf, n), toks[q])
    return NO_MATCH


@_jit
def _sorted(buf: np.ndarray, n: int) -> np.ndarray:
    """buf[:n] sorted in place: by insertion where a context's own occurrences are few, as
    they mostly are (nothing allocated, unlike np.sort, on the many queries that have
    none), by numpy's sort where a response repeats itself (insertion is quadratic)."""
    if n > 32:
        head = buf[:n]
        head.sort()
        return head
    for x in range(1, n):
        v = buf[x]
        y = x - 1
        while y >= 0 and buf[y] > v:
            buf[y + 1] = buf[y]
            y -= 1
        buf[y + 1] = v
    return buf[:n]


@_jit
def step_block(
    table: Table,
    seq: Seq,
    toks: np.ndarray,
    orders: int,
    vis: int,
    i0: int,
    depth: int,
    paths: int,
    iterations: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`sim.group_step.step_block` over the index's arrays (`table`: the group's table
    (seen, start, pair_tok, cnt); `seq`: the request's SeqIds (cid, prev); `toks`: the
    window's tokens, int64):
    iteration by iteration as sim.group_table.reference_block, each query answered from
    the table plus the own window (indices below the iteration's start)."""
    n_tok = len(toks)
    size = max(0, min(iterations, n_tok - i0))
    emitted = np.empty(size, np.int64)
    after = np.empty(size, np.int64)
    drafted = np.empty(size, np.int64)
    accepted = np.empty(size, np.int64)
    buf = np.empty(64, np.int64)  # a query's own occurrences (_rank_at widens its copy)
    i = i0
    k = 0
    while k < iterations and i < n_tok:
        r = _rank_at(table, seq, toks, orders, vis, i, i, buf)
        acc = 0
        drafts = 0
        if r != NO_MATCH:
            drafts = depth * paths
            if r < paths:
                acc = 1
                while (
                    acc < depth
                    and i + acc < n_tok
                    and _rank_at(table, seq, toks, orders, vis, i + acc, i, buf) == 0
                ):
                    acc += 1
        e = min(acc + 1, n_tok - i)
        i += e
        emitted[k] = e
        after[k] = vis + i
        drafted[k] = drafts
        accepted[k] = acc
        k += 1
    return emitted[:k], after[:k], drafted[:k], accepted[:k]


@_jit
def block_counts(
    x: np.ndarray, rem: np.ndarray, first_finish: bool
) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`sim.spec_planner.block_counts` for `rem` within 0..65535 (progress in uint16):
    (k, fin, progress, column sums, order, gone) of tokens `x` (rows x iterations, >= 0)
    and the rows' remaining tokens `rem`. fin: the column in which each row reaches its
    remaining tokens (k: not in the block); with `first_finish` the block ends at the
    first; order: rows by finish column (stable); gone[i]: rows finished before column i."""
    b, k = x.shape
    fin = np.full(b, k, np.int64)
    for r in range(b):  # the running sum up to the row's finish, no further
        total = 0
        want = rem[r]
        for c in range(k):
            total += x[r, c]
            if total >= want:
                fin[r] = c
                break
    if first_finish and b and fin.min() < k:
        k = fin.min() + 1
        for r in range(b):
            fin[r] = min(fin[r], k)
    progress = np.empty((b, k), np.uint16)
    colsum = np.zeros(k, np.int64)
    for r in range(b):
        total = 0
        want = rem[r]
        for c in range(k):
            total += x[r, c]
            v = total if total < want else want
            progress[r, c] = v
            colsum[c] += v
    hist = np.zeros(k + 2, np.int64)  # rows per finish column (k + 1: past a cut block)
    for r in range(b):
        hist[fin[r] + 1] += 1
    for v in range(1, k + 2):
        hist[v] += hist[v - 1]  # hist[v]: rows finishing before column v
    gone = hist[:k].copy()
    order = np.empty(b, np.int64)
    for r in range(b):  # a stable counting sort by finish column
        order[hist[fin[r]]] = r
        hist[fin[r]] += 1
    return k, fin, progress, colsum, order, gone
