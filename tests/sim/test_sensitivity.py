"""Sensitivity curves (sim/sensitivity.py, the sweep in simctl/reproduce_runner.py): where a
curve reaches the paper, the transforms a sweep applies, and the shape of what it reports."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simctl.reproduce_runner import Runner, run_experiment, sweep
from simctl.sim.cost_model import DEFAULT_PARAMS
from simctl.sim.experiments import EXPERIMENTS, PAPERS, Experiment, PaperValue, Scale
from simctl.sim.sensitivity import (
    NON_SPECULATIVE,
    SENSITIVITIES,
    Curve,
    Sensitivity,
    cost_params,
    crossing,
    generated,
    logit_shift,
    sensitivity_for,
    with_acceptance,
)
from simctl.traces.generate import generate_trace
from simctl.traces.io import Trace
from simctl.traces.presets import get_preset
from simctl.traces.schema import accept_column, bucket_column

ER = "efficientrollout-qwen7b-8k"
TINY = Scale(1 / 16, "a100x1:tp1", (0,), seeds=1)  # 8 prompts x 8 samples on one A100


def _tiny_trace(preset: str = ER, steps: int = 1, scale: float = 1 / 16) -> Trace:
    df, meta, lists = generate_trace(preset, steps, 0, scale=scale)
    return Trace(df=df, meta=meta, lists=lists)


def _experiment(policy: str, value: tuple[float, float] = (5.0, 6.0), baseline: str = "verl") -> Experiment:
    return Experiment(
        "efficientrollout",
        "efficientrollout/tiny",
        "tiny sweep case",
        ER,
        "rollout_speedup",
        baseline,
        policy,
        PaperValue(value[0], value[1], "Table 2", "test value"),
        TINY,
        TINY,
    )


# --- crossing ----------------------------------------------------------------------------------


def test_crossing_interpolates_the_entry_into_the_range() -> None:
    assert crossing([1, 2, 3], [1.0, 1.5, 2.0], 1.7, 1.9, calibrated=1) == pytest.approx(2.4)
    # falling curve, entered through the upper bound
    assert crossing([1, 2, 3], [2.0, 1.5, 1.0], 1.1, 1.2, calibrated=1) == pytest.approx(2.6)
    # the calibrated point itself in range
    assert crossing([1, 2, 3], [1.0, 1.5, 2.0], 1.4, 1.6, calibrated=2) == 2.0
    # nearest to the calibrated value of the two entries of a hump
    assert crossing([0, 1, 2], [0.0, 2.0, 0.0], 1.0, 1.0, calibrated=1.9) == pytest.approx(1.5)
    assert crossing([1, 2], [1.0, 1.2], 1.7, 1.9, calibrated=1) is None
    assert crossing([1, 2, 3], [1.0, math.nan, 3.0], 1.9, 2.1, calibrated=1) == pytest.approx(1.9)
    with pytest.raises(ValueError):
        crossing([1], [1.0], 2.0, 1.0, calibrated=1)


# Input grids: values to 0.01 (no subnormal spacing, as on any real grid).
_xs = st.lists(st.integers(0, 1000).map(lambda i: i / 100), min_size=2, max_size=8, unique=True)


@given(
    xs=_xs,
    ys=st.lists(st.floats(0.0, 5.0, allow_nan=False), min_size=8, max_size=8),
    lo=st.floats(0.0, 5.0),
    width=st.floats(0.0, 1.0),
    cal=st.floats(0.0, 10.0),
)
@settings(max_examples=300, deadline=None)
def test_crossing_lies_on_the_curve_inside_the_range(xs, ys, lo, width, cal) -> None:
    ys = ys[: len(xs)]
    hi = lo + width
    at = crossing(xs, ys, lo, hi, cal)
    order = np.argsort(xs)
    px, py = np.asarray(xs)[order], np.asarray(ys)[order]
    if any(lo <= y <= hi for y in ys):
        assert at is not None
        on_grid = [x for x, y in zip(xs, ys, strict=True) if lo <= y <= hi]
        assert abs(at - cal) <= min(abs(x - cal) for x in on_grid) + 1e-9  # nearest wins
    if at is None:
        # no segment meets the band: every segment is entirely below or above it
        assert all(max(a, b) < lo or min(a, b) > hi for a, b in itertools.pairwise(py))
    else:
        assert px[0] - 1e-9 <= at <= px[-1] + 1e-9
        assert lo - 1e-6 <= float(np.interp(at, px, py)) <= hi + 1e-6


# --- the declared inputs -----------------------------------------------------------------------


def test_every_paper_declares_one_input_with_a_reason() -> None:
    assert set(PAPERS) <= set(SENSITIVITIES)
    for paper, s in SENSITIVITIES.items():
        assert any(k in s.why for k in ("§", "Table", "Fig.")), paper
        assert s.calibrated in s.grid(True) and s.calibrated in s.grid(False)
        assert len(s.grid(False)) > len(s.grid(True)) >= 3
        assert list(s.grid(True)) == sorted(s.grid(True))
    named = {e.sensitivity for e in EXPERIMENTS} - {None}
    assert named == set(SENSITIVITIES) - set(PAPERS)  # every extra input is used
    for e in EXPERIMENTS:
        s = sensitivity_for(e)
        assert s is not None and s.input == SENSITIVITIES[e.sensitivity or e.paper].input


def test_scheduling_only_rungs_sweep_an_input_they_read() -> None:
    """Divided rollout, context scheduling, HistoPipe and two-tier read no acceptance or
    drafter cost: their misses are swept over memory or lengths, which every run reads."""
    for e in EXPERIMENTS:
        s = sensitivity_for(e)
        assert s is not None
        if e.policy in NON_SPECULATIVE:
            assert s.kind in ("gen", "cluster") and s.reads(e.policy) and s.reads(e.baseline), e.id


def test_layout_and_preset_inputs_take_the_experiments_own_calibrated_value() -> None:
    from simctl.sim.cluster import parse_cluster

    for e in EXPERIMENTS:
        s = sensitivity_for(e)
        scale = e.full or e.quick
        assert s is not None and scale is not None
        if s.kind == "cluster":
            assert s.calibrated == getattr(parse_cluster(scale.cluster), s.name)
        if s.kind == "gen":
            assert s.calibrated == getattr(get_preset(e.preset), s.name)


def test_calibrated_values_are_what_simctl_runs_with() -> None:
    assert SENSITIVITIES["speactor"].calibrated == pytest.approx(
        get_preset("dapo-32b-20k").accept["draft_small"]
    )
    assert SENSITIVITIES["tlt"].calibrated == pytest.approx(get_preset("tlt-qwen32b-32k").accept["eagle"])
    assert SENSITIVITIES["efficientrollout"].calibrated == DEFAULT_PARAMS.eta_d


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown method"):
        Sensitivity("accept:nosuch", "x", 0.5, (0.4,), (0.4,), "§1")
    with pytest.raises(ValueError, match="outside"):
        Sensitivity("accept:ngram", "x", 0.5, (1.2,), (0.4,), "§1")
    with pytest.raises(ValueError, match="no cost-model field"):
        Sensitivity("cost:nosuch", "x", 0.5, (0.4,), (0.4,), "§1")
    with pytest.raises(ValueError, match="kind"):
        Sensitivity("lengths:x", "x", 0.5, (0.4,), (0.4,), "§1")
    with pytest.raises(ValueError, match="not an assumed preset parameter"):
        Sensitivity("gen:max_tokens", "x", 0.5, (0.4,), (0.4,), "§1")
    with pytest.raises(ValueError, match="outside"):
        Sensitivity("gen:icc", "x", 0.5, (1.5,), (0.4,), "§1")
    with pytest.raises(ValueError, match="no cluster field"):
        Sensitivity("cluster:nodes", "x", 0.5, (0.4,), (0.4,), "§1")
    with pytest.raises(ValueError, match="outside"):
        Sensitivity("cluster:gpu_mem_util", "x", 0.9, (0.0,), (0.5,), "§1")


def test_quick_sweeps_keep_the_middle_steps() -> None:
    s = dataclasses.replace(SENSITIVITIES["seer"], quick_steps=1)
    assert s.sweep_steps((0, 1, 2, 3, 4), quick=True) == (2,)
    assert s.sweep_steps((0, 1, 2, 3, 4), quick=False) == (0, 1, 2, 3, 4)
    assert dataclasses.replace(s, quick_steps=2).sweep_steps((0, 100, 199), True) == (0, 100)
    assert dataclasses.replace(s, quick_steps=None).sweep_steps((4,), True) == (4,)


# --- transforms --------------------------------------------------------------------------------


def test_logit_shift_hits_the_mean() -> None:
    v = np.array([0.1, 0.5, 0.8, 0.95])
    for m in (0.2, 0.5, 0.9):
        c = logit_shift(v, m)
        assert float((1 / (1 + np.exp(-(np.log(v / (1 - v)) + c)))).mean()) == pytest.approx(m, abs=1e-9)
    with pytest.raises(ValueError):
        logit_shift(v, 1.0)


def test_with_acceptance_sets_each_step_mean_and_keeps_the_order() -> None:
    trace = _tiny_trace(steps=2)
    col = accept_column("w4_self")
    before = trace.df[col].to_numpy().copy()
    out = with_acceptance(trace, "w4_self", 0.7)
    for _, grp in out.df.groupby("step"):
        assert grp[col].mean() == pytest.approx(0.7, abs=1e-4)
    after = out.df[col].to_numpy()
    for step in (0, 1):  # one monotone map per step: no request overtakes another
        rows = out.df["step"].to_numpy() == step
        order = np.argsort(before[rows], kind="stable")
        assert np.all(np.diff(after[rows][order]) >= 0)
    assert np.array_equal(trace.df[col].to_numpy(), before)  # the input is not modified
    other = accept_column("ngram")
    assert np.array_equal(out.df[other].to_numpy(), trace.df[other].to_numpy())
    assert "accept:w4_self" in out.meta.notes["sensitivity"]


def test_history_keeps_its_first_epoch_floor() -> None:
    trace = _tiny_trace("rhymerl-math-14b-16k", steps=34, scale=1 / 64)
    col = accept_column("history")
    out = with_acceptance(trace, "history", 0.5)
    first = trace.df["epoch"].to_numpy() == 0
    assert np.array_equal(out.df[col].to_numpy()[first], trace.df[col].to_numpy()[first])
    assert out.df[col].to_numpy()[~first].mean() == pytest.approx(0.5, abs=1e-3)


def test_buckets_move_with_their_row() -> None:
    trace = _tiny_trace(scale=1 / 32)  # small traces carry position buckets
    bcol = bucket_column("eagle")
    assert bcol in trace.lists
    out = with_acceptance(trace, "eagle", 0.9)
    old, new = trace.lists[bcol], out.lists[bcol]
    assert isinstance(new, pa.ListArray) and len(new) == len(old)
    assert new.value_lengths().equals(old.value_lengths())
    assert float(np.mean(new.flatten().to_numpy())) > float(np.mean(old.flatten().to_numpy())) + 0.1


def test_cost_params_replace_one_field() -> None:
    s = SENSITIVITIES["efficientrollout"]
    p = cost_params(s, 3.0)
    assert p.eta_d == 3.0 and dataclasses.replace(p, eta_d=DEFAULT_PARAMS.eta_d) == DEFAULT_PARAMS
    assert cost_params(SENSITIVITIES["tlt"], 0.9) == DEFAULT_PARAMS


# --- the sweep ---------------------------------------------------------------------------------


def test_sweep_over_acceptance_raises_the_speedup_and_shares_the_baseline() -> None:
    cal = round(float(get_preset(ER).accept["w4_self"]), 4)  # the untransformed trace's level
    s = Sensitivity("accept:w4_self", "w4", cal, (0.3, 0.6, 0.9), (0.3, 0.6, 0.9), "Table 4")
    runner = Runner()
    curve = sweep(runner, _experiment("quantized-selfspec"), s, quick=True)
    assert curve.values == (0.3, 0.6, 0.9, cal)
    assert all(a < b for a, b in itertools.pairwise(curve.metric))
    assert curve.metric[-1] > 1.0 > curve.metric[0]  # poor drafts slow it down, good ones pay
    verl = [k for k in runner.outcomes if k[2] == "verl"]
    assert len(verl) == 1 and verl[0][3] is None  # the non-speculative baseline ran once
    assert curve.baseline_idle == ()  # ... so it has no idleness curve to show
    assert curve.reaches_paper_at is None  # a 5x speedup is out of reach


def test_sweep_over_drafter_cost_lowers_the_speedup() -> None:
    s = dataclasses.replace(SENSITIVITIES["efficientrollout"], quick_grid=(3.0,))
    curve = sweep(Runner(), _experiment("quantized-selfspec", (1.0, 1.0)), s, quick=True)
    assert curve.values == (s.calibrated, 3.0)
    assert curve.metric[1] < curve.metric[0]
    if curve.metric[1] <= 1.0 <= curve.metric[0]:
        assert curve.reaches_paper_at is not None and s.calibrated <= curve.reaches_paper_at <= 3.0


@pytest.mark.parametrize("policy", sorted(NON_SPECULATIVE))
def test_non_speculative_policies_ignore_the_inputs(policy) -> None:
    """The sweep shares their replays, which is only right if the inputs cannot move them."""
    from simctl.reproduce_runner import _setup
    from simctl.sim.replay import run_policy

    key = (ER, TINY.trace_scale, TINY.replayed, 0)
    runner = Runner()
    base = run_policy(_setup(runner.trace(key), TINY.cluster, key), policy)
    for s, v in ((SENSITIVITIES["efficientrollout"], 4.0), (SENSITIVITIES["tlt"], 0.95)):
        moved = run_policy(_setup(runner.trace(key, (s, v)), TINY.cluster, key, (s, v)), policy)
        assert [m.rollout_makespan_s for m in moved.steps] == [m.rollout_makespan_s for m in base.steps]


def test_a_miss_carries_its_curve_into_json_and_a_hit_does_not() -> None:
    runner = Runner()
    miss = run_experiment(runner, _experiment("quantized-selfspec"), quick=True, seeds=1)
    assert miss.verdict == "below" and isinstance(miss.sensitivity, Curve)
    doc = miss.to_json()["sensitivity"]
    assert {"input", "values", "metric", "reaches_paper_at", "calibrated", "why"} <= set(doc)
    assert doc["input"] == "cost:eta_d" and len(doc["values"]) == len(doc["metric"]) == 4
    assert doc["reaches_paper_at"] is None
    # the calibrated point of the curve is the experiment's own seed-0 run
    cal = doc["values"].index(doc["calibrated"])
    assert doc["metric"][cal] == pytest.approx(miss.summary.mean)
    off = run_experiment(runner, _experiment("quantized-selfspec"), quick=True, seeds=1, sensitivity=False)
    assert off.sensitivity is None and "sensitivity" not in off.to_json()
    hit_value = (miss.summary.mean - 0.01, miss.summary.mean + 0.01)
    hit = run_experiment(runner, _experiment("quantized-selfspec", hit_value), quick=True, seeds=1)
    assert hit.verdict == "in-range" and hit.sensitivity is None


def test_an_input_neither_run_reads_gives_no_curve() -> None:
    curve = sweep(Runner(), _experiment("seer-divided"), SENSITIVITIES["efficientrollout"], quick=True)
    assert curve.values == () and curve.metric == () and curve.reaches_paper_at is None


# --- inputs every run reads: the preset's lengths, the engine's memory ------------------------


def test_generated_moves_only_what_the_parameter_shapes() -> None:
    s = SENSITIVITIES["rhymerl-lengths"]
    preset = "rhymerl-math-14b-16k"
    same = generated(s, preset, 1, 0, 1 / 16, float(get_preset(preset).len_sigma))
    base = _tiny_trace(preset)
    assert same.df.equals(base.df)  # at the preset's own value: the preset's trace
    wide = generated(s, preset, 1, 0, 1 / 16, 1.4)
    narrow = generated(s, preset, 1, 0, 1 / 16, 0.5)
    for t in (wide, narrow):
        assert t.df["prompt_id"].tolist() == base.df["prompt_id"].tolist()  # same layout
        assert "gen:len_sigma" in t.meta.notes["sensitivity"]

    def spread(t: Trace) -> float:
        return float(np.log(t.df["response_len"].to_numpy(np.float64)).std())

    assert spread(narrow) < spread(base) < spread(wide)


def test_a_length_sweep_replays_the_baseline_at_every_value() -> None:
    s = Sensitivity(
        "gen:len_sigma", "spread", float(get_preset(ER).len_sigma), (0.2, 0.9), (0.2, 0.9), "Fig. 1"
    )
    runner = Runner()
    eight = Scale(1 / 16, "a100x8:tp1", (0,), seeds=1)  # 64 requests on 8 workers
    e = dataclasses.replace(_experiment("rhymerl-pipe"), full=eight, quick=eight)
    curve = sweep(runner, e, s, quick=True)
    assert len(curve.values) == len(curve.metric) == len(curve.baseline_idle) == 3
    assert all(math.isfinite(m) for m in curve.metric)
    verl = {k[3] for k in runner.outcomes if k[2] == "verl"}
    assert len(verl) == 3  # the baseline reads the trace: one replay per value
    # each point's idle share is its own baseline replay's, and the replays differ
    key = ("efficientrollout-qwen7b-8k", eight.trace_scale, eight.replayed, 0)
    for v, idle in zip(curve.values, curve.baseline_idle, strict=True):
        variant = None if v == s.calibrated else (s, v)
        assert idle == runner.outcomes[(key, eight.cluster, "verl", variant)].steps[0].gpu_idle_fraction
    assert min(curve.baseline_idle) > 0.0 and len(set(curve.baseline_idle)) == 3


def test_a_memory_sweep_skips_values_at_which_the_model_does_not_fit() -> None:
    s = Sensitivity("cluster:gpu_mem_util", "memory", 0.9, (0.1, 0.5), (0.1, 0.5), "Fig. 3")
    runner = Runner()
    curve = sweep(runner, _experiment("seer-divided"), s, quick=True)
    assert curve.values == (0.1, 0.5, 0.9)
    assert math.isnan(curve.metric[0]) and math.isnan(curve.baseline_idle[0])  # 7B weights > 10%
    assert all(math.isfinite(m) for m in curve.metric[1:])
    assert curve.to_json()["metric"][0] is None
    # the memory reaches the cost model: at half the memory the baseline's engine holds less
    key = (ER, TINY.trace_scale, TINY.replayed, 0)
    half, full = (
        runner.outcomes[(key, TINY.cluster, "verl", (s, 0.5))],
        runner.outcomes[(key, TINY.cluster, "verl", None)],
    )
    assert half.steps[0].rollout_makespan_s >= full.steps[0].rollout_makespan_s
