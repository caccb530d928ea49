"""Seer's least-loaded worker off a heap (equal KV capacities) picks exactly what a scan of
every worker picks, through random dispatches and releases; Composite's replica-aware
choice likewise while no worker runs replicas."""

from __future__ import annotations

import random

import pytest

from simctl.policies.composite import ReplicaAwareScheduler
from simctl.policies.seer_scheduler import SeerScheduler, WorkerLoad


def _loaded(sched: SeerScheduler, workers: int, cap: int) -> SeerScheduler:
    sched._loads = [WorkerLoad() for _ in range(workers)]
    sched._caps = [cap] * workers
    sched._uniform = True
    sched._free = [(0.0, 0, w, 0) for w in range(workers)]
    sched._idle = set(range(workers))
    return sched


@pytest.mark.parametrize("make", [SeerScheduler, ReplicaAwareScheduler])
@pytest.mark.parametrize("seed", range(4))
def test_heap_choice_equals_scan(make: type[SeerScheduler], seed: int) -> None:
    rng = random.Random(seed)
    cap = 10_000
    sched = _loaded(make(max_seqs=rng.choice([2, 4, 256]), kv_margin=0.02), rng.randint(1, 12), cap)
    placed: list[tuple[int, int, int]] = []  # (request, worker, reserved)
    for rid in range(600):
        need = rng.choice([1, 50, 900, 4_000, 9_900, 20_000])
        assert sched._select_worker(need) == sched._scan_workers(need)
        if placed and rng.random() < 0.45:
            r, w, _ = placed.pop(rng.randrange(len(placed)))
            load = sched._loads[w]
            load.reserved -= load.by_request.pop(r)
            load.running -= 1
            sched._loaded(w)
            continue
        w = sched._select_worker(need)
        if w is None:
            continue
        load = sched._loads[w]
        load.reserved += need
        load.running += 1
        load.by_request[rid] = need
        sched._loaded(w)
        placed.append((rid, w, need))
