"""Acceptance that changes along a response: a trace's `accept_<method>_buckets`.

A trace may refine a request's mean acceptance `accept_<method>` by response position, in
buckets of `accept_bucket_tokens` tokens (traces/SCHEMA.md). Published measurements show
why it matters for the rollout tail: "EfficientRollout: System-Aware Self-Speculative
Decoding for RL Rollouts" (Kim, Lee et al., 2026) Table 8 reports EAGLE-3's block
efficiency falling from 1.97 in a Qwen2.5-7B response's first 512 tokens to 1.60 at 4K-8K
(and Llama3.1-8B's from 2.29 to 1.25 after 512 tokens), so the long requests that make up
the tail draft worse than their response mean, exactly where speculation is meant to help.
Replaying the mean spreads that difference evenly over the response.

With buckets, the per-token acceptance of a verify iteration is the bucket value at the
response position the iteration starts from, scaled by how far the simulator has moved the
request's mean (TLT's drafter aging, sensitivity runs): `bucket * current / trace mean`,
clipped to [0, 1]. A tree row's per-level acceptance is the tree law of that chain value
(sim.acceptance.tree_acceptance). Positions past the last bucket use the last one; a row
with an empty list, or a method without buckets, keeps its mean.

Sampling keeps sim.acceptance.sample_tokens' single uniform per iteration: an iteration
yields `ceil(ln U / ln a)` tokens clamped to [1, depth + 1], with `a` the acceptance at its
starting position. Positions depend on the tokens before them, so the block is solved as a
fixpoint: take every iteration's bucket from the path drawn at the row's mean, then
re-evaluate the iterations whose starting bucket changed, until none does (each pass
settles at least one more iteration of every row, and the first path is close, so a block
needs a few passes over the few iterations near a bucket boundary). The
uniforms are drawn exactly as `sample_tokens` draws them, so a trace without buckets, or
with buckets equal to its means, replays the same outcomes as before.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from simctl.sim.acceptance import MAX_ACCEPT, inverse_log, tree_acceptance
from simctl.sim.state import StepState
from simctl.traces.io import Trace, list_arrays
from simctl.traces.schema import bucket_column

# A mean acceptance below this counts as 0 (its buckets are then not used: a ratio to it
# would overflow)
MEAN_FLOOR = 1e-12


@dataclass(frozen=True)
class _MethodBuckets:
    """One method's buckets as ratios to the trace's mean, per trace row (CSR)."""

    ratio: np.ndarray  # float64: bucket value / the row's `accept_<method>` (1 where that is 0)
    offsets: np.ndarray  # int64 per trace row + 1
    counts: np.ndarray  # int64 buckets per trace row


class PositionAcceptance:
    """The buckets of one step's rows (a Fastest-of-N replica row reads its request's),
    and the sampler that uses them (module docstring)."""

    def __init__(
        self, state: StepState, trace_rows: np.ndarray, width: int, methods: dict[int, _MethodBuckets]
    ) -> None:
        self.state = state
        # row of each step request in the buckets' arrays
        self.trace_rows = np.asarray(trace_rows, np.int64)
        self.width = int(width)
        self._methods = methods  # method index (into state.methods) -> its buckets
        # every method's ratios in one array (a draw may mix methods), and where each starts
        self._ratio = np.concatenate([b.ratio for b in methods.values()]) if methods else np.zeros(0)
        starts = np.cumsum([0, *(len(b.ratio) for b in methods.values())])
        self._start = {j: int(starts[i]) for i, j in enumerate(methods)}

    @classmethod
    def of_trace(cls, trace: Trace, state: StepState, trace_rows: np.ndarray) -> PositionAcceptance | None:
        """The step's position buckets (of its rows only: a long trace holds every step's),
        or None when the trace has none for any method the step replays (then nothing
        changes how outcomes are sampled)."""
        width = trace.meta.accept_bucket_tokens
        if not width:
            return None
        rows = np.asarray(trace_rows, np.int64)
        methods: dict[int, _MethodBuckets] = {}
        for j, method in enumerate(state.methods):
            arr = trace.lists.get(bucket_column(method))
            if arr is None or f"accept_{method}" not in trace.df.columns:
                continue
            mean = trace.df[f"accept_{method}"].to_numpy(np.float64)[rows]
            methods[j] = _ratios(arr.take(pa.array(rows)), mean)
        if not methods:
            return None
        return cls(state, np.arange(len(rows)), int(width), methods)

    def covers(self, methods: np.ndarray) -> bool:
        """Whether any of these rows' methods has buckets."""
        return any(int(m) in self._methods for m in np.unique(methods))

    def sample(
        self,
        rng: np.random.Generator,
        rids: np.ndarray,
        methods: np.ndarray,
        alpha: np.ndarray,
        gamma: np.ndarray,
        width: np.ndarray | None,
        iterations: int,
        first_plain: np.ndarray | None = None,
    ) -> np.ndarray:
        """Tokens per row per iteration (int16), as sim.acceptance.sample_tokens with each
        iteration's acceptance taken at its starting position. `alpha`: the rows' per-token
        acceptance as planned (a tree row's already through the tree law); `width`: each
        row's tree width, verify budget included (None: all chains); `first_plain`: rows
        whose first iteration is their prefill pass (one token)."""
        st = self.state
        n, k = len(rids), iterations
        a_row = np.minimum(np.maximum(np.asarray(alpha, dtype=np.float64), 0.0), MAX_ACCEPT)
        g = np.asarray(gamma, dtype=np.int64)
        u = rng.random((n, k), dtype=np.float32)  # (the uniforms sample_tokens draws)
        with np.errstate(divide="ignore"):  # (U = 0: -inf, see _tokens)
            lnu = np.log(u)
        top = (g + 1).astype(np.float32)[:, None]
        tokens = _tokens(lnu, inverse_log(a_row)[:, None], top)
        if first_plain is not None and k and first_plain.any():
            tokens[first_plain, 0] = 1
        lookup = self._lookup(rids, methods)
        if lookup is None or not k:
            return tokens
        rows, off, cnt = lookup
        sub = np.flatnonzero(rows)
        if not len(sub):
            return tokens
        m = np.asarray(methods)[sub].astype(np.int64)
        tokens[sub] = _settle(
            tokens[sub],
            lnu[sub],
            top[sub],
            st.generated[rids[sub]].astype(np.int64),
            st.accept_mat[rids[sub], m],
            self._ratio,
            off[sub],
            cnt[sub],
            self.width,
            np.ones(len(sub), np.int64) if width is None else np.asarray(width, np.int64)[sub],
            np.maximum(g[sub], 1),
            first_plain[sub] if first_plain is not None else None,
        )
        return tokens

    def _lookup(
        self, rids: np.ndarray, methods: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(rows with buckets, each row's first index into `_ratio`, its bucket count);
        None: no row has buckets."""
        st = self.state
        trace_row = self.trace_rows[st.origin[rids]]
        m = np.asarray(methods, np.int64)
        rows = np.zeros(len(rids), np.bool_)
        off = np.zeros(len(rids), np.int64)
        cnt = np.ones(len(rids), np.int64)
        for j in np.unique(m).tolist():
            got = self._methods.get(int(j))
            if got is None:
                continue
            sel = m == j
            tr = trace_row[sel]
            c = got.counts[tr]
            rows[sel] = c > 0
            off[sel] = got.offsets[tr] + self._start[int(j)]
            cnt[sel] = np.maximum(c, 1)
        return (rows, off, cnt) if rows.any() else None


def _settle(
    tokens: np.ndarray,
    lnu: np.ndarray,
    top: np.ndarray,
    start: np.ndarray,
    chain: np.ndarray,
    ratio: np.ndarray,
    off: np.ndarray,
    cnt: np.ndarray,
    bucket_tokens: int,
    width: np.ndarray,
    depth: np.ndarray,
    first_plain: np.ndarray | None,
) -> np.ndarray:
    """The position fixpoint (module docstring) of rows with buckets: `tokens` drawn at
    the rows' mean, `lnu` their ln U, `start` their position at the block's start, `chain`
    their current mean, `ratio[off + b]` bucket b's ratio (of `cnt` buckets).

    A cell needs of its bucket only 1 / ln(acceptance), so that is tabled once per row
    and bucket (`inv[base + b]`). The first pass takes every iteration's bucket from the
    path drawn at the mean; each later pass re-evaluates only the
    iterations whose bucket moved (those near a boundary the path shifted across)."""
    n = len(tokens)
    base = np.zeros(n + 1, np.int64)
    np.cumsum(cnt, out=base[1:])
    row = np.repeat(np.arange(n), cnt)
    a = np.minimum(np.maximum(chain[row] * ratio[off[row] + np.arange(base[-1]) - base[row]], 0.0), 1.0)
    w = width[row]
    if (w > 1).any():
        d = depth[row]
        a = np.where(w > 1, tree_acceptance(a, d, w, w * d), a)
    inv = inverse_log(np.minimum(a, MAX_ACCEPT))
    base, last = base[:-1], (cnt - 1).astype(np.int32)
    pos0 = start.astype(np.int32)
    # the first pass, dense (most iterations of a long block may sit past a boundary),
    # along the path drawn at the mean
    bucket = _buckets_along(tokens, pos0, bucket_tokens, last)
    tokens = _tokens(lnu, inv[base[:, None] + bucket], top)
    if first_plain is not None:
        tokens[first_plain, 0] = 1
    active = np.arange(n)
    for _ in range(tokens.shape[1]):  # (each pass settles at least one more iteration)
        now = _buckets_along(tokens[active], pos0[active], bucket_tokens, last[active])
        moved = now != bucket[active]
        some = moved.any(axis=1)
        if not some.any():
            break
        active, now, moved = active[some], now[some], moved[some]
        r, c = np.nonzero(moved)
        rows, b = active[r], now[r, c]
        bucket[rows, c] = b
        new = _tokens(lnu[rows, c], inv[base[rows] + b], top[rows, 0])
        if first_plain is not None:
            new[first_plain[rows] & (c == 0)] = 1
        tokens[rows, c] = new
    return tokens


def _bucket(pos: np.ndarray, bucket_tokens: int) -> np.ndarray:
    """pos // bucket_tokens (a shift when the width is a power of two, as 512 is)."""
    if bucket_tokens & (bucket_tokens - 1) == 0:
        return np.right_shift(pos, bucket_tokens.bit_length() - 1)
    return pos // bucket_tokens


def _buckets_along(tokens: np.ndarray, pos0: np.ndarray, bucket_tokens: int, last: np.ndarray) -> np.ndarray:
    """The bucket each iteration starts in (int32), along the path `tokens` from `pos0`."""
    pos = np.cumsum(tokens, axis=1, dtype=np.int32)
    pos -= tokens
    pos += pos0[:, None]
    return np.minimum(_bucket(pos, bucket_tokens), last[:, None])


def _ratios(arr: pa.Array, mean: np.ndarray) -> _MethodBuckets:
    """Bucket values over the row's mean; 1 where the mean is 0 (below MEAN_FLOOR: the
    mean says the row never accepts, and it keeps that whatever its buckets say)."""
    values, offsets = list_arrays(arr)
    values = values.astype(np.float64)
    counts = np.diff(offsets)
    row = np.repeat(np.arange(len(counts)), counts)
    m = mean[row]
    some = m > MEAN_FLOOR
    ratio = np.where(some, values / np.where(some, m, 1.0), 1.0)
    return _MethodBuckets(ratio, offsets, counts)


def _tokens(lnu: np.ndarray, inv: np.ndarray, top: np.ndarray) -> np.ndarray:
    """sim.acceptance.sample_tokens' arithmetic, per cell: ceil(ln U * inv) clamped to
    [1, depth + 1] (`inv` = 1 / ln a, per row or per cell), in float32 as it computes it."""
    with np.errstate(invalid="ignore"):
        r = lnu * inv
    np.ceil(r, out=r)
    np.fmax(r, np.float32(1.0), out=r)  # (0 * -inf at U = 0 of a non-drafting row: one token)
    np.minimum(r, top, out=r)
    return r.astype(np.int16)
