"""SpecActor's model and algorithms on hand-computed cases, and the policy in the simulator."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from simctl.policies.speactor_model import (
    Affine,
    CostLaws,
    accept_distribution,
    best_window,
    draft_ladder,
    fastest_of_n,
    plan_search,
    reconfigure,
    tau_decoupled,
    tgs_decoupled,
    tokens_coupled,
)
from tests.factories import make_frame, make_trace, run_one


def test_window_acceptance_distribution_and_tau_by_hand() -> None:
    probs = accept_distribution(0.8, 2)
    assert probs == pytest.approx([0.2, 0.16, 0.64])
    assert sum(probs) == pytest.approx(1.0)
    # 0.2 * 1/2 + 0.16 * 2/2 + 2 * 0.64
    assert tau_decoupled(0.8, 2) == pytest.approx(1.54)
    assert tau_decoupled(1.0, 5) == pytest.approx(5.0)
    assert tokens_coupled(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)
    assert tokens_coupled(1.0, 4) == 5.0


def test_affine_fit_recovers_a_line() -> None:
    law = Affine.fit(lambda b: 0.002 + 1e-4 * b)
    assert law.slope == pytest.approx(1e-4) and law.intercept == pytest.approx(0.002)


def _laws(draft=(1e-4, 0.004), verify_slope=2e-4, verify_base=0.010) -> CostLaws:
    return CostLaws(
        draft=Affine(*draft),
        verify=lambda w: Affine(verify_slope * (1 + 0.1 * w), verify_base),
        decode=Affine(verify_slope, verify_base),
    )


def test_plan_search_picks_the_brute_force_optimum_on_a_small_grid() -> None:
    laws, p = _laws(), 0.8
    plan = plan_search(laws, p, total_batch=1024, total_gpus=64, verifier_configs=[2, 4], max_window=6)
    # line 5's pruning bound by hand: max(ceil(V'_1/D') = ceil(2.2), ceil(beta/alpha) = ceil(2.5)) = 3
    best = max(
        (tgs_decoupled(laws, p, w, -(-(gd + gv) * 1024 // 64), gd), gd, gv, w)
        for gv in (2, 4)
        for gd in range(1, gv + 1)
        for w in range(1, 4)
    )
    assert (plan.drafter_gpus, plan.verifier_gpus, plan.window) == best[1:]
    assert plan.tgs == pytest.approx(best[0])


def test_reconfigure_prefers_coupled_when_drafting_is_free_and_decoupled_when_it_is_not() -> None:
    cheap = _laws(draft=(0.0, 1e-6))
    costly = _laws(draft=(0.0, 0.008))
    assert reconfigure(cheap, 0.7, drafter_gpus=1)[0] == "coupled"
    mode, w, _ = reconfigure(costly, 0.95, drafter_gpus=1)
    assert mode == "decoupled" and w >= 2
    # a hopeless request gets the smallest window
    assert reconfigure(costly, 0.01, drafter_gpus=1)[1] == 1


def test_best_window_ties_keep_the_smaller() -> None:
    assert best_window(lambda w: 1.0) == (1, 1.0)
    assert best_window(lambda w: -((w - 3) ** 2)) == (3, 0)


def test_draft_ladder_ranks_by_speedup_at_the_batch() -> None:
    laws = {"good": _laws(draft=(1e-5, 1e-4)), "slow": _laws(draft=(1e-3, 0.01))}
    ladder = draft_ladder(laws, {"good": 0.7, "slow": 0.9}, batch=8)
    assert [r.method for r in ladder] == ["good", "slow"]
    assert ladder[0].speedup > 1.0 > ladder[1].speedup


def test_fastest_of_n_is_draft_first_lowest_acceptance_first() -> None:
    assigned = {(1, "a"): 0, (2, "a"): 0, (3, "a"): 0}
    picks = fastest_of_n(
        requests=[(1, 0.9), (2, 0.1), (3, 0.5)],
        methods=["a", "b", "c"],
        assigned=assigned,
        workers_by_method={},
        free_workers=[7, 8],
        load={},
        max_batch=2,
    )
    # request 2 (lowest acceptance) gets every missing method first, then request 3;
    # worker 7 is dedicated to "b", worker 8 to "c", two requests each at most
    assert picks == [(2, "b", 7), (2, "c", 8), (3, "b", 7), (3, "c", 8)]
    assert assigned[(2, "b")] == 7


def test_speactor_variants_run_and_fon_launches_replicas_on_freed_workers() -> None:
    rng = np.random.default_rng(0)
    lengths = np.concatenate([np.full(48, 300), np.full(16, 4000)])
    accept = {m: rng.beta(5, 4, 64) for m in ("draft_small", "draft_medium", "ngram")}
    trace = make_trace(make_frame(lengths, accept=accept), model="qwen2.5-32b")
    runs = {
        name: run_one(trace, name, cluster="h100x16")
        for name in ("verl", "speactor-vanilla", "speactor-decoupled-reconfig", "speactor")
    }
    fon = runs["speactor"]
    assert fon.counters.get("replicas", 0) > 0
    req = pd.concat(fon.requests)
    assert req["finish_s"].notna().all() and fon.steps[0].output_tokens == int(lengths.sum())
    assert fon.steps[0].gpu_idle_fraction < runs["speactor-vanilla"].steps[0].gpu_idle_fraction
    assert fon.steps[0].rollout_makespan_s < runs["verl"].steps[0].rollout_makespan_s
    assert runs["speactor-vanilla"].steps[0].mean_accept_len > 1.5
