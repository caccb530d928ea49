"""The timeline's phase split (prefill_s, recompute_s, draft_s): what the simulator priced,
per segment, checked against hand-priced cases with an affine cost model, and never more
than the segment lasted. The makespan breakdown (reports/breakdown.py) is built on it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simctl.policies.registry import make_policy
from simctl.reports.breakdown import _sim_busy
from simctl.sim.replay import run_policy
from simctl.traces.cli_options import WorkerFault
from simctl.traces.run_format import PHASE_COLUMNS
from tests.factories import LinearCost, make_frame, make_setup, make_trace, random_lengths, run_one

FAST = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ONE_WORKER = "h100x8:tp8"
COST = LinearCost()


def _timeline(run) -> pd.DataFrame:
    return pd.concat(run.timeline, ignore_index=True)


def _prefill(tokens: int) -> float:
    return float(COST.prefill_time(tokens))


def _check_segments(tl: pd.DataFrame) -> None:
    """Every phase is >= 0 and together they fit in the segment."""
    span = (tl["t1_s"] - tl["t0_s"]).to_numpy()
    phases = tl[list(PHASE_COLUMNS)].to_numpy()
    assert not np.isnan(phases).any()
    assert (phases >= 0).all()
    assert (phases.sum(axis=1) <= span * (1 + 1e-12)).all()


def test_prefill_is_priced_once_per_admission_batch() -> None:
    """One worker, 8 requests of a 128-token prompt, at most 4 running: 4 admitted at once,
    then each finish admits one (distinct lengths), five prefill passes in all."""
    lengths = np.array([300, 310, 320, 330, 340, 350, 360, 370])
    trace = make_trace(make_frame(lengths, prompt_len=128))
    run = run_one(trace, "verl", cluster=ONE_WORKER, cost=COST, max_num_seqs=4)
    tl = _timeline(run)
    _check_segments(tl)
    assert tl["prefill_s"].sum() == pytest.approx(_prefill(4 * 128) + 4 * _prefill(128), rel=1e-12)
    assert (tl["prefill_s"] > 0).sum() == 5
    assert tl["recompute_s"].sum() == 0 and tl["draft_s"].sum() == 0
    # the first segment starts with the first pass
    first = tl.sort_values("t0_s").iloc[0]
    assert first["t0_s"] == 0 and first["prefill_s"] == pytest.approx(_prefill(512), rel=1e-12)


def test_preempted_context_is_recompute_priced_as_the_simulator_did() -> None:
    """Two 100-token prompts, 600 tokens each, KV for 1000 tokens: after 400 iterations
    (2 x 500 context fills it) the later admitted is preempted by recompute; it is
    re-admitted alone when the other finishes and recomputes its 500-token context."""
    trace = make_trace(make_frame([600, 600], group_size=2, prompt_len=100), group_size=2)
    cost = LinearCost(kv_capacity_tokens=1000)
    run = run_one(trace, "verl", cluster=ONE_WORKER, cost=cost)
    req = pd.concat(run.requests, ignore_index=True)
    assert req["preemptions"].tolist() == [0, 1]
    tl = _timeline(run)
    _check_segments(tl)
    assert tl["prefill_s"].sum() == pytest.approx(float(cost.prefill_time(200)), rel=1e-12)
    assert tl["recompute_s"].sum() == pytest.approx(float(cost.prefill_time(500)), rel=1e-12)
    # the recompute pass opens the segment that starts when the first request finished
    rec = tl[tl["recompute_s"] > 0]
    assert len(rec) == 1 and rec["t0_s"].iloc[0] == pytest.approx(req["finish_s"].min(), rel=1e-12)
    # nothing of the makespan is unaccounted: the priced parts plus decoding are the busy time
    busy = float((tl["t1_s"] - tl["t0_s"]).sum())
    assert busy == pytest.approx(run.steps[0].rollout_makespan_s, rel=1e-12)  # one worker, never idle


def test_admission_after_preemption_shares_one_pass_by_tokens() -> None:
    """A pass that holds both a new prompt and a recompute is priced once on all its tokens
    and split in proportion to them. Two slots, KV for 1000 tokens: the two long requests
    run until the second is preempted with a 500-token context (as above); when the first
    finishes, the queue head (the preempted one, re-queued first) and a new 100-token prompt
    are admitted together: one pass of 600 tokens, 5/6 of it recompute."""
    trace = make_trace(make_frame([600, 600, 50, 50], group_size=4, prompt_len=100))
    cost = LinearCost(kv_capacity_tokens=1000)
    run = run_one(trace, "verl", cluster=ONE_WORKER, cost=cost, max_num_seqs=2)
    tl = _timeline(run).sort_values("t0_s")
    _check_segments(tl)
    passes = tl[(tl["prefill_s"] > 0) | (tl["recompute_s"] > 0)]
    mixed = float(cost.prefill_time(600))
    np.testing.assert_allclose(
        passes[["prefill_s", "recompute_s"]].to_numpy(),
        [
            [float(cost.prefill_time(200)), 0.0],
            [mixed / 6, mixed * 5 / 6],
            [float(cost.prefill_time(100)), 0.0],
        ],
        rtol=1e-12,
    )


@pytest.mark.parametrize("gamma", [2, 4])
def test_coupled_drafting_is_what_the_drafter_was_priced(gamma: int) -> None:
    """LinearCost prices a coupled draft pass at draft_s x gamma per iteration, whatever the
    batch: the timeline's draft seconds are that times the iterations speculated. The first
    iteration prefills every prompt at once and nobody has a token to draft from yet, so
    it drafts nothing (every later admission joins a batch that drafts)."""
    trace = make_trace(make_frame(random_lengths(5, 16, hi=600), accept={"draft_small": 0.7}))
    run = run_one(trace, f"spec-coupled:method=draft_small,gamma={gamma}", cluster=ONE_WORKER, cost=COST)
    tl = _timeline(run)
    _check_segments(tl)
    assert (tl["gamma_mean"] > 0).all()
    speculated = tl["iterations"] - (tl["t0_s"] == 0)
    assert (tl["t0_s"] == 0).sum() == 1
    assert tl["draft_s"].sum() == pytest.approx(COST.draft_s * gamma * speculated.sum(), rel=1e-9)
    np.testing.assert_allclose(tl["draft_s"], COST.draft_s * gamma * speculated, rtol=1e-9)
    plain = _timeline(run_one(trace, "verl", cluster=ONE_WORKER, cost=COST))
    assert plain["draft_s"].sum() == 0 and (plain["gamma_mean"] == 0).all()
    # the same admissions: the same prefill whatever the worker decodes with
    assert tl["prefill_s"].sum() == pytest.approx(plain["prefill_s"].sum(), rel=1e-12)


def test_roofline_drafting_is_positive_and_plain_decoding_drafts_nothing() -> None:
    """With the roofline cost model: a model drafter costs drafting time, verl none."""
    trace = make_trace(make_frame(random_lengths(2, 32, hi=800), accept={"draft_small": 0.7, "ngram": 0.4}))
    for policy, drafts in (("verl", False), ("ngram", True), ("spec-coupled", True)):
        tl = _timeline(run_one(trace, policy, cluster="h100x8:tp2"))
        _check_segments(tl)
        assert (tl["draft_s"].sum() > 0) == drafts, policy
        assert tl["prefill_s"].sum() > 0


def test_a_lost_workers_partial_block_keeps_only_its_completed_iterations() -> None:
    """A fault mid-block: the segments before it still fit their phases; the re-placed
    requests recompute their context on the survivors (KV lost with the worker)."""
    trace = make_trace(make_frame(random_lengths(4, 32, lo=200, hi=900), accept={"ngram": 0.5}))
    for policy in ("verl", "ngram"):
        setup = make_setup(trace, cluster="h100x8:tp2", cost=COST, seed=1)
        setup.faults = (WorkerFault(worker=1, time_s=2.0),)
        run = run_policy(setup, make_policy(policy))
        tl = _timeline(run)
        _check_segments(tl)
        lost = tl[tl["worker"] == 1]
        assert lost["t1_s"].max() <= 2.0 + 1e-12
        assert tl["recompute_s"].sum() > 0, policy


@FAST
@given(
    seed=st.integers(0, 10_000),
    policy=st.sampled_from(
        ["verl", "ngram", "spec-coupled", "speactor-decoupled", "seer-divided", "rlhfuse"]
    ),
    kv=st.sampled_from([4_000, 20_000, 1_000_000]),
)
def test_phases_fit_their_segments_and_the_split_adds_up(seed: int, policy: str, kv: int) -> None:
    """Any policy, any KV pressure: phases >= 0, within their segment, and the breakdown's
    busy phases add up to the busy time exactly."""
    lengths = random_lengths(seed, 32, hi=1500)
    accept = {"ngram": 0.5, "draft_small": 0.7, "draft_medium": 0.8}
    trace = make_trace(make_frame(lengths, accept=accept))
    run = run_one(trace, policy, cluster="h100x8:tp2", cost=LinearCost(kv_capacity_tokens=kv), seed=seed)
    tl = _timeline(run)
    _check_segments(tl)
    dur = (tl["t1_s"] - tl["t0_s"]).to_numpy()
    parts = _sim_busy(tl, dur, 1.0)
    assert sum(parts.values()) == pytest.approx(dur.sum(), rel=1e-12)
    assert min(parts.values()) >= 0
    assert parts["prefill"] > 0
    if run.counters.get("preemptions", 0):
        assert parts["preemption recompute"] > 0
    if policy in ("verl", "rlhfuse", "seer-divided"):
        assert parts["draft"] == 0 and parts["verify"] == 0


def test_chrome_trace_carries_the_phase_seconds() -> None:
    from simctl.traces.chrome_trace import chrome_trace

    trace = make_trace(make_frame([300, 310, 320, 330], prompt_len=128))
    tl = _timeline(run_one(trace, "verl", cluster=ONE_WORKER, cost=COST))
    doc = chrome_trace(tl, None, {})
    busy = sorted((e for e in doc["traceEvents"] if e.get("cat") == "busy"), key=lambda e: e["ts"])
    assert busy[0]["args"]["prefill_s"] == pytest.approx(_prefill(4 * 128), rel=1e-12)
    assert all(e["args"]["draft_s"] == 0 and e["args"]["recompute_s"] == 0 for e in busy)
