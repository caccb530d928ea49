"""Behaviour of the fast-forward engine: conservation, determinism, agreement with the
per-iteration reference, speculation bounds, preemption, monotonicity in workers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.factories import LinearCost, make_frame, make_trace, random_lengths, run_one

FAST = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _requests(run) -> pd.DataFrame:
    return pd.concat(run.requests, ignore_index=True)


@FAST
@given(
    seed=st.integers(0, 10_000),
    policy=st.sampled_from(["verl", "ngram", "spec-coupled", "rlhfuse"]),
    alpha=st.floats(0.0, 1.0),
)
def test_every_token_generated_exactly_once(seed: int, policy: str, alpha: float) -> None:
    lengths = random_lengths(seed, 64)
    trace = make_trace(make_frame(lengths, accept={"ngram": alpha, "draft_small": alpha}))
    run = run_one(trace, policy, cluster="h100x8", cost=LinearCost(), seed=seed)
    req = _requests(run)
    assert req["finish_s"].notna().all()
    assert int(req["response_len"].sum()) == run.steps[0].output_tokens == int(lengths.sum())
    assert req["finish_s"].max() == pytest.approx(run.steps[0].rollout_makespan_s)
    if policy in ("ngram", "spec-coupled"):
        # accepted drafts never exceed drafted ones, and each verify iteration emits <= gamma+1
        # tokens; each admission's prefill pass gives one more (and verifies nothing)
        assert (req["accepted"] <= req["drafted"]).all()
        admissions = req["dispatches"] + req["preemptions"]
        assert (req["response_len"] <= 5 * req["spec_iters"] + admissions).all()
        assert (req["response_len"] - req["accepted"] - req["spec_iters"] <= admissions).all()


@pytest.mark.parametrize("policy", ["verl", "ngram"])
def test_same_seed_same_result_and_seed_matters_only_with_speculation(policy: str) -> None:
    trace = make_trace(make_frame(random_lengths(3, 96), accept={"ngram": 0.6}))
    a = run_one(trace, policy, cluster="h100x8", seed=7)
    b = run_one(trace, policy, cluster="h100x8", seed=7)
    c = run_one(trace, policy, cluster="h100x8", seed=8)
    assert [s.to_dict() for s in a.steps] == [s.to_dict() for s in b.steps]
    pd.testing.assert_frame_equal(_requests(a), _requests(b))
    same = a.steps[0].rollout_makespan_s == c.steps[0].rollout_makespan_s
    assert same == (policy == "verl")


@FAST
@given(seed=st.integers(0, 10_000), groups=st.sampled_from([8, 16, 32]))
def test_more_workers_never_slower_under_verl(seed: int, groups: int) -> None:
    trace = make_trace(make_frame(random_lengths(seed, groups * 4)))
    small = run_one(trace, "verl", cluster="h100x8:tp2", cost=LinearCost())  # 4 workers
    large = run_one(trace, "verl", cluster="h100x16:tp2", cost=LinearCost())  # 8 workers
    assert large.steps[0].rollout_makespan_s <= small.steps[0].rollout_makespan_s * (1 + 1e-12)


def test_fast_forward_matches_per_iteration_exactly_without_speculation() -> None:
    trace = make_trace(make_frame(random_lengths(1, 48, hi=800)))
    ff = run_one(trace, "verl", cluster="h100x8")
    it = run_one(trace, "verl", cluster="h100x8", per_iteration=True)
    assert ff.steps[0].rollout_makespan_s == pytest.approx(it.steps[0].rollout_makespan_s, rel=1e-9)
    np.testing.assert_allclose(_requests(ff)["finish_s"], _requests(it)["finish_s"], rtol=1e-9)
    # the reference really steps every iteration: one timeline segment per iteration
    assert len(it.timeline[0]) == it.timeline[0]["iterations"].sum() > 10 * len(ff.timeline[0])


def test_fast_forward_matches_per_iteration_in_distribution_with_speculation() -> None:
    lengths = random_lengths(2, 64, hi=1200)
    rng = np.random.default_rng(0)
    trace = make_trace(make_frame(lengths, accept={"ngram": rng.beta(4, 3, 64)}))
    seeds = range(12)
    ff = [run_one(trace, "ngram", cluster="h100x8", seed=s) for s in seeds]
    it = [run_one(trace, "ngram", cluster="h100x8", seed=s, per_iteration=True) for s in seeds]
    mk_ff = np.array([r.steps[0].rollout_makespan_s for r in ff])
    mk_it = np.array([r.steps[0].rollout_makespan_s for r in it])
    # The makespan is a maximum over requests, noisy per seed: allow 1% or 4 standard errors.
    se = np.sqrt(mk_ff.var(ddof=1) / len(mk_ff) + mk_it.var(ddof=1) / len(mk_it))
    assert abs(mk_ff.mean() - mk_it.mean()) <= max(0.01 * mk_it.mean(), 4 * se)
    fin_ff = np.concatenate([_requests(r)["finish_s"].to_numpy() for r in ff])
    fin_it = np.concatenate([_requests(r)["finish_s"].to_numpy() for r in it])
    # averaged over every request, the noise is small: completion times agree within 1%
    assert fin_ff.mean() == pytest.approx(fin_it.mean(), rel=0.01)
    # matching distributions: two-sample Kolmogorov-Smirnov distance below the 0.1% critical value
    grid = np.sort(np.concatenate([fin_ff, fin_it]))
    ks = np.abs(
        np.searchsorted(np.sort(fin_ff), grid, side="right") / len(fin_ff)
        - np.searchsorted(np.sort(fin_it), grid, side="right") / len(fin_it)
    ).max()
    assert ks < 1.95 * np.sqrt(2 / len(fin_ff))
    acc_ff = np.mean([r.steps[0].mean_accept_len for r in ff])
    acc_it = np.mean([r.steps[0].mean_accept_len for r in it])
    assert acc_ff == pytest.approx(acc_it, rel=0.01)


def test_full_acceptance_reaches_the_speculative_bound_and_zero_acceptance_slows_down() -> None:
    gamma = 4
    lengths = np.full(8, 1000)
    cost = LinearCost(base_s=0.010, per_seq_s=0.0, per_new_token_s=0.0, per_ctx_token_s=0.0, draft_s=0.0)
    trace_hi = make_trace(make_frame(lengths, accept={"ngram": 1.0}))
    trace_lo = make_trace(make_frame(lengths, accept={"ngram": 0.0}))
    plain = run_one(trace_hi, "verl", cluster="h100x8:tp8", cost=cost).steps[0]
    hi = run_one(trace_hi, f"ngram:gamma={gamma}", cluster="h100x8:tp8", cost=cost).steps[0]
    # free drafting, verification as cheap as decoding: exactly (gamma+1)x fewer iterations
    # (each run also pays one 10 ms prefill pass; the iteration that holds it gives every
    # request its first token, in both runs, and verifies nothing: then 999 tokens in
    # ceil(999 / 5) = 200 verify iterations)
    assert hi.mean_accept_len == pytest.approx(999 / 200)
    assert plain.rollout_makespan_s == pytest.approx(0.010 * (1 + 1000))
    assert hi.rollout_makespan_s == pytest.approx(0.010 * (1 + 1 + 200))
    # with the real roofline (drafting and verifying cost something), zero acceptance is a loss
    plain_rf = run_one(trace_lo, "verl", cluster="h100x8:tp8").steps[0]
    lo_rf = run_one(trace_lo, "spec-coupled:method=ngram", cluster="h100x8:tp8").steps[0]
    assert lo_rf.mean_accept_len == pytest.approx(1.0)
    assert lo_rf.rollout_makespan_s > plain_rf.rollout_makespan_s


def test_kv_overflow_preempts_and_still_finishes_everything() -> None:
    lengths = np.full(32, 2000)
    trace = make_trace(make_frame(lengths, group_size=32, prompt_len=100))
    roomy = run_one(trace, "verl", cluster="h100x8:tp8", cost=LinearCost())
    tight = run_one(trace, "verl", cluster="h100x8:tp8", cost=LinearCost(kv_capacity_tokens=20_000))
    assert roomy.counters.get("preemptions", 0) == 0
    assert tight.counters["preemptions"] > 0
    assert _requests(tight)["preemptions"].sum() == tight.counters["preemptions"]
    assert _requests(tight)["finish_s"].notna().all()
    # recomputation and a smaller effective batch cost time
    assert tight.steps[0].rollout_makespan_s > roomy.steps[0].rollout_makespan_s


def test_request_longer_than_kv_capacity_is_a_clear_error() -> None:
    from simctl.sim.engine import SimError

    trace = make_trace(make_frame([5000] * 4))
    with pytest.raises(SimError, match="KV capacity 1000 tokens"):
        run_one(trace, "verl", cluster="h100x8", cost=LinearCost(kv_capacity_tokens=1000))


def test_verl_long_tail_leaves_gpus_idle_and_rlhfuse_lends_them_to_training() -> None:
    lengths = np.concatenate([np.full(60, 100), np.full(4, 4000)])  # one worker gets the long group
    trace = make_trace(make_frame(lengths))
    verl = run_one(trace, "verl", cluster="h100x16").steps[0]
    fuse = run_one(trace, "rlhfuse", cluster="h100x16").steps[0]
    assert verl.gpu_idle_fraction > 0.5
    assert verl.tail_time_s > 0.5 * verl.rollout_makespan_s
    assert fuse.rollout_makespan_s == pytest.approx(verl.rollout_makespan_s)
    assert fuse.gpu_idle_fraction < verl.gpu_idle_fraction
    assert fuse.step_time_s < verl.step_time_s


def test_speculative_blocks_run_through_several_finishes() -> None:
    """With nothing waiting, a speculative block plans past the first finish (stopping at
    each to report it), so blocks are far fewer than finishes; all tokens still arrive."""
    lengths = random_lengths(3, 64, hi=1200)
    trace = make_trace(make_frame(lengths, accept={"ngram": 0.6}))
    run = run_one(trace, "ngram", cluster="h100x8")
    reqs = _requests(run)
    assert int(reqs["response_len"].sum()) == int(lengths.sum())
    assert (reqs["accepted"] <= reqs["drafted"]).all()
    assert (reqs["response_len"] <= 5 * reqs["spec_iters"]).all()
    assert run.counters["blocks"] < len(lengths) / 4
    # every finish is still reported at its own time: finish times are distinct per request
    assert reqs["finish_s"].nunique() > len(lengths) / 2


class _CountTicks:
    """verl placement plus a tick every 8 iterations that changes nothing."""

    def __init__(self) -> None:
        from simctl.policies.registry import make_policy

        self.inner = make_policy("verl")
        self.name = "count-ticks"
        self.requires = self.inner.requires
        self.draft_methods_used = self.inner.draft_methods_used
        self.tick_iterations = 8
        self.ticks: list[tuple[int, int]] = []

    def on_event(self, event, view):
        from simctl.policies.contract import Tick

        if isinstance(event, Tick):
            self.ticks.append((event.worker, event.iteration))
            return []
        return self.inner.on_event(event, view)

    def params(self) -> dict[str, object]:
        return {}


def test_ticks_are_reported_every_period_without_ending_the_block() -> None:
    from simctl.policies import registry

    trace = make_trace(make_frame(random_lengths(4, 32, hi=600)))
    policy = _CountTicks()
    registry.register("count-ticks", lambda: policy, "test")
    try:
        run = run_one(trace, "count-ticks", cluster="h100x8")
    finally:
        registry.REGISTRY.pop("count-ticks")
    base = run_one(trace, "verl", cluster="h100x8")
    assert run.steps[0].rollout_makespan_s == pytest.approx(base.steps[0].rollout_makespan_s, rel=1e-12)
    by_worker: dict[int, list[int]] = {}
    for w, it in policy.ticks:
        by_worker.setdefault(w, []).append(it)
    for its in by_worker.values():
        assert its == list(range(8, 8 * len(its) + 1, 8))  # every 8th iteration, none missed
    assert len(policy.ticks) > 50
    # a tick the policy ignores does not end the block
    assert run.counters["blocks"] < len(policy.ticks) / 4


@pytest.mark.parametrize("policy", ["ngram", "spec-coupled", "efficientrollout"])
def test_uniform_drafting_shortcut_prices_like_the_general_path(policy: str, monkeypatch) -> None:
    """Every plan of a run priced both ways: the shortcut for "all rows draft alike,
    coupled" (the batch the plan already counted) must equal the per-method general path;
    and a plan whose rows all follow the worker's setting, priced by the planner's
    uniform path, equals the general `_iteration_seconds` (which runs both drafting paths)."""
    from simctl.sim.spec_planner import SpecPlanner

    general = SpecPlanner.draft_times
    general_seconds = SpecPlanner._iteration_seconds
    uniform_seconds = SpecPlanner._uniform_iteration_seconds
    checked = []
    uniform = []

    def both_seconds(self, ids, arrays, blk):
        fast = uniform_seconds(self, ids, arrays, blk)
        slow = general_seconds(self, ids, arrays, blk, None)
        np.testing.assert_array_equal(fast[0], slow[0])
        np.testing.assert_array_equal(fast[1], slow[1])
        uniform.append(True)
        return fast

    def both(self, ids, methods, gamma, window, topk, ctx, finish, batch=None):
        slow = general(self, ids, methods, gamma, window, topk, ctx, finish)
        fast = general(self, ids, methods, gamma, window, topk, ctx, finish, batch)
        np.testing.assert_array_equal(fast[0], slow[0])
        np.testing.assert_array_equal(fast[1], slow[1])
        checked.append(batch is not None and (methods == methods[0]).all() and not window.any())
        return fast

    monkeypatch.setattr(SpecPlanner, "draft_times", both)
    monkeypatch.setattr(SpecPlanner, "_uniform_iteration_seconds", both_seconds)
    lengths = random_lengths(5, 48, hi=900)
    trace = make_trace(make_frame(lengths, accept={"ngram": 0.5, "draft_small": 0.6, "w4_self": 0.7}))
    # TP1: there W4 self-drafting pays off and EfficientRollout's toggle switches SD on
    run_one(trace, policy, cluster="h100x8:tp1")
    assert sum(checked) >= 2, checked  # the shortcut was exercised
    assert len(uniform) >= 2  # and the planner's uniform path
