"""One rollout worker (a TP group of GPUs running a continuous-batching engine) as a SimPy process.

The worker plans a block of decode iterations in one vectorised computation (`plan`),
sleeps for their total time, and applies the progress (`apply`). Inside a block the batch
only shrinks: every request's progress (sampled verification outcomes when speculating) is
known, so each iteration is priced by the requests still running in it. The block stops at
each finish or chunk end and each policy tick to report it, and ends there only if the
policy's answer changed this worker; it also ends when a waiting request could be admitted,
the KV cache fills up, or an action interrupts it (honoured at the next iteration boundary,
as a real engine would). How far a worker plans adapts to how long its blocks last.
`per_iteration=True` plans one iteration at a time: the reference the fast path is
validated against.

The batching engine mirrors vLLM's scheduler in the parts that shape a rollout tail:
admission by priority then arrival up to `max_num_seqs` and KV capacity (head-of-line
blocking), newly admitted prompts prefilled in the next iteration, and preemption by
recompute of the most recently admitted request when the KV cache overflows.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import simpy

from simctl.policies.contract import SPEC_OFF, Role, SpecConfig, Tick, WorkerIdle
from simctl.sim.acceptance import expected_tokens, stall_after_rejection, tree_acceptance
from simctl.sim.state import PLAIN_GAMMA, RUNNING, WAITING

if TYPE_CHECKING:
    from simctl.sim.engine import StepSimulation
    from simctl.sim.token_replay import ModelProbe

# A fast-forward block never plans more iterations than this (bounds memory of the
# sampled acceptance matrix; the loop simply plans again).
MAX_BLOCK_ITERATIONS = 4096
# A speculative block that plans through several finishes samples at most this many
# (request, iteration) outcomes: the horizon shrinks with the batch.
SPEC_BLOCK_CELLS = 1 << 19
# A block through several finishes plans at most the worker's current horizon (adapted to
# how long its blocks last, between these bounds); it then simply plans again.
MIN_HORIZON = 16
FIRST_HORIZON = MAX_BLOCK_ITERATIONS


@dataclass
class Plan:
    ids: np.ndarray  # running requests, admission order
    cum_s: np.ndarray  # cumulative time at the end of each planned iteration
    remaining: np.ndarray  # tokens until each request's dispatch ends
    tokens: np.ndarray | None  # per-request per-iteration tokens (None: plain decode)
    spec_rows: np.ndarray | None  # bool mask of rows decoded speculatively
    gamma: np.ndarray | None
    kv_tokens: int
    spec_gamma_mean: float
    cum: np.ndarray | None = None  # cumulative tokens per row over the block (speculative plans)
    # Iterations (1-based, increasing, last = iterations) after which a request ends: the
    # worker stops there to report it. Plain decoding plans several finishes at once.
    stops: np.ndarray | None = None
    decoupled_rows: np.ndarray | None = None  # bool mask of decoupled rows (they sit out iterations)
    # Speculative plans: the 0-based column in which each row reaches its dispatch end
    # (`iterations` if it does not within the block); a row takes part up to that column.
    finish: np.ndarray | None = None
    probe: ModelProbe | None = None  # rows drawn from the grouped-drafter model (drift check)

    @property
    def iterations(self) -> int:
        return len(self.cum_s)


class Worker:
    def __init__(self, sim: StepSimulation, wid: int, node: int, gpus: int, kv_capacity: int) -> None:
        self.sim = sim
        self.id = wid
        self.node = node
        self.gpus = gpus
        self.kv_capacity = kv_capacity
        self.rng = np.random.default_rng([sim.seed, sim.state.step, wid])
        self.running = np.empty(0, np.int64)
        self._waiting: list[tuple[float, int, int]] = []  # (-priority, seq, request)
        self._seq = 0
        self.waiting_count = 0
        self.role = Role.ROLLOUT
        self.spec: SpecConfig = SPEC_OFF
        self._method_idx = -1
        self.prefill_tokens = 0
        self.iteration = 0
        self._since_tick = 0
        self._horizon = FIRST_HORIZON
        self._idle_reported = False
        self._wake: simpy.Event | None = None
        self._advancing = False
        self._applying = False
        self.disturbed = False  # a request left mid-block (migration): re-check ownership
        self._dirty = False  # an action reached this worker while it applied progress
        self.proc = sim.env.process(self.run())

    # ---------------------------------------------------------------- queue management
    def enqueue(self, rid: int) -> None:
        st = self.sim.state
        st.state[rid] = WAITING
        heapq.heappush(self._waiting, (-float(st.priority[rid]), self._seq, rid))
        self._seq += 1
        self.waiting_count += 1
        self._idle_reported = False
        self.poke()

    def kv_used(self) -> int:
        return int(self.sim.state.context(self.running).sum()) if len(self.running) else 0

    def poke(self) -> None:
        """Make the worker re-plan at its next iteration boundary (after an action)."""
        if self._applying:
            self._dirty = True  # its own loop re-plans right after the current apply
            return
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()
        elif self._advancing:
            self._advancing = False
            self.proc.interrupt()

    def _admit(self) -> None:
        st, cfg = self.sim.state, self.sim.config
        if not self._waiting or len(self.running) >= cfg.max_num_seqs:
            return
        limit = int(self.kv_capacity * (1.0 - cfg.kv_watermark))
        used = self.kv_used()
        added = []
        while self._waiting and len(self.running) + len(added) < cfg.max_num_seqs:
            _, _, rid = self._waiting[0]
            if st.state[rid] != WAITING or st.worker[rid] != self.id:
                heapq.heappop(self._waiting)  # stale entry (migrated/deferred)
                continue
            need = int(st.prompt_len[rid] + st.generated[rid])
            if used + need > limit and (len(self.running) or added):
                break  # head-of-line blocking, as vLLM's FCFS/priority queue
            heapq.heappop(self._waiting)
            self.waiting_count -= 1
            self.prefill_tokens += need - int(min(st.kv_resident[rid], need))
            st.kv_resident[rid] = need
            st.state[rid] = RUNNING
            used += need
            added.append(rid)
        if added:
            self.running = np.concatenate([self.running, np.asarray(added, np.int64)])

    def _preempt_for_room(self) -> None:
        """Recompute-preempt the latest admitted requests until one iteration fits."""
        st = self.sim.state
        if len(self.running) <= 1 or self.kv_used() + len(self.running) <= self.kv_capacity:
            return
        while len(self.running) > 1 and self.kv_used() + len(self.running) > self.kv_capacity:
            rid = int(self.running[-1])
            self.running = self.running[:-1]
            st.kv_resident[rid] = 0
            st.preemptions[rid] += 1
            st.state[rid] = WAITING
            heapq.heappush(self._waiting, (-float(st.priority[rid]), -1 - self._seq, rid))
            self._seq += 1
            self.waiting_count += 1
            self.sim.counters["preemptions"] += 1

    # -------------------------------------------------------------------- planning
    def set_spec(self, spec: SpecConfig) -> None:
        self.spec = spec
        self._method_idx = self.sim.method_index(spec.method) if spec.enabled and spec.method else -1
        self.poke()

    def _spec_arrays(self, ids: np.ndarray) -> tuple[np.ndarray, ...]:
        """Per row: acceptance per verified level, draft depth, method index (-1 = plain
        decode), decoupled window (0 = coupled), tree width and tokens verified. Request
        overrides win over the worker's setting."""
        st, spec = self.sim.state, self.spec
        if not self.sim.request_spec and self._method_idx >= 0:
            return self._worker_spec_arrays(ids)
        method = st.req_method[ids].astype(np.int64)
        gamma = st.req_gamma[ids].astype(np.int64)
        window = st.req_window[ids].astype(np.int64)
        topk = st.req_topk[ids].astype(np.int64)
        verify = st.req_verify[ids].astype(np.int64)
        inherit = gamma <= 0  # PLAIN_GAMMA rows are plain whatever the worker does
        if self._method_idx >= 0:
            follow = gamma == 0
            method[follow] = self._method_idx
            gamma[follow] = spec.gamma
            window[follow] = spec.window if spec.mode == "decoupled" else 0
            topk[follow] = max(1, spec.topk)
            verify[follow] = spec.tokens_verified
            inherit = gamma == PLAIN_GAMMA
        method[inherit] = -1
        gamma[inherit] = 0
        verify[inherit] = 0
        # a decoupled request verifies its whole window each iteration
        gamma = np.where(window > 0, window, gamma)
        verify = np.where(window > 0, window, verify)
        alpha = (
            np.where(method >= 0, st.accept_mat[ids, np.maximum(method, 0)], 0.0)
            if st.methods
            else (np.zeros(len(ids)))
        )
        tree = topk > 1
        if tree.any():
            alpha = np.where(tree, tree_acceptance(alpha, gamma, topk, verify), alpha)
        return alpha, gamma, method, window, topk, verify

    def _worker_spec_arrays(self, ids: np.ndarray) -> tuple[np.ndarray, ...]:
        """`_spec_arrays` when no request overrides its worker (most policies, most
        re-plans): every row takes the worker's setting."""
        st, spec, b = self.sim.state, self.spec, len(ids)
        window = spec.window if spec.mode == "decoupled" else 0
        topk = max(1, spec.topk)
        gamma = np.full(b, window if window > 0 else spec.gamma, np.int64)
        verify = np.full(b, window if window > 0 else spec.tokens_verified, np.int64)
        alpha = st.accept_mat[ids, self._method_idx]
        topks = np.full(b, topk, np.int64)
        if topk > 1:
            alpha = tree_acceptance(alpha, gamma, topks, verify)
        methods = np.full(b, self._method_idx, np.int64)
        return alpha, gamma, methods, np.full(b, window, np.int64), topks, verify

    def _verify_time(
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
        st, cost = self.sim.state, self.sim.cost
        spec = gamma > 0
        kw = {"gamma": int(gamma[spec].max())} if self.sim.cost_takes_gamma and spec.any() else {}
        hit = st.hit_mat[ids, np.maximum(methods, 0)] if st.methods else np.ones(len(ids))
        if exact or not (spec & (hit < 1.0)).any():
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

    def _draft_times(
        self,
        ids,
        methods,
        gamma,
        window,
        topk,
        ctx: np.ndarray,
        finish: np.ndarray,
        batch: np.ndarray | int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(coupled, decoupled) drafting seconds per iteration. Coupled drafting adds to the
        verifier's iteration; decoupled drafting runs on the drafter worker's GPUs (one
        drafter instance per GPU, shared by every verifier pointing at it) and overlaps it.
        A row drafts in the iterations up to its `finish` column."""
        st, cost, sim = self.sim.state, self.sim.cost, self.sim
        k = len(ctx)
        if batch is not None and methods[0] >= 0 and not window.any():
            m0 = methods[0]
            if (methods == m0).all():  # the common case: every row drafts alike, coupled
                n = batch if np.ndim(batch) else float(batch)
                share = ctx * (n / np.maximum(n, 1.0))
                width = int(topk.max())
                drafter = sim.drafter_for(st.methods[m0])
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
            drafter = sim.drafter_for(st.methods[midx])
            for dec in (False, True):
                sel = (methods == midx) & ((window > 0) == dec)
                if not sel.any():
                    continue
                n = running(sel)
                live = np.asarray(n) > 0
                share = ctx * (n / np.maximum(b, 1.0))
                g = int(gamma[sel].max())
                if dec:
                    d = self._drafter_worker(ids[sel])
                    per_gpu = np.maximum(1.0, n * max(1, len(sim.drafter_clients[d])) / sim.workers[d].gpus)
                    t = cost.draft_time(drafter, per_gpu, share * per_gpu / np.maximum(n, 1.0), g)
                    decoupled = np.maximum(decoupled, np.where(live, t, 0.0))
                else:
                    # a tree drafts topk candidates per level for each sequence
                    width = int(topk[sel].max())
                    t = cost.draft_time(drafter, n * width, share * width, g)
                    coupled = coupled + np.where(live, t, 0.0)
        return coupled, decoupled

    def _drafter_worker(self, rows: np.ndarray) -> int:
        st = self.sim.state
        for r in rows[:1].tolist():
            if st.req_window[r] > 0 and st.spec[r].drafter_worker is not None:
                return int(st.spec[r].drafter_worker)
        assert self.spec.drafter_worker is not None
        return int(self.spec.drafter_worker)

    def plan(self) -> Plan:
        st, cost, cfg = self.sim.state, self.sim.cost, self.sim.config
        ids = self.running
        b = len(ids)
        remaining = st.dispatch_end[ids] - st.generated[ids]
        ctx0 = int(st.context(ids).sum())
        cap = 1 if cfg.per_iteration else MAX_BLOCK_ITERATIONS
        tick = self.sim.policy.tick_iterations
        if tick and self.sim.replan_at_tick:
            cap = min(cap, tick - self._since_tick)
        prefill = float(cost.prefill_time(self.prefill_tokens)) if self.prefill_tokens else 0.0
        spec_on = self._method_idx >= 0 or (self.sim.request_spec and bool(st.req_gamma[ids].any()))
        arrays = self._spec_arrays(ids) if spec_on else None
        # With requests waiting, the first finish may admit one: plan only up to it.
        first_finish = bool(self.waiting_count) or cfg.per_iteration
        if arrays is None or not arrays[1].any():
            if first_finish:
                room = (self.kv_capacity - ctx0) // b
                k = int(max(1, min(int(remaining.min()), cap, room)))
                ctx = ctx0 + b * np.arange(k, dtype=np.float64)
                t = np.asarray(cost.iteration_time(b, b, ctx), dtype=np.float64)
                t[0] += prefill
                return self._with_ticks(Plan(ids, np.cumsum(t), remaining, None, None, None, ctx0, 0.0))
            return self._with_ticks(self._plan_plain_finishes(ids, remaining, cap, prefill))
        return self._with_ticks(self._plan_speculative(ids, remaining, arrays, cap, prefill, first_finish))

    def _with_ticks(self, plan: Plan) -> Plan:
        """Stop at every policy tick inside the block: the tick is reported there and the
        block goes on unless the policy's answer changed this worker."""
        tick = self.sim.policy.tick_iterations
        k = plan.iterations
        if not tick or self.sim.replan_at_tick or tick - self._since_tick > k:
            return plan
        ticks = np.arange(tick - self._since_tick, k + 1, tick)
        stops = plan.stops if plan.stops is not None else np.array([k])
        plan.stops = np.union1d(stops, ticks)
        return plan

    def _plan_speculative(
        self,
        ids: np.ndarray,
        remaining: np.ndarray,
        arrays: tuple[np.ndarray, ...],
        cap: int,
        prefill: float,
        first_finish: bool,
    ) -> Plan:
        """Sample every row's verification outcomes for the block, then price each iteration
        by the rows still running in it. With nothing waiting, the block runs through
        several finishes (stopping at each to report it), as plain decoding does; the
        horizon is the expected iterations to the last finish, bounded by SPEC_BLOCK_CELLS."""
        st = self.sim.state
        alpha, gamma, methods, window, topk, verify = arrays
        b = len(ids)
        rows = gamma > 0
        est = remaining / expected_tokens(alpha, gamma)
        k_first = max(1, min(int(np.ceil(est.min() * 1.1)) + 4, int(remaining.min()), cap))
        k = k_first
        if not first_finish:
            k_all = min(
                int(np.ceil(est.max() * 1.1)) + 4,
                int(remaining.max()),
                cap,
                self._horizon,
                SPEC_BLOCK_CELLS // b,
            )
            k = max(k_first, k_all)
        x = np.ones((b, k), np.int16)
        x[rows], exact_slots, probe = self.sim.spec_tokens(
            self, ids[rows], methods[rows], alpha[rows], gamma[rows], k
        )
        dec = window > 0
        if dec.any():
            x[dec] = stall_after_rejection(x[dec], window[dec])
        cum = np.cumsum(x, axis=1, dtype=np.int32)
        # cum rises along a row: the columns before it reaches `remaining` count to its finish
        fin = np.count_nonzero(cum < remaining[:, None], axis=1)
        if first_finish and (fin < k).any():
            k = int(fin.min()) + 1
            x, cum = x[:, :k], cum[:, :k]
            fin = np.minimum(fin, k)
        # tokens emitted per iteration (a row's last iteration emits only what it had left)
        colsum = np.minimum(cum, remaining[:, None]).sum(axis=0, dtype=np.int64)
        emitted = colsum.copy()
        emitted[1:] -= colsum[:-1]
        before = colsum - emitted
        # rows gone before each iteration free their KV and leave the batch
        order = np.argsort(fin, kind="stable")
        gone = np.searchsorted(fin[order], np.arange(k), side="left")
        ctx_r = st.context(ids).astype(np.float64)
        gone_ctx = np.concatenate([[0.0], np.cumsum((ctx_r + remaining)[order])])[gone]
        ctx = ctx_r.sum() + before - gone_ctx
        over = ctx + emitted > self.kv_capacity
        if over.any():
            k = max(1, int(np.argmax(over)))
            x, cum, ctx, gone = x[:, :k], cum[:, :k], ctx[:k], gone[:k]
            fin = np.minimum(fin, k)
        # verification covers the draft slots the drafter filled (model-free drafters
        # propose nothing where no n-gram matches)
        fill = st.fill_mat[ids, np.maximum(methods, 0)] if st.methods else np.ones(b)
        slots = np.where(gamma > 0, verify * fill, 0) + 1
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
            gone_slots = np.concatenate([[0.0], np.cumsum(slots[order])])[gone]
            new_tokens = np.round(slots.sum() - gone_slots)
        verify_s = self._verify_time(
            ids, methods, gamma, batch, new_tokens, ctx, order, gone, exact_slots is not None
        )
        coupled, decoupled = self._draft_times(ids, methods, gamma, window, topk, ctx, fin, batch)
        t = np.maximum(verify_s, decoupled) + coupled
        t[0] += prefill
        stops = np.unique(fin[fin < k] + 1)
        if not len(stops) or stops[-1] != k:
            stops = np.append(stops, k)
        return Plan(
            ids,
            np.cumsum(t),
            remaining,
            x,
            rows,
            gamma,
            int(ctx[0]),
            float(gamma[rows].mean()),
            cum=cum,
            stops=stops,
            decoupled_rows=dec if dec.any() else None,
            finish=fin,
            probe=probe,
        )

    def _plan_plain_finishes(self, ids: np.ndarray, remaining: np.ndarray, cap: int, prefill: float) -> Plan:
        """Plain decoding with nothing waiting: every running request gains one token per
        iteration and the batch only shrinks as requests finish, so the whole sequence of
        finishes (up to the block cap, a tick or a full KV cache) is one vectorised plan."""
        st, cost = self.sim.state, self.sim.cost
        order = np.argsort(remaining, kind="stable")
        rem = remaining[order]
        ctx_sorted = st.context(ids)[order].astype(np.float64)
        k = int(min(int(rem[-1]), cap, max(self._horizon, int(rem[0]))))
        i = np.arange(k)
        gone = np.searchsorted(rem, i, side="right")  # requests finished before iteration i
        batch = len(ids) - gone
        ctx_gone = np.concatenate([[0.0], np.cumsum(ctx_sorted)])[gone]
        ctx = (ctx_sorted.sum() - ctx_gone) + batch * i
        over = ctx + batch > self.kv_capacity
        if over.any():
            k = max(1, int(np.argmax(over)))
            batch, ctx = batch[:k], ctx[:k]
        t = np.asarray(
            cost.iteration_time(batch.astype(np.float64), batch.astype(np.float64), ctx), np.float64
        )
        t[0] += prefill
        stops = np.unique(np.minimum(rem[rem <= k], k))
        if not len(stops) or stops[-1] != k:
            stops = np.append(stops, k)
        return Plan(ids, np.cumsum(t), remaining, None, None, None, int(ctx[0]), 0.0, stops=stops)

    # --------------------------------------------------------------------- applying
    def apply(self, plan: Plan, done: int, pos: int = 0) -> bool:
        """Apply iterations pos..done of the plan (plain plans are applied stop by stop);
        True when a policy tick was reported."""
        st, sim = self.sim.state, self.sim
        ids = plan.ids
        self.prefill_tokens = 0
        if plan.tokens is None:
            progress = np.minimum(done, plan.remaining)  # tokens since the plan started
            prev = np.minimum(pos, plan.remaining)
        else:
            assert plan.cum is not None and plan.finish is not None
            progress = np.minimum(plan.cum[:, done - 1], plan.remaining)
            prev = np.minimum(plan.cum[:, pos - 1], plan.remaining) if pos else np.zeros_like(progress)
            # iterations each row took part in (up to its finish column); decoupled rows
            # verified only where they emitted
            last = plan.finish + 1
            iters = np.minimum(done, last) - np.minimum(pos, last)
            if plan.decoupled_rows is not None:
                dec = plan.decoupled_rows
                cols = np.arange(pos, done)
                iters[dec] = ((plan.tokens[dec, pos:done] > 0) & (cols < last[dec, None])).sum(axis=1)
            rows = plan.spec_rows
            assert rows is not None and plan.gamma is not None
            sid = ids[rows]
            spec_gained = (progress - prev)[rows]
            st.spec_iters[sid] += iters[rows]
            st.spec_tokens[sid] += spec_gained
            st.drafted[sid] += iters[rows] * plan.gamma[rows]
            st.accepted[sid] += spec_gained - iters[rows]
        gained = progress - prev
        st.generated[ids] += gained
        left = plan.remaining - progress
        now = sim.env.now
        t0 = now - float(plan.cum_s[done - 1] - (plan.cum_s[pos - 1] if pos else 0.0))
        sim.record_segment(self, t0, now, done - pos, plan, int((prev < plan.remaining).sum()))
        self.iteration += done - pos
        fired_tick = False
        if sim.policy.tick_iterations:
            self._since_tick += done - pos
            if self._since_tick >= sim.policy.tick_iterations:
                self._since_tick = 0
                fired_tick = True
        alive = left > 0
        ended = ~alive & (prev < plan.remaining)  # ended in this stretch
        if self.disturbed:
            # A request migrated away mid-block finished its in-flight iteration here but no
            # longer belongs to this worker.
            self.disturbed = False
            mine = (st.worker[ids] == self.id) & (st.state[ids] == RUNNING)
            ended &= mine
            self.running = ids[mine & alive]
        elif ended.any():
            self.running = ids[alive]
        for rid in ids[ended].tolist():
            sim.end_dispatch(rid, self, now)
        if fired_tick:
            sim.emit(Tick(time_s=now, worker=self.id, iteration=self.iteration))
        return fired_tick

    # ------------------------------------------------------------------------- loop
    def run(self):
        sim = self.sim
        while not sim.done:
            self._admit()
            if not len(self.running):
                if not self._idle_reported and not self.waiting_count:
                    self._idle_reported = True
                    self._applying = True
                    sim.emit(WorkerIdle(time_s=sim.env.now, worker=self.id))
                    self._applying = False
                    continue
                self._wake = sim.env.event()
                try:
                    yield self._wake
                except simpy.Interrupt:
                    pass
                self._wake = None
                continue
            self._preempt_for_room()
            plan = self.plan()
            sim.counters["blocks"] += 1
            start = sim.env.now
            stops = plan.stops.tolist() if plan.stops is not None else [plan.iterations]
            pos = 0
            for stop in stops:
                self._advancing = True
                interrupted = False
                try:
                    yield sim.env.timeout(start + float(plan.cum_s[stop - 1]) - sim.env.now)
                    done = stop
                except simpy.Interrupt:
                    interrupted = True
                    elapsed = sim.env.now - start
                    done = min(int(np.searchsorted(plan.cum_s, elapsed, side="left")) + 1, plan.iterations)
                    done = max(done, pos + 1)
                    end = start + float(plan.cum_s[done - 1])
                    while sim.env.now < end:
                        try:
                            yield sim.env.timeout(end - sim.env.now)
                        except simpy.Interrupt:
                            pass
                self._advancing = False
                self._applying = True
                self._dirty = False
                ticked = self.apply(plan, done, pos)
                self._applying = False
                pos = done
                if interrupted or self._dirty or sim.done or done >= plan.iterations:
                    break
                if ticked and plan.probe is not None and sim.drifted(plan.probe):
                    break
            # Plan about as far ahead as blocks on this worker last lasted: a worker that is
            # re-planned every few iterations (requests arriving) would waste long plans.
            if pos >= plan.iterations:
                self._horizon = min(MAX_BLOCK_ITERATIONS, self._horizon * 4)
            else:
                self._horizon = max(MIN_HORIZON, pos + pos // 4)
