"""Fastest-of-N (SpecActor §4.2, Algorithm 3) as a standalone policy part.

Workers that run out of work during a step are wasted unless something uses them. This
part puts them to work on the requests still in flight: each freed worker is dedicated to
one draft method of a *ladder* (methods best first), and coupled replicas of the running
requests, lowest acceptance first, are launched on it with that method; the first copy to
finish completes the request and the executor cancels the others (`LaunchReplica`). A
request's acceptance differs per method (SpecActor Fig. 7), so racing several drafters
on hardware that would idle anyway cuts the tail at no cost to the rest.

What it needs, all observable without knowing the rest of the composed policy:
- which requests are unfinished: the step's requests (`StepStarted`) less the finished
  ones (`RequestFinished`);
- where each runs and with which method: read from the view when a worker goes idle
  (`RequestView.worker`, the request's own `spec`, else its worker's `spec`), so the part
  follows placements and speculation settings made by any other part (chunked
  re-dispatch included);
- the ladder: fixed by an owner through `start` (SpecActor ranks its methods at step
  start), or asked of a `ladder_source` at every decision (a composed policy whose
  speculation part learns acceptance during the step).

Choices (constructor keywords / `start` arguments):
- `max_batch`: replicas per dedicated worker (SpecActor's verification batch bound, 32).
  A replica only wins when its token rate beats the original's, so policies that leave
  stragglers alone on a worker (Seer's divided rollout) want a small bound.
- `reserved`: workers lent to another role (SpecActor's drafters, keyed by the verifiers
  they serve) count as free only once every worker they serve is free (§4.2).
- `reserve`: free workers kept back per request in flight (SpecActor: 0, every freed
  worker races). A scheduler that re-dispatches chunks to the least-loaded worker (Seer's
  divided rollout) needs a free worker per straggler to run it alone; replicas should only
  take the workers beyond that.
- A replica is never launched onto a worker that already runs a copy of the request.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from simctl.policies.bulk_reads import request_rows, worker_loads
from simctl.policies.contract import (
    Action,
    Capability,
    ClusterView,
    Event,
    LaunchReplica,
    Policy,
    RequestFinished,
    RequestId,
    SpecConfig,
    StepStarted,
    WorkerId,
    WorkerIdle,
)
from simctl.policies.speactor_model import fastest_of_n

MAX_BATCH = 32  # SpecActor's bound on a Fastest-of-N worker's verification batch


@dataclass(frozen=True)
class Rung:
    """One method of the draft ladder and the speculation its replicas run with."""

    method: str
    spec: SpecConfig


# (view, requests in flight) -> the ladder, best method first
LadderSource = Callable[[ClusterView, Sequence[RequestId]], Sequence[Rung]]


def request_method(view: ClusterView, rid: RequestId, cache: dict[WorkerId, str] | None = None) -> str:
    """The draft method a request decodes with now: its own setting, else its worker's
    ("" for plain decoding or a request without a worker)."""
    rv = view.request(rid)
    if rv.spec.enabled and rv.spec.method is not None:
        return rv.spec.method
    if rv.worker is None:
        return ""
    if cache is not None and rv.worker in cache:
        return cache[rv.worker]
    ws = view.worker(rv.worker).spec
    method = ws.method if ws.enabled and ws.method is not None else ""
    if cache is not None:
        cache[rv.worker] = method
    return method


class FastestOfN(Policy):
    """Replicas of in-flight requests on freed workers, one draft method per worker."""

    name = "fastest-of-n"
    requires = frozenset({Capability.REPLICAS})

    def __init__(
        self, max_batch: int = MAX_BATCH, ladder_source: LadderSource | None = None, reserve: float = 0.0
    ) -> None:
        self.max_batch = int(max_batch)
        self.reserve = float(reserve)
        self.ladder_source = ladder_source
        self.start(())

    def start(
        self,
        requests: Iterable[RequestId],
        ladder: Sequence[Rung] = (),
        reserved: Mapping[WorkerId, WorkerId] | None = None,
    ) -> None:
        """Forget the previous step. `ladder` is the fixed ladder (used when no
        `ladder_source` is set); `reserved` maps a served worker to the worker lent to it."""
        self.unfinished: set[RequestId] = set(requests)
        self.ladder: list[Rung] = list(ladder)
        self.reserved_for: dict[WorkerId, WorkerId] = dict(reserved or {})
        self.reserved: set[WorkerId] = set(self.reserved_for.values())
        self.clients: dict[WorkerId, list[WorkerId]] = {}  # lent worker -> the workers it serves
        for v, d in self.reserved_for.items():
            self.clients.setdefault(d, []).append(v)
        self.free: set[WorkerId] = set()
        self.assigned: dict[tuple[RequestId, str], WorkerId] = {}  # (request, method) -> worker
        self.workers_by_method: dict[str, list[WorkerId]] = {}

    # ------------------------------------------------------------------ events
    def on_event(self, event: Event, view: ClusterView) -> list[Action]:
        if isinstance(event, StepStarted):
            self.start(event.requests)
        elif isinstance(event, RequestFinished):
            self.unfinished.discard(event.request)
        elif isinstance(event, WorkerIdle):
            return self.worker_idle(event.worker, view)
        return []

    def worker_idle(self, worker: WorkerId, view: ClusterView) -> list[Action]:
        """Algorithm 3 at the moment `worker` ran dry."""
        if worker in self.reserved:
            return []
        self.free.add(worker)
        for d in self.reserved:  # a lent worker whose clients are all done is free too
            if d not in self.free and all(v in self.free for v in self.clients[d]):
                self.free.add(d)
        candidates = sorted(self.free)
        free = [w for w, n in zip(candidates, worker_loads(view, candidates), strict=True) if n == 0]
        dedicated = {w for ws in self.workers_by_method.values() for w in ws}
        free = [w for w in free if w not in dedicated]
        active: list[tuple[RequestId, float]] = []
        home: dict[RequestId, WorkerId] = {}
        methods: dict[WorkerId, str] = {}
        # every unfinished request, read in bulk (this runs at every idle worker of the tail)
        rids = list(self.unfinished)
        rows = request_rows(view, rids)
        columns = (rows.state, rows.worker, rows.drafted, rows.accepted, rows.spec)
        for rid, state, w, drafted, accepted, spec in zip(rids, *columns, strict=True):
            if w is None or state not in ("running", "waiting"):
                continue
            active.append((rid, accepted / drafted if drafted else 0.0))
            home[rid] = w
            if spec.enabled and spec.method is not None:
                method = spec.method
            else:  # its worker's setting, as `request_method` reads it
                cached = methods.get(w)
                method = cached if cached is not None else _worker_method(view, w, methods)
            self.assigned.setdefault((rid, method), w)
        if self.reserve:
            free = free[: max(0, len(free) - math.ceil(self.reserve * len(active)))]
        if not active or not free:
            return []
        ladder = self.ladder if self.ladder_source is None else self.ladder_source(view, sorted(home))
        if not ladder:
            return []
        busy = list(dedicated)
        load = dict(zip(busy, worker_loads(view, busy), strict=True))
        order = [r.method for r in ladder]
        picks = fastest_of_n(active, order, self.assigned, self.workers_by_method, free, load, self.max_batch)
        spec = {r.method: r.spec for r in ladder}
        out: list[Action] = []
        for rid, m, w in picks:
            if w == home[rid]:  # the original runs there (e.g. re-dispatched onto a pool worker)
                del self.assigned[(rid, m)]
                continue
            out.append(LaunchReplica(request=rid, worker=w, spec=spec[m]))
        return out


def _worker_method(view: ClusterView, worker: WorkerId, cache: dict[WorkerId, str]) -> str:
    """The method a worker's setting drafts with ("" for none), remembered in `cache`."""
    ws = view.worker(worker).spec
    method = cache[worker] = ws.method if ws.enabled and ws.method is not None else ""
    return method
