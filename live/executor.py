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
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from simctl.live.backend import EngineWorker
from simctl.live.drafters import KNOWN as KNOWN_METHODS
from simctl.live.state import LiveRequest, LiveWorker, MethodStats
from simctl.live.view import LiveView
from simctl.live.workload import StepWork, Workload
from simctl.policies.compose import requirement_gaps
from simctl.policies.contract import (
    SPEC_OFF,
    Action,
    Assign,
    Cancel,
    Capability,
    ChunkFinished,
    CopyCancelled,
    Defer,
    Event,
    LaunchReplica,
    Migrate,
    ModelInfo,
    Policy,
    PromptHistory,
    RequestFinished,
    Role,
    SetRole,
    SetSpec,
    SpecConfig,
    StepFinished,
    StepStarted,
    Tick,
    WorkerIdle,
)

TORCH_CAPABILITIES = frozenset(
    {
        Capability.PLACE,
        Capability.CHUNK,
        Capability.PRIORITY,
        Capability.MIGRATE,
        Capability.SPEC_PER_WORKER,
        Capability.SPEC_PER_REQUEST,
        Capability.REPLICAS,
    }
)


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else ""


class LiveError(RuntimeError):
    """A live run that cannot go on; the message is one line."""


class WorkerCrashed(LiveError):
    pass


@dataclass
class ExecutorConfig:
    max_num_seqs: int = 256
    kv_capacity_tokens: int = 1 << 20
    kv_watermark: float = 0.01


@dataclass
class StepRecord:
    """Everything one step produced; the recorder turns it into trace rows and tables."""

    step: int
    epoch: int
    requests: list[LiveRequest]  # the step's requests, then Fastest-of-N replica rows
    n_requests: int
    makespan_s: float
    segments: list[list]  # [worker, t0, t1, iterations, batch, kv_tokens, gamma_mean]
    roles: list[tuple[int, float, str]]
    engine_s: float
    policy_s: float
    bookkeeping_s: float
    wall_s: float
    events: int
    counters: Counter[str]
    complete: bool = True
    # One row per engine iteration, ITERATION_COLUMNS: what the cost model is asked to price
    # (batch, query tokens, context, prefill) next to what the engine measured.
    iterations: list[tuple] = field(default_factory=list)


ITERATION_COLUMNS = [
    "worker",
    "t0_s",  # the worker's clock when the iteration started
    "engine_s",  # measured engine step (what the worker's clock advanced by, before bookkeeping)
    "engine_cpu_s",  # CPU time of this thread in it: engine_cpu_s / engine_s < 1 means the host
    # took the core away (other processes) or the engine waited on other threads, a device or
    # a remote worker (Ray: ~0, the step runs in the actor)
    "batch",  # running requests
    "new_tokens",  # batch + draft tokens verified (the simulator's new_tokens; prefill apart)
    "context_tokens",  # prompt + generated tokens of the running requests (the simulator's)
    "prefill_tokens",  # uncached tokens of requests admitted since the previous iteration
    "drafted",  # draft tokens proposed (and verified) in this iteration (vLLM backend: only
    # known when a request finishes, so its drafted total lands in that iteration)
    "drafting",  # requests that proposed at least one token
    "speculating",  # requests running with a drafter (gamma > 0)
    "gamma",  # widest draft length asked of the speculating requests (0: none)
    "method",  # the draft method most of them use ("" when none speculates)
    "accepted",
    "draft_s",  # the engine's own split of engine_s, when it reports one (else 0)
    "forward_s",
    "sample_s",
]


@dataclass
class Overhead:
    engine_s: float = 0.0
    policy_s: float = 0.0
    bookkeeping_s: float = 0.0

    @property
    def fraction(self) -> float:
        """Controller time over engine time (issue target: < 2%)."""
        return (self.policy_s + self.bookkeeping_s) / self.engine_s if self.engine_s else 0.0


@dataclass
class _StepState:
    work: StepWork
    t_wall0: float
    segments: list[list] = field(default_factory=list)
    roles: list[tuple[int, float, str]] = field(default_factory=list)
    counters: Counter[str] = field(default_factory=Counter)
    events: int = 0
    policy_s: float = 0.0
    engine_s: float = 0.0
    bookkeeping_s: float = 0.0
    iterations: list[tuple] = field(default_factory=list)


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
        draft_methods: frozenset[str] = frozenset(KNOWN_METHODS),
        cost_model: object | None = None,
        history: Mapping[int, PromptHistory] | None = None,
        on_progress: Callable[[LiveExecutor], None] | None = None,
    ) -> None:
        if not engines:
            raise LiveError("a live run needs at least one worker")
        self.policy = policy
        self.workload = workload
        self.info = info
        self.config = config or ExecutorConfig()
        self.capabilities = capabilities
        self.draft_methods = draft_methods
        self.cost_model = cost_model
        self.history: dict[int, PromptHistory] = dict(history or {})
        self.on_progress = on_progress
        self.workers = [LiveWorker(i, e, self.config.kv_capacity_tokens) for i, e in enumerate(engines)]
        self.view = LiveView(self, self.history)
        self.requests: list[LiveRequest] = []
        self.n_requests = 0
        self.replicas: dict[int, list[int]] = {}  # request -> its Fastest-of-N replica rows
        self.unfinished = 0
        self.now = 0.0
        self.step_no = 0
        self.epoch = 0
        self.makespan = 0.0
        self.records: list[StepRecord] = []
        self.partial: StepRecord | None = None
        self.approximated: Counter[str] = Counter()
        self.overhead = Overhead()
        self._quiet = False
        self._st: _StepState | None = None
        for gap in requirement_gaps(policy, capabilities):
            self.approximated[f"policy requires capability '{gap}', which this executor lacks"] += 1

    # ------------------------------------------------------------------------- run
    def run(self) -> list[StepRecord]:
        """Every step of the workload; on failure `records` holds the completed steps and
        `partial` what the failed one had finished."""
        for work in self.workload.steps:
            self.records.append(self.run_step(work))
        return self.records

    def run_step(self, work: StepWork) -> StepRecord:
        self._begin(work)
        st = self._st
        assert st is not None
        try:
            self._emit(
                StepStarted(
                    time_s=0.0, step=work.step, epoch=work.epoch, requests=tuple(range(len(work.requests)))
                )
            )
            if all(r.state == "unassigned" for r in self.requests[: self.n_requests]):
                raise LiveError(f"policy '{self.policy.name}' placed no request at step start")
            self._settle()
            while self.unfinished > 0:
                w = self._next_worker()
                if w is None:
                    left = sum(r.state == "unassigned" for r in self.requests[: self.n_requests])
                    raise LiveError(
                        f"policy '{self.policy.name}' left {left} request(s) unassigned "
                        "with every worker idle"
                    )
                self._iterate(w)
            self._emit(StepFinished(time_s=self.makespan, step=work.step, rollout_makespan_s=self.makespan))
            self._drain_deferred()
        except BaseException:
            self.partial = self._record(complete=False)
            raise
        record = self._record(complete=True)
        self._extend_history()
        return record

    def _begin(self, work: StepWork) -> None:
        self.step_no, self.epoch = work.step, work.epoch
        self.requests = [LiveRequest(i, spec) for i, spec in enumerate(work.requests)]
        self.n_requests = len(self.requests)
        self.replicas: dict[int, list[int]] = {}
        for r in self.requests:
            r.dispatch_end = r.budget
        self.unfinished = len(self.requests)
        self.now = 0.0
        self.makespan = 0.0
        for w in self.workers:
            if w.running or w.waiting:
                raise LiveError(f"worker {w.id} still holds requests from the previous step")
            w.clock, w.role, w.iteration, w.since_tick, w.idle_reported = 0.0, Role.ROLLOUT, 0, 0, False
            w.prefill_tokens = 0
        self._st = _StepState(work, time.perf_counter())
        self._st.roles.extend((w.id, 0.0, Role.ROLLOUT.value) for w in self.workers)

    # ---------------------------------------------------------------------- events
    def _emit(self, event: Event) -> None:
        if self._quiet:
            return
        st = self._st
        assert st is not None
        st.events += 1
        t0 = time.perf_counter()
        actions = self.policy.on_event(event, self.view)
        st.policy_s += time.perf_counter() - t0
        if actions:
            self.apply(actions)

    def _next_worker(self) -> LiveWorker | None:
        busy = [w for w in self.workers if w.running]
        return min(busy, key=lambda w: (w.clock, w.id)) if busy else None

    def _iterate(self, w: LiveWorker) -> None:
        """One engine iteration of `w` and everything it triggers."""
        st = self._st
        assert st is not None
        batch, kv = len(w.running), self.kv_used(w)
        specs = [self._effective(self.requests[rid], w) for rid in w.running]
        gammas = [s.gamma if s.enabled else 0 for s in specs]
        methods = Counter(s.method for s, g in zip(specs, gammas, strict=True) if g > 0 and s.method)
        prefill, w.prefill_tokens = w.prefill_tokens, 0
        c0 = time.thread_time()
        t0 = time.perf_counter()
        try:
            deltas = w.engine.step()
        except Exception as exc:
            raise WorkerCrashed(
                f"worker {w.id} crashed at step {self.step_no}: {type(exc).__name__}: {_first_line(exc)}"
            ) from exc
        t1 = time.perf_counter()
        engine_cpu_s = time.thread_time() - c0
        timing = w.engine.last_timing
        # a remote worker times its step itself: the call's round trip is not engine time
        engine_s = timing.engine_s if timing.engine_s is not None else t1 - t0
        st.engine_s += engine_s
        start = w.clock
        w.clock += engine_s
        self.now = w.clock
        policy_before = st.policy_s
        ended: list[tuple[LiveRequest, bool]] = []
        drafted = drafting = accepted = 0
        for d in deltas:
            drafted += d.drafted
            drafting += d.drafted > 0
            accepted += d.accepted
            r = self.requests[d.request]
            if d.tokens and r.first_token_s is None:
                r.first_token_s = self.now
            r.tokens.extend(d.tokens)
            spec = r.running_spec
            if spec.enabled and spec.method is not None:
                r.spec_iters += 1
                r.spec_tokens += len(d.tokens)
                r.drafted += d.drafted
                r.accepted += d.accepted
                m = r.by_method.setdefault(spec.method, MethodStats())
                m.iterations += 1
                m.tokens += len(d.tokens)
                m.drafted += d.drafted
                m.accepted += d.accepted
                m.gamma_sum += spec.gamma
                m.hits += d.drafted > 0
            if d.ended or r.generated >= r.dispatch_end:
                if not d.ended:
                    w.engine.abort(r.id)
                ended.append((r, d.stopped))
        w.iteration += 1
        spec_g = [g for g in gammas if g > 0]
        st.iterations.append(
            (
                w.id,
                start,
                engine_s,
                engine_cpu_s,
                batch,
                batch + drafted,
                kv,
                prefill,
                drafted,
                drafting,
                len(spec_g),
                max(spec_g, default=0),
                methods.most_common(1)[0][0] if methods else "",
                accepted,
                timing.draft_s,
                timing.forward_s,
                timing.sample_s,
            )
        )
        seg = [w.id, start, 0.0, 1, batch, kv, sum(spec_g) / len(spec_g) if spec_g else 0.0]
        done = {r.id for r, _ in ended}
        w.running = [rid for rid in w.running if rid not in done]
        for r, stopped in ended:
            if r.state == "running":  # not cancelled by an earlier copy's finish just now
                self._end_dispatch(r, w, stopped)
        tick = self.policy.tick_iterations
        if tick:
            w.since_tick += 1
            if w.since_tick >= tick:
                w.since_tick = 0
                self._emit(Tick(time_s=self.now, worker=w.id, iteration=w.iteration))
        self._settle()
        spent = time.perf_counter() - t1
        policy_s = st.policy_s - policy_before
        st.bookkeeping_s += spent - policy_s
        w.clock += spent
        seg[2] = w.clock
        self._add_segment(seg)
        if self.on_progress is not None:
            self.on_progress(self)

    def _add_segment(self, seg: list) -> None:
        """Merge runs of iterations with the same batch and draft length (as the
        simulator's fast-forward blocks), keeping the timeline table small."""
        segs = self._st.segments  # type: ignore[union-attr]
        for last in reversed(segs[-len(self.workers) :]):
            if last[0] == seg[0]:
                if abs(last[2] - seg[1]) < 1e-12 and last[4] == seg[4] and last[6] == seg[6]:
                    last[2] = seg[2]
                    last[3] += 1
                    return
                break
        segs.append(seg)

    def _settle(self) -> None:
        """Admit what fits everywhere, then report workers that ran dry (each once); repeat
        while the policy's answers change anything."""
        for _ in range(10 * len(self.workers) + 10):
            for w in self.workers:
                self._admit(w)
            idle = [w for w in self.workers if not w.running and not w.waiting and not w.idle_reported]
            if not idle or self.unfinished == 0:
                return
            for w in idle:
                w.idle_reported = True
                self._emit(WorkerIdle(time_s=max(self.now, w.clock), worker=w.id))

    def _end_dispatch(self, r: LiveRequest, w: LiveWorker, stopped: bool) -> None:
        st = self._st
        assert st is not None
        if stopped or r.generated >= r.budget:
            r.state = "finished"
            r.finish_s = self.now
            forced = r.spec_in.finish_reason
            r.finish_reason = forced or ("stop" if stopped else "length")
            req = self.requests[r.origin]
            raced = r.origin != r.id or bool(self.replicas.get(r.origin))
            losers = self._cancel_copies(r.origin, keep=r.id) if raced else []
            if req is not r:  # a replica won: the request completes with its tokens
                req.tokens = list(r.tokens)
                req.state, req.finish_s, req.worker = "finished", r.finish_s, w.id
                req.finish_reason = r.finish_reason
                st.counters["replica_wins"] += 1
            if self._quiet:
                return
            self.unfinished -= 1
            self.makespan = self.now
            self._emit(RequestFinished(time_s=self.now, request=req.id, worker=w.id, length=req.generated))
            for loser in losers:
                self._emit(CopyCancelled(time_s=self.now, request=req.id, worker=loser, winner=w.id))
        else:
            r.state, r.worker = "unassigned", None
            st.counters["chunks"] += 1
            self._emit(ChunkFinished(time_s=self.now, request=r.id, worker=w.id, generated=r.generated))

    # ------------------------------------------------------------------- admission
    def kv_used(self, w: LiveWorker) -> int:
        return sum(self.requests[rid].prompt_len + self.requests[rid].generated for rid in w.running)

    def _effective(self, r: LiveRequest, w: LiveWorker) -> SpecConfig:
        if r.spec.plain:
            return SPEC_OFF
        return r.spec if r.spec.enabled else w.spec

    def _admit(self, w: LiveWorker) -> None:
        cfg = self.config
        limit = int(w.kv_capacity * (1.0 - cfg.kv_watermark))
        used = self.kv_used(w) if w.waiting else 0
        while w.waiting and len(w.running) < cfg.max_num_seqs:
            rid = w.peek()
            if rid is None:
                break
            r = self.requests[rid]
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
        w.running.append(r.id)
        spec = self._effective(r, w)
        prompt = [*r.spec_in.prompt, *r.tokens]
        key = f"{self.step_no}/{r.spec_in.prompt_id}/{r.spec_in.sample}"
        group = (self.step_no, r.spec_in.prompt_id)
        notes = w.engine.add(r.id, key, prompt, r.dispatch_end - r.generated, spec, group)
        w.prefill_tokens += len(prompt)
        r.running_spec = spec
        self._note(notes)

    def _note(self, notes: Sequence[str]) -> None:
        for n in notes:
            self.approximated[n] += 1

    def _enqueue(self, r: LiveRequest, w: LiveWorker) -> None:
        r.state, r.worker, r.ready_s = "waiting", w.id, self.now
        w.push(r.id, r.priority)

    # --------------------------------------------------------------------- actions
    def apply(self, actions: Sequence[Action]) -> None:
        for a in actions:
            if isinstance(a, Assign):
                self._assign(a)
            elif isinstance(a, SetSpec):
                self._set_spec(a)
            elif isinstance(a, Migrate):
                self._migrate(a)
            elif isinstance(a, SetRole):
                w = self._worker(a.worker, a)
                w.role = a.role
                self._st.roles.append((w.id, self.now, a.role.value))  # type: ignore[union-attr]
                if a.role not in (Role.ROLLOUT, Role.IDLE):
                    self.approximated[
                        f"SetRole({a.role.value}): recorded only, live workers run no other work"
                    ] += 1
            elif isinstance(a, Defer):
                self._defer(a)
            elif isinstance(a, LaunchReplica):
                self._launch_replica(a)
            elif isinstance(a, Cancel):
                self._cancel(a)
            else:
                raise LiveError(
                    f"policy '{self.policy.name}' used {type(a).__name__}, unknown to the live executor"
                )

    def _worker(self, wid: int | None, a: Action) -> LiveWorker:
        if wid is None or not 0 <= wid < len(self.workers):
            raise LiveError(
                f"policy '{self.policy.name}': {a} names worker {wid}, run has {len(self.workers)}"
            )
        return self.workers[wid]

    def _request(self, rid: int, a: Action) -> LiveRequest:
        if not 0 <= rid < len(self.requests):
            raise LiveError(
                f"policy '{self.policy.name}': {a} names request {rid}, step has {len(self.requests)}"
            )
        return self.requests[rid]

    def _assign(self, a: Assign) -> None:
        w = self._worker(a.worker, a)
        r = self._request(a.request, a)
        if r.state != "unassigned":
            raise LiveError(f"policy '{self.policy.name}': {a} for a request that is not unassigned")
        r.priority = a.priority
        r.dispatch_end = r.budget if a.max_tokens is None else min(r.budget, r.generated + a.max_tokens)
        r.dispatches += 1
        if r.submit_s is None:
            r.submit_s = self.now
        self._enqueue(r, w)

    def _set_spec(self, a: SetSpec) -> None:
        if a.spec.enabled and a.spec.method not in KNOWN_METHODS:
            raise LiveError(
                f"policy '{self.policy.name}': unknown draft method '{a.spec.method}'; "
                f"known: {', '.join(KNOWN_METHODS)}"
            )
        if a.request is not None:
            r = self._request(a.request, a)
            r.spec = a.spec
            if r.state == "running" and r.worker is not None:
                self._refresh(r, self.workers[r.worker])
        if a.worker is not None:
            w = self._worker(a.worker, a)
            w.spec = a.spec
            for rid in w.running:
                self._refresh(self.requests[rid], w)

    def _refresh(self, r: LiveRequest, w: LiveWorker) -> None:
        spec = self._effective(r, w)
        if spec != r.running_spec:
            self._note(w.engine.set_spec(r.id, spec))
            r.running_spec = spec

    def _migrate(self, a: Migrate) -> None:
        dst = self._worker(a.worker, a)
        r = self._request(a.request, a)
        if r.state not in ("running", "waiting") or r.worker is None:
            raise LiveError(f"policy '{self.policy.name}': {a} for a request that is not queued or running")
        src = self.workers[r.worker]
        if r.state == "running":
            src.engine.abort(r.id)
            src.running.remove(r.id)
        else:
            src.drop_waiting(r.id)
        if a.transfer_kv:
            self.approximated["Migrate(transfer_kv=True): KV recomputed on the new worker"] += 1
        self._st.counters["migrations"] += 1  # type: ignore[union-attr]
        self._enqueue(r, dst)

    def _launch_replica(self, a: LaunchReplica) -> None:
        """Fastest-of-N: a copy from the request's furthest progress on another worker (KV
        recomputed there). The sampling key is the request's, so every copy emits the same
        tokens: only how fast differs, which is the point of the race."""
        w = self._worker(a.worker, a)
        if not 0 <= a.request < self.n_requests:
            raise LiveError(f"policy '{self.policy.name}': {a} names request {a.request}")
        rows = [a.request, *self.replicas.get(a.request, [])]
        origin = self.requests[a.request]
        if origin.state in ("finished", "deferred", "cancelled") and not self.replicas.get(a.request):
            raise LiveError(f"policy '{self.policy.name}': {a} for a request that is not in flight")
        if any(
            self.requests[i].worker == w.id and self.requests[i].state in ("waiting", "running") for i in rows
        ):
            raise LiveError(f"policy '{self.policy.name}': {a}: the request already runs on worker {w.id}")
        progress = max((self.requests[i] for i in rows), key=lambda x: x.generated)
        row = LiveRequest(len(self.requests), origin.spec_in, tokens=list(progress.tokens), origin=a.request)
        row.spec, row.priority = a.spec, max(origin.priority, 0.0) + 1.0
        row.dispatch_end, row.dispatches, row.submit_s = row.budget, 1, self.now
        self.requests.append(row)
        self.replicas.setdefault(a.request, []).append(row.id)
        self._st.counters["replicas"] += 1  # type: ignore[union-attr]
        self._enqueue(row, w)

    def _cancel(self, a: Cancel) -> None:
        for i in [a.request, *self.replicas.get(a.request, [])]:
            r = self.requests[i]
            if r.worker == a.worker and r.state in ("waiting", "running"):
                self._remove(r)
                if i != a.request:
                    self.replicas[a.request].remove(i)
                return
        raise LiveError(f"policy '{self.policy.name}': {a}: no copy of the request runs on that worker")

    def _cancel_copies(self, request: int, keep: int) -> list[int]:
        """The first copy to finish wins; every other copy stops now. Returns the workers
        of the copies stopped (the policy hears of each)."""
        losers = []
        for i in [request, *self.replicas.pop(request, [])]:
            if i != keep:
                r = self.requests[i]
                if r.state in ("waiting", "running") and r.worker is not None:
                    losers.append(r.worker)
                self._remove(r)
        return losers

    def _remove(self, r: LiveRequest) -> None:
        if r.worker is not None:
            w = self.workers[r.worker]
            if r.state == "running" and r.id in w.running:
                w.engine.abort(r.id)
                w.running.remove(r.id)
            elif r.state == "waiting":
                w.drop_waiting(r.id)
        if r.state != "finished":
            r.state = "cancelled"
            self._st.counters["cancelled"] += 1  # type: ignore[union-attr]

    def _defer(self, a: Defer) -> None:
        r = self._request(a.request, a)
        if r.state not in ("unassigned", "waiting"):
            raise LiveError(f"policy '{self.policy.name}': {a} for a request that is running or done")
        if r.state == "waiting" and r.worker is not None:
            self.workers[r.worker].drop_waiting(r.id)
        r.state = "deferred"
        self.unfinished -= 1
        self.approximated[
            "Defer: generated after this step's makespan (outside it), not in the next step"
        ] += 1

    def _drain_deferred(self) -> None:
        """Deferred requests still need their tokens for the trace: run them after the
        makespan without telling the policy (the step is over for it)."""
        deferred = [r for r in self.requests[: self.n_requests] if r.state == "deferred"]
        if not deferred:
            return
        self._quiet = True
        try:
            for r in deferred:
                w = self.workers[r.worker if r.worker is not None else 0]
                r.dispatch_end = r.budget
                self._enqueue(r, w)
            while any(r.state != "finished" for r in deferred):
                for w in self.workers:
                    self._admit(w)
                w = self._next_worker()
                if w is None:
                    break
                self._iterate(w)
        finally:
            self._quiet = False

    # --------------------------------------------------------------------- records
    def _record(self, complete: bool) -> StepRecord:
        st = self._st
        assert st is not None
        self.overhead.engine_s += st.engine_s
        self.overhead.policy_s += st.policy_s
        self.overhead.bookkeeping_s += st.bookkeeping_s
        return StepRecord(
            step=st.work.step,
            epoch=st.work.epoch,
            requests=self.requests,
            n_requests=self.n_requests,
            makespan_s=self.makespan,
            segments=st.segments,
            roles=st.roles,
            engine_s=st.engine_s,
            policy_s=st.policy_s,
            bookkeeping_s=st.bookkeeping_s,
            wall_s=time.perf_counter() - st.t_wall0,
            events=st.events,
            counters=st.counters,
            complete=complete,
            iterations=st.iterations,
        )

    def _extend_history(self) -> None:
        groups: dict[int, list[LiveRequest]] = {}
        for r in self.requests[: self.n_requests]:
            groups.setdefault(r.spec_in.prompt_id, []).append(r)
        for pid, rs in groups.items():
            old = self.history.get(pid, PromptHistory())
            lengths = (*old.lengths, tuple(r.generated for r in rs))
            self.history[pid] = PromptHistory(lengths=lengths, rewards=old.rewards)
