"""simctl's A100/H100 cost model against published decode timings (an outside reference).

    .venv/bin/python bench/published_crosscheck.py

simctl's roofline (sim/cost_model.py) is calibrated to the five papers' own measurements
(sim/calibration_points.py). `bench/data/published_decode_latency.csv` holds decode timings
measured by others with other engines (its header says where each number comes from and
with which engine features): LLM-Inference-Bench (arXiv:2411.00136; vLLM and TensorRT-LLM
on H100, batch 1-64, TP 1-4), gpt-fast and torchao (torch.compile with CUDA graphs, batch 1,
A100 TP 1-8 and one H100 row) and lmdeploy's TurboMind (A100, batch 1-64). It is a check, not
a calibration: no constant is fitted to it.

Every row is a static batch of `batch` identical requests timed end to end, so both sides
are the batch's wall time over its output tokens (ms per output step). simctl's side is the
cost model that `load_cost_model(model, parse_cluster("<gpu>x8:tp<tp>"))` gives a replay: one
iteration prefilling all prompts (`iteration_time(b, b * input, b * input / 2)`: the causal
attention over half the prompt, as `prefill_time` prices one prompt), then output - 1 decode
iterations whose context grows by one token per sequence. Models are the catalogue's where
the architecture is the same (Llama-3-8B is Llama-3.1-8B's shape, Qwen2-7B and Qwen2-72B are
Qwen2.5-7B's and Qwen2.5-72B's), otherwise built here from their config.json (Llama-2, and
Llama-3-70B for Llama-3.1-70B), as bench/vidur_crosscheck.py does; no model is added to the
catalogue.

`b1_hbm_frac` (batch-1 rows): the weights' bytes per GPU over the published step, as a share
of the datasheet HBM bandwidth (simctl streams at 0.78 and adds its overheads).

`implied_ar_us` (TP>1 rows at batch 1, where per-sequence costs are negligible): the all-reduce
latency at which simctl would match the row with every other term unchanged, (published -
simctl with zero all-reduce latency) / all-reduces per step. It bounds what the engine pays
per all-reduce (launch, sync, rank skew, and whatever else of its per-step gap it has at TP1
too), to set against simctl's `allreduce_latency_s` (H100 6.8 us, fitted to TLT; A100 45 us,
the class default).

What it shows (docs/calibration.md, "Published decode timings cross-check"): at TP1 the A100
rows agree (torch.compile with CUDA graphs 0.93-1.00, TurboMind 0.79-1.13); the H100 engines
measured here are slower than simctl's H100 (0.69-0.92), whose batch-1 step is fitted to
TLT's faster engine: they stream the weights at 0.58-0.68 of the datasheet bandwidth where
TLT's reached 0.75. At TP>1 the gap follows each engine's cost per all-reduce: above simctl's
H100 6.8 us for TensorRT-LLM 0.11 (20-38 us) and vLLM's V0 engine (27-56 us), below the
A100's 45 us default for gpt-fast's CUDA graphs and intra-node all-reduce (12-31 us), where
simctl is up to 1.58x slower.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd

from simctl.sim.cluster import parse_cluster
from simctl.sim.cost_model import DEFAULT_PARAMS, CostModel, load_cost_model
from simctl.sim.model_config import model_from_config
from simctl.sim.models import ModelSpec, get_model

DATA = Path(__file__).resolve().parent / "data" / "published_decode_latency.csv"


def _llama2(name: str, layers: int, hidden: int, heads: int, kv_heads: int, ffn: int) -> ModelSpec:
    fields = {"num_hidden_layers": layers, "hidden_size": hidden, "num_attention_heads": heads}
    fields |= {"num_key_value_heads": kv_heads, "intermediate_size": ffn}
    return model_from_config({"model_type": "llama", "vocab_size": 32000, **fields}, name)


#: Published model name -> simctl's architecture: catalogue entries where the shape is the
#: same; Llama-2 from meta-llama/Llama-2-{7b,13b,70b}-hf config.json through simctl's own
#: config reader (sim/model_config.py), as a user's model would be.
MODELS: dict[str, ModelSpec] = {
    "Llama-2-7B": _llama2("Llama-2-7B", 32, 4096, 32, 32, 11008),
    "Llama-2-13B": _llama2("Llama-2-13B", 40, 5120, 40, 40, 13824),
    "Llama-2-70B": _llama2("Llama-2-70B", 80, 8192, 64, 8, 28672),
    "Llama-3-8B": get_model("Llama-3.1-8B"),
    "Llama-3.1-8B": get_model("Llama-3.1-8B"),
    "Llama-3.1-70B": get_model("Llama-3.1-70B"),
    "Qwen2-7B": get_model("Qwen2.5-7B"),
    "Qwen2-72B": get_model("Qwen2.5-72B"),
}
#: simctl's parameters with no all-reduce latency (for `implied_ar_us`)
NO_AR_LATENCY = dataclasses.replace(DEFAULT_PARAMS, allreduce_latency_s=0.0)


def published_ms(row: pd.Series) -> float:
    """The source's number as ms per output step of the batch."""
    if row["unit"] == "s_per_batch":
        return 1e3 * float(row["published"]) / int(row["output_len"])
    if row["unit"] == "out_tok_per_s":
        return 1e3 * int(row["batch"]) / float(row["published"])
    raise ValueError(f"unknown unit {row['unit']!r}")


def batch_ms(cm: CostModel, batch: int, input_len: int, output_len: int) -> tuple[float, float]:
    """simctl's wall time of the static batch per output token, in ms, and the prefill's share."""
    prefill = float(cm.iteration_time(batch, batch * input_len, batch * input_len / 2))
    context = batch * (input_len + np.arange(1, output_len, dtype=np.float64))
    decode = float(np.sum(cm.iteration_time(batch, batch, context)))
    return 1e3 * (prefill + decode) / output_len, prefill / (prefill + decode)


def rows() -> pd.DataFrame:
    """One row per published timing: the published and simctl's ms per output step."""
    data = pd.read_csv(DATA, comment="#")
    out = []
    for _, r in data.iterrows():
        model = MODELS[str(r["model"])]
        tp, b, n_in, n_out = int(r["tp"]), int(r["batch"]), int(r["input_len"]), int(r["output_len"])
        cluster = parse_cluster(f"{r['gpu']}x8:tp{tp}")
        cm = load_cost_model(model, cluster)
        sim, prefill_share = batch_ms(cm, b, n_in, n_out)
        pub = published_ms(r)
        # batch 1: the share of the datasheet HBM bandwidth that streaming the weights once
        # per published step implies (simctl: hbm_bw_eff = 0.78 while streaming)
        hbm = cm.weight_bytes_per_gpu / (1e-3 * pub) / cluster.gpu.hbm_bw if b == 1 else float("nan")
        implied = float("nan")
        if tp > 1 and b == 1:
            no_ar, _ = batch_ms(load_cost_model(model, cluster, params=NO_AR_LATENCY), b, n_in, n_out)
            implied = 1e3 * (pub - no_ar) / (2 * model.layers)  # us per all-reduce
        out.append(
            {
                "source": str(r["source"]),
                "engine": str(r["engine"]),
                "gpu": str(r["gpu"]),
                "model": str(r["model"]),
                "tp": tp,
                "batch": b,
                "in": n_in,
                "out": n_out,
                "published_ms": pub,
                "simctl_ms": sim,
                "ratio": sim / pub,
                "prefill_share": prefill_share,
                "b1_hbm_frac": hbm,
                "implied_ar_us": implied,
            }
        )
    return pd.DataFrame(out)


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """simctl / published, range by source, engine, GPU and TP1 vs TP>1."""
    keys = [table["source"], table["engine"], table["gpu"], (table["tp"] > 1).rename("tp>1")]
    return table.groupby(keys).agg(
        rows=("ratio", "size"),
        ratio_min=("ratio", "min"),
        ratio_max=("ratio", "max"),
        b1_hbm_min=("b1_hbm_frac", "min"),
        b1_hbm_max=("b1_hbm_frac", "max"),
        implied_ar_us_min=("implied_ar_us", "min"),
        implied_ar_us_max=("implied_ar_us", "max"),
    )


def main() -> None:
    table = rows()
    pd.set_option("display.width", 200)
    print(table.to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    print("\nsimctl / published (ms per output step), range by source, engine, GPU and TP:")
    print(summary(table).to_string(float_format=lambda x: f"{x:.2f}"))


if __name__ == "__main__":
    main()
