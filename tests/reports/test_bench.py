"""The benchmark script still runs (tiny size): synthesised run dir -> report within budget."""

from __future__ import annotations

import gc
import itertools
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


def test_measure_keeps_the_fastest_run(monkeypatch):
    """`--repeat`: a cell is the fastest of its runs (a noisy machine only adds time), an
    error counts only when every run failed."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import bench_sim_speed
    finally:
        sys.path.remove(str(ROOT / "bench"))
    runs = iter([{"cpu_s": 2.0, "blocks": 5}, {"error": "boom"}, {"cpu_s": 1.5, "blocks": 5}])
    monkeypatch.setattr(bench_sim_speed, "_measure_once", lambda *a: next(runs))
    assert bench_sim_speed.measure(Path("t.parquet"), 1, "verl", 3) == {"cpu_s": 1.5, "blocks": 5}
    calls = []
    monkeypatch.setattr(bench_sim_speed, "_measure_once", lambda *a: calls.append(a) or {"error": "boom"})
    assert bench_sim_speed.measure(Path("t.parquet"), 8, "seer", 2) == {"error": "boom"}
    assert calls == [(Path("t.parquet"), 8, "seer")] * 2
    monkeypatch.setattr(bench_sim_speed, "_measure_once", lambda *a: {"cpu_s": 3.0})
    assert bench_sim_speed.measure(Path("t.parquet"), 1, "verl", 0) == {"cpu_s": 3.0}  # at least one run


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
    assert plain["planning"] == 0.0 and plain["policy"] > 0.0 and plain["plans"] == 0
    assert spec["planning"] > 0.0 and spec["plans"] >= 2
    for parts in (plain, spec):
        assert parts["policy"] + parts["planning"] <= parts["total"]
        assert 0.0 <= parts["gc"] <= parts["total"]  # (the collector's seconds are inside it)
    assert not [c for c in gc.callbacks if getattr(c, "__qualname__", "").startswith("_collector_seconds")]


def test_plan_fit_recovers_fixed_and_per_cell_costs():
    """`fit_plans` splits plan seconds into a per-plan and a per-cell part: on plans built
    as 200 us + 8 ns per cell it finds both, and the parts add up to the total."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import sim_cost_split
    finally:
        sys.path.remove(str(ROOT / "bench"))
    shapes = [(26, 72), (10, 116), (128, 400), (3, 5), (64, 2000)]
    blocks = [(b, k, 200e-6 + 8e-9 * b * k) for b, k in shapes]
    fit = sim_cost_split.fit_plans(blocks)
    assert fit["plans"] == 5
    assert fit["per_plan_s"] == pytest.approx(200e-6) and fit["per_cell_s"] == pytest.approx(8e-9)
    assert fit["fixed_s"] + fit["cells_s"] == pytest.approx(sum(t for _, _, t in blocks))
    assert sim_cost_split.fit_plans([(4, 4, 1.0)])["per_plan_s"] == 0.0  # one plan: no fit


def test_policy_alone_flags_a_policy_whose_own_code_exceeds_the_target():
    """A policy whose `on_event` alone costs over 3x verl's whole replay cannot reach the
    target by any simulator speed-up (composite on the DAPO sample: 9.9 s against 0.9 s)."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import sim_cost_split
    finally:
        sys.path.remove(str(ROOT / "bench"))
    assert sim_cost_split.policy_alone({"policy": 9.9}, 0.9) == pytest.approx(11.0)
    assert sim_cost_split.policy_alone({"policy": 1.8}, 0.9) is None  # 2x: within


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


def test_published_crosscheck_matches_the_documented_ranges():
    """`published_crosscheck.py`: each published timing becomes ms per output step (a batch's
    wall time over its output tokens, or batch / output tokens per second), and the ranges
    docs/calibration.md states ("Published decode timings cross-check") are what the cost
    model gives now: a change of the cost model that moves them must update that section."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import published_crosscheck as pc
    finally:
        sys.path.remove(str(ROOT / "bench"))
    table = pc.rows()
    assert len(table) == 77 and set(table["gpu"]) == {"a100", "h100"}
    assert len(table[table["gpu"] == "h100"]) == 49 and table["source"].nunique() == 4
    trt = table[
        (table["engine"] == "TensorRT-LLM")
        & (table["model"] == "Llama-3-8B")
        & (table["tp"] == 1)
        & (table["batch"] == 1)
        & (table["in"] == 128)
    ].iloc[0]
    assert trt["published_ms"] == pytest.approx(1e3 * 0.896754 / 128)
    turbo = table[
        (table["model"] == "Llama-2-70B") & (table["engine"] == "TurboMind") & (table["batch"] == 64)
    ]
    assert turbo.iloc[0]["published_ms"] == pytest.approx(1e3 * 64 / 1425.79)
    # (source, engine, gpu, tp>1): ratio range, batch-1 weight-streaming share of the datasheet
    # HBM bandwidth, implied all-reduce latency at batch 1 (us)
    ranges = {
        ("argonne", "TensorRT-LLM", "h100", False): (0.77, 0.92, 0.60, 0.68, None),
        ("argonne", "TensorRT-LLM", "h100", True): (0.67, 0.84, None, None, (20, 38)),
        ("argonne", "vLLM", "h100", False): (0.69, 0.83, 0.58, 0.62, None),
        ("argonne", "vLLM", "h100", True): (0.44, 0.82, None, None, (27, 56)),
        ("torchao", "torch.compile", "h100", False): (0.82, 0.82, 0.61, 0.61, None),
        ("torchao", "torch.compile", "a100", False): (0.95, 1.00, 0.71, 0.75, None),
        ("gpt-fast", "torch.compile", "a100", False): (0.93, 0.98, 0.69, 0.74, None),
        ("gpt-fast", "torch.compile", "a100", True): (0.84, 1.58, None, None, (12, 107)),
        ("lmdeploy", "TurboMind", "a100", False): (0.79, 1.13, 0.66, 0.73, None),
        ("lmdeploy", "TurboMind", "a100", True): (0.80, 1.01, None, None, (43, 43)),
    }
    summary = pc.summary(table)
    assert len(summary) == len(ranges)
    for key, (lo, hi, hbm_lo, hbm_hi, ar) in ranges.items():
        got = summary.loc[key]
        assert [round(got["ratio_min"], 2), round(got["ratio_max"], 2)] == [lo, hi], key
        if hbm_lo is not None:
            assert [round(got["b1_hbm_min"], 2), round(got["b1_hbm_max"], 2)] == [hbm_lo, hbm_hi], key
        if ar is not None:
            assert (round(got["implied_ar_us_min"]), round(got["implied_ar_us_max"])) == ar, key
    # gpt-fast's TP>1 all-reduce range without the Llama-3.1-70B TP2 row (weights fill the card)
    fast = table[(table["source"] == "gpt-fast") & (table["tp"] > 1)]
    full = (fast["model"] == "Llama-3.1-70B") & (fast["tp"] == 2)
    assert round(fast.loc[~full, "implied_ar_us"].max()) == 31
    assert round(fast.loc[full, "ratio"].iloc[0], 2) == 0.84
    doc = (ROOT / "docs/calibration.md").read_text()
    for line in (
        "| LLM-Inference-Bench, TensorRT-LLM 0.11 | H100 | 0.77-0.92 | 0.67-0.84 | 0.60-0.68 | 20-38 us |",
        "| LLM-Inference-Bench, vLLM V0 | H100 | 0.69-0.83 | 0.44-0.82 | 0.58-0.62 | 27-56 us |",
        "| torchao, torch.compile | H100 | 0.82 | - | 0.61 | - |",
        "| torchao, torch.compile | A100 | 0.95-1.00 | - | 0.71-0.75 | - |",
        "| gpt-fast, torch.compile | A100 | 0.93-0.98 | 0.84-1.58 | 0.69-0.74 | "
        "12-31 us (107 at Llama-3.1-70B TP2) |",
        "| lmdeploy TurboMind v0.1 | A100 | 0.79-1.13 | 0.80-1.01 | 0.66-0.73 | 43 us |",
    ):
        assert line in doc, line


def test_moe_speculation_prices():
    """bench/moe_speculation.py prices TLT's strategy for each batch (its bandit's group) and
    finds a sparse target's break-even acceptance length far above a dense one's."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import moe_speculation
    finally:
        sys.path.remove(str(ROOT / "bench"))
    assert moe_speculation.tlt_strategy(4) == (8, 48)  # Table 4: 48 tokens at batch 2-4
    assert moe_speculation.tlt_strategy(16) == (4, 16)  # 16 from batch 8 on

    def break_even(model: str) -> float:
        line = moe_speculation.prices(model, "h100x64:tp4")[0]
        return float(line.split("breaks even at ")[1].split()[0])

    assert break_even("gpt-oss-120b") > 2 * break_even("Qwen2.5-32B") > 4


def test_moe_routing_correlation_sensitivity():
    """The routing-correlation table: at r = 0 it is the roofline's independent routing (the
    weight bytes of its own verify and decode passes); more correlation reads fewer experts;
    gpt-oss-120b's verify pass still reads most experts at r = 0.8."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import moe_speculation
    finally:
        sys.path.remove(str(ROOT / "bench"))
    from simctl.sim.cluster import parse_cluster
    from simctl.sim.cost_model import load_cost_model
    from simctl.sim.models import get_model

    p = load_cost_model(get_model("gpt-oss-120b"), parse_cluster("h100x64:tp4"))._pass
    share0, ratio0 = moe_speculation.routed_weight_ratio("gpt-oss-120b", "h100x64:tp4", 4, 48, 0.0)
    touched = p.num_experts * (1 - (1 - p.top_k / p.num_experts) ** (4 * 48))
    assert share0 == pytest.approx(touched / p.num_experts)
    decode = p.num_experts * (1 - (1 - p.top_k / p.num_experts) ** 4)
    verify_bytes = p.dense_bytes + p.moe_layers * p.expert_bytes * touched
    decode_bytes = p.dense_bytes + p.moe_layers * p.expert_bytes * decode
    assert ratio0 == pytest.approx(verify_bytes / decode_bytes)
    rows = [
        moe_speculation.routed_weight_ratio("gpt-oss-120b", "h100x64:tp4", 4, 48, r)
        for r in (0.0, 0.5, 0.8, 0.9)
    ]
    assert all(a[0] >= b[0] and a[1] >= b[1] for a, b in itertools.pairwise(rows))
    assert rows[2][0] > 0.7 and rows[2][1] > 4.0 and rows[3][1] < 0.6 * ratio0
    # a token that always repeats its predecessor's experts routes like decode's one token
    assert moe_speculation.routed_weight_ratio("gpt-oss-120b", "h100x64:tp4", 4, 48, 1.0)[1] == pytest.approx(
        1.0
    )


def test_row_shows_the_growth_of_events_and_blocks():
    """A growth cell comes with the growth of the work behind it (events + blocks), which
    tells a policy's dynamics at scale from a cost per unit that grows."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import bench_sim_speed
    finally:
        sys.path.remove(str(ROOT / "bench"))
    base_small, base_big = (
        {"cpu_s": 1.0, "events": 90, "blocks": 10},
        {"cpu_s": 8.0, "events": 720, "blocks": 80},
    )
    small = {"cpu_s": 2.0, "events": 150, "blocks": 50}
    big = {"cpu_s": 21.0, "events": 1300, "blocks": 600}  # 10.5x the time, 9.5x the work
    row = bench_sim_speed._row("p", small, big, base_small, base_big)
    assert row.split()[-3:] == ["10.50", "9.50", "*"]
    row = bench_sim_speed._row("p", small, {**big, "cpu_s": 16.0}, base_small, base_big)
    assert row.split()[-2:] == ["8.00", "9.50"]  # within the targets: no flag
    assert bench_sim_speed._row("p", small, {"cpu_s": 16.0}, base_small, base_big).split()[-1] == "nan"
