"""simctl's H100 cost model against Vidur's operator profiles (an outside reference).

    .venv/bin/python bench/vidur_crosscheck.py

simctl's roofline (sim/cost_model.py) is calibrated to the five papers' own measurements
(sim/calibration_points.py). Vidur (Agrawal et al., "Vidur: A Large-Scale Simulation
Framework for LLM Inference", arXiv:2405.05465) publishes per-operator GPU kernel times
measured on H100 for Llama-2-7B and Llama-2-70B; `bench/data/vidur_h100_layer_ops.csv`
holds the part of them this compares with (its header says what and from where). It is a
check, not a calibration: no constant is fitted to it.

Scope, on both sides: the transformer layers without attention kernels (linear layers,
norms, rotary, activation, residual add, and at TP>1 the two all-reduces per layer), since
no H100 attention profile of these models could be read. Vidur adds its operators one after
another with no CPU time (kernel durations from its profiler, eager PyTorch, NCCL
all-reduce plus Vidur's 0.02 ms launch cost each); simctl's "layers" column is the same
scope: `iteration_time(b, tokens, 0)` with the overhead terms at zero and no embedding or
LM head (vocab 0). The "as run" column is simctl's iteration as a replay prices it (its
overheads, embedding and LM head included), for scale. Decode rows have one token per
sequence; rows of 512 tokens and more are one sequence's prefill.

What it shows (docs/calibration.md, "Vidur cross-check"): at TP1 simctl's layers are
0.59-1.07x Vidur's, the lowest where Vidur's GEMMs slow down past 128 tokens while the
roofline stays memory-bound; at TP>1 decode simctl is 0.29-0.89x, mostly from the
all-reduce (simctl 6.8 us, fitted to TLT's H100 decode latency on an engine with CUDA graphs
and vLLM's custom all-reduce; Vidur's NCCL mostly 30-50 us plus 20 us launch) and partly
from sharded GEMVs whose kernel times do not shrink with the shard (the comm-free ratio
falls with TP). Prefill agrees within 10% from 2,048 tokens.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pandas as pd

from simctl.sim.cost_model import RooflineCostModel, RooflineParams
from simctl.sim.hardware import get_gpu
from simctl.sim.models import ModelSpec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from published_crosscheck import MODELS as PUBLISHED_MODELS

DATA = Path(__file__).resolve().parent / "data" / "vidur_h100_layer_ops.csv"
#: Vidur's CPU launch cost it adds to every all-reduce (vidur/config: nccl_cpu_launch_overhead_ms)
NCCL_LAUNCH_MS = 0.02
#: Llama-2 shapes (meta-llama/Llama-2-{7b,70b}-hf config.json), as published_crosscheck.py
#: reads them
MODELS: dict[str, ModelSpec] = {name: PUBLISHED_MODELS[name] for name in ("Llama-2-7B", "Llama-2-70B")}
#: GPU time only: no per-iteration, per-sequence or per-token overhead
GPU_ONLY = RooflineParams(
    iteration_overhead_s=0.0, tp_iteration_overhead_s=0.0, per_seq_overhead_s=0.0, per_token_overhead_s=0.0
)
#: ... and no all-reduce (no latency, unbounded link)
NO_COMM = dataclasses.replace(GPU_ONLY, allreduce_latency_s=0.0, nvlink_eff=1e12)
PREFILL_FROM = 512  # rows with this many tokens or more are one sequence's prefill


def simctl_ms(model: ModelSpec, tp: int, seqs: int, tokens: int, params: RooflineParams | None) -> float:
    """One iteration of `seqs` sequences computing `tokens` tokens with no context, in ms
    (params None: simctl's own, as a replay prices it)."""
    h100 = get_gpu("h100")
    cm = RooflineCostModel(model, h100, tp) if params is None else RooflineCostModel(model, h100, tp, params)
    return 1e3 * float(cm.iteration_time(seqs, tokens, 0))


def rows() -> pd.DataFrame:
    """One row per profiled (model, TP, tokens): Vidur's and simctl's milliseconds."""
    data = pd.read_csv(DATA, comment="#")
    out = []
    for r in data.itertuples(index=False):
        model = MODELS[str(r.model)]
        layers_only = dataclasses.replace(model, vocab=0)
        tp, n = int(r.tp), int(r.tokens)
        seqs = 1 if n >= PREFILL_FROM else n
        comm = 2 * (float(r.allreduce_ms) + NCCL_LAUNCH_MS) if tp > 1 else 0.0
        vidur = model.layers * (float(r.linear_ms) + comm)
        vidur_no_comm = model.layers * float(r.linear_ms)
        layers = simctl_ms(layers_only, tp, seqs, n, GPU_ONLY)
        out.append(
            {
                "model": model.name,
                "tp": tp,
                "tokens": n,
                "kind": "prefill" if n >= PREFILL_FROM else "decode",
                "vidur_ms": vidur,
                "simctl_layers_ms": layers,
                "simctl_as_run_ms": simctl_ms(model, tp, seqs, n, None),
                "layers_over_vidur": layers / vidur,
                "no_comm_over_vidur": simctl_ms(layers_only, tp, seqs, n, NO_COMM) / vidur_no_comm,
            }
        )
    return pd.DataFrame(out)


def main() -> None:
    table = rows()
    pd.set_option("display.width", 160)
    print(table.to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    print("\nsimctl layers / Vidur, range by kind and TP (no-comm: both sides without all-reduce):")
    summary = table.groupby(["kind", table["tp"] > 1]).agg(
        layers_min=("layers_over_vidur", "min"),
        layers_max=("layers_over_vidur", "max"),
        no_comm_min=("no_comm_over_vidur", "min"),
        no_comm_max=("no_comm_over_vidur", "max"),
    )
    summary.index = summary.index.set_names(["kind", "tp>1"])
    print(summary.to_string(float_format=lambda x: f"{x:.2f}"))


if __name__ == "__main__":
    main()
