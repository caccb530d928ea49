"""Speculative planning for one worker: which rows draft how, what a block of verify
iterations yields (from the injected acceptance source) and what each iteration costs.

Split from the worker (sim.worker), which keeps the batching engine (queue, admission,
preemption) and the block loop; this owns the worker's speculation setting.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from simctl.policies.contract import SPEC_OFF, SpecConfig
from simctl.sim.acceptance import expected_tokens, stall_after_rejection, tree_acceptance
from simctl.sim.acceptance_source import AcceptanceSource, Draw
from simctl.sim.compiled import kernels
from simctl.sim.plan import Plan
from simctl.sim.state import PLAIN_GAMMA, StepState
from simctl.sim.worker_host import WorkerHost

# A speculative block that plans through several finishes samples at most this many
# (request, iteration) outcomes: the horizon shrinks with the batch.
SPEC_BLOCK_CELLS = 1 << 19

# Blocks up to this many cells take the direct formulas of `finish_columns` and
# `capped_progress` (their faster forms pay off only on large blocks).
SMALL_BLOCK_CELLS = 1 << 12

# Per row: acceptance per verified level, draft depth, method index (-1 = plain decode),
# decoupled window (0 = coupled), tree width and tokens verified.
SpecArrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]

_INT32 = np.iinfo(np.int32)
_UINT16_MAX = int(np.iinfo(np.uint16).max)


class _Block(NamedTuple):
    """A speculative block's outcomes laid out per iteration (see `SpecPlanner._layout`)."""

    x: np.ndarray  # tokens per row per iteration
    progress: np.ndarray  # tokens per row since the block began, capped at its dispatch end
    fin: np.ndarray  # column in which each row reaches its dispatch end (k: not in the block)
    order: np.ndarray  # rows by finish column
    fin_sorted: np.ndarray  # fin[order]: the finish columns, ascending
    gone: np.ndarray  # rows finished before each iteration
    ctx: np.ndarray  # context tokens of the batch in each iteration
    k: int  # iterations


def finish_columns(cum: np.ndarray, remaining: np.ndarray) -> np.ndarray:
    """Per row, the number of columns of `cum` below the row's `remaining`: the column in
    which it reaches its dispatch end (`cum.shape[1]`: not in the block). Rows of `cum`
    never fall (a block emits no negative tokens), so that count is the first column at or
    above `remaining`, which `argmax` finds without counting a whole row (this runs on
    every speculative block, up to SPEC_BLOCK_CELLS cells).

    >>> finish_columns(np.array([[1, 3, 6], [2, 2, 2]], np.int32), np.array([3, 5]))
    array([1, 3])
    """
    if cum.size <= SMALL_BLOCK_CELLS:
        return np.count_nonzero(cum < remaining[:, None], axis=1)
    rem = _narrow(remaining, cum.dtype)
    fin = np.argmax(cum >= rem[:, None], axis=1)
    return np.where(cum[:, -1] >= rem, fin, cum.shape[1]) if cum.shape[1] else fin


def capped_progress(cum: np.ndarray, remaining: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(progress, column sums): per cell `min(cum, remaining)` (a row's tokens since the
    block began, capped at its dispatch end), and per column its sum over the rows, as
    int64 (tokens emitted so far). The sum runs in int32 when it cannot overflow: it is at
    most `remaining.sum()` (the int64 accumulation is several times slower on a block's
    cells). The plan keeps `progress` until its block ends, every worker one, so it is held
    in uint16 where every `remaining` fits (a third of `cum` and the tokens it replaces).

    >>> p, s = capped_progress(np.array([[1, 3, 6], [2, 2, 2]], np.int32), np.array([3, 5]))
    >>> p, s
    (array([[1, 3, 3],
           [2, 2, 2]], dtype=uint16), array([3, 5, 5]))
    """
    if cum.size <= SMALL_BLOCK_CELLS:
        capped = np.minimum(cum, remaining[:, None])
        sums = capped.sum(axis=0, dtype=np.int64)
    else:
        rem = _narrow(remaining, cum.dtype)[:, None]
        capped = np.minimum(cum, rem)
        if cum.dtype == np.int32 and int(remaining.sum()) < (1 << 31) - 1:
            sums = capped.sum(axis=0, dtype=np.int32).astype(np.int64)
        else:
            sums = capped.sum(axis=0, dtype=np.int64)
    if len(remaining) and int(remaining.min()) >= 0 and int(remaining.max()) <= _UINT16_MAX:
        return capped.astype(np.uint16), sums
    return capped, sums


def block_counts(
    x: np.ndarray, rem: np.ndarray, first_finish: bool, bounds: tuple[int, int] | None = None
) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(k, fin, progress, column sums, order, gone) of a speculative block: tokens `x` per
    row per iteration (>= 0) against the rows' remaining tokens `rem`. fin: the column in
    which each row reaches its end (k: not in the block), and with `first_finish` the
    block ends at the first such column; progress: `capped_progress`; order: rows by
    finish column (stable); gone[i]: rows finished before iteration i; `bounds`: the least
    and most of `rem`, where the caller has them. Compiled where numba is installed
    (sim.kernels.block_counts: one loop nest instead of numpy's passes; same integers) and
    the progress fits uint16, as it does unless a row has more than 65,535 tokens left."""
    compiled = kernels()
    if compiled is None or not len(rem):
        return numpy_block_counts(x, rem, first_finish)
    lo, hi = bounds if bounds is not None else (int(rem.min()), int(rem.max()))
    if lo >= 0 and hi <= _UINT16_MAX:
        k, fin, progress, colsum, order, gone = compiled.block_counts(x, rem, first_finish)
        return int(k), fin, progress, colsum, order, gone
    return numpy_block_counts(x, rem, first_finish)


def numpy_block_counts(
    x: np.ndarray, rem: np.ndarray, first_finish: bool
) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`block_counts` in numpy."""
    k = x.shape[1]
    # x.cumsum(axis=1, dtype=np.int32), accumulated in place after one cast: the cast
    # inside the accumulation runs through numpy's small buffers, several times slower
    # on a large block
    cum = x.astype(np.int32)
    np.cumsum(cum, axis=1, out=cum)
    fin = finish_columns(cum, rem)
    if first_finish and (fin < k).any():
        k = int(fin.min()) + 1
        cum = cum[:, :k]
        fin = np.minimum(fin, k)
    progress, colsum = capped_progress(cum, rem)
    order = fin.argsort(kind="stable")
    gone = fin[order].searchsorted(np.arange(k), side="left")
    return k, fin, progress, colsum, order, gone


def _narrow(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """`values` in `dtype` where all fit (comparisons then run without widening `cum`)."""
    if values.dtype == dtype:  # the planner narrowed them already
        return values
    info = np.iinfo(dtype)
    if len(values) and info.min <= int(values.min()) and int(values.max()) <= info.max:
        return values.astype(dtype, copy=False)
    return values


def _prefix_sums(values: np.ndarray) -> np.ndarray:
    """`np.concatenate([[0.0], values.cumsum()])` of float64 `values` (the same running sum,
    written after a leading 0 without building the list and the second array).

    >>> _prefix_sums(np.array([1.5, 2.0, 0.25]))
    array([0.  , 1.5 , 3.5 , 3.75])
    """
    out = np.empty(len(values) + 1)
    out[0] = 0.0
    np.cumsum(values, out=out[1:])
    return out


# The planners of a step share what they derive from its acceptance matrices in a cache
# the step owns (`StepState.derived`), each entry kept with the matrix it came from (held,
# so its id is not reused): a Fastest-of-N replica replaces the matrices, once per clone.


def _any_miss(hit_mat: np.ndarray, cache: dict[str, Any]) -> bool:
    """Whether some request of the step drafts in fewer than all iterations (a hit share
    below 1): when none does, every plan prices verification directly."""
    held = cache.get("any_miss")
    if held is None or held[0] is not hit_mat:
        held = cache["any_miss"] = (hit_mat, bool((hit_mat < 1.0).any()))
    return bool(held[1])


def setting_rows(
    accept_mat: np.ndarray, method: int, gamma: int, topk: int, verify: int, cache: dict[str, Any]
) -> tuple[np.ndarray, np.ndarray]:
    """(per-token acceptance, expected tokens per verify iteration) of every request drafting
    `method` at depth `gamma` on `topk` paths verifying `verify` tokens: what `arrays` and
    `_block_length` compute for a plan's rows, computed once per setting (elementwise, so
    a row's value is the same whichever rows it is computed with)."""
    held = cache.get("setting_rows")
    if held is None or held[0] is not accept_mat:
        held = cache["setting_rows"] = (accept_mat, {})
    rows: dict[tuple[int, int, int, int], tuple[np.ndarray, np.ndarray]] = held[1]
    key = (method, gamma, topk, verify)
    hit = rows.get(key)
    if hit is None:
        n = len(accept_mat)
        alpha = np.ascontiguousarray(accept_mat[:, method])
        depth = np.full(n, gamma, np.int64)
        if topk > 1:
            alpha = tree_acceptance(alpha, depth, np.full(n, topk, np.int64), np.full(n, verify, np.int64))
        hit = rows[key] = (alpha, expected_tokens(alpha, depth))
    return hit


def _shared_rows(
    cache: dict[str, Any],
) -> dict[tuple[int, int, int, int, int], dict[int, tuple[np.ndarray, ...]]]:
    """The step's constant rows (`SpecPlanner._constant`) by setting, then batch size: they
    depend on nothing else, and being read-only any planner may use them."""
    rows = cache.get("constant_rows")
    if rows is None:
        rows = cache["constant_rows"] = {}
    return rows


class _WorkerArrays(tuple):
    """SpecArrays in which every row follows its worker's setting (no request overrides
    it): one method, one depth, coupled or decoupled alike, so the planner can skip the
    per-row selections that mixed settings need. `expected`: the rows' expected tokens
    per verify iteration; `rows`: every row speculates (all True, read-only)."""

    expected: np.ndarray
    rows: np.ndarray


def draft_slots(
    st: StepState, ids: np.ndarray, methods: np.ndarray, gamma: np.ndarray, verify: np.ndarray
) -> np.ndarray:
    """Tokens each row puts through a verify iteration on average: its own token plus the
    draft slots its drafter fills (`draft_fill_<method>`; plain rows fill none)."""
    fill = st.fill_mat[ids, np.maximum(methods, 0)] if st.methods else np.ones(len(ids))
    return np.where(gamma > 0, verify * fill, 0) + 1


def block_stops(fin_sorted: np.ndarray, k: int) -> np.ndarray:
    """Iterations (1-based) after which a row ends, ascending and unique, with `k` last:
    `np.unique(fin[fin < k] + 1)` plus `k`, from the finish columns already sorted (np.unique
    sorts again and costs more than the rest of this on a re-plan's few rows).

    >>> block_stops(np.array([0, 0, 2, 5, 5]), 5)
    array([1, 3, 5])
    """
    head = fin_sorted[: int(fin_sorted.searchsorted(k, side="left"))]
    if not len(head):
        return np.array([k], np.int64)
    keep = np.empty(len(head), np.bool_)
    keep[0] = True
    np.not_equal(head[1:], head[:-1], out=keep[1:])
    stops = head[keep]
    stops += 1
    if stops[-1] == k:
        return stops
    out = np.empty(len(stops) + 1, stops.dtype)  # np.append(stops, k), without its wrapper
    out[:-1] = stops
    out[-1] = k
    return out


def request_arrays(st: StepState, spec: SpecConfig, method_idx: int, ids: np.ndarray) -> SpecArrays:
    """`SpecPlanner.arrays` when requests may override their worker's setting `spec`
    (drafting method `method_idx`, -1: none): per row, its own setting where it has one,
    plain decoding where it opted out (PLAIN_GAMMA), else the worker's."""
    # (masked writes only where some row is masked: nothing to write otherwise)
    method = st.req_method.take(ids).astype(np.int64)
    gamma = st.req_gamma.take(ids).astype(np.int64)
    window = st.req_window.take(ids).astype(np.int64)
    topk = st.req_topk.take(ids).astype(np.int64)
    verify = st.req_verify.take(ids).astype(np.int64)
    inherit = gamma <= 0  # PLAIN_GAMMA rows are plain whatever the worker does
    if method_idx >= 0:
        follow = gamma == 0
        if follow.any():
            method[follow] = method_idx
            gamma[follow] = spec.gamma
            window[follow] = spec.window if spec.mode == "decoupled" else 0
            topk[follow] = max(1, spec.topk)
            verify[follow] = spec.tokens_verified
        inherit = gamma == PLAIN_GAMMA
    if inherit.any():
        method[inherit] = -1
        gamma[inherit] = 0
        verify[inherit] = 0
    # a decoupled request verifies its whole window each iteration
    decoupled = window > 0
    if decoupled.any():
        gamma = np.where(decoupled, window, gamma)
        verify = np.where(decoupled, window, verify)
    alpha = (
        np.where(method >= 0, st.accept_mat[ids, np.maximum(method, 0)], 0.0)
        if st.methods
        else (np.zeros(len(ids)))
    )
    tree = topk > 1
    if tree.any():
        alpha = np.where(tree, tree_acceptance(alpha, gamma, topk, verify), alpha)
    return alpha, gamma, method, window, topk, verify


def tree_widths(arrays: SpecArrays) -> np.ndarray | None:
    """Each row's effective tree width, `min(topk, verify // depth)` as
    sim.acceptance.tree_acceptance takes it (1: a chain); None when every row drafts a
    chain (the acceptance sources then need none)."""
    _, gamma, _, _, topk, verify = arrays
    if isinstance(arrays, _WorkerArrays) and len(topk) and topk[0] <= 1:
        return None
    tree = topk > 1
    if not tree.any():
        return None
    w = np.minimum(topk, verify // np.maximum(gamma, 1))
    return np.where(tree, np.maximum(w, 1), 1).astype(np.int64)


def constant_rows(spec: SpecConfig, method_idx: int, b: int) -> tuple[np.ndarray, ...]:
    """(gamma, method, window, topk, verify, speculates) rows of `b` requests following the
    worker's setting; built once per batch size and setting, read-only since plans keep
    them."""
    window = spec.window if spec.mode == "decoupled" else 0
    depth = window if window > 0 else spec.gamma
    rows = (
        np.full(b, depth, np.int64),
        np.full(b, method_idx, np.int64),
        np.full(b, window, np.int64),
        np.full(b, max(1, spec.topk), np.int64),
        np.full(b, window if window > 0 else spec.tokens_verified, np.int64),
        np.full(b, depth > 0, np.bool_),
    )
    for a in rows:
        a.flags.writeable = False
    return rows


def block_length(
    remaining: np.ndarray,
    expected: np.ndarray,
    cap: int,
    first_finish: bool,
    horizon: int,
    lo: int,
    hi: int,
) -> int:
    """Iterations to sample: to the expected first finish (with margin), or with nothing
    waiting to the expected last one within the worker's horizon (`expected`: tokens
    per iteration of each row; `lo`, `hi`: the least and most `remaining`)."""
    est = remaining / expected
    # math.ceil of the float: np.ceil's value, without a numpy scalar call
    k_first = max(1, min(math.ceil(float(est.min()) * 1.1) + 4, lo, cap))
    if first_finish:
        return k_first
    k_all = min(
        math.ceil(float(est.max()) * 1.1) + 4,
        hi,
        cap,
        horizon,
        SPEC_BLOCK_CELLS // len(remaining),
    )
    return max(k_first, k_all)


class SpecPlanner:
    def __init__(
        self,
        host: WorkerHost,
        kv_capacity: int,
        rng: np.random.Generator,
        acceptance: AcceptanceSource,
        kv_window: int = 0,
    ) -> None:
        self.host = host
        self.kv_capacity = kv_capacity
        self.kv_window = kv_window  # each running row's sliding-window KV (Worker.kv_window)
        self.rng = rng
        self.acceptance = acceptance
        self.spec: SpecConfig = SPEC_OFF
        self.method_idx = -1
        # the worker's setting as constant rows, by batch size (read-only: plans keep them);
        # the table of each setting is shared by the step's planners (`_shared_rows`), since
        # adaptive policies switch workers between a few settings over and over
        self._constant_rows: dict[int, tuple[np.ndarray, ...]] = {}

    def set_spec(self, spec: SpecConfig) -> None:
        self.spec = spec
        self.method_idx = self.host.method_index(spec.method) if spec.enabled and spec.method else -1
        window = spec.window if spec.mode == "decoupled" else 0
        key = (self.method_idx, spec.gamma, window, spec.topk, spec.tokens_verified)
        self._constant_rows = _shared_rows(self.host.state.derived).setdefault(key, {})

    def arrays(self, ids: np.ndarray) -> SpecArrays | None:
        """The rows' speculation settings (request overrides win over the worker's
        setting), or None when no row can speculate."""
        host = self.host
        if self.method_idx < 0 and not (host.request_spec and bool(host.state.req_gamma[ids].any())):
            return None
        if not host.request_spec and self.method_idx >= 0:
            return self._worker_arrays(ids)
        return self._request_arrays(ids)

    def _request_arrays(self, ids: np.ndarray) -> SpecArrays:
        return request_arrays(self.host.state, self.spec, self.method_idx, ids)

    def _worker_arrays(self, ids: np.ndarray) -> SpecArrays:
        """`arrays` when no request overrides its worker (most policies, most re-plans):
        every row takes the worker's setting."""
        st, b = self.host.state, len(ids)
        gamma, methods, windows, topks, verify, rows = self._constant_rows.get(b) or self._constant(b)
        alpha, expected = setting_rows(
            st.accept_mat, self.method_idx, int(gamma[0]), int(topks[0]), int(verify[0]), st.derived
        )
        out = _WorkerArrays((alpha.take(ids), gamma, methods, windows, topks, verify))
        out.expected = expected.take(ids)
        out.rows = rows
        return out

    def _constant(self, b: int) -> tuple[np.ndarray, ...]:
        rows = self._constant_rows[b] = constant_rows(self.spec, self.method_idx, b)
        return rows

    # ------------------------------------------------------------------------ planning
    def plan(
        self,
        ids: np.ndarray,
        remaining: np.ndarray,
        arrays: SpecArrays,
        cap: int,
        prefill: float,
        first_finish: bool,
        horizon: int,
        fresh: np.ndarray | None = None,
    ) -> Plan:
        """Sample every row's verification outcomes for the block, then price each iteration
        by the rows still running in it. With nothing waiting, the block runs through
        several finishes (stopping at each to report it), as plain decoding does; the
        horizon is the expected iterations to the last finish, bounded by SPEC_BLOCK_CELLS.

        `fresh`: rows prefilled in the block's first iteration (None: none). That pass
        computes their first token and nothing else: an engine drafts for a request only
        after its first sampled token (vLLM's proposers do), so they emit one token there,
        draft nothing and are verified at width 1; the other rows speculate as usual."""
        if fresh is not None and not fresh.any():
            fresh = None
        alpha, gamma, _, window, _, _ = arrays
        uniform = isinstance(arrays, _WorkerArrays)  # and with gamma > 0 (else no plan)
        if isinstance(arrays, _WorkerArrays):
            rows, expected = arrays.rows, arrays.expected
        else:
            rows, expected = gamma > 0, expected_tokens(alpha, gamma)
        every_row = uniform or bool(rows.all())
        lo, hi = int(remaining.min()), int(remaining.max())
        k = block_length(remaining, expected, cap, first_finish, horizon, lo, hi)
        x, draw = self._outcomes(ids, arrays, k, rows, every_row, fresh)
        # `remaining` in the cumulative tokens' int32, when it fits: compared without widening
        rem = remaining.astype(np.int32) if _INT32.min <= lo and hi <= _INT32.max else remaining
        blk = self._layout(ids, remaining, rem, x, first_finish, (lo, hi))
        if uniform and not window[0] and draw.slots is None:
            t, draft = self._uniform_iteration_seconds(ids, arrays, blk)
        else:
            t, draft = self._iteration_seconds(ids, arrays, blk, draw.slots)
        if fresh is not None:
            draft = admission_column(self, ids, arrays, blk, fresh, draw.slots, t, draft)
        t[0] += prefill
        fin, k = blk.fin, blk.k
        stops = block_stops(blk.fin_sorted, k)
        dec = (window > 0) if not uniform or window[0] else None
        if dec is not None and not dec.any():
            dec = None
        return Plan(
            ids,
            t.cumsum(),
            remaining,
            rows,
            gamma,
            int(blk.ctx[0]),
            # one depth: b copies of it sum exactly, so their mean is that depth
            float(gamma[0]) if uniform else float(gamma[rows].mean()),
            every_row_speculates=every_row,
            progress=blk.progress,
            stops=stops,
            decoupled_rows=dec,
            # a decoupled row's iterations are those it verified in (it sits some out)
            verified=None if dec is None else blk.x[dec] > 0,
            finish=fin,
            last=fin + 1,
            probe=draw.probe,
            draft_cum_s=draft.cumsum(),
            fresh=fresh,
        )

    def _outcomes(
        self,
        ids: np.ndarray,
        arrays: SpecArrays,
        k: int,
        rows: np.ndarray,
        every_row: bool,
        fresh: np.ndarray | None = None,
    ) -> tuple[np.ndarray, Draw]:
        """Tokens per row per iteration (plain rows emit 1; decoupled rows sit out the
        iteration after each rejected window) and the acceptance source's draw. `rows`:
        the rows that speculate (`every_row`: all of them); `fresh`: rows whose first
        iteration is their prefill pass (one token)."""
        alpha, gamma, methods, window, _, _ = arrays
        topk = max(1, self.spec.topk)
        width = tree_widths(arrays)
        if every_row:
            # the draw is the block (a fresh array the source hands over), of every row as
            # they are: the same values as selecting all of them
            draw = self.acceptance.draw(self.rng, ids, methods, alpha, gamma, topk, k, fresh, width)
            if draw.tokens.dtype == np.int16 and draw.tokens.shape == (len(ids), k):
                x = draw.tokens
            else:
                x = np.ones((len(ids), k), np.int16)
                x[:] = draw.tokens
            if isinstance(arrays, _WorkerArrays) and not window[0]:
                return x, draw  # coupled
        else:
            x = np.ones((len(ids), k), np.int16)
            first = fresh[rows] if fresh is not None else None
            width = width[rows] if width is not None else None
            args = (ids[rows], methods[rows], alpha[rows], gamma[rows], topk, k, first, width)
            draw = self.acceptance.draw(self.rng, *args)
            x[rows] = draw.tokens
        dec = window > 0
        if dec.any():
            late = dec & fresh if fresh is not None else None
            if late is not None and late.any() and k > 1:
                # drafting starts after the prefill pass: lay the windows out from there
                x[late, 1:] = stall_after_rejection(x[late, 1:], window[late])
                dec = dec & ~late
            x[dec] = stall_after_rejection(x[dec], window[dec])
        return x, draw

    def _layout(
        self,
        ids: np.ndarray,
        remaining: np.ndarray,
        rem: np.ndarray,
        x: np.ndarray,
        first_finish: bool,
        bounds: tuple[int, int],
    ) -> _Block:
        """Where each row finishes and the batch's context per iteration; the block ends at
        the first finish when requests wait, and before the KV cache would overflow. `rem`:
        `remaining`, narrowed to int32 where it fits; `bounds`: its least and most."""
        k, fin, progress, colsum, order, gone = block_counts(x, rem, first_finish, bounds)
        if k < x.shape[1]:
            x = x[:, :k]
        # tokens emitted per iteration (a row's last iteration emits only what it had left)
        emitted = colsum.copy()
        emitted[1:] -= colsum[:-1]
        before = colsum - emitted
        # rows gone before each iteration free their KV and leave the batch
        fin_sorted = fin[order]
        ctx_r = self.host.state.context(ids).astype(np.float64)
        ctx = ctx_r.sum() + before
        if gone[-1]:  # else nobody leaves within the block: nothing to take off (x - 0.0 == x)
            ctx -= _prefix_sums((ctx_r + remaining).take(order)).take(gone)
        over = ctx + emitted > self.kv_capacity
        if self.kv_window:  # and each row still running holds its window
            over = ctx + emitted + (len(ids) - gone) * self.kv_window > self.kv_capacity
        if over.any():
            k = max(1, int(np.argmax(over)))
            x, progress, ctx, gone = x[:, :k], progress[:, :k], ctx[:k], gone[:k]
            fin, fin_sorted = np.minimum(fin, k), np.minimum(fin_sorted, k)
        return _Block(x, progress, fin, order, fin_sorted, gone, ctx, k)

    def _iteration_seconds(
        self, ids: np.ndarray, arrays: SpecArrays, blk: _Block, exact_slots: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Seconds of each iteration: verification (of the draft slots the drafter filled:
        model-free drafters propose nothing where no n-gram matches) overlapped with
        decoupled drafting, plus coupled drafting; and the drafting part of each (coupled
        drafting and any wait for a slower decoupled drafter), which the timeline records."""
        _, gamma, methods, window, topk, verify = arrays
        st, b, k, gone, fin = self.host.state, len(ids), blk.k, blk.gone, blk.fin
        rows = gamma > 0
        if isinstance(arrays, _WorkerArrays):  # every row drafts with the worker's method
            slots = verify * st.fill_mat[ids, self.method_idx] + 1
        else:
            slots = draft_slots(st, ids, methods, gamma, verify)
        batch: np.ndarray | int
        new_tokens: np.ndarray | int
        if exact_slots is not None:
            # exact replay knows each iteration's draft: charge it, for the rows still running
            per = np.broadcast_to(slots[:, None].astype(np.float32), (b, k)).copy()
            ex = exact_slots[:, :k]
            per[rows] = np.where(np.isnan(ex), per[rows], ex + 1)
            per[np.arange(k)[None, :] > fin[:, None]] = 0.0
            batch = (b - gone).astype(np.float64) if gone[-1] else b
            new_tokens = np.round(per.sum(axis=0, dtype=np.float64))
        elif gone[-1] == 0:
            batch = b
            new_tokens = round(float(slots.sum()))
        else:
            batch = (b - gone).astype(np.float64)
            gone_slots = _prefix_sums(slots.take(blk.order)).take(gone)
            new_tokens = np.rint(slots.sum() - gone_slots)  # np.round to 0 decimals is rint
        verify_s = self.verify_time(
            ids, methods, gamma, batch, new_tokens, blk.ctx, blk.order, gone, exact_slots is not None
        )
        coupled, decoupled = self.draft_times(ids, methods, gamma, window, topk, blk.ctx, fin, batch)
        draft = coupled + np.maximum(decoupled - verify_s, 0.0)
        if draft.shape != (blk.k,):
            draft = np.broadcast_to(draft, (blk.k,))
        return np.maximum(verify_s, decoupled) + coupled, draft

    def _uniform_iteration_seconds(
        self, ids: np.ndarray, arrays: SpecArrays, blk: _Block
    ) -> tuple[np.ndarray, np.ndarray]:
        """`_iteration_seconds` when every row drafts with the worker's method, coupled, and
        the draft slots are expected ones (no exact replay): the same operations on the same
        values, without the per-row selections and checks that mixed settings need."""
        _, gamma, methods, _, topk, verify = arrays
        st, host, b, gone = self.host.state, self.host, len(ids), blk.gone
        # verify * fill + 1 of the general path: int * float64 is the float64 product
        slots = st.fill_mat[ids, self.method_idx] * int(verify[0]) + 1
        batch: np.ndarray | int
        new_tokens: np.ndarray | int
        if gone[-1] == 0:
            batch = b
            new_tokens = round(float(slots.sum()))
        else:
            batch = (b - gone).astype(np.float64)
            new_tokens = np.rint(slots.sum() - _prefix_sums(slots.take(blk.order)).take(gone))
        g = int(gamma[0])
        if _any_miss(st.hit_mat, st.derived):  # some request drafts in fewer than all iterations
            verify_s = self.verify_time(
                ids, methods, gamma, batch, new_tokens, blk.ctx, blk.order, gone, False
            )
        else:
            kw = {"gamma": g} if host.cost_takes_gamma else {}
            verify_s = np.asarray(
                host.cost.iteration_time(batch, new_tokens, blk.ctx, **kw), dtype=np.float64
            )
        coupled = self._uniform_draft_times(int(methods[0]), g, int(topk[0]), blk.ctx, batch)
        if verify_s.min() >= 0.0:
            # no decoupled drafter: max(0 - verify, 0) is 0 and max(verify, 0) is verify
            return verify_s + coupled, coupled
        zeros = np.zeros(blk.k)
        return np.maximum(verify_s, zeros) + coupled, coupled + np.maximum(zeros - verify_s, 0.0)

    def _uniform_draft_times(
        self, method: int, gamma: int, topk: int, ctx: np.ndarray, batch: np.ndarray | int
    ) -> np.ndarray:
        """Coupled drafting seconds per iteration when every row drafts `method` at depth
        `gamma` on `topk` paths: `draft_times`' shortcut for that case (its first part)."""
        st, host = self.host.state, self.host
        n = batch if np.ndim(batch) else float(batch)
        share = ctx * (n / np.maximum(n, 1.0))
        drafter = host.drafter_for(st.methods[method])
        t = host.cost.draft_time(drafter, n * topk, share * topk, gamma)
        return np.zeros(len(ctx)) + np.where(np.asarray(n) > 0, t, 0.0)

    # ------------------------------------------------------------------------- pricing
    def verify_time(
        self,
        ids: np.ndarray,
        methods: np.ndarray,
        gamma: np.ndarray,
        batch: np.ndarray | int,
        new_tokens: np.ndarray | int,
        ctx: np.ndarray,
        order: np.ndarray,
        gone: np.ndarray,
        exact: bool,
    ) -> np.ndarray:
        """Seconds of each verify iteration. A model-free drafter often proposes nothing
        (`draft_hit_<method>` < 1), and an iteration in which no request of the batch drafted
        is a plain decode step: with P0 the chance of that (rows independent), the price is
        P0 * decode + (1 - P0) * verify of the expected drafts given some were proposed.
        Exact replay knows each iteration's drafts already. A measured profile is told the
        widest draft length (its verify law depends on it)."""
        st, cost = self.host.state, self.host.cost
        spec = gamma > 0
        kw = {"gamma": int(gamma[spec].max())} if self.host.cost_takes_gamma and spec.any() else {}
        if exact or not _any_miss(st.hit_mat, st.derived):  # no request of the step ever drafts nothing
            return np.asarray(cost.iteration_time(batch, new_tokens, ctx, **kw), dtype=np.float64)
        hit = st.hit_mat[ids, np.maximum(methods, 0)] if st.methods else np.ones(len(ids))
        if not (spec & (hit < 1.0)).any():
            return np.asarray(cost.iteration_time(batch, new_tokens, ctx, **kw), dtype=np.float64)
        log_miss = np.where(spec, np.log(np.maximum(1.0 - hit, 1e-300)), 0.0)
        if gone[-1] == 0:
            p0: np.ndarray | float = float(np.exp(log_miss.sum()))
        else:
            p0 = np.exp(log_miss.sum() - np.concatenate([[0.0], np.cumsum(log_miss[order])])[gone])
        drafts = np.asarray(new_tokens, np.float64) - batch
        plain = np.asarray(cost.iteration_time(batch, batch, ctx, **kw), dtype=np.float64)
        given = batch + drafts / np.maximum(1.0 - p0, 1e-12)  # tokens verified when someone drafted
        some = np.asarray(cost.iteration_time(batch, given, ctx, **kw), dtype=np.float64)
        return p0 * plain + (1.0 - p0) * some

    def draft_times(
        self,
        ids: np.ndarray,
        methods: np.ndarray,
        gamma: np.ndarray,
        window: np.ndarray,
        topk: np.ndarray,
        ctx: np.ndarray,
        finish: np.ndarray,
        batch: np.ndarray | int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(coupled, decoupled) drafting seconds per iteration. Coupled drafting adds to the
        verifier's iteration; decoupled drafting runs on the drafter worker's GPUs (one
        drafter instance per GPU, shared by every verifier pointing at it) and overlaps it.
        A row drafts in the iterations up to its `finish` column."""
        st, cost, host = self.host.state, self.host.cost, self.host
        k = len(ctx)
        if batch is not None and methods[0] >= 0 and not window.any():
            m0 = methods[0]
            if (methods == m0).all():  # the common case: every row drafts alike, coupled
                n = batch if np.ndim(batch) else float(batch)
                share = ctx * (n / np.maximum(n, 1.0))
                width = int(topk.max())
                drafter = host.drafter_for(st.methods[m0])
                t = cost.draft_time(drafter, n * width, share * width, int(gamma.max()))
                return np.zeros(k) + np.where(np.asarray(n) > 0, t, 0.0), np.zeros(k)
        it = np.arange(k)

        def running(sel: np.ndarray) -> np.ndarray | float:
            f = np.sort(finish[sel])
            if not len(f) or f[0] >= k - 1:
                return float(len(f))
            return (len(f) - np.searchsorted(f, it, side="left")).astype(np.float64)

        b = running(np.ones(len(ids), bool))
        coupled = np.zeros(k)
        decoupled = np.zeros(k)
        for midx in np.unique(methods[methods >= 0]):
            drafter = host.drafter_for(st.methods[midx])
            for dec in (False, True):
                sel = (methods == midx) & ((window > 0) == dec)
                if not sel.any():
                    continue
                n = running(sel)
                live = np.asarray(n) > 0
                share = ctx * (n / np.maximum(b, 1.0))
                g = int(gamma[sel].max())
                if dec:
                    clients, gpus = host.drafter_load(_drafter_worker(st, self.spec, ids[sel]))
                    per_gpu = np.maximum(1.0, n * max(1, clients) / gpus)
                    t = cost.draft_time(drafter, per_gpu, share * per_gpu / np.maximum(n, 1.0), g)
                    decoupled = np.maximum(decoupled, np.where(live, t, 0.0))
                else:
                    # a tree drafts topk candidates per level for each sequence
                    width = int(topk[sel].max())
                    t = cost.draft_time(drafter, n * width, share * width, g)
                    coupled = coupled + np.where(live, t, 0.0)
        return coupled, decoupled


def admission_column(
    planner: SpecPlanner,
    ids: np.ndarray,
    arrays: SpecArrays,
    blk: _Block,
    fresh: np.ndarray,
    exact_slots: np.ndarray | None,
    t: np.ndarray,
    draft: np.ndarray,
) -> np.ndarray:
    """Price the block's first iteration again with the `fresh` rows (prefilled in it)
    at width 1 and drafting nothing, the others as `_iteration_seconds` does; writes it
    into `t` and returns the drafting seconds with it. Every row runs in that iteration
    (no row finishes before it)."""
    _, gamma, methods, window, topk, verify = arrays
    st, b = planner.host.state, len(ids)
    old = ~fresh
    slots = draft_slots(st, ids, methods, gamma, verify)
    if exact_slots is not None:  # rows replayed exactly verify what they drafted
        rows = gamma > 0
        ex = exact_slots[:, 0].astype(np.float64)
        slots[rows] = np.where(np.isnan(ex), slots[rows], ex + 1)
    slots[fresh] = 1  # (a fresh row's one token, from the prefill pass)
    new_tokens = round(float(slots.sum()))
    ctx0 = blk.ctx[:1]
    order, gone = np.arange(int(old.sum())), np.zeros(1, np.int64)
    verify_s = planner.verify_time(
        ids[old], methods[old], gamma[old], b, new_tokens, ctx0, order, gone, exact_slots is not None
    )
    coupled = decoupled = np.zeros(1)
    spec = old & (gamma > 0)
    if spec.any():
        # the drafter sees the context of the rows it drafts for
        ctx_old = ctx0 - float(st.context(ids[fresh]).sum())
        n = int(old.sum())
        coupled, decoupled = planner.draft_times(
            ids[old], methods[old], gamma[old], window[old], topk[old], ctx_old, blk.fin[old], n
        )
    v, c, d = float(verify_s[0]), float(coupled[0]), float(decoupled[0])
    t[0] = max(v, d) + c
    out = np.array(draft, dtype=np.float64)
    out[0] = c + max(d - v, 0.0)
    return out


def _drafter_worker(st: StepState, spec: SpecConfig, rows: np.ndarray) -> int:
    """The drafter worker of decoupled `rows`: the first row's own, else the worker's."""
    for r in rows[:1].tolist():
        if st.req_window[r] > 0 and st.spec[r].drafter_worker is not None:
            return int(st.spec[r].drafter_worker)
    assert spec.drafter_worker is not None
    return int(spec.drafter_worker)
