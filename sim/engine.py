"""One RL step's rollout on the simulated cluster: builds workers, delivers events to the
policy, applies its actions, and collects what the metrics need.

The policy is called synchronously from inside worker processes (at the simulated instant
the event happens); actions that affect another worker poke it, and it re-plans at its
next iteration boundary.

Seams: workers see this simulation only as a WorkerHost (sim.worker_host) and are changed
only through their methods; the policies' view reads it as a ViewSource (sim.view); where
verification outcomes come from is an injected AcceptanceSource (sim.acceptance_source:
sampling by default, exact token replay from sim.token_replay). The engine imports its
workers and view, never the reverse.
"""

from __future__ import annotations

import inspect
import math
from collections import Counter, defaultdict
from collections.abc import Sequence

import numpy as np
import simpy

from simctl.policies.action_checks import checked
from simctl.policies.contract import (
    Action,
    Assign,
    Cancel,
    ChunkFinished,
    CopyCancelled,
    Defer,
    Event,
    LaunchReplica,
    Migrate,
    Policy,
    RequestFinished,
    Role,
    SetRole,
    SetSpec,
    SpecConfig,
    StepFinished,
    StepStarted,
    decide,
    wants_tick,
)
from simctl.sim.acceptance_source import AcceptanceSource, SampledAcceptance
from simctl.sim.cost_model import CostModel
from simctl.sim.drafters import DRAFTERS
from simctl.sim.engine_config import SIM_CAPABILITIES, EngineConfig
from simctl.sim.placement import Placement
from simctl.sim.plan import Plan
from simctl.sim.state import (
    CANCELLED,
    DEFERRED,
    FINISHED,
    PLAIN_GAMMA,
    RUNNING,
    STATE_NAMES,
    UNASSIGNED,
    WAITING,
    StepState,
)
from simctl.sim.token_methods import ANNOTATE_HINT
from simctl.sim.view import SimView
from simctl.sim.worker import Worker
from simctl.sim.worker_faults import StepFaults
from simctl.traces.cli_options import WorkerFault

__all__ = ["DRAFTERS", "SIM_CAPABILITIES", "EngineConfig", "SimError", "StepSimulation"]


class SimError(ValueError):
    """A run that cannot proceed (policy asks for something impossible); one line."""


class StepSimulation:
    """Implements WorkerHost (sim.worker_host) for its workers and the source the
    policies' SimView reads (sim.view)."""

    def __init__(
        self,
        state: StepState,
        policy: Policy,
        cost: CostModel,
        layout: Sequence[tuple[int, int]],  # per worker: (node, gpus)
        config: EngineConfig,
        seed: int,
        view_extras: dict | None = None,
        acceptance: AcceptanceSource | None = None,
        lost: Sequence[int] = (),
        faults: Sequence[WorkerFault] = (),
    ) -> None:
        """`lost`: workers lost in earlier steps; `faults`: losses injected in this one, in
        time order (sim.worker_faults)."""
        self.state = state
        self.policy = policy
        self.cost = cost
        self.config = config
        self.seed = seed
        # where verification outcomes come from (exact token replay: sim.token_replay)
        self.acceptance: AcceptanceSource = acceptance if acceptance is not None else SampledAcceptance()
        self.env = simpy.Environment()
        self.done = False
        self.done_event = self.env.event()
        self.counters: Counter[str] = Counter()
        # traces.run_format SEGMENT_COLUMNS: (worker, t0, t1, iterations, batch, kv, gamma_mean,
        # replicas, prefill_s, recompute_s, draft_s)
        self.segments: list[tuple] = []
        self.roles: list[tuple[int, float, str]] = []  # (worker, time, role)
        self.unfinished = state.n_requests
        self.request_spec = False  # some request has its own speculation setting
        self.replicas: dict[int, list[int]] = {}  # request -> its Fastest-of-N replica rows
        self.drafter_clients: defaultdict[int, set[int]] = defaultdict(set)  # drafter -> verifier workers
        self.makespan = 0.0
        longest = int((state.prompt_len + state.target_len).max()) if state.n else 0
        # each running sequence's window of KV in sliding-window layers (sim.model_spec)
        kv_window = math.ceil(getattr(cost, "kv_window_tokens", 0.0))
        if longest + kv_window > cost.kv_capacity_tokens:
            window = f" plus its sliding window's {kv_window}" if kv_window else ""
            raise SimError(
                f"KV capacity {cost.kv_capacity_tokens} tokens per worker is smaller than the longest "
                f"request context {longest} tokens{window} (step {state.step}): use more GPUs per "
                "worker (tp)"
            )
        self.workers = [
            Worker(self, w, node, gpus, cost.kv_capacity_tokens, seed, self.acceptance, kv_window)
            for w, (node, gpus) in enumerate(layout)
        ]
        self.placement = Placement(len(self.workers), state.n_requests)
        self.view = SimView(self, **(view_extras or {}))
        self.faults = StepFaults(self, lost, faults)
        # measured profiles price verification by the draft length too (sim.cost_model)
        self.cost_takes_gamma = "gamma" in inspect.signature(cost.iteration_time).parameters

    # --------------------------------------------------------- for workers and the view
    @property
    def tick_iterations(self) -> int | None:
        return self.policy.tick_iterations

    def wants_ticks(self, worker: int) -> bool:
        """Whether the policy wants `worker`'s Ticks now (asked when the worker plans)."""
        if not self.policy.tick_iterations:
            return False
        return wants_tick(self.policy, worker, self.view)

    def method_index(self, method: str) -> int:
        try:
            return self.state.method_index(method)
        except KeyError:
            raise SimError(
                f"trace has no acceptance column 'accept_{method}' needed by policy "
                f"'{self.policy.name}' ({ANNOTATE_HINT})"
            ) from None

    def drafter_for(self, method: str) -> str:
        try:
            return DRAFTERS[method]
        except KeyError:
            raise SimError(f"unknown draft method '{method}'; known: {', '.join(DRAFTERS)}") from None

    def drafter_load(self, drafter_worker: int) -> tuple[int, int]:
        return len(self.drafter_clients[drafter_worker]), self.workers[drafter_worker].gpus

    def record_segment(
        self, worker: int, t0: float, t1: float, iterations: int, plan: Plan, batch: int, pos: int
    ) -> None:
        st = self.state
        replicas = int((st.origin[plan.ids] != plan.ids).sum()) if len(st.origin) > st.n_requests else 0
        # what the plan priced for these iterations, never more than the segment lasted
        # (the difference of cumulative sums may round below their parts)
        prefill, recompute, draft = plan.phase_seconds(pos, pos + iterations)
        span = t1 - t0
        prefill = min(prefill, span)
        recompute = min(recompute, span - prefill)
        draft = min(max(draft, 0.0), span - prefill - recompute)
        self.segments.append(
            (
                worker,
                t0,
                t1,
                iterations,
                batch,
                plan.kv_tokens,
                plan.spec_gamma_mean,
                replicas,
                prefill,
                recompute,
                draft,
            )
        )

    # ---------------------------------------------------------------------- events
    def emit(self, event: Event) -> None:
        self.counters["events"] += 1
        actions, problem = checked(decide(self.policy, event, self.view), self.state.n_requests)
        if problem:
            raise SimError(f"policy '{self.policy.name}': {problem}")
        if actions:
            self.apply_actions(actions)

    def end_dispatch(self, rid: int, worker: int, now: float) -> None:
        st = self.state
        req = int(st.origin[rid])
        self.placement.unplace(rid, worker)
        if st.generated[rid] >= st.target_len[rid]:
            st.state[rid] = FINISHED
            st.finish_s[rid] = now
            raced = req != rid or bool(self.replicas.get(req))
            losers = self._cancel_siblings(req, keep=rid) if raced else []
            if req != rid:  # a replica won: the request completes with it, and its tokens
                st.state[req] = FINISHED
                st.generated[req] = st.generated[rid]
                st.finish_s[req] = now
                st.worker[req] = worker
                self.counters["replica_wins"] += 1
            self.unfinished -= 1
            self.makespan = now
            self.emit(RequestFinished(time_s=now, request=req, worker=worker, length=int(st.target_len[req])))
            for w in losers:
                self.emit(CopyCancelled(time_s=now, request=req, worker=w, winner=worker))
            if self.unfinished == 0:
                self._finish()
        else:
            st.state[rid] = UNASSIGNED
            st.worker[rid] = -1
            if self.config.kv_pool:  # the chunk's KV stays in the global pool: no recompute later
                st.kv_resident[rid] = int(st.prompt_len[rid] + st.generated[rid])
            self.counters["chunks"] += 1
            self.emit(ChunkFinished(time_s=now, request=rid, worker=worker, generated=int(st.generated[rid])))

    def _cancel_siblings(self, request: int, keep: int) -> list[int]:
        """Fastest-of-N: the first copy to finish wins; every other copy stops now. Returns
        the workers of the copies stopped (the policy hears of each)."""
        losers = []
        for row in [request, *self.replicas.pop(request, [])]:
            if row != keep:
                w = int(self.state.worker[row])
                if self.state.state[row] in (WAITING, RUNNING) and w >= 0:
                    losers.append(w)
                self._remove_row(row)
        return losers

    def _remove_row(self, row: int) -> None:
        st = self.state
        w = int(st.worker[row])
        if st.state[row] == RUNNING and w >= 0:
            self.placement.unplace(row, w)
            self.workers[w].drop_running(row)
        elif st.state[row] == WAITING and w >= 0:
            self.placement.unplace(row, w)
            self.workers[w].forget_waiting()
        if st.state[row] != FINISHED:
            st.state[row] = CANCELLED
            self.counters["cancelled"] += 1

    def _finish(self) -> None:
        if not self.done:
            self.done = True
            self.done_event.succeed()

    # --------------------------------------------------------------------- actions
    def apply_actions(self, actions: Sequence[Action]) -> None:
        for action in actions:
            a = self.faults.aimed(action) if self.faults.lost else action
            if a is None:
                continue
            if isinstance(a, Assign):
                self._assign(a)
            elif isinstance(a, SetSpec):
                self._set_spec(a)
            elif isinstance(a, SetRole):
                self._check_worker(a.worker, a)
                self.workers[a.worker].set_role(a.role)
                self.roles.append((a.worker, self.env.now, a.role.value))
            elif isinstance(a, Defer):
                self._defer(a)
            elif isinstance(a, Migrate):
                self._migrate(a)
            elif isinstance(a, LaunchReplica):
                self._launch_replica(a)
            elif isinstance(a, Cancel):
                self._cancel(a)
            else:
                raise SimError(
                    f"policy '{self.policy.name}' used {type(a).__name__}, "
                    "which the simulator does not support yet"
                )

    def _assign(self, a: Assign) -> None:
        st = self.state
        self._check_worker(a.worker, a)
        if st.state[a.request] != UNASSIGNED:
            raise SimError(f"policy '{self.policy.name}': {a} for a request that is not unassigned")
        st.worker[a.request] = a.worker
        st.priority[a.request] = a.priority
        budget = st.target_len[a.request]
        if a.max_tokens is not None:
            budget = min(budget, st.generated[a.request] + a.max_tokens)
        st.dispatch_end[a.request] = budget
        st.dispatches[a.request] += 1
        self.placement.place(a.request, a.worker)
        self.workers[a.worker].enqueue(a.request)

    def _set_spec(self, a: SetSpec) -> None:
        if a.spec.enabled:
            assert a.spec.method is not None
            self.drafter_for(a.spec.method)
        if a.request is not None:
            self._set_request_spec(a)
        if a.worker is not None:
            self._check_worker(a.worker, a)
            if a.spec.enabled and a.spec.mode == "decoupled":
                self._check_drafter(a.spec)
                assert a.spec.drafter_worker is not None
                self.drafter_clients[a.spec.drafter_worker].add(a.worker)
            self.workers[a.worker].set_spec(a.spec)

    def _defer(self, a: Defer) -> None:
        st = self.state
        if st.state[a.request] not in (UNASSIGNED, WAITING):
            raise SimError(f"policy '{self.policy.name}': {a} for a request that is running or done")
        if st.state[a.request] == WAITING:
            w = int(st.worker[a.request])
            self.placement.unplace(a.request, w)
            self.workers[w].forget_waiting()
        st.state[a.request] = DEFERRED
        self.counters["deferred"] += 1
        self.unfinished -= 1
        if self.unfinished == 0:
            self._finish()

    def _launch_replica(self, a: LaunchReplica) -> None:
        """A copy of the request from its current progress on another worker. Its KV is
        rebuilt there by recompute (SpecActor §4.3 recovers KV by tail transfer plus
        recompute; recompute is the conservative bound)."""
        st = self.state
        self._check_worker(a.worker, a)
        if a.request >= st.n_requests or st.state[a.request] in (FINISHED, DEFERRED, CANCELLED):
            raise SimError(f"policy '{self.policy.name}': {a} for a request that is not in flight")
        rows = [a.request, *self.replicas.get(a.request, [])]
        if any(int(st.worker[r]) == a.worker and st.state[r] in (WAITING, RUNNING) for r in rows):
            raise SimError(f"policy '{self.policy.name}': {a}: the request already runs on worker {a.worker}")
        progress = max(rows, key=lambda r: int(st.generated[r]))
        row = st.clone_row(progress)
        st.state[row] = UNASSIGNED
        st.worker[row] = a.worker
        st.dispatch_end[row] = st.target_len[row]
        st.priority[row] = max(float(st.priority[a.request]), 0.0) + 1.0
        self.replicas.setdefault(a.request, []).append(row)
        self.counters["replicas"] += 1
        self._set_row_spec(row, a.spec)
        self.workers[a.worker].enqueue(row)

    def _cancel(self, a: Cancel) -> None:
        st = self.state
        for row in [a.request, *self.replicas.get(a.request, [])]:
            if int(st.worker[row]) == a.worker and st.state[row] in (WAITING, RUNNING):
                self._remove_row(row)
                if row != a.request:
                    self.replicas[a.request].remove(row)
                return
        raise SimError(f"policy '{self.policy.name}': {a}: no copy of the request runs on that worker")

    def _set_request_spec(self, a: SetSpec) -> None:
        assert a.request is not None
        self._set_row_spec(a.request, a.spec)
        w = self.state.worker[a.request]
        if w >= 0:
            self.workers[w].poke()

    def _set_row_spec(self, row: int, spec: SpecConfig) -> None:
        st = self.state
        st.spec[row] = spec
        on = spec.enabled and spec.method is not None
        st.req_method[row] = self.method_index(spec.method) if on else -1  # type: ignore[arg-type]
        st.req_gamma[row] = spec.gamma if on else (PLAIN_GAMMA if spec.plain else 0)
        self.request_spec = self.request_spec or on or spec.plain
        st.req_window[row] = spec.window if on and spec.mode == "decoupled" else 0
        st.req_topk[row] = max(1, spec.topk) if on else 1
        st.req_verify[row] = spec.tokens_verified if on else 0
        if on and spec.mode == "decoupled":
            self._check_drafter(spec)
            assert spec.drafter_worker is not None
            self.drafter_clients[spec.drafter_worker].add(max(int(st.worker[row]), -1))

    def _check_drafter(self, spec: SpecConfig) -> None:
        if spec.drafter_worker is None or not 0 <= spec.drafter_worker < len(self.workers):
            raise SimError(
                f"policy '{self.policy.name}': decoupled speculation needs a drafter_worker "
                f"in 0..{len(self.workers) - 1}, got {spec.drafter_worker}"
            )
        if spec.window < 1:
            raise SimError(f"policy '{self.policy.name}': decoupled speculation needs window >= 1")

    def _migrate(self, a: Migrate) -> None:
        """Move a waiting request now; a running one leaves at its worker's next boundary."""
        st = self.state
        self._check_worker(a.worker, a)
        src = int(st.worker[a.request])
        if st.state[a.request] == RUNNING:
            self.placement.unplace(a.request, src)
            self.workers[src].drop_running(a.request)
        elif st.state[a.request] == WAITING:
            self.placement.unplace(a.request, src)
            self.workers[src].forget_waiting()
        else:
            raise SimError(f"policy '{self.policy.name}': {a} for a request that is not queued or running")
        st.kv_resident[a.request] = (
            int(st.prompt_len[a.request] + st.generated[a.request]) if a.transfer_kv else 0
        )
        self.counters["migrations"] += 1
        st.worker[a.request] = a.worker
        self.placement.place(a.request, a.worker)
        self.workers[a.worker].enqueue(a.request)

    def _check_worker(self, w: int | None, a: Action) -> None:
        if w is None or not 0 <= w < len(self.workers):
            raise SimError(
                f"policy '{self.policy.name}': {a} names worker {w}, cluster has {len(self.workers)}"
            )

    # ------------------------------------------------------------------------- run
    def run(self) -> float:
        """Simulate the step; its rollout makespan. The acceptance source's totals join
        the counters at the end."""
        st = self.state
        if st.n_requests == 0:
            self.faults.start()
            self.faults.finish(0.0)
            return 0.0
        for w in self.workers:
            self.roles.append((w.id, 0.0, Role.ROLLOUT.value))
        self.faults.start()
        self.emit(StepStarted(time_s=0.0, step=st.step, epoch=st.epoch, requests=tuple(range(st.n_requests))))
        unplaced = int((st.state == UNASSIGNED).sum())
        if unplaced == st.n_requests:
            raise SimError(f"policy '{self.policy.name}' placed no request at step start")
        try:
            self.env.run(until=self.done_event)
        except RuntimeError as exc:
            if self.done_event.triggered or "No scheduled events left" not in str(exc):
                raise
            raise SimError(stall_report(self.policy.name, self.state, self.env.now)) from None
        self.faults.finish(self.makespan)
        self.emit(StepFinished(time_s=self.makespan, step=st.step, rollout_makespan_s=self.makespan))
        self.acceptance.finish(self.counters)
        return self.makespan


def stall_report(policy: str, st: StepState, now: float) -> str:
    """One line for a step that stopped with requests unfinished: nothing left to happen
    (no worker busy, no event due), so the policy never placed or re-placed them."""
    left = np.flatnonzero(~np.isin(st.state, (FINISHED, DEFERRED)))
    counts = Counter(STATE_NAMES[int(x)] for x in st.state[left])
    shown = ", ".join(str(int(r)) for r in left[:5]) + (" ..." if len(left) > 5 else "")
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    why = []  # (by what state they were left in: the policy's part in each)
    if counts.get("unassigned"):
        why.append("never placed the unassigned ones")
    if counts.get("cancelled"):
        why.append("cancelled the only copy of the cancelled ones")
    if counts.get("waiting"):
        why.append("left the waiting ones queued where no worker admits them (a batch or KV limit)")
    return (
        f"policy '{policy}' left {len(left)} of {st.n_requests} requests of step {st.step} "
        f"unfinished ({kinds}; requests {shown}) at t={now:.1f} s, with no worker busy "
        f"and nothing left to happen: the policy {'; '.join(why) or 'never placed them'}"
    )
