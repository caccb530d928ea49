"""Fastest-of-N's idle-worker step after the speed work (issue #17) equals its direct form.

`FastestOfN.worker_idle` reads the requests in flight as columns, keeps the (request,
method) pairs running as a mask over the step's requests per method, leaves requests with
every ladder method taken out of the scan (with a fixed ladder, out of the read too), and
places with `place_replicas`; the form it replaced walked every request record by record
and called `speactor_model.fastest_of_n` with a dict of pairs.
Both must launch the same replicas and leave the same bookkeeping, event after event."""

from __future__ import annotations

import copy
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simctl.policies.bulk_reads import request_rows, worker_loads
from simctl.policies.contract import (
    SPEC_OFF,
    Action,
    ClusterView,
    LaunchReplica,
    RequestFinished,
    RequestId,
    SpecConfig,
    StepStarted,
    WorkerId,
    WorkerIdle,
)
from simctl.policies.fastest_of_n import FastestOfN, Rung, place_replicas, request_method
from simctl.policies.speactor_model import fastest_of_n
from tests.policies.fakes import FakeView

METHODS = ("ngram", "suffix", "draft_small", "eagle")
LADDER = [Rung(m, SpecConfig(method=m, gamma=3)) for m in METHODS[:3]]
N_WORKERS, N_REQUESTS = 8, 24


class DirectFastestOfN(FastestOfN):
    """Algorithm 3's idle-worker step as first written (a dict of running pairs)."""

    def start(self, requests, ladder=(), reserved=None) -> None:  # type: ignore[no-untyped-def]
        super().start(requests, ladder, reserved)
        self.assigned: dict[tuple[RequestId, str], WorkerId] = {}

    def worker_idle(self, worker: WorkerId, view: ClusterView) -> list[Action]:
        if worker in self.reserved:
            return []
        self.free.add(worker)
        for d in self.reserved:
            if d not in self.free and all(v in self.free for v, dd in self.reserved_for.items() if dd == d):
                self.free.add(d)
        candidates = sorted(self.free)
        free = [w for w, n in zip(candidates, worker_loads(view, candidates), strict=True) if n == 0]
        dedicated = {w for ws in self.workers_by_method.values() for w in ws}
        free = [w for w in free if w not in dedicated]
        active: list[tuple[RequestId, float]] = []
        home: dict[RequestId, WorkerId] = {}
        rids = self.ids[self.open].tolist()
        rows = request_rows(view, rids)
        for rid, state, w, drafted, accepted in zip(
            rids, rows.state, rows.worker, rows.drafted, rows.accepted, strict=True
        ):
            if w is None or state not in ("running", "waiting"):
                continue
            active.append((rid, accepted / drafted if drafted else 0.0))
            home[rid] = w
            self.assigned.setdefault((rid, request_method(view, rid)), w)
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
            if w == home[rid]:
                del self.assigned[(rid, m)]
                continue
            out.append(LaunchReplica(request=rid, worker=w, spec=spec[m]))
        return out


spec_choice = st.sampled_from(
    [SPEC_OFF, SPEC_OFF, SpecConfig(method="ngram", gamma=2), SpecConfig(method="eagle", gamma=4)]
)
# a request's record at some moment: (state, worker or None, drafted, accepted share, own setting)
record = st.tuples(
    st.sampled_from(["running", "running", "waiting", "finished", "unassigned"]),
    st.one_of(st.none(), st.integers(0, N_WORKERS - 1)),
    st.integers(0, 50),
    st.integers(0, 4),
    spec_choice,
)
# an event: a worker going idle (with new worker loads and request records), or a finish
event = st.one_of(
    st.tuples(
        st.just("idle"),
        st.integers(0, N_WORKERS - 1),
        st.lists(st.integers(0, 2), min_size=N_WORKERS, max_size=N_WORKERS),
        st.dictionaries(st.integers(0, N_REQUESTS - 1), record, max_size=N_REQUESTS),
    ),
    st.tuples(st.just("finish"), st.integers(0, N_REQUESTS - 1)),
)


def _pairs(fon: FastestOfN) -> set[tuple[RequestId, str]]:
    return {(int(fon.ids[p]), m) for m, taken in fon.taken.items() for p in np.flatnonzero(taken)}


@settings(max_examples=150, deadline=None)
@given(
    st.lists(event, max_size=14),
    st.integers(1, 4),
    st.sampled_from([0.0, 0.5]),
    st.booleans(),
    st.sampled_from([{}, {0: 7, 1: 7}, {2: 6}]),
    st.lists(st.sampled_from(METHODS), min_size=N_WORKERS, max_size=N_WORKERS),
)
def test_worker_idle_equals_the_direct_form(
    events: list[tuple], max_batch: int, reserve: float, sourced: bool, reserved: dict, worker_methods: list
) -> None:
    view = FakeView.make(N_WORKERS)
    for w, m in enumerate(worker_methods):
        view.set_worker(w, spec=SpecConfig(method=m, gamma=2) if w % 3 else SPEC_OFF)
    for rid in range(N_REQUESTS):
        view.add_request(rid, rid % N_WORKERS)
    source = (lambda v, rids: LADDER[: 1 + len(rids) % 3]) if sourced else None
    fast = FastestOfN(max_batch, ladder_source=source, reserve=reserve)
    direct = DirectFastestOfN(max_batch, ladder_source=source, reserve=reserve)
    started = StepStarted(0.0, 0, 0, tuple(range(N_REQUESTS)))
    for fon in (fast, direct):
        fon.on_event(started, view)
        fon.start(started.requests, LADDER, reserved)
    for t, ev in enumerate(events):
        if ev[0] == "finish":
            finished = RequestFinished(float(t), request=ev[1], worker=0, length=1)
            out = [fon.on_event(finished, view) for fon in (fast, direct)]
        else:
            _, worker, loads, records = ev
            for w, n in enumerate(loads):
                view.set_worker(w, running=n)
            for rid, (state, w, drafted, quarter, spec) in records.items():
                accepted = drafted * quarter // 4
                view.add_request(rid, w, state, drafted_tokens=drafted, accepted_tokens=accepted, spec=spec)
            idle = WorkerIdle(float(t), worker=worker)
            out = [fast.on_event(idle, view), direct.on_event(idle, copy.deepcopy(view))]
        assert out[0] == out[1]
        pairs, want = _pairs(fast), set(direct.assigned)
        if not sourced and not reserve:  # a fixed ladder asks only about its own methods
            ladder = {r.method for r in LADDER}
            pairs, want = ({(r, m) for r, m in ps if m in ladder} for ps in (pairs, want))
        assert pairs == want
        assert fast.workers_by_method == direct.workers_by_method and fast.free == direct.free


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_place_replicas_equals_the_model(data: st.DataObject) -> None:
    methods = data.draw(st.lists(st.sampled_from(METHODS), min_size=1, max_size=4, unique=True))
    n = data.draw(st.integers(0, 30))
    requests = [(r, data.draw(st.sampled_from([0.0, 0.25, 0.5, 0.9]))) for r in range(n)]
    workers_by_method: dict[str, list[int]] = {}
    for w in range(data.draw(st.integers(0, 5))):
        # (a worker may serve two methods: a copy placed for one fills it for the other)
        for m in data.draw(st.lists(st.sampled_from(methods), min_size=1, max_size=2, unique=True)):
            workers_by_method.setdefault(m, []).append(w)
    free = list(range(10, 10 + data.draw(st.integers(0, 4))))
    load = {w: data.draw(st.integers(0, 4)) for ws in workers_by_method.values() for w in ws}
    assigned = {(r, m): 99 for r, _ in requests for m in methods if data.draw(st.integers(0, 2)) == 0}
    max_batch = data.draw(st.integers(1, 5))
    ids = np.array([r for r, _ in requests][::-1], np.int64)  # positions need not follow ids
    at = {r: p for p, r in enumerate(ids.tolist())}
    taken: dict[str, np.ndarray] = {}
    for r, m in assigned:
        taken.setdefault(m, np.zeros(n, bool))[at[r]] = True
    ranked = [at[r] for _, r in sorted((acc, r) for r, acc in requests)]
    mine_workers, mine_load = copy.deepcopy(workers_by_method), dict(load)
    got = place_replicas(ranked, ids, methods, taken, mine_workers, free, mine_load, max_batch)
    want = fastest_of_n(requests, methods, assigned, workers_by_method, free, load, max_batch)
    assert got == want
    assert {(int(ids[p]), m) for m, t in taken.items() for p in np.flatnonzero(t)} == set(assigned)
    assert (mine_workers, mine_load) == (workers_by_method, load)
