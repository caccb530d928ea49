"""Worker loss in the simulator: `simctl replay --fail-worker W@T[:S]` (issue #14).

A real rollout cluster loses engines mid-step (an OOM, a dead actor, a node reboot); a
policy that only ever saw healthy workers can stall its step with requests nobody
re-places. The simulator injects such a loss so a design can be checked against it with
the same semantics the live executor gives a real one (policies/contract.py `WorkerLost`):

- At simulated time T of step S worker W stops. Iterations that completed before T keep
  their tokens (they were streamed out); the iteration in flight is lost. Every request
  it held, running or waiting, becomes unassigned with the tokens it had; its KV is gone,
  so a re-placement recomputes the prompt and generated prefix, like a Migrate without
  KV transfer. A Fastest-of-N copy on W is dropped (the request runs on elsewhere).
  Verifiers W drafted for (decoupled speculation) fall back to coupled drafting with the
  same method, W's window as gamma.
- The policy hears `WorkerLost(T, W, requests)` and its actions are applied; whatever of
  those requests is still unassigned then goes to the least-loaded survivor
  (`policies/worker_loss.py`), counted in run.json.
- W stays lost for the rest of the run: the view says `alive=False`, it runs no iteration,
  an Assign, Migrate or LaunchReplica aimed at it goes to the least-loaded survivor
  (`redirect`, counted), and a SetRole, SetSpec or Cancel naming it is dropped (counted).
- T beyond step S's rollout end: the loss takes effect at that end (every request already
  finished, so it holds none) and the event is delivered just before `StepFinished`;
  run.json records the effective time. W is absent from the later steps.
- A fault on a worker already lost is ignored (a worker is lost at most once); losing
  every worker is an error ("every worker lost at step S").
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Collection, Generator, Sequence
from typing import Protocol

import simpy

from simctl.policies.contract import (
    Action,
    Assign,
    Cancel,
    ClusterView,
    Event,
    LaunchReplica,
    Migrate,
    Policy,
    Role,
    SetRole,
    SetSpec,
    SpecConfig,
    WorkerLost,
)
from simctl.policies.worker_loss import fallback_placements, redirect
from simctl.sim.placement import Placement
from simctl.sim.state import CANCELLED, RUNNING, UNASSIGNED, WAITING, StepState
from simctl.sim.worker import Worker
from simctl.traces.cli_options import WorkerFault
from simctl.traces.run_format import WorkerLossEntry

# counters (run.json `counters`): actions moved off a lost worker, actions naming it that
# were dropped, orphans the executor placed itself, verifiers whose drafter was lost
REDIRECTED = "worker_lost_redirected"
DROPPED = "worker_lost_dropped"
PLACED = "worker_lost_placed_by_executor"
DRAFTER_FALLBACKS = "worker_lost_decoupled_to_coupled"


class WorkerFaultError(ValueError):
    """The run cannot go on after a fault (every worker lost); one line."""


def fault_problem(fault: WorkerFault, num_workers: int, steps: Sequence[int]) -> str | None:
    """Why `fault` cannot apply to this replay (None: it can), naming the bad value.

    >>> fault_problem(WorkerFault(worker=8, time_s=1.0), 8, [0, 1])
    'worker 8 does not exist: the cluster has workers 0..7'
    >>> fault_problem(WorkerFault(worker=1, time_s=1.0, step=5), 8, [0, 1]) is not None
    True
    """
    if fault.worker >= num_workers:
        return f"worker {fault.worker} does not exist: the cluster has workers 0..{num_workers - 1}"
    if fault.step is not None and fault.step not in steps:
        return f"step {fault.step} is not replayed (steps: {', '.join(map(str, steps))})"
    return None


def faults_of_step(faults: Sequence[WorkerFault], step: int, first_step: int) -> list[WorkerFault]:
    """The faults injected in `step` (a fault without a step is the first replayed step's),
    the earliest per worker, in time order (ties: lower worker first)."""
    mine: dict[int, WorkerFault] = {}
    for f in faults:
        ours = (f.step if f.step is not None else first_step) == step
        if ours and (f.worker not in mine or f.time_s < mine[f.worker].time_s):
            mine[f.worker] = f
    return sorted(mine.values(), key=lambda f: (f.time_s, f.worker))


def coupled(spec: SpecConfig) -> SpecConfig:
    """Decoupled speculation whose drafter worker is gone, drafted on the verifier itself
    with the same method, as many tokens as the window allowed ahead."""
    return dataclasses.replace(
        spec, mode="coupled", window=0, drafter_worker=None, gamma=max(spec.window, spec.gamma, 1)
    )


class FaultHost(Protocol):
    """What the faults use of the step simulation (sim.engine.StepSimulation)."""

    @property
    def env(self) -> simpy.Environment: ...
    @property
    def state(self) -> StepState: ...
    @property
    def workers(self) -> Sequence[Worker]: ...
    @property
    def placement(self) -> Placement: ...
    @property
    def view(self) -> ClusterView: ...
    @property
    def policy(self) -> Policy: ...
    @property
    def counters(self) -> Counter[str]: ...
    @property
    def done(self) -> bool: ...
    @property
    def replicas(self) -> dict[int, list[int]]: ...
    @property
    def drafter_clients(self) -> dict[int, set[int]]: ...
    @property
    def roles(self) -> list[tuple[int, float, str]]: ...
    def emit(self, event: Event) -> None: ...
    def apply_actions(self, actions: Sequence[Action]) -> None: ...


class StepFaults:
    """One step's worker losses: the workers lost before it, the faults due in it, and the
    losses it recorded (run.json `worker_losses`)."""

    def __init__(self, sim: FaultHost, lost: Collection[int] = (), due: Sequence[WorkerFault] = ()) -> None:
        self._sim = sim
        for w in [*lost, *(f.worker for f in due)]:
            if not 0 <= w < len(sim.workers):
                raise WorkerFaultError(
                    f"worker {w} does not exist: the cluster has workers 0..{len(sim.workers) - 1}"
                )
        self.lost: set[int] = set()
        self._before = sorted(set(lost))
        self._due = list(due)
        self._fired: set[int] = set()
        self.losses: list[WorkerLossEntry] = []

    def start(self) -> None:
        """At the step's start, before the policy hears StepStarted: workers lost earlier
        take no work; the faults of this step are scheduled."""
        for w in self._before:
            self._stop(w, 0.0)
        if self._due:
            self._sim.env.process(self._inject())

    def _inject(self) -> Generator[simpy.Event, object, None]:
        env = self._sim.env
        for f in self._due:
            if f.time_s > env.now:
                yield env.timeout(f.time_s - env.now)
            if self._sim.done:
                return  # the rest take effect at the step's end (`finish`)
            self.lose(f.worker)

    def finish(self, makespan: float) -> None:
        """Faults due after the step's rollout ended take effect at its end."""
        for f in self._due:
            if f.worker not in self._fired:
                self.lose(f.worker, makespan)

    def _stop(self, w: int, now: float) -> list[int]:
        sim = self._sim
        if w in self.lost:
            return []
        self.lost.add(w)
        if len(self.lost) == len(sim.workers):
            raise WorkerFaultError(f"every worker lost at step {sim.state.step}")
        rows = sim.workers[w].lose()
        sim.roles.append((w, now, Role.IDLE.value))
        return rows

    def lose(self, w: int, now: float | None = None) -> None:
        """Worker `w` is lost now (or at `now`, the step's end): its requests are orphaned,
        the policy hears WorkerLost, and the executor places what the policy left."""
        sim = self._sim
        if w in self._fired or w in self.lost:
            return
        self._fired.add(w)
        t = float(sim.env.now if now is None else now)
        orphans = self._orphan(w, self._stop(w, t))
        self._drafter_lost(w)
        sim.emit(WorkerLost(time_s=t, worker=w, requests=tuple(orphans)))
        placed = fallback_placements(sim.view, orphans)
        sim.apply_actions(placed)
        if placed:
            sim.counters[PLACED] += len(placed)
        self.losses.append(
            {
                "worker": w,
                "step": sim.state.step,
                "time_s": t,
                "requests": len(orphans),
                "placed_by_executor": len(placed),
                "cause": "injected",
            }
        )

    def _orphan(self, w: int, rows: list[int]) -> list[int]:
        """The lost worker's rows become unassigned requests (tokens kept, KV gone); its
        Fastest-of-N copies are dropped."""
        sim, st = self._sim, self._sim.state
        orphans = []
        for row in rows:
            if row >= st.n_requests:
                st.state[row] = CANCELLED
                copies = sim.replicas.get(int(st.origin[row]), [])
                if row in copies:
                    copies.remove(row)
                sim.counters["cancelled"] += 1
                continue
            sim.placement.unplace(row, w)
            st.state[row] = UNASSIGNED
            st.worker[row] = -1
            st.kv_resident[row] = 0
            orphans.append(row)
        return sorted(orphans)

    def _drafter_lost(self, w: int) -> None:
        """Verifiers (and requests) that drafted on `w` draft coupled from now on."""
        sim, st = self._sim, self._sim.state
        clients = sim.drafter_clients.pop(w, set())
        for drafted_for in sim.drafter_clients.values():
            drafted_for.discard(w)
        fixes: list[Action] = []
        for v in sorted(clients):
            spec = sim.workers[v].spec if v >= 0 else None
            if v not in self.lost and spec is not None and spec.drafter_worker == w:
                fixes.append(SetSpec(spec=coupled(spec), worker=v))
        for row, spec in enumerate(st.spec):
            if spec.mode == "decoupled" and spec.drafter_worker == w and st.state[row] != CANCELLED:
                fixes.append(SetSpec(spec=coupled(spec), request=row))
        if fixes:
            sim.counters[DRAFTER_FALLBACKS] += len(fixes)
            sim.apply_actions(fixes)

    # ------------------------------------------------------------ actions at lost workers
    def aimed(self, a: Action) -> Action | None:
        """The action as applied with the lost workers gone: redirected to the least-loaded
        survivor, or None (dropped) when it only concerns a lost worker."""
        sim = self._sim
        if isinstance(a, SetSpec) and a.spec.mode == "decoupled" and a.spec.drafter_worker in self.lost:
            sim.counters[DRAFTER_FALLBACKS] += 1
            a = dataclasses.replace(a, spec=coupled(a.spec))
        target = getattr(a, "worker", None)
        if target is None or target not in self.lost:
            return a
        if isinstance(a, (Assign, Migrate, LaunchReplica)):
            to = redirect(sim.view, target)
            if to is not None and not (isinstance(a, LaunchReplica) and self._runs_copy(a.request, to)):
                sim.counters[REDIRECTED] += 1
                return dataclasses.replace(a, worker=to)
        if isinstance(a, (SetRole, SetSpec, Cancel, LaunchReplica)):
            sim.counters[DROPPED] += 1
            return None
        return a  # the engine names the bad worker (no survivor is an error raised earlier)

    def _runs_copy(self, request: int, worker: int) -> bool:
        st = self._sim.state
        rows = [request, *self._sim.replicas.get(request, [])]
        return any(int(st.worker[r]) == worker and st.state[r] in (WAITING, RUNNING) for r in rows)
