"""The composite policy and its parts: Fastest-of-N as a standalone part, the per-request
drafter choice on hand-made acceptance, Seer's scheduler under replicas, and the composed
policy end to end in the simulator."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pytest

from policies.best_drafter import BestDrafter
from policies.composite import VARIANTS, ReplicaAwareScheduler
from policies.contract import (
    Assign,
    LaunchReplica,
    RequestFinished,
    SetSpec,
    SpecConfig,
    StepStarted,
    WorkerIdle,
)
from policies.fastest_of_n import FastestOfN, Rung
from policies.registry import make_policy
from policies.seer_acceptance import expected_accept_len
from policies.seer_spec import DEPTHS
from sim.replay import run_policy
from tests.factories import make_frame, make_setup, make_trace, random_lengths
from tests.policies.fakes import FakeView

SUFFIX = SpecConfig(method="suffix", gamma=6)
SMALL = SpecConfig(method="draft_small", gamma=3)
EAGLE = SpecConfig(method="eagle", gamma=4)
LADDER = [Rung("suffix", SUFFIX), Rung("draft_small", SMALL), Rung("eagle", EAGLE)]


def fon_view() -> FakeView:
    """Workers 0 and 1 busy (suffix / draft model), 2 and 3 idle; request 3 drafts with
    EAGLE on its own setting."""
    view = FakeView.make(4)
    view.set_worker(0, running=1, spec=SUFFIX)
    view.set_worker(1, running=2, spec=SMALL)
    view.add_request(0, 0, drafted_tokens=100, accepted_tokens=50)
    view.add_request(1, 1, drafted_tokens=100, accepted_tokens=30)
    view.add_request(2, 1, state="finished")
    view.add_request(3, 1, spec=EAGLE, drafted_tokens=100, accepted_tokens=40)
    return view


def replicas(actions) -> list[tuple[int, str | None, int]]:
    return [(a.request, a.spec.method, a.worker) for a in actions if isinstance(a, LaunchReplica)]


def test_fon_replicas_appear_only_on_idle_workers_with_other_methods_than_the_original() -> None:
    view = fon_view()
    fon = FastestOfN(max_batch=32, ladder_source=lambda v, rids: LADDER)
    assert fon.on_event(StepStarted(0.0, 0, 0, (0, 1, 2, 3)), view) == []
    assert fon.on_event(RequestFinished(1.0, request=2, worker=1, length=10), view) == []
    # worker 2 runs dry: lowest acceptance first (1: 0.3, 3: 0.4, 0: 0.5); it is dedicated
    # to the best ladder method that some request does not run yet
    first = replicas(fon.on_event(WorkerIdle(2.0, worker=2), view))
    assert first == [(1, "suffix", 2), (3, "suffix", 2)]
    view.set_worker(2, running=2)
    # worker 3: the next method nobody races yet; never a request's own method
    second = replicas(fon.on_event(WorkerIdle(3.0, worker=3), view))
    assert second == [(1, "eagle", 3), (0, "eagle", 3)]
    own = {0: "suffix", 1: "draft_small", 3: "eagle"}
    assert all(method != own[rid] for rid, method, _ in first + second)
    assert {a.spec for a in fon.on_event(WorkerIdle(3.5, worker=3), view)} <= {r.spec for r in LADDER}


def test_fon_keeps_free_workers_back_for_a_rescheduling_scheduler() -> None:
    view = fon_view()
    fon = FastestOfN(max_batch=32, ladder_source=lambda v, rids: LADDER, reserve=1.0)
    fon.on_event(StepStarted(0.0, 0, 0, (0, 1, 3)), view)
    # three requests in flight keep three free workers back: one free worker races nothing
    assert fon.on_event(WorkerIdle(1.0, worker=2), view) == []
    # a fixed ladder from an owner (SpecActor's use) works the same way
    owned = FastestOfN(max_batch=1)
    owned.start((0, 1, 3), LADDER, reserved={0: 3})
    assert owned.on_event(WorkerIdle(1.0, worker=3), view) == []  # lent worker 3 is not free yet
    assert replicas(owned.on_event(WorkerIdle(1.0, worker=2), view)) == [(1, "suffix", 2)]


@dataclass
class CostView(FakeView):
    """FakeView with a per-method drafting cost per draft token."""

    draft_step: dict[str, float] = field(default_factory=dict)

    def draft_cost(self, method: str, num_seqs: float, context_tokens: float, gamma: int) -> float:
        return self.draft_step[method] * gamma


def drafter_setup(batch: int) -> tuple[BestDrafter, CostView]:
    view = CostView(workers=FakeView.make(1).workers, draft_step={"suffix": 0.0, "draft_small": 0.002})
    view.set_worker(0, running=batch, kv_used_tokens=100 * batch)
    for rid in range(batch):
        view.add_request(rid, 0, prompt_id=rid)
    drafter = BestDrafter(("suffix", "draft_small"), multi_path=False)
    drafter.on_event(StepStarted(0.0, 0, 0, tuple(range(batch))), view)
    drafter.observe([Assign(request=r, worker=0) for r in range(batch)])
    return drafter, view


def hand_rate(view: CostView, batch: int, method: str, p: float) -> float:
    """Best tokens per second of one method over the depth grid, computed by hand."""
    return max(
        expected_accept_len(p, d)
        / (view.cost(batch, batch * (d + 1), 100 * batch) + view.draft_cost(method, batch, 0, d))
        for d in DEPTHS
    )


def test_drafter_choice_picks_the_best_expected_throughput_per_request() -> None:
    drafter, view = drafter_setup(batch=1)
    # request 0 drafts badly with the suffix tree: its evidence (1000 iterations at depth 4,
    # 250 tokens accepted, i.e. p = 0.2) outweighs the pooled value
    drafter.record(0, "suffix", depth=4, ratio=1.0, drafted=4000, accepted=250)
    assert drafter.acceptance(0, "suffix") == pytest.approx(0.2, abs=0.02)
    assert drafter.acceptance(0, "draft_small") == pytest.approx(0.6)  # never ran: the prior
    p_suffix, p_small = drafter.acceptance(0, "suffix"), drafter.acceptance(0, "draft_small")
    assert hand_rate(view, 1, "draft_small", p_small) > hand_rate(view, 1, "suffix", p_suffix)
    actions = drafter.configure(0, view)
    (spec,) = [a.spec for a in actions if isinstance(a, SetSpec)]
    assert spec.method == "draft_small"
    assert expected_accept_len(p_small, spec.gamma) / (
        view.cost(1, spec.gamma + 1, 100) + view.draft_cost("draft_small", 1, 0, spec.gamma)
    ) == pytest.approx(hand_rate(view, 1, "draft_small", p_small))
    # good suffix evidence turns it around
    drafter.record(0, "suffix", depth=4, ratio=1.0, drafted=40000, accepted=30000)
    assert [a.spec.method for a in drafter.configure(0, view) if isinstance(a, SetSpec)] == ["suffix"]


def test_a_draft_model_one_request_wants_is_dropped_when_the_batch_pays_more_for_it() -> None:
    drafter, view = drafter_setup(batch=2)
    drafter.record(0, "suffix", depth=4, ratio=1.0, drafted=4000, accepted=250)  # p = 0.2
    drafter.record(1, "suffix", depth=4, ratio=1.0, drafted=4000, accepted=3000)  # p ~ 0.8
    # alone, request 0 would take the draft model ...
    p0 = {m: drafter.acceptance(0, m) for m in ("suffix", "draft_small")}
    assert drafter.best_arm(view, 2, 200.0, p0)[0].method == "draft_small"  # type: ignore[union-attr]
    # ... but its draft pass would slow request 1's iterations too: both use the suffix tree
    actions = drafter.configure(0, view)
    specs = [(a.worker, a.request, a.spec.method) for a in actions if isinstance(a, SetSpec)]
    assert specs[0] == (0, None, "suffix")
    assert all(a.spec.method in ("suffix", None) for a in actions if isinstance(a, SetSpec))


def test_full_batches_get_one_setting_and_history_needs_an_earlier_epoch() -> None:
    view = CostView(workers=FakeView.make(1).workers, draft_step={"suffix": 0.0, "history": 0.0})
    view.set_worker(0, running=500, kv_used_tokens=10**5)
    view.t_per_token = 1e-3  # verification is expensive at this batch: plain decoding wins
    drafter = BestDrafter(("suffix", "history"), per_request_batch=64)
    view.add_request(0, 0)
    drafter.on_event(StepStarted(0.0, 0, 0, (0,)), view)
    drafter.observe([Assign(request=0, worker=0)])
    assert drafter.configure(0, view) == []  # plain, as the worker already is
    view.t_per_token = 1e-7  # nearly free verification: the whole worker speculates, in one action
    drafter.on_event(StepStarted(1.0, 1, 0, (0,)), view)  # cost tables are kept per step
    drafter.observe([Assign(request=0, worker=0)])
    (action,) = drafter.configure(0, view)
    assert isinstance(action, SetSpec) and action.worker == 0 and action.request is None
    assert action.spec.method == "suffix"  # no earlier epoch: no history drafting
    assert drafter.ladder(view, [0]) and all(r.method != "history" for r in drafter.ladder(view, [0]))


def test_scheduler_releases_a_chunk_won_by_a_replica_where_it_was_reserved() -> None:
    view = FakeView.make(2)
    for rid in range(3):
        view.add_request(rid, None, state="unassigned", prompt_id=0, sample=rid, max_tokens=1000)
    sched = ReplicaAwareScheduler("fifo", chunk_tokens=500, max_seqs=1)
    placed = [(a.request, a.worker) for a in sched.on_event(StepStarted(0.0, 0, 0, (0, 1, 2)), view)]
    assert placed == [(0, 0), (1, 1)]  # request 2 waits in the buffer
    # a replica of request 0 on worker 1 wins: worker 0's slot frees, worker 1's is untouched
    sched.observe([LaunchReplica(request=0, worker=1, spec=SUFFIX)])
    view.add_request(0, 1, state="finished", prompt_id=0)
    got = sched.on_event(RequestFinished(1.0, request=0, worker=1, length=700), view)
    assert [(a.request, a.worker) for a in got] == [(2, 0)]
    assert sched._loads[1].running == 1 and sched._loads[0].running == 1
    # a request finished by a replica while buffered leaves the buffer
    sched2 = ReplicaAwareScheduler("fifo", chunk_tokens=500, max_seqs=1)
    view2 = FakeView.make(1)
    for rid in range(2):
        view2.add_request(rid, None, state="unassigned", prompt_id=0, sample=rid, max_tokens=1000)
    sched2.on_event(StepStarted(0.0, 0, 0, (0, 1)), view2)
    view2.add_request(1, 0, state="finished", prompt_id=0)
    assert sched2.on_event(RequestFinished(1.0, request=1, worker=0, length=300), view2) == []
    view2.add_request(0, 0, state="finished", prompt_id=0)
    assert sched2.on_event(RequestFinished(2.0, request=0, worker=0, length=300), view2) == []
    assert sched2._loads[0].running == 0


# ------------------------------------------------------------------------ simulator

ACCEPT_METHODS = ("suffix", "draft_small", "eagle")


def long_tail_trace(seed: int = 0):
    rng = np.random.default_rng(seed)
    lengths = np.concatenate([random_lengths(seed + 1, 56, lo=100, hi=1500), np.full(8, 6000)])
    accept = {m: rng.beta(6, 4, 64) for m in ACCEPT_METHODS}
    return make_trace(make_frame(lengths, group_size=8, accept=accept), group_size=8, model="qwen2.5-32b")


def test_composite_conserves_tokens_is_deterministic_and_not_slower_than_seer_context() -> None:
    trace = long_tail_trace()
    setup = make_setup(trace, cluster="h100x16")
    spec = "composite:chunk_tokens=1024,methods=suffix/draft_small/eagle"
    a, b = run_policy(setup, spec), run_policy(setup, spec)
    req = pd.concat(a.requests)
    assert req["finish_s"].notna().all()
    assert a.steps[0].output_tokens == int(trace.df["response_len"].sum())
    assert (req["accepted"] <= req["drafted"]).all() and a.steps[0].mean_accept_len > 1.5
    pd.testing.assert_frame_equal(req, pd.concat(b.requests))
    assert a.steps[0].rollout_makespan_s == b.steps[0].rollout_makespan_s
    seer = run_policy(setup, "seer-divided-context:chunk_tokens=1024")
    assert a.steps[0].rollout_makespan_s <= seer.steps[0].rollout_makespan_s
    assert a.counters.get("preemptions", 0) == 0


def test_fon_races_a_lone_straggler_on_spare_workers_in_the_simulator() -> None:
    rng = np.random.default_rng(1)
    lengths = np.concatenate([np.full(15, 200), [5000]])
    accept = {m: rng.beta(6, 4, 16) for m in ACCEPT_METHODS}
    trace = make_trace(make_frame(lengths, group_size=4, accept=accept), model="qwen2.5-32b")
    setup = make_setup(trace, cluster="h100x16")
    runs = {
        name: run_policy(setup, f"{name}:chunk_tokens=1024,methods=suffix/draft_small/eagle")
        for name in ("composite", "composite-no-fon")
    }
    fon = runs["composite"]
    assert fon.counters.get("replicas", 0) >= 2  # one per other method, on idle workers
    assert runs["composite-no-fon"].counters.get("replicas", 0) == 0
    assert fon.steps[0].output_tokens == int(lengths.sum())
    assert pd.concat(fon.requests)["finish_s"].notna().all()


@pytest.mark.parametrize("name", list(VARIANTS))
def test_variants_are_registered_with_parameters(name: str) -> None:
    policy = make_policy(f"{name}:fon_max_batch=2,methods=suffix/eagle,per_request_batch=8")
    params = policy.params()
    assert params["BestDrafter"]["methods"] == ["suffix", "eagle"]  # type: ignore[index]
    assert ("FastestOfN" in params) == (name != "composite-no-fon")
    assert "suffix" in getattr(policy, "draft_rules", {})
    if name == "composite-fixed-drafter":
        assert params["BestDrafter"]["fixed"] == "suffix"  # type: ignore[index]
