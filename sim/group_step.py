"""One request's planned block under the exact grouped drafter (Seer's), over a
`GroupIndex` (sim.group_index): what `sim.group_table`'s reference loop computes, with
the per-token work done in bulk.

During one block the group's table is fixed (siblings' tokens arrive only when a worker
re-plans); only the request's own tokens since they were last indexed (its "own window",
which the reference keeps in a second dict, `over`) grow. So, before stepping, every
position the block may query gets in a few numpy gathers the longest context the table
holds and the recorded token's rank under it. A query needs the own window only where
an earlier own occurrence of one of its contexts (at that order or a longer one) lies
in the window; those few queries take an exact slow path that merges the own
occurrences seen so far, and all others read the precomputed rank. An iteration's
outcome then depends only on where it starts, so every start's outcome (tokens emitted,
drafted, accepted) comes from the ranks in bulk too, and the Python loop only chains
starts (redoing query by query the few whose queries may read the own window).

Both checks of the reference are ranks: the first draft token is accepted when the
recorded token is among the `paths` best children at the anchor (rank < paths), a chained
one when it is the best child (rank 0: `best(kids) == token`).

With numba installed, `step_block` runs the compiled loop of sim.kernels instead
(query by query, as the reference, at a fraction of this form's fixed cost per request);
this numpy form stays the fallback, and the tests hold both to the reference.
"""

from __future__ import annotations

import numpy as np

from simctl.sim.compiled import kernels
from simctl.sim.group_index import GroupIndex, SeqIds
from simctl.sim.group_table import ABSENT, rank

NO_MATCH = -1  # no context of the position has a child: nothing is drafted


class BlockWindow:
    """Positions a block may query: response positions vis + q for window index q in
    [i0, end) (end: len(toks) unless given), with own window entries vis .. vis + i - 1 at
    iteration start i."""

    def __init__(
        self, index: GroupIndex, ids: SeqIds, toks: list[int], vis: int, i0: int, end: int | None = None
    ) -> None:
        self.index, self.ids, self.toks, self.vis, self.i0 = index, ids, toks, vis, i0
        orders = self.orders = index.orders
        lo, hi = (vis + i0) * orders, (vis + (len(toks) if end is None else end)) * orders
        cid = ids.cid[lo:hi]
        m = len(cid) // orders
        self.rows = ar = np.arange(m)
        present = index.seen[cid].reshape(m, orders)
        jb = present.argmax(axis=1)  # the longest context the table holds, if any
        has = present[ar, jb]
        jb[~has] = orders
        mine = (ids.prev[lo:hi] >= vis * orders).reshape(m, orders)
        jo = mine.argmax(axis=1)  # the longest context with an own occurrence in the window
        #: an earlier own occurrence of a context the lookup may stop at lies in the window
        self.own = mine[ar, jo] & (jo <= jb)
        #: rank of the recorded token under the table's longest context (NO_MATCH: none)
        self.ranks = np.full(m, NO_MATCH, np.int64)
        rows = np.flatnonzero(has)
        if len(rows):
            at = lo + rows * orders + jb[rows]
            self.ranks[rows] = index.base_ranks(ids.cid[at], ids.pid[at])
        self._jb = jb  # orders: the table has none
        self._jo = jo  # no own occurrence in the window at a longer order
        self._lists: tuple[list[int], list[bool], list[int], list[int]] | None = None

    def rank(self, q: int, i: int) -> int:
        """Rank of the recorded token at window index q among the children of its longest
        matching context, with the own window holding indices < i (NO_MATCH: no context)."""
        if self._lists is None:
            self._lists = (self.ranks.tolist(), self.own.tolist(), self._jo.tolist(), self._jb.tolist())
        k = q - self.i0
        return self._exact(q, i, k) if self._lists[1][k] else self._lists[0][k]

    def _exact(self, q: int, i: int, k: int) -> int:
        """The reference lookup + rank where the own window may matter: from the longest
        order with an own occurrence in the window up to the table's longest, the own
        occurrences before i (previous-occurrence links of the same sequence), merged with
        the table's children at that order."""
        assert self._lists is not None
        prev = self.ids.prev.item
        toks, orders = self.toks, self.orders
        vis = self.vis * orders  # sequence entry of window index 0
        stop = vis + i * orders  # the own window's end
        jb = self._lists[3][k]
        entry = vis + q * orders
        for j in range(self._lists[2][k], min(jb, orders - 1) + 1):
            own: list[int] = []  # tokens after the own window's occurrences of the context
            f = prev(entry + j)
            while f >= vis:
                if f < stop:
                    own.append(toks[(f - vis) // orders])
                f = prev(f)
            if j == jb:
                return self.index.merged_rank(self.ids.cid.item(entry + j), own, toks[q])
            if own:  # the own window alone holds this context
                kids: dict[int, int] = {}
                for t in own:
                    kids[t] = kids.get(t, 0) + 1
                return rank(kids, toks[q])
        return NO_MATCH

    def iteration(self, i: int, depth: int, paths: int) -> tuple[int, int, int]:
        """(emitted, drafted, accepted) of the iteration starting at window index i, query by
        query as the reference does (the starts whose queries may read the own window)."""
        r = self.rank(i, i)
        acc = drafts = 0
        if r != NO_MATCH:
            drafts = depth * paths
            if r < paths:
                acc = 1
                while acc < depth and i + acc < len(self.toks) and self.rank(i + acc, i) == 0:
                    acc += 1
        return min(acc + 1, len(self.toks) - i), drafts, acc

    def starts(self, depth: int, paths: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """For an iteration starting at each window index i0 + k, from the table's ranks
        alone: (emitted, drafted, accepted, clean), where clean says no query it may make
        reads the own window (those are exact; the others are redone by `iteration`).

        Accepted = 1 + the run of rank-0 positions after the anchor (capped at depth - 1 and
        the window's end) when the anchor's rank is below `paths`, else 0."""
        r, ar = self.ranks, self.rows
        m = len(r)
        left = len(self.toks) - self.i0 - ar  # tokens from the start to the window's end
        nonzero = np.where(r == 0, m, ar)  # first position >= k whose rank is not 0
        nonzero = np.minimum.accumulate(nonzero[::-1])[::-1]
        zeros_after = np.empty(m, np.int64)
        zeros_after[:-1] = nonzero[1:] - ar[1:]
        zeros_after[-1:] = 0
        hit = (r >= 0) & (r < paths)
        acc = np.where(hit, 1 + np.minimum(np.minimum(zeros_after, depth - 1), left - 1), 0)
        drafted = np.where(r >= 0, depth * paths, 0)
        emitted = np.minimum(acc + 1, left)
        seen = np.zeros(m + 1, np.int64)
        np.cumsum(self.own, out=seen[1:])
        clean = seen[np.minimum(ar + depth, m)] == seen[:m]
        return emitted, drafted, acc, clean


def step_block(
    index: GroupIndex,
    ids: SeqIds,
    toks: list[int] | np.ndarray,
    vis: int,
    i0: int,
    depth: int,
    paths: int,
    iterations: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Step one request through up to `iterations` iterations from window index i0 (tokens
    `toks` = response positions vis..): per iteration the tokens emitted (accepted + 1),
    the position after it, the draft tokens proposed and those accepted.

    With numba installed (the `fast` extra) this runs compiled (sim.kernels, the
    same integers); otherwise, or with SIMCTL_NO_NUMBA=1, in numpy (`numpy_step_block`)."""
    compiled = kernels()
    if compiled is not None:
        table = (index.seen, index.start, index.pair_tok, index.cnt)
        arrays = np.asarray(toks, np.int64)
        return compiled.step_block(
            table, (ids.cid, ids.prev), arrays, index.orders, vis, i0, depth, paths, iterations
        )
    listed = toks.tolist() if isinstance(toks, np.ndarray) else toks
    return numpy_step_block(index, ids, listed, vis, i0, depth, paths, iterations)


def numpy_step_block(
    index: GroupIndex,
    ids: SeqIds,
    toks: list[int],
    vis: int,
    i0: int,
    depth: int,
    paths: int,
    iterations: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`step_block` in numpy. The window is looked up in chunks of about two positions per
    iteration (a block rarely emits more), so the gathers cover mostly positions that are
    reached."""
    parts: list[tuple[np.ndarray, ...]] = []
    chunk = 2 * iterations
    while iterations > 0 and i0 < len(toks):
        end = min(len(toks), i0 + chunk + depth)
        # starts up to `last` query only rows inside the chunk (all of them at the end)
        last = end - i0 - 1 if end == len(toks) else chunk
        at, emitted, drafted, accepted = _chunk(
            BlockWindow(index, ids, toks, vis, i0, end), depth, paths, iterations, last
        )
        parts.append((emitted, vis + i0 + at + emitted, drafted, accepted))
        iterations -= len(at)
        i0 += int(at[-1] + emitted[-1])
    if len(parts) == 1:
        return parts[0]  # type: ignore[return-value]
    if not parts:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty, empty
    em, after, dr, ac = (np.concatenate(x) for x in zip(*parts, strict=True))
    return em, after, dr, ac


def _chunk(
    win: BlockWindow, depth: int, paths: int, iterations: int, last: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Iterations over one chunk from its first row, while they start at row <= last:
    (start rows, emitted, drafted, accepted)."""
    emitted, drafted, accepted, clean = win.starts(depth, paths)
    nxt: list[int] = (win.rows + emitted).tolist()
    ok: list[bool] = clean.tolist()
    path: list[int] = []
    k = 0
    for _ in range(iterations):
        if k > last:
            break
        if not ok[k]:
            e, d, a = win.iteration(win.i0 + k, depth, paths)
            emitted[k], drafted[k], accepted[k], nxt[k] = e, d, a, k + e
        path.append(k)
        k = nxt[k]
    at = np.array(path, np.int64)
    return at, emitted[at], drafted[at], accepted[at]


__all__ = ["ABSENT", "NO_MATCH", "BlockWindow", "numpy_step_block", "step_block"]
