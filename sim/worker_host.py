"""What a worker may use of the step simulation that hosts it.

A Worker (sim.worker) holds its host only as a :class:`WorkerHost`; StepSimulation
(sim.engine) is the one implementation. The seam is deliberately narrow:

A worker MAY
- read the run's settings (`config`, `cost`, `cost_takes_gamma`, `tick_iterations`), the
  simulated clock and process factory (`env`), whether the step is over (`done`) and
  whether some request has its own speculation setting (`request_spec`);
- read any row of `state`, and write the progress columns of the rows it runs (state
  RUNNING/WAITING on admission and preemption, generated, kv_resident, the speculation
  counters, preemptions);
- count in `counters` (blocks, preemptions);
- ask `wants_ticks` (whether to stop for the policy's Ticks), and `method_index`,
  `drafter_for` and `drafter_load` to name and price drafters;
- report through `record_segment` (busy time), `end_dispatch` (a request reached the end
  of its dispatch: the host decides what that means) and `emit` (Tick, WorkerIdle).

A worker MAY NOT touch another worker, the policy, the placement of requests (`worker`,
`dispatch_end`, `priority`, spec overrides are the host's, set by policy actions) or the
host's bookkeeping. Conversely the host changes a worker only through its methods
(enqueue, set_spec, set_role, drop_running, forget_waiting, poke).
"""

from __future__ import annotations

from collections import Counter
from typing import Protocol

import simpy

from simctl.policies.contract import Event
from simctl.sim.cost_model import CostModel
from simctl.sim.engine_config import EngineConfig
from simctl.sim.plan import Plan
from simctl.sim.state import StepState


class WorkerHost(Protocol):
    @property
    def state(self) -> StepState: ...
    @property
    def config(self) -> EngineConfig: ...
    @property
    def cost(self) -> CostModel: ...
    @property
    def env(self) -> simpy.Environment: ...
    @property
    def counters(self) -> Counter[str]: ...
    @property
    def done(self) -> bool: ...
    @property
    def request_spec(self) -> bool: ...
    @property
    def cost_takes_gamma(self) -> bool:
        """Whether `cost.iteration_time` takes the draft length (measured profiles)."""
        ...

    @property
    def tick_iterations(self) -> int | None:
        """The policy's tick period in iterations (None/0: no ticks)."""
        ...

    def wants_ticks(self, worker: int) -> bool:
        """Whether the policy wants this worker's Ticks now (Policy.wants_ticks); asked
        when the worker plans a block."""
        ...

    def method_index(self, method: str) -> int:
        """Column of a draft method in the step's acceptance matrix."""
        ...

    def drafter_for(self, method: str) -> str:
        """The cost-model drafter of a draft method."""
        ...

    def drafter_load(self, drafter_worker: int) -> tuple[int, int]:
        """(verifier workers it drafts for, its GPUs) of a decoupled drafter worker."""
        ...

    def record_segment(
        self, worker: int, t0: float, t1: float, iterations: int, plan: Plan, batch: int, pos: int
    ) -> None:
        """A stretch of a plan was applied: busy from t0 to t1 with `batch` requests, plan
        iterations [pos, pos + iterations) (the prefill pass is in the one holding 0)."""
        ...

    def end_dispatch(self, rid: int, worker: int, now: float) -> None:
        """Row `rid` on `worker` reached the end of its dispatch (finished or chunk end)."""
        ...

    def emit(self, event: Event) -> None:
        """Deliver an event to the policy now (its actions may call back into workers)."""
        ...
