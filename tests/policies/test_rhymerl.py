"""RhymeRL: ranking-group alternation, migration thresholds, two-tier allocation, the
HistoSpec batch threshold, and every variant end to end on the simulator."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pytest

from simctl.policies.contract import (
    SPEC_OFF,
    Assign,
    Defer,
    Migrate,
    PromptHistory,
    RequestFinished,
    SetSpec,
    StepStarted,
    Tick,
)
from simctl.policies.rhymerl import VARIANTS
from simctl.policies.rhymerl_pipe import HistoPipe, ascending, growth_beta, plan_allocation, ranking_groups
from simctl.policies.rhymerl_spec import HistoSpec, speculation_wins
from tests.factories import LinearCost, make_frame, make_trace, run_one
from tests.policies.fakes import FakeView


@dataclass
class HistoryView(FakeView):
    hist: dict[int, PromptHistory] = field(default_factory=dict)

    def history(self, prompt_id: int) -> PromptHistory:
        return self.hist.get(prompt_id, PromptHistory())


def view_with_history(medians: list[int], workers: int, samples: int = 2) -> HistoryView:
    view = HistoryView.make(workers)
    view.__class__ = HistoryView
    view.hist = {}
    for p, m in enumerate(medians):
        view.hist[p] = PromptHistory(lengths=((m,) * samples,))
        for s in range(samples):
            view.add_request(p * samples + s, None, state="unassigned", prompt_id=p, sample=s)
    return view


def worker_of_prompt(actions, samples: int = 2) -> dict[int, int]:
    return {a.request // samples: a.worker for a in actions if isinstance(a, Assign)}


def test_ranking_groups_alternate_ascending_and_descending_across_steps() -> None:
    medians = [800, 100, 400, 200, 700, 300, 600, 500]  # prompt p's historical median
    view = view_with_history(medians, workers=4)
    pipe = HistoPipe(ranking_groups=4, migrate=False)
    reqs = tuple(sorted(view.requests))
    even = worker_of_prompt(pipe.on_event(StepStarted(0.0, 0, 1, reqs), view))
    odd = worker_of_prompt(pipe.on_event(StepStarted(0.0, 1, 1, reqs), view))
    assert ascending(0) and not ascending(1)
    # groups by rank: {1,3} {5,2} {7,6} {4,0}; worker 0 takes the shortest in even steps ...
    assert even == {1: 0, 3: 0, 5: 1, 2: 1, 7: 2, 6: 2, 4: 3, 0: 3}
    # ... and the longest in odd steps: each worker's two steps complement each other
    assert odd == {4: 0, 0: 0, 7: 1, 6: 1, 5: 2, 2: 2, 1: 3, 3: 3}
    assert ranking_groups([5, 6, 7], [3.0, 1.0, 2.0], 5) == [[6], [7], [5]]


def test_first_epoch_falls_back_to_static_placement() -> None:
    view = view_with_history([100, 200], workers=2)
    view.hist = {}
    acts = HistoPipe(ranking_groups=2).on_event(StepStarted(0.0, 0, 0, (0, 1, 2, 3)), view)
    assert worker_of_prompt(acts) == {0: 0, 1: 1}


def test_migration_threshold_alpha_and_beta() -> None:
    """Outliers are the last 10% of a ranking group past beta x its longest history; a
    short group's outlier moves to a longer group still running, a long group's waits."""
    samples = 10
    view = view_with_history([100, 1000], workers=2, samples=samples)
    pipe = HistoPipe(ranking_groups=2, alpha=0.1)
    acts = pipe.on_event(StepStarted(0.0, 0, 1, tuple(sorted(view.requests))), view)
    assert pipe.beta == 1.1  # one occurrence each: no growth known, the floor
    for a in acts:
        view.add_request(a.request, a.worker, state="running", prompt_id=a.request // samples)
    short = [r for r in range(samples)]
    for r in short[:-1]:  # 9 of 10 finish: the last one is in the last 10%
        view.add_request(r, 0, state="finished", prompt_id=0)
        pipe.on_event(RequestFinished(1.0, request=r, worker=0, length=100), view)
    last = short[-1]
    view.add_request(last, 0, state="running", prompt_id=0, generated=105)  # below 1.1 x 100
    assert pipe.on_event(Tick(2.0, worker=0, iteration=256), view) == []
    view.add_request(last, 0, state="running", prompt_id=0, generated=111)
    assert pipe.on_event(Tick(3.0, worker=0, iteration=512), view) == [
        Migrate(request=last, worker=1, transfer_kv=False)
    ]
    assert pipe.on_event(Tick(4.0, worker=0, iteration=768), view) == []  # once per request
    long_ = [samples + i for i in range(samples)]
    for r in long_[:-1]:
        view.add_request(r, 1, state="finished", prompt_id=1)
        pipe.on_event(RequestFinished(5.0, request=r, worker=1, length=900), view)
    view.add_request(long_[-1], 1, state="running", prompt_id=1, generated=1200)
    acts = pipe.on_event(Tick(6.0, worker=1, iteration=256), view)
    assert acts == [Migrate(request=long_[-1], worker=1, transfer_kv=False), Defer(request=long_[-1])]
    assert pipe.migrations == {"intra": 1, "inter": 1}


def test_beta_is_the_75th_percentile_of_growth_with_a_floor() -> None:
    assert growth_beta([[[100], [100]]] * 4) == 1.1
    assert growth_beta([[[100], [g]] for g in (100, 120, 150, 200, 300)]) == pytest.approx(2.0)


def test_two_tier_allocation_makes_completion_times_rise_linearly() -> None:
    lens = [100.0 * 2**i for i in range(6)]  # exponential group lengths, shortest first
    longest_first = lens[::-1]

    def tau(i: int, k: int) -> float:
        return longest_first[i] / k

    workers = 48
    plan = plan_allocation(tau, len(lens), workers, max_wks=24)
    assert sum(plan) == workers and min(plan) >= 1
    assert plan == sorted(plan, reverse=True)  # long groups get more workers
    times = [tau(i, k) for i, k in enumerate(plan)]
    equal = [tau(i, workers // len(lens)) for i in range(len(lens))]
    assert max(times) < 0.5 * max(equal)  # the exponential spread is flattened
    assert max(times) / min(times) < 1.5 < max(equal) / min(equal)
    # too few workers for one common finish: targets t0 + i d rise linearly with i
    flat = [1000.0] * 6
    plan = plan_allocation(lambda i, k: flat[i] / k, 6, 12, max_wks=4)
    times = [flat[i] / k for i, k in enumerate(plan)]
    assert sum(plan) == 12 and plan[0] == 4 and times[0] == 250.0
    assert times == sorted(times) and times[-1] > times[0]


def test_histospec_is_off_above_the_batch_threshold_and_on_below() -> None:
    view = FakeView.make(1)
    view.t_draft_step = 1e-6
    assert speculation_wins(view, 4, 4e3, tau=2.5, gamma=4)
    assert not speculation_wins(view, 2000, 2e6, tau=2.5, gamma=4)
    assert not speculation_wins(view, 4, 4e3, tau=1.0, gamma=4)  # nothing accepted: never


@dataclass
class _ViewWithHistory(FakeView):
    """FakeView whose prompts all have an earlier epoch (HistoSpec enables itself)."""

    def history(self, prompt_id: int) -> PromptHistory:
        return PromptHistory(lengths=((100,),), rewards=((1.0,),))


def test_histospec_threshold_reads_the_running_batch_not_the_queue() -> None:
    """A worker decoding 8 requests with 4,000 queued behind a full KV cache speculates: the
    queue runs no iteration (§5.4 thresholds decoding parallelism). At 4,000 running it
    does not."""
    view = _ViewWithHistory(workers=FakeView.make(1).workers)
    view.t_draft_step = 1e-6
    view.add_request(0, None, state="waiting")
    policy = HistoSpec()
    policy.on_event(StepStarted(time_s=0.0, step=1, epoch=1, requests=(0,)), view)
    view.set_worker(0, running=8, waiting=4000, kv_used_tokens=8 * 4000)
    (on,) = policy.on_event(Tick(time_s=1.0, worker=0, iteration=128), view)
    assert isinstance(on, SetSpec) and on.spec.gamma == policy.verify_gamma
    assert not speculation_wins(view, 8 + 4000, 8 * 4000, policy.tau, policy.verify_gamma)
    view.set_worker(0, running=4000, waiting=0, kv_used_tokens=4000 * 4000)
    (off,) = policy.on_event(Tick(time_s=2.0, worker=0, iteration=256), view)
    assert isinstance(off, SetSpec) and off.spec == SPEC_OFF


def two_epoch_trace() -> tuple:
    rng = np.random.default_rng(0)
    frames = []
    base = rng.lognormal(5.5, 0.8, 16)
    for step in range(2):
        lengths = np.clip(np.repeat(base, 4) * rng.lognormal(0, 0.2, 64), 20, 3000).astype(int)
        df = make_frame(lengths, group_size=4, step=step, max_tokens=3000, accept={"history": 0.7})
        df["epoch"] = step
        frames.append(df)
    return make_trace(frames), frames


@pytest.mark.parametrize("name", list(VARIANTS))
def test_every_rhymerl_variant_runs_by_name(name: str) -> None:
    trace, _ = two_epoch_trace()
    run = run_one(trace, f"{name}:ranking_groups=4", cluster="h100x8:tp1", cost=LinearCost())
    req = pd.concat(run.requests)
    deferred = req["finish_s"].isna()
    assert deferred.sum() <= 0.1 * len(req)
    finished_tokens = int(req.loc[~deferred, "response_len"].sum())
    assert sum(s.output_tokens for s in run.steps) == finished_tokens
    if "spec" in name or name == "rhymerl":
        assert run.steps[0].mean_accept_len is None  # no history in the first epoch
        assert run.steps[1].mean_accept_len is not None and run.steps[1].mean_accept_len > 1.0
