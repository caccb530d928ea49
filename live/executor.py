"""The live executor: the policies' contract carried out over real engines.

Same event semantics as the simulator (sim/engine.py, sim/worker.py): StepStarted with all
request ids at t=0, then per worker iteration the requests whose dispatch ended
(RequestFinished, or ChunkFinished when an `Assign.max_tokens` chunk ran out first), a Tick
every `policy.tick_iterations` iterations of that worker, WorkerIdle once when a worker has
nothing running or queued, and StepFinished at the makespan. Actions returned by
`on_event` are applied before the next event.

Clock. Workers are engines in this process, stepped one iteration at a time. Each worker
has its own clock: the measured (perf_counter) duration of its iterations plus the
controller time it waited for (policy + bookkeeping after its iteration). The next
iteration always goes to the busy worker whose clock is earliest, so events reach the
policy in time order and the makespan is what N devices running side by side would show.
With one worker this clock is the wall clock; with several on one host it is not (they
share the cores), which is why the wall time is reported next to it.

Scheduling stays with the executor, not the engine: a per-worker queue admits by
`Assign.priority` then arrival, up to `max_num_seqs` and the KV budget (head-of-line
blocking, as vLLM and the simulator do). A chunk is a dispatch with an engine budget of
`max_tokens`; re-dispatch and migration re-add the request with prompt + generated tokens
(recompute), under the same sampling key, so the output stream continues unchanged.
Fastest-of-N replicas are extra rows (ids from the step's request count up, as in the
simulator) started from the furthest copy's tokens; the first copy to finish completes the
request and the others are aborted. Actions the backend cannot carry out exactly (roles,
decoupled drafting, KV transfer, Defer) are carried out approximately and counted in
`approximated`, which run.json reports.

Where the pieces live: the cluster state the executor shares with the policies' view and
its action handler in live/cluster_state.py, applying actions in live/actions.py, the view
in live/view.py, what a step records in live/records.py; engines behind live/backend.py's
interface (this module imports none: it runs without torch).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from simctl.live.actions import ActionApplier
from simctl.live.backend import Delta, EngineWorker, StepTiming
from simctl.live.capabilities import TORCH_CAPABILITIES, TORCH_DRAFT_METHODS
from simctl.live.cluster_state import ClusterState
from simctl.live.errors import LiveError, WorkerCrashed, first_line
from simctl.live.losses import INJECTED, Losses
from simctl.live.records import ITERATION_COLUMNS, Overhead, StepAccounts, StepRecord
from simctl.live.state import LiveRequest, LiveWorker
from simctl.live.view import LiveView, RunFacts
from simctl.live.workload import StepWork, Workload
from simctl.policies.action_checks import checked, policy_problem
from simctl.policies.compose import drafting_gap, requirement_gaps
from simctl.policies.contract import (
    Action,
    Capability,
    ChunkFinished,
    CopyCancelled,
    Event,
    ModelInfo,
    Policy,
    PromptHistory,
    RequestFinished,
    StepFinished,
    StepStarted,
    Tick,
    WorkerIdle,
    asked,
    decide,
    wants_tick,
)
from simctl.traces.cli_options import WorkerFault

if TYPE_CHECKING:
    from simctl.sim.cost_model import CostModel

# Names the run drivers and the recorder import from here (they live in their own modules).
__all__ = [
    "ITERATION_COLUMNS",
    "TORCH_CAPABILITIES",
    "ExecutorConfig",
    "LiveError",
    "LiveExecutor",
    "Overhead",
    "StepRecord",
    "WorkerCrashed",
]


@dataclass
class ExecutorConfig:
    max_num_seqs: int = 256
    kv_capacity_tokens: int = 1 << 20
    kv_watermark: float = 0.01


def _checked(policy: Policy) -> Policy:
    """The policy, once its own settings pass the executors' check (action_checks)."""
    problem = asked(policy, "its settings", lambda: policy_problem(policy))
    if problem:
        raise LiveError(f"policy '{getattr(policy, 'name', policy)}': {problem}")
    return policy


class LiveExecutor:
    """Runs one policy over a workload on `engines` (one per rollout worker)."""

    def __init__(
        self,
        policy: Policy,
        engines: Sequence[EngineWorker],
        workload: Workload,
        info: ModelInfo,
        *,
        config: ExecutorConfig | None = None,
        capabilities: frozenset[Capability] = TORCH_CAPABILITIES,
        draft_methods: frozenset[str] = TORCH_DRAFT_METHODS,
        cost_model: CostModel | None = None,
        history: Mapping[int, PromptHistory] | None = None,
        on_progress: Callable[[LiveExecutor], None] | None = None,
        faults: Sequence[WorkerFault] = (),
    ) -> None:
        if not engines:
            raise LiveError("a live run needs at least one worker")
        self.policy = _checked(policy)
        self.workload = workload
        self.config = config or ExecutorConfig()
        self.history: dict[int, PromptHistory] = dict(history or {})
        self.on_progress = on_progress
        cap = self.config.kv_capacity_tokens
        self.cluster = ClusterState([LiveWorker(i, e, cap) for i, e in enumerate(engines)])
        self.workers = self.cluster.workers
        self.approximated = self.cluster.approximated
        facts = RunFacts(policy.name, info, capabilities, draft_methods, workload.oracle, cost_model)
        self.view = LiveView(self.cluster, facts, self.history)
        self.actions = ActionApplier(self.cluster, policy.name, self.view)
        self.losses = Losses(faults, workload.steps[0].step if workload.steps else 0)
        self.records: list[StepRecord] = []
        self.partial: StepRecord | None = None
        self.overhead = Overhead()
        self._quiet = False
        self._acct: StepAccounts | None = None
        for gap in requirement_gaps(policy, capabilities):
            self.approximated[f"policy requires capability '{gap}', which this executor lacks"] += 1
        drafting = drafting_gap(policy, draft_methods)
        if drafting:
            raise LiveError(drafting)

    # the cluster's progress, for run drivers and progress displays
    @property
    def requests(self) -> list[LiveRequest]:
        return self.cluster.requests

    @property
    def n_requests(self) -> int:
        return self.cluster.n_requests

    @property
    def unfinished(self) -> int:
        return self.cluster.unfinished

    @property
    def now(self) -> float:
        return self.cluster.now

    @property
    def step_no(self) -> int:
        return self.cluster.step_no

    # ------------------------------------------------------------------------- run
    def run(self) -> list[StepRecord]:
        """Every step of the workload; on failure `records` holds the completed steps and
        `partial` what the failed one had finished."""
        for work in self.workload.steps:
            self.records.append(self.run_step(work))
        return self.records

    def run_step(self, work: StepWork) -> StepRecord:
        c = self.cluster
        c.begin_step(work)
        self._acct = StepAccounts(work, time.perf_counter())
        try:
            self._emit(
                StepStarted(
                    time_s=0.0, step=work.step, epoch=work.epoch, requests=tuple(range(len(work.requests)))
                )
            )
            if all(r.state == "unassigned" for r in c.requests[: c.n_requests]):
                raise LiveError(f"policy '{self.policy.name}' placed no request at step start")
            self._settle()
            self._drive(lambda: c.unfinished == 0)
            self.losses.fire_remaining(self)
            self._emit(StepFinished(time_s=c.makespan, step=work.step, rollout_makespan_s=c.makespan))
            self._drain_deferred()
        except BaseException:
            self.partial = self._record(complete=False)
            raise
        record = self._record(complete=True)
        self._extend_history()
        return record

    def apply(self, actions: Sequence[Action]) -> None:
        self.actions.apply(actions)

    def emit_event(self, event: Event) -> None:
        """Deliver `event` to the policy and apply its answer (live/losses.py uses it)."""
        self._emit(event)

    def inject_loss(self, worker: int, time_s: float) -> None:
        """`--fail-worker`: lose `worker` at `time_s` of the worker clocks (lockstep)."""
        w = self.workers[worker]
        if w.lost:
            return
        self.cluster.now = max(self.cluster.now, time_s)
        self.losses.lose(self, w, INJECTED)
        self._settle()

    # ---------------------------------------------------------------------- events
    def _emit(self, event: Event) -> None:
        if self._quiet:
            return
        acct = self._step_accounts()
        acct.events += 1
        t0 = time.perf_counter()
        actions, problem = checked(decide(self.policy, event, self.view), self.cluster.n_requests)
        acct.policy_s += time.perf_counter() - t0
        if problem:
            raise LiveError(f"policy '{self.policy.name}': {problem}")
        if actions:
            self.actions.apply(actions)

    def _step_accounts(self) -> StepAccounts:
        assert self._acct is not None, "no step is running"
        return self._acct

    def _drive(self, done: Callable[[], bool], stall_ok: bool = False) -> None:
        """Lockstep: one iteration at a time, always of the busy worker whose clock is
        earliest, until `done()`; injected faults fire when that clock passes them."""
        c = self.cluster
        while not done():
            w = self._next_worker()
            self.losses.fire_due(self, w.clock if w is not None else c.now)
            w = self._next_worker()
            if w is None:
                if stall_ok:
                    return
                raise stalled(self.cluster, self.policy.name)
            self._iterate(w)

    def _next_worker(self) -> LiveWorker | None:
        busy = [w for w in self.workers if w.running and not w.lost]
        return min(busy, key=lambda w: (w.clock, w.id)) if busy else None

    def _iterate(self, w: LiveWorker) -> None:
        """One engine iteration of `w` (stepped here) and everything it triggers; the
        worker's clock advances by the engine's time and the controller's after it."""
        acct, c = self._step_accounts(), self.cluster
        shape = self._batch_shape(w)
        deltas, timing, engine_s, engine_cpu_s, t1 = self._step_engine(w)
        start = w.clock
        w.clock += engine_s
        c.now = w.clock
        policy_before = acct.policy_s
        seg = self._after_iteration(w, shape, deltas, timing, (start, engine_s, engine_cpu_s))
        spent = time.perf_counter() - t1
        acct.bookkeeping_s += spent - (acct.policy_s - policy_before)
        w.clock += spent
        seg[2] = w.clock
        acct.add_segment(seg, len(self.workers))
        if self.on_progress is not None:
            self.on_progress(self)

    def _batch_shape(self, w: LiveWorker) -> tuple[int, int, int, list[int], str]:
        """(batch, KV tokens, prefill tokens, draft length per request, the most common
        method) of the iteration `w` is about to run."""
        c = self.cluster
        specs = [c.effective(c.requests[rid], w) for rid in w.running]
        gammas = [s.gamma if s.enabled else 0 for s in specs]
        methods = Counter(s.method for s, g in zip(specs, gammas, strict=True) if g > 0 and s.method)
        prefill, w.prefill_tokens = w.prefill_tokens, 0
        method = methods.most_common(1)[0][0] if methods else ""
        return len(w.running), c.kv_used(w), prefill, gammas, method

    def _after_iteration(
        self,
        w: LiveWorker,
        shape: tuple[int, int, int, list[int], str],
        deltas: Sequence[Delta],
        timing: StepTiming,
        when: tuple[float, float, float],
    ) -> list:
        """Credit an iteration (started at `when[0]`, `when[1]` engine seconds, `when[2]`
        CPU seconds), record its row, wind up what it ended. Returns its timeline segment
        (end time left to the caller)."""
        acct = self._step_accounts()
        start, engine_s, engine_cpu_s = when
        batch, kv, prefill, gammas, method = shape
        acct.engine_s += engine_s
        ended, drafted, drafting, accepted = self._absorb(w, deltas)
        w.iteration += 1
        spec_g = [g for g in gammas if g > 0]
        load = (w.id, start, engine_s, engine_cpu_s, batch, batch + drafted, kv, prefill, drafted, drafting)
        spec_cols = (len(spec_g), max(spec_g, default=0), method, accepted)
        acct.iterations.append((*load, *spec_cols, timing.draft_s, timing.forward_s, timing.sample_s))
        seg = [w.id, start, 0.0, 1, batch, kv, sum(spec_g) / len(spec_g) if spec_g else 0.0]
        self._wind_up(w, ended)
        return seg

    def _step_engine(self, w: LiveWorker) -> tuple[list[Delta], StepTiming, float, float, float]:
        """(deltas, the engine's timing, engine seconds, this thread's CPU seconds in them,
        perf_counter at the step's end) of one engine step; a raising engine is a crash."""
        c0 = time.thread_time()
        t0 = time.perf_counter()
        try:
            deltas = w.engine.step()
        except Exception as exc:
            where = f"worker {w.id} crashed at step {self.cluster.step_no}"
            raise WorkerCrashed(f"{where}: {type(exc).__name__}: {first_line(exc)}") from exc
        t1 = time.perf_counter()
        engine_cpu_s = time.thread_time() - c0
        timing = w.engine.last_timing
        # a remote worker times its step itself: the call's round trip is not engine time
        engine_s = timing.engine_s if timing.engine_s is not None else t1 - t0
        return deltas, timing, engine_s, engine_cpu_s, t1

    def _absorb(
        self, w: LiveWorker, deltas: Sequence[Delta]
    ) -> tuple[list[tuple[LiveRequest, bool]], int, int, int]:
        """Credit an iteration's tokens to its requests. Returns the requests whose dispatch
        ended (with whether a stop token ended it) and the iteration's drafted tokens,
        drafting requests and accepted tokens."""
        ended: list[tuple[LiveRequest, bool]] = []
        drafted = drafting = accepted = 0
        for d in deltas:
            drafted += d.drafted
            drafting += d.drafted > 0
            accepted += d.accepted
            r = self.cluster.requests[d.request]
            r.absorb(d, self.cluster.now)
            if d.ended or r.generated >= r.dispatch_end:
                if not d.ended:
                    w.engine.abort(r.id)
                ended.append((r, d.stopped))
        return ended, drafted, drafting, accepted

    def _wind_up(self, w: LiveWorker, ended: list[tuple[LiveRequest, bool]]) -> None:
        """After an iteration: end the dispatches that ran out, then a Tick when due, then
        admission and idle reports (each event's actions applied before the next)."""
        done = {r.id for r, _ in ended}
        w.running = [rid for rid in w.running if rid not in done]
        w.ending = [r.id for r, _ in ended]
        try:
            for r, stopped in ended:
                if r.state == "running":  # not cancelled by an earlier copy's finish just now
                    self._end_dispatch(r, w, stopped)
        finally:
            w.ending = []
        if tick := self.policy.tick_iterations:
            w.since_tick += 1
            if w.since_tick >= tick:
                w.since_tick = 0
                if wants_tick(self.policy, w.id, self.view):  # a skipped Tick keeps the cadence
                    self._emit(Tick(time_s=self.cluster.now, worker=w.id, iteration=w.iteration))
        self._settle()

    def _settle(self) -> None:
        """Admit what fits everywhere, then report workers that ran dry (each once); repeat
        while the policy's answers change anything."""
        for _ in range(10 * len(self.workers) + 10):
            for w in self.workers:
                if not w.lost:
                    self._admit(w)
            idle = [w for w in self.workers if not (w.running or w.waiting or w.idle_reported or w.lost)]
            if not idle or self.cluster.unfinished == 0:
                return
            for w in idle:
                w.idle_reported = True
                self._emit(WorkerIdle(time_s=max(self.cluster.now, w.clock), worker=w.id))

    def _end_dispatch(self, r: LiveRequest, w: LiveWorker, stopped: bool) -> None:
        c = self.cluster
        if not (stopped or r.generated >= r.budget):
            r.state, r.worker = "unassigned", None
            c.counters["chunks"] += 1
            self._emit(ChunkFinished(time_s=c.now, request=r.id, worker=w.id, generated=r.generated))
            return
        r.state = "finished"
        r.finish_s = c.now
        forced = r.spec_in.finish_reason
        r.finish_reason = forced or ("stop" if stopped else "length")
        req = c.requests[r.origin]
        raced = r.origin != r.id or bool(c.replicas.get(r.origin))
        losers = c.cancel_copies(r.origin, keep=r.id) if raced else []
        if req is not r:  # a replica won: the request completes with its tokens
            req.tokens = list(r.tokens)
            req.state, req.finish_s, req.worker = "finished", r.finish_s, w.id
            req.finish_reason = r.finish_reason
            c.counters["replica_wins"] += 1
        if self._quiet:
            return
        c.unfinished -= 1
        c.makespan = c.now
        self._emit(RequestFinished(time_s=c.now, request=req.id, worker=w.id, length=req.generated))
        for loser in losers:
            self._emit(CopyCancelled(time_s=c.now, request=req.id, worker=loser, winner=w.id))

    # ------------------------------------------------------------------- admission
    def kv_used(self, w: LiveWorker) -> int:
        return self.cluster.kv_used(w)

    def _admit(self, w: LiveWorker) -> None:
        cfg = self.config
        limit = int(w.kv_capacity * (1.0 - cfg.kv_watermark))
        used = self.cluster.kv_used(w) if w.waiting else 0
        while w.waiting and len(w.running) < cfg.max_num_seqs:
            rid = w.peek()
            if rid is None:
                break
            r = self.cluster.requests[rid]
            if r.ready_s > w.clock:
                if w.running:
                    break
                w.clock = r.ready_s  # an idle worker starts when the work reached it
            need = r.prompt_len + r.generated
            if used + need > limit and w.running:
                break
            w.pop()
            used += need
            self._start(r, w)

    def _start(self, r: LiveRequest, w: LiveWorker) -> None:
        r.state = "running"
        r.start_s = w.clock if r.start_s is None else r.start_s  # first admission
        w.running.append(r.id)
        spec = self.cluster.effective(r, w)
        prompt = [*r.spec_in.prompt, *r.tokens]
        step = self.cluster.step_no
        key = f"{step}/{r.spec_in.prompt_id}/{r.spec_in.sample}"
        group = (step, r.spec_in.prompt_id)
        budget = r.dispatch_end - r.generated
        if r.spec_in.acceptance is None:
            notes = w.engine.add(r.id, key, prompt, budget, spec, group)
        else:  # a replayed trace's acceptance, verified at its rates (live/trace_acceptance.py)
            notes = w.engine.add(r.id, key, prompt, budget, spec, group, acceptance=r.spec_in.acceptance)
        w.prefill_tokens += len(prompt)
        r.running_spec = spec
        self.cluster.note(notes)

    def _drain_deferred(self) -> None:
        """Deferred requests still need their tokens for the trace: run them after the
        makespan without telling the policy (the step is over for it)."""
        c = self.cluster
        deferred = [r for r in c.requests[: c.n_requests] if r.state == "deferred"]
        if not deferred:
            return
        self._quiet = True
        try:
            alive = [w for w in self.workers if not w.lost]
            for r in deferred:
                w = self.workers[r.worker if r.worker is not None else 0]
                w = w if not w.lost else alive[0]
                r.dispatch_end = r.budget
                c.enqueue(r, w)
            for w in self.workers:
                if not w.lost:
                    self._admit(w)
            self._drive(lambda: all(r.state == "finished" for r in deferred), stall_ok=True)
        finally:
            self._quiet = False

    # --------------------------------------------------------------------- records
    def _record(self, complete: bool) -> StepRecord:
        acct, c = self._step_accounts(), self.cluster
        self.overhead.engine_s += acct.engine_s
        self.overhead.policy_s += acct.policy_s
        self.overhead.bookkeeping_s += acct.bookkeeping_s
        return StepRecord(
            step=acct.work.step,
            epoch=acct.work.epoch,
            requests=c.requests,
            n_requests=c.n_requests,
            makespan_s=c.makespan,
            segments=acct.segments,
            roles=c.roles,
            engine_s=acct.engine_s,
            policy_s=acct.policy_s,
            bookkeeping_s=acct.bookkeeping_s,
            wall_s=time.perf_counter() - acct.t_wall0,
            events=acct.events,
            counters=c.counters,
            complete=complete,
            iterations=acct.iterations,
        )

    def _extend_history(self) -> None:
        c = self.cluster
        groups: dict[int, list[LiveRequest]] = {}
        for r in c.requests[: c.n_requests]:
            groups.setdefault(r.spec_in.prompt_id, []).append(r)
        for pid, rs in groups.items():
            old = self.history.get(pid, PromptHistory())
            lengths = (*old.lengths, tuple(r.generated for r in rs))
            self.history[pid] = PromptHistory(lengths=lengths, rewards=old.rewards)


def stalled(c: ClusterState, policy: str) -> LiveError:
    """The error of a step in which nothing runs and requests are still unplaced (both
    executors' drivers raise it)."""
    left = sum(r.state == "unassigned" for r in c.requests[: c.n_requests])
    return LiveError(f"policy '{policy}' left {left} request(s) unassigned with every worker idle")
