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

import heapq
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from simctl.policies.bulk_reads import drafting_method, request_columns, worker_loads, worker_specs
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
    own = drafting_method(rv.spec)
    if own is not None:
        return own
    if rv.worker is None:
        return ""
    if cache is not None and rv.worker in cache:
        return cache[rv.worker]
    method = drafting_method(view.worker(rv.worker).spec) or ""
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
        # the step's requests as positions, so the scans of `worker_idle` run on arrays
        step = set(requests)
        self.ids = np.fromiter(step, np.int64, len(step))
        self.position = {rid: i for i, rid in enumerate(self.ids.tolist())}
        self.open = np.ones(len(self.ids), bool)  # unfinished, by position
        self.ladder: list[Rung] = list(ladder)
        self.reserved_for: dict[WorkerId, WorkerId] = dict(reserved or {})
        self.reserved: set[WorkerId] = set(self.reserved_for.values())
        self.clients: dict[WorkerId, list[WorkerId]] = {}  # lent worker -> the workers it serves
        for v, d in self.reserved_for.items():
            self.clients.setdefault(d, []).append(v)
        # the lent workers not free yet, in the order a scan of `reserved` visits them
        self.lent_pending: list[WorkerId] = list(self.reserved)
        self.free: set[WorkerId] = set()
        self.taken: dict[str, np.ndarray] = {}  # method -> by position: a copy runs it
        self.workers_by_method: dict[str, list[WorkerId]] = {}
        self._dedicated: tuple[int, set[WorkerId]] = (0, set())  # (workers listed, their set)

    # ------------------------------------------------------------------ events
    def on_event(self, event: Event, view: ClusterView) -> list[Action]:
        if isinstance(event, StepStarted):
            self.start(event.requests)
        elif isinstance(event, RequestFinished):
            at = self.position.get(event.request)
            if at is not None:
                self.open[at] = False
        elif isinstance(event, WorkerIdle):
            return self.worker_idle(event.worker, view)
        return []

    def worker_idle(self, worker: WorkerId, view: ClusterView) -> list[Action]:
        """Algorithm 3 at the moment `worker` ran dry."""
        if worker in self.reserved:
            return []
        self.free.add(worker)
        self._free_lent()
        dedicated = self._dedicated_workers()
        candidates = sorted(self.free - dedicated)
        free = [w for w, n in zip(candidates, worker_loads(view, candidates), strict=True) if n == 0]
        flight = self._in_flight(view, self._unsettled())
        n_active = len(flight.pos)
        if self.reserve:
            free = free[: max(0, len(free) - math.ceil(self.reserve * n_active))]
        if not n_active or not free:
            return []
        ladder: Sequence[Rung]
        if self.ladder_source is None:
            ladder = self.ladder
        else:
            ladder = self.ladder_source(view, sorted(self.ids[flight.pos].tolist()))
        if not ladder:
            return []
        busy = list(dedicated)
        load = dict(zip(busy, worker_loads(view, busy), strict=True))
        order = [r.method for r in ladder]
        ranked = self._by_acceptance(flight, order)
        picks = place_replicas(
            ranked, self.ids, order, self.taken, self.workers_by_method, free, load, self.max_batch
        )
        spec = {r.method: r.spec for r in ladder}
        out: list[Action] = []
        for rid, m, w in picks:
            at = self.position[rid]
            # (flight.pos ascends: the request's row in the flight, found without a mapping
            # of every request in flight, which early in the tail is most of the step)
            if w == int(flight.home[int(flight.pos.searchsorted(at))]):
                # the original runs there (e.g. re-dispatched onto a pool worker)
                self.taken[m][at] = False
                continue
            out.append(LaunchReplica(request=rid, worker=w, spec=spec[m]))
        return out

    def _free_lent(self) -> None:
        """A lent worker whose clients are all free is free too. The scan visits only the
        lent workers not free yet, in the order of `reserved` (a lent worker may serve
        another: one freed earlier in the scan counts for those after it), so the free set
        grows as a scan of every reservation at every idle worker made it grow (tested)."""
        pending, free = self.lent_pending, self.free
        if not pending:
            return
        still = []
        for d in pending:
            if d not in free and all(v in free for v in self.clients[d]):
                free.add(d)
            elif d not in free:
                still.append(d)
        self.lent_pending = still

    def _dedicated_workers(self) -> set[WorkerId]:
        """Every worker dedicated to a method: rebuilt only when `workers_by_method`, which
        only grows, gained workers (each idle worker of the tail asks)."""
        listed = sum(len(ws) for ws in self.workers_by_method.values())
        if listed != self._dedicated[0]:
            self._dedicated = (listed, {w for ws in self.workers_by_method.values() for w in ws})
        return self._dedicated[1]

    def _unsettled(self) -> np.ndarray:
        """Positions of the requests to read: every unfinished one, except, with a fixed
        ladder and nothing reserved, those with a copy of every ladder method running. Those
        change nothing: the scan passes over them, marking their own method changes no mark
        the step's ladder asks about, and a step has others in flight whenever they are
        (late in the tail, most requests are such)."""
        unsettled = self.open
        methods = [r.method for r in self.ladder]
        fixed = self.ladder_source is None and not self.reserve
        if fixed and methods and all(m in self.taken for m in methods):
            unsettled = unsettled & ~np.logical_and.reduce([self.taken[m] for m in methods])
        return np.flatnonzero(unsettled)

    def _in_flight(self, view: ClusterView, pos: np.ndarray) -> _Flight:
        """The requests at positions `pos` running or waiting on a worker, with their
        acceptance so far (0 before any draft), and each one's method marked taken for it.
        This reads the unfinished requests at every idle worker of the tail (quadratic in
        the step's size), so it works on columns (`bulk_reads.request_columns`): arrays in,
        numpy throughout, Python only per distinct method and per followed worker."""
        cols = request_columns(view, self.ids[pos])
        idx = np.flatnonzero(cols.in_flight)
        home = cols.worker[idx]
        drafted, accepted = cols.drafted[idx], cols.accepted[idx]
        # accepted / drafted in float64, as Python divides two ints below 2**53
        acceptance = np.divide(accepted, drafted, out=np.zeros(len(idx)), where=drafted != 0)
        # the request's own method where its setting has one, else its worker's
        names = list(cols.methods)
        code = {m: i for i, m in enumerate(names)}
        method = cols.method[idx]
        follow = method < 0
        if follow.any():
            of_worker = np.full(int(home.max()) + 1, -1, np.int64)
            followed = np.flatnonzero(np.bincount(home[follow])).tolist()
            for w, ws in zip(followed, worker_specs(view, followed), strict=True):
                of_worker[w] = _code(drafting_method(ws) or "", names, code)
            method = np.where(follow, of_worker[home], method)
        for c in np.flatnonzero(np.bincount(method, minlength=len(names))).tolist():
            self._taken(names[c])[pos[idx[method == c]]] = True
        return _Flight(pos[idx], acceptance, home)

    def _taken(self, method: str) -> np.ndarray:
        """By position: whether a copy of the request runs `method` (created all False)."""
        taken = self.taken.get(method)
        if taken is None:
            taken = self.taken[method] = np.zeros(len(self.ids), bool)
        return taken

    def _by_acceptance(self, flight: _Flight, methods: Sequence[str]) -> list[int]:
        """Positions of the requests of `flight` that lack a copy of some ladder method,
        acceptance ascending and ties by id: the order Algorithm 3 visits them in. A request
        with every method taken is left out, as the scan passes over it without placing
        anything (most requests, late in the tail)."""
        pos, acc = flight.pos, flight.acceptance
        if methods and all(m in self.taken for m in methods):
            keep = ~np.logical_and.reduce([self.taken[m][pos] for m in methods])
            pos, acc = pos[keep], acc[keep]
        order: list[int] = pos[np.lexsort((self.ids[pos], acc))].tolist()
        return order


class _Flight(NamedTuple):
    """Requests in flight when a worker went idle (positions among the step's requests)."""

    pos: np.ndarray
    acceptance: np.ndarray  # accepted / drafted tokens so far (0 before any draft)
    home: np.ndarray  # the worker each runs on


def place_replicas(
    ranked: Sequence[int],
    ids: np.ndarray,
    methods: Sequence[str],
    taken: dict[str, np.ndarray],
    workers_by_method: dict[str, list[WorkerId]],
    free_workers: list[WorkerId],
    load: dict[WorkerId, int],
    max_batch: int,
) -> list[tuple[RequestId, str, WorkerId]]:
    """`speactor_model.fastest_of_n` (Algorithm 3's greedy) on requests given as positions
    in `ids`, already in visiting order, with the (request, method) pairs running kept as
    a mask per method (`taken`, updated with the placements): the same placements and
    bookkeeping (tested). The least-loaded worker of a method comes off a heap of its
    workers (`_MethodWorkers`) instead of a scan of them per copy placed: late in a large
    step's tail a method holds hundreds of dedicated workers and a call places thousands."""
    out = []
    free = list(free_workers)
    pools = {m: _MethodWorkers(m, workers_by_method, load, max_batch) for m in methods}
    # (a method's room is re-read only after a copy of it is placed, as the greedy does)
    room = {m: pools[m].has_room() for m in methods}
    for p in ranked:
        if not free and not any(room.values()):
            break
        for m in methods:
            running = taken.get(m)
            if running is None:
                running = taken[m] = np.zeros(len(ids), bool)
            if running[p] or not (free or room[m]):
                continue
            w = pools[m].least_loaded(free)
            if w is None:
                continue
            running[p] = True
            load[w] = load.get(w, 0) + 1
            pools[m].push(w)
            out.append((int(ids[p]), m, w))
            room[m] = pools[m].has_room()
    return out


class _MethodWorkers:
    """The workers serving one method with room (load below `max_batch`), as a heap on
    (load, worker): `speactor_model.least_loaded` and `has_room` without scanning them.
    `load` is shared by every method's heap and only grows, so an entry whose load is out
    of date (the worker also serves another method) is refreshed when it reaches the top."""

    def __init__(
        self,
        method: str,
        workers_by_method: dict[str, list[WorkerId]],
        load: dict[WorkerId, int],
        max_batch: int,
    ) -> None:
        self.method, self.workers_by_method = method, workers_by_method
        self.load, self.max_batch = load, max_batch
        workers = workers_by_method.get(method, ())
        self.heap = [(load.get(w, 0), w) for w in workers if load.get(w, 0) < max_batch]
        heapq.heapify(self.heap)

    def _top(self) -> tuple[int, WorkerId] | None:
        heap, load = self.heap, self.load
        while heap:
            n, w = heap[0]
            now = load.get(w, 0)
            if now == n:
                return heap[0]
            heapq.heappop(heap)
            if now < self.max_batch:
                heapq.heappush(heap, (now, w))
        return None

    def has_room(self) -> bool:
        return self._top() is not None

    def least_loaded(self, free: list[WorkerId]) -> WorkerId | None:
        """The least-loaded worker with room (taken off the heap; `push` puts it back),
        else the first free worker, dedicated to the method from then on."""
        top = self._top()
        if top is not None:
            heapq.heappop(self.heap)
            return top[1]
        if not free:
            return None
        w = free.pop(0)
        self.workers_by_method.setdefault(self.method, []).append(w)
        return w

    def push(self, w: WorkerId) -> None:
        """Put `w` back after a copy was placed on it, while it has room."""
        n = self.load.get(w, 0)
        if n < self.max_batch:
            heapq.heappush(self.heap, (n, w))


def _code(method: str | None, names: list[str], code: dict[str, int]) -> int:
    """`method`'s index in `names` (added on first sight); -1 for None."""
    if method is None:
        return -1
    if method not in code:
        code[method] = len(names)
        names.append(method)
    return code[method]
