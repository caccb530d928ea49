"""Fastest-of-N's freed-worker bookkeeping after the speed work (issue #17): a lent worker's
clients are listed once per step (`FastestOfN.clients`) instead of found by scanning every
reservation at each idle worker; the free set must grow exactly as the scan made it grow."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from simctl.policies.contract import WorkerIdle
from simctl.policies.fastest_of_n import FastestOfN
from tests.policies.fakes import FakeView

N_WORKERS = 10


def _free_by_scan(free: set[int], reserved_for: dict[int, int], worker: int) -> None:
    """`worker_idle`'s update of the free set as first written."""
    reserved = set(reserved_for.values())
    if worker in reserved:
        return
    free.add(worker)
    for d in reserved:
        if d not in free and all(v in free for v, dd in reserved_for.items() if dd == d):
            free.add(d)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.integers(0, N_WORKERS - 1), st.integers(0, N_WORKERS - 1), max_size=8),
    st.lists(st.integers(0, N_WORKERS - 1), max_size=20),
)
def test_free_workers_grow_as_the_reservation_scan_grows_them(
    reserved_for: dict[int, int], idle: list[int]
) -> None:
    view = FakeView.make(N_WORKERS)  # no request in flight: only the free set moves
    fon = FastestOfN()
    fon.start((), (), reserved_for)
    want: set[int] = set()
    for t, worker in enumerate(idle):
        assert fon.on_event(WorkerIdle(float(t), worker=worker), view) == []
        _free_by_scan(want, reserved_for, worker)
        assert fon.free == want
