"""`simctl reproduce`: the experiment table, the runner's outputs, verdicts, and the paper
layout a generated trace records for `simctl replay`."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from simctl.cli import main
from simctl.policies.registry import make_policy
from simctl.sim.cluster import parse_cluster
from simctl.sim.experiments import (
    EXPERIMENTS,
    METRICS,
    PAPERS,
    PIPELINED_POLICIES,
    experiments_of,
    ratio_of_rounded,
    rounded,
)
from simctl.sim.reproduce_stats import summarize, t975, verdict
from simctl.traces.io import read_trace
from simctl.traces.layouts import LAYOUTS, NOT_EXPRESSIBLE, layout_for
from simctl.traces.presets import PRESETS

SAMPLES = Path(__file__).resolve().parents[1] / "traces" / "samples"


# --- the experiment table ----------------------------------------------------------------------


def test_every_paper_has_experiments_and_ids_are_unique() -> None:
    assert {e.paper for e in EXPERIMENTS} == set(PAPERS)
    ids = [e.id for e in EXPERIMENTS]
    assert len(ids) == len(set(ids))
    assert all(e.id.startswith(e.paper + "/") for e in EXPERIMENTS)
    assert experiments_of("all") == EXPERIMENTS
    assert sum(len(experiments_of(p)) for p in PAPERS) == len(EXPERIMENTS)


@pytest.mark.parametrize("e", EXPERIMENTS, ids=lambda e: e.id)
def test_experiment_names_exist_and_values_have_sources(e) -> None:
    assert e.preset in PRESETS
    assert e.metric in METRICS
    make_policy(e.baseline)
    make_policy(e.policy)
    v = e.value
    assert 0 < v.lo <= v.hi and v.source.strip() and v.text.strip()
    assert any(k in v.source for k in ("Table", "Fig.", "§")), v.source
    if e.not_expressible:
        assert e.full is None and e.quick is None and e.preset in NOT_EXPRESSIBLE
        return
    assert e.full is not None and e.quick is not None
    for scale in (e.full, e.quick):
        parse_cluster(scale.cluster)
        if scale.baseline_cluster:
            parse_cluster(scale.baseline_cluster)
        assert scale.cluster == layout_for(e.preset, scale.trace_scale)
        assert scale.steps and scale.seeds >= 1 and not set(scale.steps) & set(scale.warmup)
    assert e.full.trace_scale == 1.0 and e.full.cluster == LAYOUTS[e.preset].spec


@pytest.mark.parametrize("e", [e for e in EXPERIMENTS if e.quick], ids=lambda e: e.id)
def test_quick_runs_the_papers_layout_with_fewer_steps_and_seeds(e) -> None:
    """--quick: the full run's trace scale, clusters and warm-up; a subset of its steps, fewer
    seeds (a scaled-down layout changes what is measured: fewer instances give veRL less
    imbalance, and RhymeRL's two-tier allocation needs more workers than ranking groups)."""
    q, f = e.quick, e.full
    assert (q.trace_scale, q.cluster, q.baseline_cluster, q.warmup) == (
        f.trace_scale,
        f.cluster,
        f.baseline_cluster,
        f.warmup,
    )
    assert q.seeds <= f.seeds and min(f.steps) <= min(q.steps)
    assert len(q.steps) * q.seeds < len(f.steps) * f.seeds or len(f.steps) == 1


def test_every_preset_has_a_layout_or_a_reason() -> None:
    for name in PRESETS:
        assert (name in LAYOUTS) != (name in NOT_EXPRESSIBLE), name
    assert all(NOT_EXPRESSIBLE[n].strip() for n in NOT_EXPRESSIBLE)
    assert all(e.not_expressible for e in EXPERIMENTS if e.preset in NOT_EXPRESSIBLE)


def test_ladders_chain_their_rungs() -> None:
    """Each rung is measured against the rung below it, or every rung against one baseline."""
    ladders: dict[str, list] = {}
    for e in EXPERIMENTS:
        if e.ladder:
            ladders.setdefault(e.ladder, []).append(e)
    assert {"speactor-fig15", "rhymerl-fig14", "seer-table6-moonlight"} <= set(ladders)
    for rungs in ladders.values():
        chained = all(b.baseline == a.policy for a, b in itertools.pairwise(rungs))
        common = len({e.baseline for e in rungs}) == 1
        assert chained or common, [e.id for e in rungs]
        assert len({(e.preset, e.metric) for e in rungs}) == 1


def test_pipelined_policies_exist() -> None:
    for name in PIPELINED_POLICIES:
        assert make_policy(name).name == name


def test_rounding_intervals() -> None:
    assert rounded(1.3, 1) == (1.25, 1.35)
    lo, hi = ratio_of_rounded(82.4, 66.3, 1)
    assert lo < 82.4 / 66.3 < hi and hi - lo < 0.005


# --- statistics and verdicts -----------------------------------------------------------------


def test_verdict_on_hand_made_intervals() -> None:
    assert verdict(1.0, 1.2, 1.1, 1.5) == "in-range"  # overlaps the lower end
    assert verdict(1.6, 1.7, 1.1, 1.5) == "above"
    assert verdict(0.8, 1.09, 1.1, 1.5) == "below"
    assert verdict(1.2, 1.2, 1.2, 1.2) == "in-range"  # point on point
    assert verdict(1.0, 2.0, 1.25, 1.35) == "in-range"  # paper range inside the interval
    with pytest.raises(ValueError):
        verdict(2.0, 1.0, 1.0, 1.5)


def test_summary_is_the_t_interval() -> None:
    s = summarize([1.0, 2.0, 3.0])
    assert s.mean == 2.0 and s.n == 3
    assert s.hi - s.mean == pytest.approx(4.303 * 1.0 / 3**0.5)
    one = summarize([1.5])
    assert (one.lo, one.mean, one.hi, one.n) == (1.5, 1.5, 1.5, 1)
    assert t975(1) == 12.706 and t975(30) == 2.042
    assert 1.96 < t975(200) < t975(31) < 2.042


# --- the command -----------------------------------------------------------------------------


def test_unknown_paper_is_one_line_listing_the_papers() -> None:
    res = CliRunner().invoke(main, ["reproduce", "nosuchpaper"])
    assert res.exit_code == 2  # a usage error, as click's own choices are
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "nosuchpaper" in lines[0]
    assert all(p in lines[0] for p in PAPERS) and "all" in lines[0]


def test_reproduce_one_paper_quick_writes_json_and_page(tmp_path) -> None:
    out, page = tmp_path / "r.json", tmp_path / "page"
    res = CliRunner().invoke(
        main, ["reproduce", "tlt", "--quick", "--seeds", "1", "--json", str(out), "--report", str(page)]
    )
    assert res.exit_code == 0, res.output
    assert "tlt/e2e-vs-verl" in res.output
    doc = json.loads(out.read_text())
    exps = doc["experiments"]
    assert [e["id"] for e in exps] == [e.id for e in experiments_of("tlt")]
    for e in exps:
        assert {"paper", "id", "metric", "paper_value", "simctl", "verdict"} <= set(e)
        assert e["paper"] == "tlt" and e["metric"] == "step_speedup"
        lo, hi = e["paper_value"]
        assert lo <= hi
        sim = e["simctl"]
        assert sim["ci95"][0] <= sim["mean"] <= sim["ci95"][1] and sim["mean"] > 0
        assert sim["n"] == 3  # one seed x the three measured steps after the warm-up step
        assert e["verdict"] == verdict(*sim["ci95"], lo, hi)
        if e["verdict"] in ("below", "above"):  # a miss carries its sensitivity curve
            sens = e["sensitivity"]
            assert sens["input"] == "accept:eagle" and sens["calibrated"] in sens["values"]
            assert sens["values"] == sorted(sens["values"]) and len(sens["metric"]) == len(sens["values"])
            at = sens["reaches_paper_at"]
            assert at is None or sens["values"][0] <= at <= sens["values"][-1]
            slug = e["id"].replace("/", "-")
            assert (page / "figures" / "sensitivity" / f"{slug}.png").stat().st_size > 1000
        else:
            assert "sensitivity" not in e
    html = (page / "index.html").read_text()
    assert 'id="headline-table"' in html and "tlt/e2e-vs-verl" in html and "Fig. 11" in html
    assert (page / "figures" / "tlt.png").stat().st_size > 1000
    # a second run replaces the page whole; a directory holding other files is refused
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "keep.txt").write_text("x")
    res = CliRunner().invoke(main, ["reproduce", "tlt", "--quick", "--report", str(tmp_path / "other")])
    assert res.exit_code == 1 and "keep.txt" in res.output


def test_not_expressible_experiment_is_reported_not_run() -> None:
    import dataclasses

    from simctl.reproduce_runner import run_experiments

    # Every paper layout is expressible today (Kimi-K2's DP32/EP32 FP8 instances included:
    # sim/cluster.py); an experiment whose layout is not stays in the table, unrun, with why.
    kimi = next(e for e in EXPERIMENTS if e.preset == "seer-kimi-k2-96k")
    assert kimi.quick is not None and kimi.not_expressible is None and ":dp32" in kimi.quick.cluster
    missing = dataclasses.replace(kimi, full=None, quick=None, not_expressible="needs a DP128 layout")
    results = run_experiments([missing], quick=True, seeds=1)
    assert {r.verdict for r in results} == {"not-expressible"}
    assert all(r.summary is None and "DP128" in r.reason for r in results)
    assert results[0].to_json()["simctl"] is None


# --- trace presets carry their paper's layout --------------------------------------------------


def test_generated_trace_records_its_scaled_layout_and_replay_uses_it(tmp_path) -> None:
    trace = tmp_path / "er.parquet"
    runner = CliRunner()
    gen = ["trace", "gen", "--preset", "efficientrollout-qwen7b-8k", "--steps", "1", "--seed", "0"]
    res = runner.invoke(main, [*gen, "--scale", "0.25", "-o", str(trace)])
    assert res.exit_code == 0, res.output
    assert read_trace(trace).meta.cluster == "a100x2:tp1"  # 8 A100 TP1 at a quarter of the prompts
    out = tmp_path / "run.json"
    res = runner.invoke(main, ["replay", str(trace), "--policy", "verl", "--json", str(out)])
    assert res.exit_code == 0, res.output
    said = [ln for ln in res.output.splitlines() if "recorded in the trace" in ln]
    assert said == ["cluster a100x2:tp1: the layout recorded in the trace (--cluster overrides)"]
    doc = json.loads(out.read_text())
    assert doc["provenance"]["cluster"]["total_gpus"] == 2 and doc["provenance"]["cluster"]["tp"] == 1
    res = runner.invoke(
        main, ["replay", str(trace), "--policy", "verl", "--cluster", "a100x4:tp1", "--json", str(out)]
    )
    assert res.exit_code == 0 and "recorded in the trace" not in res.output
    assert json.loads(out.read_text())["provenance"]["cluster"]["total_gpus"] == 4


def test_bundled_sample_without_layout_replays_on_the_default(tmp_path) -> None:
    sample = SAMPLES / "dapo-32b-20k-2steps.parquet"
    assert read_trace(sample).meta.cluster is None
    out = tmp_path / "run.json"
    res = CliRunner().invoke(
        main, ["replay", str(sample), "--policy", "verl", "--steps", "0", "--json", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert "recorded in the trace" not in res.output
    assert json.loads(out.read_text())["provenance"]["cluster"]["total_gpus"] == 512


def test_metric_values_follow_the_papers_definitions() -> None:
    from simctl.reproduce_runner import metric_value
    from simctl.sim.metrics import StepMetrics

    base = StepMetrics(0, 100.0, 150.0, 1000, 10.0, 40.0, 0.3, None)
    pol = StepMetrics(0, 50.0, 100.0, 1000, 20.0, 10.0, 0.1, 2.0)
    assert metric_value("rollout_speedup", base, pol) == 2.0
    assert metric_value("step_speedup", base, pol) == 1.5
    assert metric_value("throughput_gain", base, pol) == 2.0
    assert metric_value("tail_reduction", base, pol) == 0.75
    with pytest.raises(ValueError):
        metric_value("training_throughput", base, pol)  # a whole-run metric, not per step


def test_no_sensitivity_skips_the_sweeps(tmp_path) -> None:
    out = tmp_path / "r.json"
    res = CliRunner().invoke(
        main, ["reproduce", "tlt", "--quick", "--seeds", "1", "--no-sensitivity", "--json", str(out)]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["run"]["sensitivity"] is False
    assert any(e["verdict"] in ("below", "above") for e in doc["experiments"])  # misses, yet no curve
    assert all("sensitivity" not in e for e in doc["experiments"])


def test_presets_side_by_side_give_the_serial_results() -> None:
    """--jobs: each preset's experiments in their own process, the same numbers in the same order."""
    from simctl.reproduce_runner import run_experiments

    chosen = [e for e in EXPERIMENTS if e.paper == "tlt"][:1] + [
        e for e in EXPERIMENTS if e.id == "efficientrollout/rollout-vs-verl"
    ]
    serial, parallel = (
        [r.to_json() for r in run_experiments(chosen, quick=True, seeds=1, sensitivity=False, jobs=jobs)]
        for jobs in (1, 2)
    )
    assert [r["id"] for r in parallel] == [e.id for e in chosen]
    assert parallel == serial
    assert all(r["simctl"] is not None for r in serial)
