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
validated against. Speculative blocks are planned by sim.spec_planner.

The batching engine mirrors vLLM's scheduler in the parts that shape a rollout tail:
admission by priority then arrival up to `max_num_seqs` and KV capacity (head-of-line
blocking), newly admitted prompts prefilled in the next iteration, and preemption by
recompute of the most recently admitted request when the KV cache overflows. The plan
notes which part of its prefill pass was first-time prefill and which recompute (and the
spec planner its drafting seconds), so the timeline records the time as it was priced.

The worker sees its simulation only as a WorkerHost (sim.worker_host), and the simulation
changes a worker only through its methods (enqueue, set_spec, set_role, drop_running,
forget_waiting, poke, lose).
"""

from __future__ import annotations

import heapq
from collections.abc import Generator

import numpy as np
import simpy

from simctl.policies.contract import Role, SpecConfig, Tick, WorkerIdle
from simctl.sim.acceptance_source import AcceptanceSource
from simctl.sim.plan import Plan
from simctl.sim.spec_planner import SpecPlanner, _prefix_sums
from simctl.sim.state import CANCELLED, FINISHED, RUNNING, WAITING
from simctl.sim.tick_cadence import TickCadence
from simctl.sim.worker_host import WorkerHost

# A fast-forward block never plans more iterations than this (bounds memory of the
# sampled acceptance matrix; the loop simply plans again).
MAX_BLOCK_ITERATIONS = 4096
# A block through several finishes plans at most the worker's current horizon (adapted to
# how long its blocks last, between these bounds); it then simply plans again.
MIN_HORIZON = 16
FIRST_HORIZON = MAX_BLOCK_ITERATIONS
# A block sampled from the grouped-drafter acceptance model (Seer Table 2 by visible
# siblings) goes on past a fetch tick while no row's per-token acceptance has moved by more
# than this; otherwise it re-plans there, as the exact replay always does.
MODEL_DRIFT = 0.01

# What the worker's process is doing, for `poke` (the one re-entrancy state): running its
# own code (BUSY; POKED once an action reached it meanwhile, e.g. from the policy's answer
# to an event it emitted, so it re-plans after the current apply), waiting for work
# (IDLE: poke wakes it) or sleeping through a block (ADVANCING: poke interrupts it).
_BUSY, _POKED, _IDLE, _ADVANCING = range(4)


class Worker:
    def __init__(
        self,
        host: WorkerHost,
        wid: int,
        node: int,
        gpus: int,
        kv_capacity: int,
        seed: int,
        acceptance: AcceptanceSource,
        kv_window: int = 0,
    ) -> None:
        self.host = host
        self.id = wid
        self.node = node
        self.gpus = gpus
        self.kv_capacity = kv_capacity
        # KV tokens each running sequence holds besides its context: its window in the
        # sliding-window layers (ModelSpec.window_kv_tokens); 0 for most models
        self.kv_window = kv_window
        self.running = np.empty(0, np.int64)
        self._waiting: list[tuple[float, int, int]] = []  # (-priority, seq, request)
        self._seq = 0
        self.waiting_count = 0
        self.role = Role.ROLLOUT
        rng = np.random.default_rng([seed, host.state.step, wid])
        self.planner = SpecPlanner(host, kv_capacity, rng, acceptance, kv_window)
        self._acceptance = acceptance
        # exact grouped drafting sees the siblings' tokens when a worker plans (Seer's
        # periodic fetch), so its blocks end at each tick
        self._replan_at_tick = acceptance.fetches_on_replan
        # uncached tokens admitted since the last applied iteration, priced as one prefill
        # pass in the next; of them, context recomputed after its KV was lost
        self.prefill_tokens = 0
        self.recompute_tokens = 0
        # requests that pass computes (their first token comes from it: they draft nothing
        # in that iteration)
        self._fresh: list[int] = []
        self.iteration = 0
        self.ticks = TickCadence(host, wid)
        self._horizon = FIRST_HORIZON
        self._idle_reported = False
        self._wake: simpy.Event | None = None
        self._phase = _BUSY
        # A request left mid-block (migration, cancellation): the rows of the plan in flight
        # are no longer all this worker's, so the next apply filters them by ownership. Set
        # only by drop_running; the state arrays say which rows left.
        self._rows_left = False
        # The block being slept through: (plan, start time, iterations applied, next stop);
        # `lose` keeps the iterations of it that completed before the fault.
        self._block: tuple[Plan, float, int, int] | None = None
        self.lost = False  # an injected fault stopped this worker (sim.worker_faults)
        self.proc = host.env.process(self.run())

    # ------------------------------------------------------------- host-facing methods
    @property
    def spec(self) -> SpecConfig:
        return self.planner.spec

    def enqueue(self, rid: int) -> None:
        st = self.host.state
        st.state[rid] = WAITING
        heapq.heappush(self._waiting, (-float(st.priority[rid]), self._seq, rid))
        self._seq += 1
        self.waiting_count += 1
        self._idle_reported = False
        self.poke()

    def set_spec(self, spec: SpecConfig) -> None:
        self.planner.set_spec(spec)
        self.poke()

    def set_role(self, role: Role) -> None:
        self.role = role

    def drop_running(self, row: int) -> None:
        """Row `row` stops running here now (migrated or cancelled); the iteration in
        flight completes, and the worker re-plans at its next iteration boundary."""
        self.running = self.running[self.running != row]
        self._rows_left = True
        self.poke()

    def forget_waiting(self) -> None:
        """A waiting request left (migrated, deferred, cancelled): its heap entry goes stale
        and is dropped at the next admission."""
        self.waiting_count -= 1

    def lose(self) -> list[int]:
        """A fault stops this worker now, for good: the iterations of the block in flight
        that completed before now are applied (their tokens were streamed out), the one in
        flight is lost, and the rows it held (running, then waiting) are returned, its
        queues and KV emptied. The host re-places them; the process ends at its next wake."""
        st = self.host.state
        if self._block is not None:
            plan, start, pos, stop = self._block
            now = self.host.env.now
            kept = min(int(np.searchsorted(plan.cum_s, now - start, side="left")), stop - 1)
            if kept > pos:  # no row ends and no tick fires before `stop` (sim.plan)
                self.apply(plan, kept, pos, end_s=start + float(plan.cum_s[kept - 1]))
            self._block = None
        rows = [int(r) for r in self.running if st.worker[r] == self.id and st.state[r] == RUNNING]
        rows += sorted({r for _, _, r in self._waiting if st.worker[r] == self.id and st.state[r] == WAITING})
        self.lost = True
        self.running = np.empty(0, np.int64)
        self._waiting = []
        self.waiting_count = 0
        phase, self._phase = self._phase, _BUSY
        if phase == _IDLE:
            assert self._wake is not None
            self._wake.succeed()
        elif phase == _ADVANCING:
            self.proc.interrupt()
        return rows

    def kv_used(self) -> int:
        return int(self.host.state.context(self.running).sum()) if len(self.running) else 0

    def kv_held(self) -> int:
        """KV tokens the running sequences hold: their context, plus their windows."""
        return self.kv_used() + self.kv_window * len(self.running)

    def poke(self) -> None:
        """Make the worker re-plan at its next iteration boundary (after an action)."""
        if self._phase == _IDLE:
            self._phase = _BUSY
            assert self._wake is not None
            self._wake.succeed()
        elif self._phase == _ADVANCING:
            self._phase = _BUSY
            self.proc.interrupt()
        else:
            self._phase = _POKED

    # ---------------------------------------------------------------- queue management
    def _admit(self) -> None:
        st, cfg = self.host.state, self.host.config
        if not self._waiting or len(self.running) >= cfg.max_num_seqs:
            return
        limit = int(self.kv_capacity * (1.0 - cfg.kv_watermark))
        used = self.kv_held()
        added: list[int] = []
        while self._waiting and len(self.running) + len(added) < cfg.max_num_seqs:
            _, _, rid = self._waiting[0]
            if st.state[rid] != WAITING or st.worker[rid] != self.id:
                heapq.heappop(self._waiting)  # stale entry (migrated/deferred)
                continue
            need = int(st.prompt_len[rid] + st.generated[rid])
            if used + need + self.kv_window > limit and (len(self.running) or added):
                break  # head-of-line blocking, as vLLM's FCFS/priority queue
            heapq.heappop(self._waiting)
            self.waiting_count -= 1
            self._count_prefill(rid, need)
            st.kv_resident[rid] = need
            st.state[rid] = RUNNING
            used += need + self.kv_window
            added.append(rid)
        if added:
            self.running = np.concatenate([self.running, np.asarray(added, np.int64)])

    def _count_prefill(self, rid: int, need: int) -> None:
        """Add an admission's uncached tokens to the next prefill pass. A first admission's
        prompt is prefill; everything else it computes (tokens generated before: carried
        over from an earlier step, or lost with the KV of a preemption or a re-dispatch) is
        recompute."""
        st = self.host.state
        resident = int(min(st.kv_resident[rid], need))
        self.prefill_tokens += need - resident
        if need > resident:
            self._fresh.append(rid)
        if st.prefilled[rid]:
            self.recompute_tokens += need - resident
        else:
            prompt = int(st.prompt_len[rid])
            self.recompute_tokens += need - max(resident, prompt)
            st.prefilled[rid] = True

    def _preempt_for_room(self) -> None:
        """Recompute-preempt the latest admitted requests until one iteration fits."""
        st = self.host.state
        if len(self.running) <= 1 or self.kv_held() + len(self.running) <= self.kv_capacity:
            return
        while len(self.running) > 1 and self.kv_held() + len(self.running) > self.kv_capacity:
            rid = int(self.running[-1])
            self.running = self.running[:-1]
            st.kv_resident[rid] = 0
            st.preemptions[rid] += 1
            st.state[rid] = WAITING
            heapq.heappush(self._waiting, (-float(st.priority[rid]), -1 - self._seq, rid))
            self._seq += 1
            self.waiting_count += 1
            self.host.counters["preemptions"] += 1

    # -------------------------------------------------------------------- planning
    def plan(self) -> Plan:
        st, cost, cfg = self.host.state, self.host.cost, self.host.config
        ids = self.running
        b = len(ids)
        remaining = st.dispatch_end[ids] - st.generated[ids]
        cap = 1 if cfg.per_iteration else MAX_BLOCK_ITERATIONS
        if self.host.tick_iterations and self._replan_at_tick:
            cap = min(cap, self.ticks.to_next())
        prefill = float(cost.prefill_time(self.prefill_tokens)) if self.prefill_tokens else 0.0
        arrays = self.planner.arrays(ids)
        # With requests waiting, the first finish may admit one: plan only up to it.
        first_finish = bool(self.waiting_count) or cfg.per_iteration
        if arrays is None or not arrays[1].any():
            if first_finish:
                ctx0 = int(st.context(ids).sum())
                room = (self.kv_capacity - ctx0 - self.kv_window * b) // b
                k = int(max(1, min(int(remaining.min()), cap, room)))
                ctx = ctx0 + b * np.arange(k, dtype=np.float64)
                t = np.asarray(cost.iteration_time(b, b, ctx), dtype=np.float64)
                t[0] += prefill
                plain = Plan(ids, np.cumsum(t), remaining, None, None, ctx0, 0.0)
                return self._with_ticks(self._with_prefill(plain, prefill))
            return self._with_ticks(
                self._with_prefill(self._plan_plain_finishes(ids, remaining, cap, prefill), prefill)
            )
        fresh = np.isin(ids, self._fresh) if self._fresh else None
        plan = self.planner.plan(ids, remaining, arrays, cap, prefill, first_finish, self._horizon, fresh)
        return self._with_ticks(self._with_prefill(plan, prefill))

    def _with_prefill(self, plan: Plan, prefill: float) -> Plan:
        """Note on the plan which part of its priced prefill pass was recompute (by tokens:
        the pass is priced on them together)."""
        if self.recompute_tokens:
            plan.recompute_s = prefill * (self.recompute_tokens / self.prefill_tokens)
        plan.prefill_s = prefill - plan.recompute_s
        return plan

    def _with_ticks(self, plan: Plan) -> Plan:
        """Stop at every policy tick inside the block that the policy wants: the tick is
        reported there and the block goes on unless the answer changed this worker."""
        return self.ticks.add_stops(plan, self._replan_at_tick)

    def _plan_plain_finishes(self, ids: np.ndarray, remaining: np.ndarray, cap: int, prefill: float) -> Plan:
        """Plain decoding with nothing waiting: every running request gains one token per
        iteration and the batch only shrinks as requests finish, so the whole sequence of
        finishes (up to the block cap, a tick or a full KV cache) is one vectorised plan."""
        st, cost = self.host.state, self.host.cost
        order = np.argsort(remaining, kind="stable")
        rem = remaining.take(order)
        ctx_sorted = st.context(ids).take(order).astype(np.float64)
        k = int(min(int(rem[-1]), cap, max(self._horizon, int(rem[0]))))
        i = np.arange(k)
        gone = rem.searchsorted(i, side="right")  # requests finished before iteration i
        batch = len(ids) - gone
        ctx = (ctx_sorted.sum() - _prefix_sums(ctx_sorted).take(gone)) + batch * i
        held = batch * (1 + self.kv_window) if self.kv_window else batch  # (+ their windows)
        over = ctx + held > self.kv_capacity
        if over.any():
            k = max(1, int(np.argmax(over)))
            batch, ctx = batch[:k], ctx[:k]
        seqs = batch.astype(np.float64)  # (a plain iteration's new tokens: one per sequence)
        t = np.asarray(cost.iteration_time(seqs, seqs, ctx), np.float64)
        t[0] += prefill
        return Plan(ids, np.cumsum(t), remaining, None, None, int(ctx[0]), 0.0, stops=_sorted_stops(rem, k))

    # --------------------------------------------------------------------- applying
    def apply(self, plan: Plan, done: int, pos: int = 0, end_s: float | None = None) -> bool:
        """Apply iterations pos..done of the plan (plain plans are applied stop by stop);
        True when the stretch reached a tick (reported to the policy if it wanted it).
        `end_s`: when iteration `done` ended, if not now (a lost worker's last completed
        iteration)."""
        st, host = self.host.state, self.host
        ids = plan.ids
        self.prefill_tokens = self.recompute_tokens = 0
        self._fresh = []
        if plan.progress is None:  # plain decoding
            progress = np.minimum(done, plan.remaining)  # tokens since the plan started
            prev = np.minimum(pos, plan.remaining)
            gained = progress - prev
        else:
            progress, prev, gained = self._apply_speculative(plan, done, pos)
        # rows still running when the stretch began (prev is 0 in a plan's first stretch)
        was = prev < plan.remaining if prev is not None else plan.remaining > 0
        if self._rows_left:  # a row finished or cancelled elsewhere meanwhile keeps its count
            gone = (st.state[ids] == FINISHED) | (st.state[ids] == CANCELLED)
            gained = np.where(gone, 0, gained)
        st.generated[ids] += gained
        left = plan.remaining - progress
        now = host.env.now if end_s is None else end_s
        t0 = now - float(plan.cum_s[done - 1] - (plan.cum_s[pos - 1] if pos else 0.0))
        host.record_segment(self.id, t0, now, done - pos, plan, int(np.count_nonzero(was)), pos)
        self.iteration += done - pos
        on_tick = self.ticks.advance(done - pos)
        alive = left > 0
        ended = ~alive & was  # ended in this stretch
        finished: list[int] = []
        if self._rows_left:
            # A request migrated away mid-block finished its in-flight iteration here but no
            # longer belongs to this worker.
            self._rows_left = False
            mine = (st.worker[ids] == self.id) & (st.state[ids] == RUNNING)
            ended &= mine
            self.running = ids[mine & alive]
            finished = ids[ended].tolist()
        elif ended.any():
            self.running = ids[alive]
            finished = ids[ended].tolist()
        for rid in finished:
            host.end_dispatch(rid, self.id, now)
        if self.ticks.deliver(on_tick, bool(finished)):
            host.emit(Tick(time_s=now, worker=self.id, iteration=self.iteration))
        return on_tick

    def _apply_speculative(
        self, plan: Plan, done: int, pos: int
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """(progress at `done`, progress at `pos` (None at 0: nothing yet), tokens gained)
        of a speculative plan's rows since it started; credits the speculating rows' draft
        counters for the stretch."""
        st = self.host.state
        progress, prev, gained, iters = plan.speculative_stretch(done, pos)
        rows = plan.spec_rows
        assert rows is not None and plan.gamma is not None
        spec_ids, spec_gained, gamma = plan.ids, gained, plan.gamma
        if plan.fresh is not None and pos == 0:  # their first token came from the prefill pass
            spec_gained = gained - plan.fresh
        if not plan.every_row_speculates and not rows.all():  # (no selection in most plans)
            spec_ids, iters, spec_gained, gamma = spec_ids[rows], iters[rows], gained[rows], gamma[rows]
        st.spec_iters[spec_ids] += iters
        st.spec_tokens[spec_ids] += spec_gained
        st.drafted[spec_ids] += iters * gamma
        st.accepted[spec_ids] += spec_gained - iters
        return progress, prev, gained

    # ------------------------------------------------------------------------- loop
    def run(self) -> Generator[simpy.Event, object, None]:
        host = self.host
        while not host.done and not self.lost:
            self._admit()
            if not len(self.running):
                if not self._idle_reported and not self.waiting_count:
                    self._idle_reported = True
                    host.emit(WorkerIdle(time_s=host.env.now, worker=self.id))
                    self._phase = _BUSY
                    continue
                self._wake = host.env.event()
                self._phase = _IDLE
                yield self._wake
                self._wake = None
                continue
            self._preempt_for_room()
            plan = self.plan()
            host.counters["blocks"] += 1
            pos = yield from self._run_block(plan)
            # Plan about as far ahead as blocks on this worker last lasted: a worker that is
            # re-planned every few iterations (requests arriving) would waste long plans.
            if pos >= plan.iterations:
                self._horizon = min(MAX_BLOCK_ITERATIONS, self._horizon * 4)
            else:
                self._horizon = max(MIN_HORIZON, pos + pos // 4)

    def _run_block(self, plan: Plan) -> Generator[simpy.Event, object, int]:
        """Sleep through the plan stop by stop, applying the progress at each; ends early
        when interrupted (an action reached the worker) or the policy's answer to what it
        reported changed this worker. Returns the iterations applied."""
        env = self.host.env
        start = env.now
        stops = plan.stops.tolist() if plan.stops is not None else [plan.iterations]
        pos, i = 0, 0
        while i < len(stops):
            stop = stops[i]
            i += 1
            self._phase = _ADVANCING
            self._block = (plan, start, pos, stop)
            interrupted = False
            try:
                yield env.timeout(start + float(plan.cum_s[stop - 1]) - env.now)
                done = stop
            except simpy.Interrupt:
                if self.lost:
                    return pos
                # the iteration in flight completes (poke left the phase BUSY)
                interrupted = True
                elapsed = env.now - start
                done = min(int(np.searchsorted(plan.cum_s, elapsed, side="left")) + 1, plan.iterations)
                done = max(done, pos + 1)
                end = start + float(plan.cum_s[done - 1])
                while env.now < end:
                    yield env.timeout(end - env.now)
            self._block = None
            if self.lost:  # lost while its in-flight iteration completed: `lose` took the rest
                return pos
            self._phase = _BUSY
            ticked = self.apply(plan, done, pos)
            poked = self._phase == _POKED
            self._phase = _BUSY
            pos = done
            # a speculative block is sampled past its rows' expected finishes: once none is
            # left, its remaining iterations would be empty batches (busy time that is not)
            if interrupted or poked or self.host.done or done >= plan.iterations or not len(self.running):
                break
            if ticked and plan.probe is not None and self._acceptance.model_drift(plan.probe) > MODEL_DRIFT:
                break
            if self.ticks.rearmed:  # the policy came to want this worker's Ticks
                stops, i = self.ticks.rearm(done, plan.iterations, stops[i:]), 0
        return pos


def _sorted_stops(rem: np.ndarray, k: int) -> np.ndarray:
    """`np.unique(np.minimum(rem[rem <= k], k))` with `k` appended if not last: the
    iterations after which a plain block's rows end, from `rem` already sorted (np.unique
    would sort it again).

    >>> _sorted_stops(np.array([2, 2, 5, 9]), 6)
    array([2, 5, 6])
    """
    head = rem[: int(rem.searchsorted(k, side="right"))]
    if len(head):
        keep = np.empty(len(head), np.bool_)
        keep[0] = True
        np.not_equal(head[1:], head[:-1], out=keep[1:])
        head = head[keep]
        if head[-1] == k:
            return head
    return np.append(head, k)
