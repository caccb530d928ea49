"""The exact grouped drafter's table (Seer's) over dense ids, built in bulk with numpy.

A step replays a trace whose every token is known before the step starts, so every
(context, next token) pair a group's table can ever hold is known too. `GroupIndex`
numbers them once per group (two sorts of the group's n-gram hashes) and keeps the table
as `seen[context]` (whether the context occurred) and `cnt[pair]` (occurrences of the
pair), the pairs of one context contiguous and in token order. A sibling's batched
append is then one scatter and one `np.add.at` instead of one dict update per token and
order (sim.group_table, the reference form it must equal), and a request's lookups over
a whole planned block are a few gathers (sim.group_step).

Hashes are compared exactly as the dict keys were: equal 64-bit hashes share one id,
whatever their order, and hash 0 (a context shorter than its order) is never counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simctl.sim.group_table import ABSENT, rank
from simctl.sim.trace_tokens import TokenSequence

_ONE = np.int32(1)


@dataclass
class SeqIds:
    """One member's response positions as the group numbers them, position-major
    (entry p * orders + j: the context of order index j ending before response position p).

    cid: context ids (a hash of 0 maps to the never-counted id `GroupIndex.null`);
    pid: (context, token at p) pair ids;
    prev: the previous entry of this sequence with the same context id, -1 if none (the
        request's own earlier occurrences, which it sees before its siblings do)."""

    cid: np.ndarray
    pid: np.ndarray
    prev: np.ndarray


class GroupIndex:
    """Counts of every (context, next token) pair of a prompt group's table (see the
    module docstring); `seqs` maps each member origin to its ids."""

    def __init__(self, prompt: np.ndarray, prompt_keys: np.ndarray, seqs: dict[int, TokenSequence]) -> None:
        """prompt/prompt_keys: the prompt's tokens and ngram_keys at positions where any
        context fits (indexed once, when the group is created); seqs: member origin ->
        its TokenSequence (prompt tail + response)."""
        self.orders = orders = prompt_keys.shape[0]
        blocks = [(prompt_keys.T, prompt)]
        blocks += [(s.keys[:, s.offset : len(s.seq)].T, s.seq[s.offset :]) for s in seqs.values()]
        keys = np.concatenate([k.ravel() for k, _ in blocks])
        toks = np.repeat(np.concatenate([t for _, t in blocks]).astype(np.int64), orders)
        seg = np.cumsum([0] + [len(t) * orders for _, t in blocks]).tolist()
        cid, prev = self._contexts(keys)
        pid = self._pairs(cid, toks)
        assert len(keys) < 1 << 31, "group too large for 32-bit ids"
        # int32: these stay for the whole step (a few bytes per token and order)
        self.seqs = {
            o: SeqIds(
                cid[a:b].astype(np.int32),
                pid[a:b].astype(np.int32),
                np.maximum(prev[a:b] - a, -1).astype(np.int32),  # links into other segments: none
            )
            for o, a, b in zip(seqs, seg[1:-1], seg[2:], strict=True)
        }
        self.wide = 16  # children above which merged_rank works in numpy
        self.members = np.array(list(seqs), np.int64)
        self._slot = {o: j for j, o in enumerate(seqs)}
        self.visible = np.zeros(len(seqs), np.int64)  # per member: response positions indexed
        self.seen = np.zeros(self.null + 1, bool)  # small: the block lookups gather it
        self.cnt = np.zeros(len(self.pair_tok), np.int32)
        self._add(cid[: seg[1]], pid[: seg[1]])

    def _contexts(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Dense context ids (hash 0 -> `null`) and, per entry, the previous entry with the
        same hash (-(n + 1): none), which SeqIds turns into the sequence's own previous
        occurrence (-1 where it lies in another segment)."""
        n = len(keys)
        cid, order, new, run = dense_ids(keys)
        zero = bool(n) and keys[order[0]] == 0
        self.null = (int(run[-1]) + 1 if n else 0) - int(zero)
        # equal hashes sort in entry order: a run's previous entry is the previous occurrence
        shifted = np.empty(n, np.int64)
        shifted[1:] = order[:-1]
        shifted[new] = -(n + 1)
        prev = np.empty(n, np.int64)
        prev[order] = shifted
        if zero:  # hash 0 is no context: never counted, never the request's own
            at = keys == 0
            cid -= 1
            cid[at] = self.null
            prev[at] = -(n + 1)
        return cid, prev

    def _pairs(self, cid: np.ndarray, toks: np.ndarray) -> np.ndarray:
        """Dense (context, token) pair ids, sorted by context then token, so a context's
        children are pair ids start[c] .. start[c + 1] - 1 in token order (hash 0's pairs
        come last, in no context's range)."""
        lo = int(toks.min()) if len(toks) else 0
        span = int(toks.max()) - lo + 1 if len(toks) else 1
        assert (self.null + 1) * span < 1 << 63, "pair codes overflow"
        code = cid * span
        code += toks
        code -= lo
        pid, order, new, _ = dense_ids(code)
        first = code[order[new]]  # each pair's code, in pair id order
        self.pair_tok = first % span + lo
        self.start = np.zeros(self.null + 2, np.int64)  # start[null + 1]: hash 0's pairs end
        np.cumsum(np.bincount(first // span, minlength=self.null + 1), out=self.start[1:])
        return pid

    def _add(self, cid: np.ndarray, pid: np.ndarray) -> None:
        self.seen[cid] = True
        np.add.at(self.cnt, pid, _ONE)  # of the array's dtype: numpy's fast path
        self.seen[self.null] = False  # hash 0 is no context

    def catch_up(self, generated: np.ndarray, append_tokens: int) -> None:
        """Index each member's tokens up to its last batched append (Seer's appends of
        `append_tokens`): what its siblings' drafts can see now."""
        vis = generated[self.members]
        vis -= vis % append_tokens
        for j in np.flatnonzero(vis > self.visible).tolist():
            self.append(int(self.members[j]), int(self.visible[j]), int(vis[j]))
            self.visible[j] = vis[j]

    def visible_of(self, origin: int) -> int:
        return int(self.visible[self._slot[origin]])

    def append(self, origin: int, lo: int, hi: int) -> None:
        """Index the member's response positions lo..hi-1 (their tokens after their
        contexts): a sibling's batched append."""
        ids = self.seqs[origin]
        a, b = lo * self.orders, hi * self.orders
        self._add(ids.cid[a:b], ids.pid[a:b])

    def children(self, c: int) -> dict[int, int]:
        """Token -> count of a context's children with a count."""
        a, b = self.start.item(c), self.start.item(c + 1)
        if b - a == 1:  # most contexts
            n = self.cnt.item(a)
            return {self.pair_tok.item(a): n} if n else {}
        return {t: n for t, n in zip(self.pair_tok[a:b].tolist(), self.cnt[a:b].tolist(), strict=True) if n}

    def merged_rank(self, c: int, own: list[int], tok: int) -> int:
        """Rank of `tok` among context c's children with one more count for each token in
        `own` (the request's own occurrences): sim.group_table's merged + rank. A wide
        context (low orders: hundreds of children) is ranked in numpy, then corrected for
        the few children `own` touches."""
        a, b = self.start.item(c), self.start.item(c + 1)
        if b - a <= self.wide:
            kids = self.children(c)
            for t in own:
                kids[t] = kids.get(t, 0) + 1
            return rank(kids, tok)
        toks, counts = self.pair_tok[a:b], self.cnt[a:b]
        adds: dict[int, int] = {}
        for t in own:
            adds[t] = adds.get(t, 0) + 1

        def base(t: int) -> int:
            j = int(np.searchsorted(toks, t))
            return counts.item(j) if j < b - a and toks.item(j) == t else 0

        w = base(tok) + adds.get(tok, 0)
        if w == 0:
            return ABSENT
        ahead = int(np.count_nonzero((counts > w) | ((counts == w) & (toks < tok))))
        for t, n in adds.items():
            if t != tok:
                was, now = base(t), base(t) + n
                ahead += int(now > w or (now == w and t < tok)) - int(was > w or (was == w and t < tok))
        return ahead

    def base_ranks(self, cid: np.ndarray, pid: np.ndarray) -> np.ndarray:
        """Per query row (context id, pair id of the recorded token under it): the rank of
        the token among the context's children (count desc, token asc; sim.group_table.rank),
        ABSENT where it has no count: every context's children at once."""
        s = self.start[cid]
        lens = self.start[cid + 1] - s
        offs = np.cumsum(lens) - lens
        idx = np.arange(int(offs[-1] + lens[-1]) if len(lens) else 0) + np.repeat(s - offs, lens)
        vals = self.cnt[idx]
        w = self.cnt[pid]
        wr, pr = np.repeat(w, lens), np.repeat(pid, lens)
        better = (vals > wr) | ((vals == wr) & (idx < pr))
        ranks = np.add.reduceat(better, offs, dtype=np.int64) if len(offs) else np.zeros(0, np.int64)
        ranks[w == 0] = ABSENT
        return ranks


def dense_ids(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(ids, order, new, run) of non-negative 64-bit values: ids[i] = rank of values[i]
    among the distinct values (np.unique's inverse); order = entry indices sorted by
    (value, index); new[m] = order[m] starts a run of equal values; run[m] = ids[order[m]].

    Packs each entry's index into the low bits of its value (small values shifted up
    first) and sorts the packed words with numpy's SIMD sort, several times faster than a
    stable argsort. Exact when value and index fit in 64 bits; otherwise (hashes) exact
    unless distinct values share their high bits, which is checked (then a stable sort)."""
    n = len(values)
    values = values.view(np.uint64) if values.dtype == np.int64 else values.astype(np.uint64, copy=False)
    bits = max((n - 1).bit_length(), 1)
    top = max(int(values.max()).bit_length(), 1) if n else 1
    order: np.ndarray | None = None
    new = np.ones(n, bool)
    if n and bits < 40:
        low = np.uint64((1 << bits) - 1)
        packed = values << np.uint64(64 - top) if top < 64 else values.copy()
        packed &= ~low
        packed |= np.arange(n, dtype=np.uint64)
        packed.sort()
        order = packed & low
        packed >>= np.uint64(bits)
        np.not_equal(packed[1:], packed[:-1], out=new[1:])
        order = order.view(np.int64)
        if top + bits > 64:  # high bits only: were two distinct values taken as one?
            sv = values[order]
            if (sv[1:] != sv[:-1])[~new[1:]].any():
                order = None
    if order is None:
        order = np.argsort(values, kind="stable")
        sv = values[order]
        np.not_equal(sv[1:], sv[:-1], out=new[1:])
    # an int32 running count is several times faster
    run = np.cumsum(new.view(np.uint8), dtype=np.int32) if n < 1 << 31 else np.cumsum(new, dtype=np.int64)
    run -= 1
    ids = np.empty(n, np.int64)
    ids[order] = run
    return ids, order, new, run
