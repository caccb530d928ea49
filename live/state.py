"""The live executor's bookkeeping: one object per request and per worker.

Live runs have hundreds of requests, not the simulator's tens of thousands, so plain Python
objects are fine here and keep the event logic readable.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Literal

from simctl.live.backend import Delta, EngineWorker
from simctl.live.workload import RequestSpec
from simctl.policies.contract import SPEC_OFF, Role, SpecConfig

# A request row's state; "cancelled": a copy stopped by Cancel or by another copy's finish.
RequestState = Literal["unassigned", "waiting", "running", "finished", "deferred", "cancelled"]
PLACED: tuple[RequestState, ...] = ("waiting", "running")  # on a worker's queue or batch


@dataclass
class MethodStats:
    """Speculative iterations of one request under one draft method (acceptance fitting)."""

    iterations: int = 0
    tokens: int = 0
    drafted: int = 0
    accepted: int = 0
    gamma_sum: int = 0
    hits: int = 0  # iterations in which the drafter proposed at least one token


@dataclass(eq=False)
class LiveRequest:
    id: int
    spec_in: RequestSpec
    tokens: list[int] = field(default_factory=list)  # generated so far
    state: RequestState = "unassigned"
    worker: int | None = None
    spec: SpecConfig = SPEC_OFF  # per-request override; disabled = the worker's setting
    priority: float = 0.0
    dispatch_end: int = 0  # `generated` at which the current dispatch ends
    ready_s: float = 0.0  # when it reached its worker's queue
    dispatches: int = 0
    drafted: int = 0
    accepted: int = 0
    spec_iters: int = 0
    spec_tokens: int = 0
    submit_s: float | None = None
    start_s: float | None = None  # first admitted into a worker's running batch
    first_token_s: float | None = None
    finish_s: float | None = None
    finish_reason: str | None = None
    by_method: dict[str, MethodStats] = field(default_factory=dict)
    running_spec: SpecConfig = SPEC_OFF  # what the engine was last told for this request
    origin: int = -1  # the request a Fastest-of-N replica row serves (-1: itself)

    def __post_init__(self) -> None:
        if self.origin < 0:
            self.origin = self.id

    @property
    def generated(self) -> int:
        return len(self.tokens)

    @property
    def budget(self) -> int:
        return self.spec_in.budget

    @property
    def prompt_len(self) -> int:
        return len(self.spec_in.prompt)

    def absorb(self, d: Delta, now: float) -> None:
        """One iteration's tokens, and the speculation counts of the method it ran with."""
        if d.tokens and self.first_token_s is None:
            self.first_token_s = now
        self.tokens.extend(d.tokens)
        spec = self.running_spec
        if spec.enabled and spec.method is not None:
            self.spec_iters += 1
            self.spec_tokens += len(d.tokens)
            self.drafted += d.drafted
            self.accepted += d.accepted
            m = self.by_method.setdefault(spec.method, MethodStats())
            m.iterations += 1
            m.tokens += len(d.tokens)
            m.drafted += d.drafted
            m.accepted += d.accepted
            m.gamma_sum += spec.gamma
            m.hits += d.drafted > 0


@dataclass(eq=False)
class LiveWorker:
    id: int
    engine: EngineWorker
    kv_capacity: int
    clock: float = 0.0
    role: Role = Role.ROLLOUT
    spec: SpecConfig = SPEC_OFF
    running: list[int] = field(default_factory=list)  # admission order
    iteration: int = 0
    since_tick: int = 0
    idle_reported: bool = False
    lost: bool = False  # gone for the rest of the run (live/losses.py)
    prefill_tokens: int = 0  # uncached tokens admitted since the last iteration
    # requests whose dispatch ended in the iteration being wound up: out of `running`
    # already, still "running" until the executor announces each (worker_requests lists them)
    ending: list[int] = field(default_factory=list)
    _waiting: list[tuple[float, int, int]] = field(default_factory=list)  # (-priority, seq, rid)
    _seq: int = 0
    waiting_ids: set[int] = field(default_factory=set)

    def push(self, rid: int, priority: float) -> None:
        heapq.heappush(self._waiting, (-priority, self._seq, rid))
        self._seq += 1
        self.waiting_ids.add(rid)
        self.idle_reported = False

    def drop_waiting(self, rid: int) -> None:
        """Lazy removal: the heap entry goes stale and is skipped on admission."""
        self.waiting_ids.discard(rid)

    def peek(self) -> int | None:
        while self._waiting and self._waiting[0][2] not in self.waiting_ids:
            heapq.heappop(self._waiting)
        return self._waiting[0][2] if self._waiting else None

    def pop(self) -> int:
        _, _, rid = heapq.heappop(self._waiting)
        self.waiting_ids.discard(rid)
        return rid

    @property
    def waiting(self) -> int:
        return len(self.waiting_ids)
