"""Cost-model calibration: every micro figure listed with its source, errors that equal a
recomputation, fitted points within tolerance, and one cost model per GPU for every preset
and experiment (no per-experiment tuning)."""

from __future__ import annotations

import dataclasses
import re
from types import SimpleNamespace

import pytest

from simctl.reproduce_cmd import document
from simctl.reproduce_runner import _setup
from simctl.sim.calibration_points import CONTEXT, POINTS, TOLERANCE, evaluate
from simctl.sim.cluster import parse_cluster
from simctl.sim.cost_model import DEFAULT_PARAMS, RooflineCostModel, load_cost_model
from simctl.sim.experiments import EXPERIMENTS, PAPERS
from simctl.sim.hardware import GPUS, get_gpu
from simctl.sim.models import get_model
from simctl.traces.layouts import LAYOUTS
from simctl.traces.presets import PRESETS

ROWS = evaluate()


def test_every_point_has_a_source_and_unique_id() -> None:
    ids = [p.id for p in POINTS]
    assert len(ids) == len(set(ids))
    papers = set(PAPERS.values())
    for p in POINTS:
        assert p.paper in papers, p.paper  # title and arXiv id live in sim/experiments.py
        assert re.search(r"Table|Fig\.|§", p.source), p.source
        assert p.quantity.strip() and p.unit.strip() and p.paper_value > 0
        assert "/" not in p.paper and ".md" not in p.source  # papers, never file paths


def test_errors_equal_recomputation() -> None:
    for r in ROWS:
        relative = r.simctl / r.paper_value - 1.0
        assert r.error == pytest.approx(max(relative, 0.0) if r.at_most else relative)
        assert r.within_tolerance == (abs(r.error) <= TOLERANCE)
    # a bound ("no or negative gain") is met anywhere at or below it
    fig5b = next(r for r in ROWS if r.id == "sa-fig5b-spec-gain-batch-128")
    assert fig5b.at_most and fig5b.simctl < 1.0 and fig5b.error == 0.0
    # two points recomputed from scratch, outside the module's helpers
    by = {r.id: r for r in ROWS}
    h100 = RooflineCostModel(get_model("Qwen2.5-7B"), get_gpu("h100"), 1)
    assert by["tlt-t2-h100-7b-decode"].simctl == pytest.approx(
        1e3 * float(h100.iteration_time(1, 1, CONTEXT))
    )
    assert by["tlt-t2-h100-7b-decode"].paper_value == pytest.approx(1e3 / 164.65, abs=1e-3)
    h800 = RooflineCostModel(get_model("Qwen2.5-32B"), get_gpu("h800"), 4)
    ratio = float(h800.iteration_time(256, 768, 256 * CONTEXT)) / float(
        h800.iteration_time(128, 384, 128 * CONTEXT)
    )
    assert by["sa-fig6b-verify-2x-batch"].simctl == pytest.approx(ratio)


def test_fitted_points_are_within_tolerance_and_misses_are_explained() -> None:
    for r in ROWS:
        if r.fitted:
            assert r.within_tolerance, (r.id, r.error)
        if not r.within_tolerance:
            assert "Outside tolerance" in r.note, r.id


def test_json_document_carries_the_calibration_table() -> None:
    doc = document([], {"mode": "quick"}, ROWS)
    assert [c["id"] for c in doc["calibration"]] == [p.id for p in POINTS]
    assert doc["calibration"][0]["error"] == ROWS[0].error


# --- one cost model per hardware --------------------------------------------------------------


def _runner_cost(preset: str, cluster: str):
    """The cost model exactly as `simctl reproduce` builds it for a run."""
    trace = SimpleNamespace(meta=SimpleNamespace(model=PRESETS[preset].model))
    return _setup(trace, cluster, (preset, 1.0, (0,), 0)).cost  # type: ignore[arg-type]


def test_every_experiment_uses_the_gpus_one_cost_model() -> None:
    seen: dict[str, tuple] = {}
    for e in EXPERIMENTS:
        for scale in (e.full, e.quick):
            if scale is None:
                continue
            for cluster in {scale.cluster, scale.baseline_cluster or scale.cluster}:
                cm = _runner_cost(e.preset, cluster)
                assert isinstance(cm, RooflineCostModel)
                assert cm.params is DEFAULT_PARAMS, e.id
                gpu = parse_cluster(cluster).gpu
                assert cm.gpu is GPUS[gpu.name], e.id
                seen.setdefault(gpu.name, (cm.params, cm.gpu))
                assert seen[gpu.name] == (cm.params, cm.gpu), e.id


def test_presets_and_layouts_agree_on_hardware() -> None:
    for name, layout in LAYOUTS.items():
        assert get_gpu(layout.gpu) is get_gpu(PRESETS[name].hardware), name
        cm = load_cost_model(PRESETS[name].model, parse_cluster(layout.spec))
        assert isinstance(cm, RooflineCostModel) and cm.params is DEFAULT_PARAMS, name


def test_cost_constants_are_not_per_gpu_except_the_fitted_platform_terms() -> None:
    # Only datasheet numbers and two engine-on-platform terms (the all-reduce latency and the
    # per-sequence cost, each fitted per platform to a published measurement, sim/hardware.py)
    # differ between GPUs; every efficiency and other overhead is shared.
    fields = {"name", "hbm_bytes", "hbm_bw", "bf16_flops", "fp8_flops", "nvlink_bw", "rdma_bw", "pcie_bw"}
    for gpu in GPUS.values():
        assert set(gpu.to_dict()) == fields | {"allreduce_latency_s", "per_seq_overhead_s"}
    assert DEFAULT_PARAMS.per_seq_overhead_s is None  # the platform's value, unless overridden


def test_per_sequence_cost_is_the_platforms_unless_overridden() -> None:
    # A100's c_T is fitted to EfficientRollout Fig. 6c; it prices each running sequence of an
    # iteration, so batch 128 pays 127 more of it than batch 1, and a parameter overrides it.
    model, a100 = get_model("qwen2.5-7b"), get_gpu("a100")
    cm = RooflineCostModel(model, a100, 1)
    assert cm.per_seq_overhead_s == a100.per_seq_overhead_s == pytest.approx(74e-6)
    extra = float(cm.iteration_time(128, 128, 128 * 600.0)) - float(cm.iteration_time(1, 1, 600.0))
    base = RooflineCostModel(model, a100, 1, dataclasses.replace(DEFAULT_PARAMS, per_seq_overhead_s=10e-6))
    extra10 = float(base.iteration_time(128, 128, 128 * 600.0)) - float(base.iteration_time(1, 1, 600.0))
    assert extra - extra10 == pytest.approx(127 * 64e-6, rel=1e-6)
    assert get_gpu("h800").per_seq_overhead_s == pytest.approx(10e-6)


# --- step time beyond rollout ------------------------------------------------------------------


def test_er_tokens_per_step_matches_the_preset() -> None:
    # ER_TOKENS_PER_STEP is the preset's 100-step mean at scale 1 (seed 0); a quarter of the
    # responses, same seed, must average a quarter of it (sampling noise ~1%).
    from simctl.sim.calibration_points import ER_TOKENS_PER_STEP
    from simctl.traces.generate import generate_trace

    df, _, _ = generate_trace("efficientrollout-qwen7b-8k", 100, 0, scale=0.25)
    per_step = (df["response_len"] + df["prompt_len"]).groupby(df["step"]).sum().mean()
    assert 4 * per_step == pytest.approx(ER_TOKENS_PER_STEP, rel=0.05)


def test_outside_rollout_time_scales_with_the_work() -> None:
    from simctl.sim.step_time import post_rollout_time
    from simctl.traces.schema import StepTiming

    def post(tokens: int, params: float, gpus: int):
        return post_rollout_time(StepTiming(), tokens, params, 2 * params, gpus, 312e12, 25e9)

    base = post(1_000_000, 7e9, 8)
    assert base.source == "model" and base.reward_s == 0.0
    assert post(2_000_000, 7e9, 8).train_s == pytest.approx(2 * base.train_s)
    assert post(1_000_000, 14e9, 8).train_s == pytest.approx(2 * base.train_s)
    assert post(1_000_000, 7e9, 16).train_s == pytest.approx(base.train_s / 2)
    assert post(1_000_000, 14e9, 8).weight_sync_s == pytest.approx(2 * base.weight_sync_s)
    measured = post_rollout_time(StepTiming(1.0, 2.0, 3.0), 1, 1.0, 1.0, 1, 1.0, 1.0)
    assert (measured.source, measured.train_s) == ("trace", 2.0)
    # each phase on its own: measured reward and sync are kept where training is modelled
    partial = post_rollout_time(
        StepTiming(reward_s=50.0, weight_sync_s=30.0), 1_000_000, 7e9, 14e9, 8, 312e12, 25e9
    )
    assert (partial.reward_s, partial.weight_sync_s, partial.source) == (50.0, 30.0, "trace+model")
    assert partial.train_s == base.train_s
    trained = post_rollout_time(StepTiming(train_s=20.0), 1_000_000, 7e9, 14e9, 8, 312e12, 25e9)
    assert (trained.reward_s, trained.train_s, trained.weight_sync_s) == (0.0, 20.0, base.weight_sync_s)


def test_reproduce_runs_model_the_phases_after_rollout() -> None:
    from simctl.reproduce_runner import Runner

    trace = Runner().trace(("efficientrollout-qwen7b-8k", 0.05, (0,), 0))
    assert trace.meta.timing.train_s is None and trace.meta.step_timing == {}


def test_a_replay_keeps_each_measured_phase_of_a_converted_trace() -> None:
    """A converted trace that measured reward and sync but not training, with a step whose
    override gives only the reward: each step's run.json parts keep what was measured and
    model the rest (both phases were dropped for a modelled training before)."""
    from simctl.traces.schema import StepTiming
    from tests.factories import make_frame, make_trace, random_lengths, run_one

    trace = make_trace([make_frame(random_lengths(s, 16), step=s) for s in (0, 1)])
    trace.meta.source = "converted"
    trace.meta.timing = StepTiming(reward_s=50.0, weight_sync_s=30.0)
    trace.meta.step_timing = {1: StepTiming(reward_s=100.0)}
    steps = run_one(trace).steps
    assert [(s.reward_s, s.weight_sync_s, s.post_source) for s in steps] == [
        (50.0, 30.0, "trace+model"),
        (100.0, 30.0, "trace+model"),
    ]
    assert all(s.train_s > 0 for s in steps)
    assert steps[0].step_time_s > steps[0].rollout_makespan_s + 80.0
