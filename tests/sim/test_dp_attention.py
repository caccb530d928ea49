"""Data-parallel attention + expert parallelism and FP8 weights: Seer's Kimi-K2 layout
(arXiv:2511.14617 §6.1, Table 5) through the normal cluster spec and cost model."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from simctl.cli import main
from simctl.sim.cluster import parse_cluster
from simctl.sim.cost_model import (
    CostModelError,
    DPAttentionRoofline,
    RooflineCostModel,
    load_cost_model,
)
from simctl.sim.experiments import EXPERIMENTS
from simctl.sim.hardware import get_gpu
from simctl.sim.models import get_model
from simctl.traces.generate import generate_trace
from simctl.traces.io import write_trace
from simctl.traces.layouts import LAYOUTS, NOT_EXPRESSIBLE, layout_for

KIMI = get_model("kimi-k2")
MOONLIGHT = get_model("moonlight-16b-a3b")
H800 = get_gpu("h800")


def kimi(dp: int = 32, nodes_span: bool = True) -> DPAttentionRoofline:
    return DPAttentionRoofline(KIMI, H800, dp, weights="fp8", spans_nodes=nodes_span)


def kv_memory_s(cm: RooflineCostModel, b: int, ctx_per_seq: int) -> float:
    """The KV-read part of one decode iteration's memory time."""
    with_kv = cm.breakdown(b, b, b * ctx_per_seq)["memory_s"]
    return with_kv - cm.breakdown(b, b, 0)["memory_s"]


# --------------------------------------------------------------------------- cost model


@pytest.mark.parametrize("dp", [1, 2, 4, 8])
def test_kv_read_per_gpu_scales_with_one_over_dp(dp: int) -> None:
    # 64 sequences of 20k tokens: each GPU reads the KV of its own 64/dp sequences only
    cm = DPAttentionRoofline(MOONLIGHT, H800, dp)
    per_seq = kv_memory_s(DPAttentionRoofline(MOONLIGHT, H800, 8), 8, 20_000)  # one sequence per rank
    assert kv_memory_s(cm, 64, 20_000) == pytest.approx(per_seq * 64 / dp, rel=1e-9)
    # and the same as Kimi-K2's 32 ranks, one sequence each, per token of context (MLA latents)
    ratio = KIMI.kv_bytes_per_token(2) / MOONLIGHT.kv_bytes_per_token(2)
    assert kv_memory_s(kimi(32), 32, 20_000) == pytest.approx(per_seq * ratio, rel=1e-9)


def test_busiest_rank_decides_when_sequences_do_not_fill_the_ranks() -> None:
    # one sequence sits on one rank: that GPU reads all of its KV (no 1/dp discount), and
    # 33 sequences on 32 ranks put two on one rank
    cm = kimi(32)
    one = kv_memory_s(cm, 1, 20_000)
    assert kv_memory_s(cm, 32, 20_000) == pytest.approx(one)
    assert kv_memory_s(cm, 33, 20_000) == pytest.approx(2 * one)


def test_kv_capacity_and_weights_per_gpu() -> None:
    cm = kimi(32)
    # attention weights (61 layers of MLA, ~6.2B parameters) are whole on every rank,
    # the rest (~1.03T) is sharded: 6.2 GB + 1.02 TB / 32 in FP8
    attn = KIMI.attn_params_per_layer() * KIMI.layers
    assert 6.0e9 < attn < 6.5e9
    assert cm.weight_bytes_per_gpu == pytest.approx(attn + (KIMI.param_count() - attn) / 32, rel=1e-3)
    per_gpu = (H800.hbm_bytes * 0.9 - cm.weight_bytes_per_gpu) // KIMI.kv_bytes_per_token(2)
    assert cm.kv_capacity_tokens == 32 * per_gpu


def test_bf16_kimi_does_not_fit_32_h800_but_fp8_does() -> None:
    with pytest.raises(CostModelError, match=r"Kimi-K2 \(7\d\.\d GB/GPU at dp=32\) does not fit"):
        DPAttentionRoofline(KIMI, H800, 32, weights="bf16", spans_nodes=True)
    assert kimi(32).weight_bytes_per_gpu < 0.6 * H800.hbm_bytes


def test_fp8_halves_weight_read_time_at_batch_one() -> None:
    for bf16, fp8 in (
        (
            RooflineCostModel(get_model("qwen2.5-32b"), H800, 4),
            RooflineCostModel(get_model("qwen2.5-32b"), H800, 4, weights="fp8"),
        ),
        (
            DPAttentionRoofline(MOONLIGHT, H800, 8),
            DPAttentionRoofline(MOONLIGHT, H800, 8, weights="fp8"),
        ),
    ):
        b16, b8 = bf16.breakdown(1, 1, 0), fp8.breakdown(1, 1, 0)
        assert b16["memory_s"] > b16["compute_s"]  # batch 1 is memory-bound
        # only the one new token's KV write (BF16 KV cache) is not halved
        assert b8["memory_s"] == pytest.approx(0.5 * b16["memory_s"], rel=1e-4)
        assert fp8.weight_bytes_per_gpu == pytest.approx(0.5 * bf16.weight_bytes_per_gpu)


def test_fp8_matmuls_run_at_the_fp8_peak() -> None:
    # H800 datasheet: FP8 1,978.9 dense TFLOPS, twice BF16; attention (no context here) aside
    assert H800.fp8_flops == pytest.approx(2 * H800.bf16_flops, rel=1e-3)
    bf16 = RooflineCostModel(get_model("qwen2.5-32b"), H800, 4)
    fp8 = RooflineCostModel(get_model("qwen2.5-32b"), H800, 4, weights="fp8")
    c16, c8 = bf16.breakdown(1, 8192, 0)["compute_s"], fp8.breakdown(1, 8192, 0)["compute_s"]
    assert c8 == pytest.approx(c16 * H800.bf16_flops / H800.fp8_flops, rel=1e-9)
    # A100 has no FP8 tensor cores: FP8 weights only halve the bytes
    a100 = get_gpu("a100")
    q7 = get_model("qwen2.5-7b")
    a16, a8 = RooflineCostModel(q7, a100, 1), RooflineCostModel(q7, a100, 1, weights="fp8")
    assert a8.breakdown(1, 8192, 0)["compute_s"] == pytest.approx(a16.breakdown(1, 8192, 0)["compute_s"])


def test_all_to_all_matches_deepep_h800_ep32() -> None:
    # DeepEP README, low-latency kernels on H800 + CX7 400 Gb/s, EP32, 128 tokens per rank,
    # hidden 7168, top-8, FP8 dispatch / BF16 combine: 155 us + 273 us per MoE layer.
    cm = kimi(32)
    b = 32 * 128
    per_layer = cm.breakdown(b, b, 0)["comm_s"] / KIMI.moe_layers
    assert per_layer == pytest.approx(155e-6 + 273e-6, rel=0.05)
    # small batches pay the per-collective latency floor, never less
    assert cm.breakdown(1, 1, 0)["comm_s"] == pytest.approx(KIMI.moe_layers * 2 * H800.allreduce_latency_s)
    # a worker inside one node exchanges over NVLink, cheaper than over the NICs
    inside = DPAttentionRoofline(MOONLIGHT, H800, 8).breakdown(4096, 4096, 0)["comm_s"]
    across = DPAttentionRoofline(MOONLIGHT, H800, 8, spans_nodes=True).breakdown(4096, 4096, 0)["comm_s"]
    assert inside < across


def test_dense_models_refuse_data_parallel_attention() -> None:
    spec = parse_cluster("h800x8:dp8")
    with pytest.raises(CostModelError, match=r"dp8: data-parallel attention .* Qwen2\.5-32B is dense"):
        load_cost_model(get_model("qwen2.5-32b"), spec)


def test_profiles_refuse_data_parallel_workers(tmp_path: Path) -> None:
    prof = tmp_path / "p.json"
    rows = [
        {"kind": "decode", "num_seqs": b, "new_tokens": b, "context_tokens": 100 * b, "gamma": 0, "time_s": t}
        for b, t in ((1, 0.01), (8, 0.02))
    ]
    doc = {"format": "simctl-profile/1", "tp": 1, "kv_capacity_tokens": 1000, "model": "kimi-k2"}
    prof.write_text(json.dumps(doc | {"measurements": rows}))
    with pytest.raises(CostModelError, match=r"p\.json: measured on tp=1 workers, .* dp32"):
        load_cost_model(KIMI, parse_cluster("h800x32:dp32:fp8"), prof)


def test_load_cost_model_prices_the_cluster_layout() -> None:
    cm = load_cost_model(KIMI, parse_cluster("h800x64:dp32:fp8"))
    assert isinstance(cm, DPAttentionRoofline) and (cm.dp, cm.weights, cm.spans_nodes) == (32, "fp8", True)
    tp = load_cost_model(get_model("qwen2.5-32b"), parse_cluster("h800x8:tp4:fp8"))
    assert type(tp) is RooflineCostModel and tp.weights == "fp8"


# --------------------------------------------------------------------------- layouts, runs


def test_kimi_layout_is_a_normal_paper_layout() -> None:
    assert "seer-kimi-k2-96k" in LAYOUTS and "seer-kimi-k2-96k" not in NOT_EXPRESSIBLE
    assert layout_for("seer-kimi-k2-96k") == "h800x256:tp1:dp32:fp8"
    quick = parse_cluster(layout_for("seer-kimi-k2-96k", 1 / 4) or "")
    assert (quick.num_workers, quick.gpus_per_worker, quick.nodes, quick.weights) == (2, 32, 8, "fp8")
    assert [quick.worker_node(w) for w in range(2)] == [0, 4]


def test_kimi_experiments_are_expressible() -> None:
    kimi_exps = [e for e in EXPERIMENTS if e.preset == "seer-kimi-k2-96k"]
    assert len(kimi_exps) == 5
    for e in kimi_exps:
        assert e.not_expressible is None and e.full is not None and e.quick is not None, e.id
        assert parse_cluster(e.full.cluster).num_workers == 8
        assert e.quick.cluster == e.full.cluster  # --quick runs the paper's layout


def test_replay_of_a_kimi_trace_uses_its_recorded_layout(tmp_path: Path) -> None:
    # 1% of the prompts: one instance of 32 GPUs (4 nodes), recorded in the trace
    df, meta, lists = generate_trace("seer-kimi-k2-96k", 1, 0, scale=0.01)
    assert meta.cluster == "h800x32:tp1:dp32:fp8"
    trace = write_trace(tmp_path / "k.parquet", df, meta, lists=lists)
    js, out = tmp_path / "m.json", tmp_path / "run"
    args = ["replay", str(trace), "--policy", "verl", "--json", str(js), "--out", str(out)]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert "h800x32:tp1:dp32:fp8" in r.output
    cluster = json.loads((out / "run.json").read_text())["provenance"]["cluster"]
    assert (cluster["dp"], cluster["gpus_per_worker"], cluster["weights"], cluster["num_workers"]) == (
        32,
        32,
        "fp8",
        1,
    )
    step = json.loads(js.read_text())["policies"]["verl"]["steps"][0]
    assert math.isfinite(step["rollout_makespan_s"]) and step["rollout_makespan_s"] > 0
