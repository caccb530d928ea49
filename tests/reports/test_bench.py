"""The benchmark script still runs (tiny size): synthesised run dir -> report within budget."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_bench_smoke(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import bench_report
    finally:
        sys.path.remove(str(ROOT / "bench"))
    assert bench_report.main(["--steps", "2", "--policies", "2", "--keep", str(tmp_path)]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["within_budget"] and result["figures"] >= 8
    meta = json.loads((tmp_path / "report" / "report.json").read_text())
    assert meta["left_out"] == [] and meta["warnings"] == []


def test_study_projection(capsys):
    """The 200-step study is projected from CPU per step: its six points (200 steps of a
    policy each, indivisible) packed onto 1, 2 and 64 workers, flagged when 2 workers
    would take over 10 minutes; the longest point bounds it whatever the workers."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import bench_sim_speed
    finally:
        sys.path.remove(str(ROOT / "bench"))
    cpu = dict.fromkeys(bench_sim_speed.STUDY, 0.5)  # 6 points of 200 x 0.5 s = 100 s
    bench_sim_speed.study_projection(cpu)
    line = capsys.readouterr().out.strip().splitlines()[0]
    assert "1 workers   10.0 min" in line and "2 workers    5.0 min" in line and not line.endswith("*")
    assert "64 workers    1.7 min" in line  # one point each: a point's 100 s, not 600 / 64
    bench_sim_speed.study_projection({**cpu, "composite": 6.0})  # composite alone: 1,200 s
    out = capsys.readouterr().out.strip().splitlines()
    assert "2 workers   20.0 min" in out[0] and "64 workers   20.0 min" in out[0] and out[0].endswith("*")
    assert "longest point: composite, 20.0 min" in out[1]
    bench_sim_speed.study_projection({"verl": 1.0})
    assert "not projected" in capsys.readouterr().out


def test_pack_lpt():
    """Points go longest first to the least loaded worker; never below the longest."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import bench_sim_speed
    finally:
        sys.path.remove(str(ROOT / "bench"))
    assert bench_sim_speed.pack([3.0, 3.0, 2.0, 2.0, 2.0], 2) == 7.0
    assert bench_sim_speed.pack([1.0] * 6, 4) == 2.0
    assert bench_sim_speed.pack([5.0, 1.0], 1) == 6.0


def test_study_sweep(tmp_path, monkeypatch, capsys):
    """`bench_sweep.py --study` sweeps the study's policies over generated dapo steps with
    1 and 2 workers and projects 200 steps from each point's CPU (here two cheap policies,
    one step, the local pool)."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import bench_sim_speed
        import bench_sweep
    finally:
        sys.path.remove(str(ROOT / "bench"))
    monkeypatch.setattr(bench_sim_speed, "STUDY", ("verl", "rhymerl"))
    res = bench_sweep.study(tmp_path, 1, use_ray=False)
    assert res["one"]["points"] == res["two"]["points"] == 2
    assert set(res["cpu_s_per_step"]) == {"verl", "rhymerl"}
    cpu = res["cpu_s_per_step"]
    proj = res["projected_200_steps_min"]
    # one point per worker on 2 workers: the longer point, whatever the number of workers
    assert proj[2] == proj[64] == round(200 * max(cpu.values()) / 60, 1)
    assert proj[1] >= proj[2]
    assert "200 steps projected" in capsys.readouterr().out


def test_cost_split():
    """`sim_cost_split.py` parts a replay's CPU into the policy's code, speculative planning
    and the rest: verl plans no speculative block, ngram does, and the parts fit in the
    total."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import sim_cost_split
    finally:
        sys.path.remove(str(ROOT / "bench"))
    sample = ROOT / "traces/samples/efficientrollout-qwen7b-8k-6steps.parquet"
    plain = sim_cost_split.split("verl", sample)
    spec = sim_cost_split.split("ngram", sample)
    assert plain["planning"] == 0.0 and plain["policy"] > 0.0
    assert spec["planning"] > 0.0
    for parts in (plain, spec):
        assert parts["policy"] + parts["planning"] <= parts["total"]


def test_vidur_crosscheck_matches_the_documented_ranges():
    """`vidur_crosscheck.py`: Vidur's side is the layers times the profiled per-layer ops (and
    two all-reduces with their launch cost at TP>1), and the ranges docs/calibration.md
    states ("Vidur cross-check") are what the cost model gives now: a change of the cost
    model that moves them must update that section."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import vidur_crosscheck as vc
    finally:
        sys.path.remove(str(ROOT / "bench"))
    table = vc.rows()
    assert len(table) == 42 and set(table["tp"]) == {1, 2, 4, 8}
    row = table[(table["model"] == "Llama-2-70B") & (table["tp"] == 4) & (table["tokens"] == 8)].iloc[0]
    assert row["vidur_ms"] == pytest.approx(80 * (0.187 + 2 * (0.041 + 0.02)))
    ranges = {
        ("decode", False): (0.59, 0.90, 0.59, 0.90),
        ("decode", True): (0.29, 0.89, 0.45, 1.02),
        ("prefill", False): (0.90, 1.07, 0.90, 1.07),
        ("prefill", True): (0.51, 1.03, 0.63, 1.05),
    }
    for (kind, sharded), want in ranges.items():
        part = table[(table["kind"] == kind) & ((table["tp"] > 1) == sharded)]
        got = (
            part["layers_over_vidur"].min(),
            part["layers_over_vidur"].max(),
            part["no_comm_over_vidur"].min(),
            part["no_comm_over_vidur"].max(),
        )
        assert [round(g, 2) for g in got] == list(want), (kind, sharded)
    doc = (ROOT / "docs/calibration.md").read_text()
    assert "| decode, 8-256 sequences | 0.59-0.90 | 0.29-0.89 | 0.45-1.02 |" in doc
    assert "| prefill, one sequence of 512-4,096 tokens | 0.90-1.07 | 0.51-1.03 | 0.63-1.05 |" in doc
