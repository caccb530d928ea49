"""Seer: the scheduler's ordering on hand-made groups, KV budgets, adaptive draft choice,
and every variant end to end on the simulator."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pytest

from simctl.policies.contract import (
    SPEC_OFF,
    Assign,
    ChunkFinished,
    RequestFinished,
    StepStarted,
)
from simctl.policies.seer import VARIANTS
from simctl.policies.seer_acceptance import table2_tau
from simctl.policies.seer_scheduler import SeerScheduler
from simctl.policies.seer_spec import best_spec
from tests.factories import LinearCost, make_frame, make_trace, random_lengths, run_one
from tests.policies.fakes import FakeView


@dataclass
class OracleView(FakeView):
    oracle: dict[int, int] = field(default_factory=dict)

    def oracle_length(self, request: int) -> int:
        return self.oracle[request]


def groups_view(groups: int = 3, size: int = 3, kv: int = 10**6, max_tokens: int = 1000) -> OracleView:
    view = OracleView.make(1)
    view.__class__ = OracleView
    view.oracle = {}
    view.set_worker(0, kv_capacity_tokens=kv)
    for g in range(groups):
        for s in range(size):
            rid = g * size + s
            view.add_request(
                rid, None, state="unassigned", prompt_id=g, sample=s, prompt_len=10, max_tokens=max_tokens
            )
    return view


def assigned(actions) -> list[int]:
    return [a.request for a in actions if isinstance(a, Assign)]


def drive(sched: SeerScheduler, view: OracleView, events) -> list[int]:
    """Feed events one at a time to a one-slot worker; the order requests are dispatched."""
    order = assigned(sched.on_event(StepStarted(0.0, 0, 0, tuple(sorted(view.requests))), view))
    for ev in events:
        rid = ev.request
        gen = ev.generated if isinstance(ev, ChunkFinished) else ev.length
        view.add_request(
            rid,
            None,
            state="unassigned" if isinstance(ev, ChunkFinished) else "finished",
            prompt_id=view.requests[rid].prompt_id,
            prompt_len=10,
            max_tokens=1000,
            generated=gen,
        )
        for r in assigned(sched.on_event(ev, view)):
            view.requests[r] = view.requests[r]._replace(state="running")
            order.append(r)
    return order


def test_context_ordering_probes_each_group_shortest_first_then_longest_estimate_first() -> None:
    view = groups_view()
    sched = SeerScheduler("context", chunk_tokens=100, max_seqs=1)
    order = drive(
        sched,
        view,
        [
            ChunkFinished(1.0, request=0, worker=0, generated=100),  # probe of group 0 continues later
            RequestFinished(2.0, request=3, worker=0, length=50),  # group 1 is short
            RequestFinished(3.0, request=6, worker=0, length=500),  # group 2 is long
            RequestFinished(4.0, request=0, worker=0, length=300),  # group 0 medium
            RequestFinished(5.0, request=7, worker=0, length=400),
            RequestFinished(6.0, request=8, worker=0, length=450),
            RequestFinished(7.0, request=1, worker=0, length=300),
            RequestFinished(8.0, request=2, worker=0, length=300),
            RequestFinished(9.0, request=4, worker=0, length=50),
        ],
    )
    # speculative requests (first of each group) shortest-generated-first, then groups by
    # their longest finished response: 2 (500), 0 (300), 1 (50)
    assert order == [0, 3, 6, 0, 7, 8, 1, 2, 4, 5]


def test_groups_without_a_finished_response_count_as_longest() -> None:
    view = groups_view(groups=2, size=2)
    sched = SeerScheduler("context", chunk_tokens=2000, max_seqs=1)
    order = drive(
        sched,
        view,
        [
            RequestFinished(1.0, request=0, worker=0, length=900),  # group 0 probe: long
            ChunkFinished(2.0, request=2, worker=0, generated=2000),  # group 1 probe still running
        ],
    )
    # group 1's estimate is the budget (1000 > 900): its probe continues first (SFS queue)
    assert order == [0, 2, 2]
    sched2 = SeerScheduler("context", chunk_tokens=2000, max_seqs=1)
    view2 = groups_view(groups=2, size=2)
    order2 = drive(
        sched2,
        view2,
        [
            RequestFinished(1.0, request=0, worker=0, length=100),
            RequestFinished(2.0, request=2, worker=0, length=900),
        ],
    )
    assert order2 == [0, 2, 3]  # group 1 (900) before group 0 (100)


def test_fifo_and_oracle_orderings() -> None:
    view = groups_view(groups=2, size=2)
    view.oracle = {0: 10, 1: 700, 2: 300, 3: 50}
    first_done = [RequestFinished(1.0, request=0, worker=0, length=10)]
    fifo = drive(SeerScheduler("fifo", max_seqs=1), view, first_done)
    assert fifo == [0, 1]
    view = groups_view(groups=2, size=2)
    view.oracle = {0: 10, 1: 700, 2: 300, 3: 50}
    events = [
        RequestFinished(float(i), request=r, worker=0, length=view.oracle[r]) for i, r in enumerate([1, 2, 3])
    ]
    assert drive(SeerScheduler("oracle", max_seqs=1), view, events) == [1, 2, 3, 0]


def test_kv_budget_is_never_exceeded_and_chunks_shrink_to_the_room_left() -> None:
    view = groups_view(groups=1, size=4, kv=2000)
    sched = SeerScheduler("fifo", chunk_tokens=1000, kv_margin=0.0, min_chunk_tokens=200)
    acts = sched.on_event(StepStarted(0.0, 0, 0, (0, 1, 2, 3)), view)
    # 10 prompt + 1000 chunk; then the 980 left after another 10-token prompt; then nothing
    assert [(a.request, a.max_tokens) for a in acts] == [(0, 1000), (1, 980)]
    assert sum(load.reserved for load in sched._loads) <= 2000
    view.add_request(0, None, state="unassigned", prompt_id=0, prompt_len=10, max_tokens=1000, generated=500)
    acts = sched.on_event(ChunkFinished(1.0, request=0, worker=0, generated=500), view)
    assert [(a.request, a.max_tokens) for a in acts] == [(0, 500)]  # its KV (510) + the rest
    assert sum(load.reserved for load in sched._loads) <= 2000


def test_adaptive_draft_length_is_long_for_few_requests_and_off_for_a_full_batch() -> None:
    view = FakeView.make(1)
    view.t_draft_step = 1e-6
    accept = {k: 0.6 for k in (1, 2, 4)}
    small = best_spec(view, 1, 1000.0, accept)
    assert small.enabled and small.gamma >= 4
    assert small.tokens_verified == small.gamma * small.topk
    assert best_spec(view, 5000, 1e6, accept) == SPEC_OFF
    mid = best_spec(view, 40, 1e5, accept)
    assert 0 < mid.gamma * mid.topk < small.gamma * small.topk  # fewer draft tokens as batches grow
    assert table2_tau(15, 4) > table2_tau(15, 1) > table2_tau(0, 1)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_every_seer_variant_runs_and_generates_every_token_without_preemption(name: str) -> None:
    lengths = random_lengths(4, 64, lo=50, hi=1500)
    trace = make_trace(make_frame(lengths, group_size=8, accept={"suffix": 0.5}), group_size=8)
    cost = LinearCost(kv_capacity_tokens=20_000)
    run = run_one(trace, f"{name}:chunk_tokens=256", cluster="h100x4:tp1", cost=cost)
    req = pd.concat(run.requests)
    assert req["finish_s"].notna().all()
    assert run.steps[0].output_tokens == int(np.sum(lengths))
    assert run.counters.get("preemptions", 0) == 0
    assert run.counters["chunks"] > 0 and (req["dispatches"] >= np.ceil(req["response_len"] / 256)).all()
    if name in ("seer", "seer-no-group-context", "seer-no-adapt"):
        assert run.steps[0].mean_accept_len is not None and run.steps[0].mean_accept_len > 1.0
