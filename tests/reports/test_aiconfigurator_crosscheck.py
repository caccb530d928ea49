"""`bench/aiconfigurator_crosscheck.py` against its data and against docs/calibration.md.

aiconfigurator's side is the layers times the looked-up per-layer operators (four GEMMs, the
attention kernel, two all-reduces at TP>1), and the ranges docs/calibration.md states
("aiconfigurator cross-check") are what the cost model gives now: a change of the cost model
that moves them must update that section.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
COMMIT = "095f58a51c4ca8e61b66ec108d86f223f8d559ce"

#: (kind, tp>1, context per sequence; 0 for prefill): ranges (min, max) of simctl /
#: aiconfigurator for the layers, linear, attention and one all-reduce (None at TP1)
RANGES: dict[tuple[str, bool, int], tuple[tuple[float, float], ...]] = {
    ("decode", False, 1024): ((0.91, 1.00), (0.92, 1.05), (0.06, 1.08)),
    ("decode", True, 1024): ((0.72, 1.05), (0.76, 1.08), (0.01, 0.97), (0.78, 1.55)),
    ("decode", False, 4096): ((0.95, 1.14), (0.92, 1.05), (0.20, 1.19)),
    ("decode", True, 4096): ((0.76, 1.09), (0.76, 1.08), (0.05, 1.15), (0.78, 1.55)),
    ("decode", False, 16384): ((0.96, 1.14), (0.95, 1.05), (0.62, 1.19)),
    ("decode", True, 16384): ((0.76, 1.13), (0.80, 1.08), (0.17, 1.17), (0.78, 1.55)),
    ("prefill", False, 0): ((1.14, 1.25), (1.17, 1.30), (0.14, 0.98)),
    ("prefill", True, 0): ((0.91, 1.23), (1.00, 1.37), (0.03, 1.01), (0.72, 1.30)),
}
#: the first column of docs/calibration.md's ranges table, per (kind, context)
LABELS = {
    ("decode", 1024): "decode, 1-128 sequences x 1,024 tokens",
    ("decode", 4096): "decode, 1-128 sequences x 4,096 tokens",
    ("decode", 16384): "decode, 1-32 sequences x 16,384 tokens",
    ("prefill", 0): "prefill, one prompt of 512-8,192 tokens",
}


@pytest.fixture(scope="module")
def crosscheck():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import aiconfigurator_crosscheck as ac
    finally:
        sys.path.remove(str(ROOT / "bench"))
    return ac


@pytest.fixture(scope="module")
def table(crosscheck) -> pd.DataFrame:
    return crosscheck.rows()


def test_data_cites_its_source_and_has_the_documented_grid(crosscheck):
    header = "".join(line for line in crosscheck.DATA.read_text().splitlines(True) if line.startswith("#"))
    assert f"ai-dynamo/aiconfigurator @ {COMMIT} (Apache-2.0)" in header
    assert "gemm/vllm/0.24.0/gemm_perf.parquet" in header and "vllm_graph" in header
    data = pd.read_csv(crosscheck.DATA, comment="#")
    assert list(data.columns) == [
        "model", "tp", "kind", "batch", "tokens", "context",
        "qkv_ms", "o_ms", "gate_up_ms", "down_ms", "attn_ms", "allreduce_ms",
    ]  # fmt: skip
    layouts = set(zip(data["model"], data["tp"], strict=True))
    assert layouts == {("Qwen2.5-7B", 1), ("Llama-3.1-8B", 1)} | {
        (m, tp) for m in ("Qwen2.5-32B", "Llama-3.1-70B") for tp in (2, 4, 8)
    }
    # every layout: 11 decode points (4 batches x 3 contexts, b x s <= 2**19) and 5 prompts
    per_layout = data.groupby(["model", "tp", "kind"]).size().unstack()
    assert (per_layout["decode"] == 11).all() and (per_layout["prefill"] == 5).all()
    assert (data.loc[data["tp"] == 1, "allreduce_ms"] == 0).all()
    assert (data.loc[data["tp"] > 1, "allreduce_ms"] > 0).all()
    assert (data[["qkv_ms", "o_ms", "gate_up_ms", "down_ms", "attn_ms"]] > 0).all().all()


def test_table_shape(table):
    assert len(table) == 128 and set(table["tp"]) == {1, 2, 4, 8}
    assert (table["kind"] == "decode").sum() == 88 and (table["kind"] == "prefill").sum() == 40
    ratios = ["total_ratio", "linear_ratio", "attn_ratio"]
    assert table[ratios].notna().all().all() and (table[ratios] > 0).all().all()
    assert table.loc[table["tp"] == 1, "ar_ratio"].isna().all()
    assert table.loc[table["tp"] > 1, "ar_ratio"].notna().all()


def test_hand_checked_row(table):
    """Llama-3.1-70B, TP4, 8 sequences of 4,096 tokens: the CSV row is
    0.01877, 0.01395, 0.08854, 0.04075 (GEMMs), 0.01894 (attention), 0.00580 (all-reduce,
    8 x 8192 = 65,536 elements: a collected size, 5.80 us); 80 layers, two all-reduces each.
    simctl's one all-reduce: 6.8 us + 2(3/4) x 65,536 x 2 B / (450 GB/s x 0.7)."""
    row = table[
        (table["model"] == "Llama-3.1-70B")
        & (table["tp"] == 4)
        & (table["kind"] == "decode")
        & (table["batch"] == 8)
        & (table["context"] == 4096)
    ].iloc[0]
    assert row["aic_ms"] == pytest.approx(
        80 * (0.01877 + 0.01395 + 0.08854 + 0.04075 + 0.01894 + 2 * 0.00580)
    )
    assert row["aic_ar_us"] == pytest.approx(5.80)
    assert row["simctl_ar_us"] == pytest.approx(1e6 * (6.8e-6 + 1.5 * 65536 * 2 / (450e9 * 0.7)))


def test_matches_the_documented_ranges(crosscheck, table):
    summary = crosscheck.summary(table)
    doc = (ROOT / "docs/calibration.md").read_text()
    assert "## aiconfigurator cross-check (H100, vLLM kernels, attention included)" in doc
    assert set(summary.index) == set(RANGES)
    for key, want in RANGES.items():
        part = summary.loc[key]
        got = [(part[f"{p}_min"], part[f"{p}_max"]) for p in ("total", "linear", "attn", "ar")]
        got = [(round(lo, 2), round(hi, 2)) for lo, hi in got[: len(want)]]
        assert got == list(want), key
        if len(want) == 3:
            assert pd.isna(part["ar_min"]) and pd.isna(part["ar_max"]), key
        kind, sharded, context = key
        cells = [f"{lo:.2f}-{hi:.2f}" for lo, hi in want] + ([] if sharded else ["-"])
        line = f"| {LABELS[kind, context]} | {'2-8' if sharded else '1'} | " + " | ".join(cells) + " |"
        assert line in doc, line
