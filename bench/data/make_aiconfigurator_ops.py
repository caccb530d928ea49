"""Rebuild bench/data/aiconfigurator_h100_vllm_ops.csv from NVIDIA's aiconfigurator tables.

    .venv/bin/python bench/data/make_aiconfigurator_ops.py --repo DIR [--check]

DIR is any git clone of https://github.com/ai-dynamo/aiconfigurator holding the pinned
commit (`COMMIT`; a bare clone will do).

ai-dynamo/aiconfigurator (Apache-2.0) ships per-operation kernel timings measured on H100
SXM under vLLM 0.24.0 (CUDA-graph replay, CUDA events, ms). This script reads four of its
tables at a pinned commit straight from a git mirror (`git show <commit>:<path>`, nothing
checked out) and looks up, per transformer layer of a few dense BF16 models in simctl's
catalogue, the operators that simctl's roofline prices: the four linear layers, the
attention kernel and the TP all-reduce. The lookups are aiconfigurator's own SILICON-mode
rules (its Rust engine, aic-core/rust/aiconfigurator-core/src/perf_database/), written
out here in a few lines each so the numbers can be rebuilt without its native extension:

* GEMM (`gemm.rs` `GemmTable::query`, `perf_interp.rs` `SiteIndex::resolve_pair`): rows
  clamped up to their speed of light at load, SOL = max(2mnk / 989 TFLOP/s, 2 B (mn + mk +
  nk) / 3.35 TB/s). A collected (n, k) answers from its own m-curve; any other (n, k) takes
  the inverse-squared-distance mean (in log2 n, log2 k) of the achieved utilisation SOL /
  latency of the 4 nearest collected sites within 2 octaves, at the same m, and returns
  SOL(m, n, k) / that utilisation.
* Generation attention (`attention.rs` `query_generation`): key (kv dtype, kv heads, head
  dim, window); grid num_heads x batch x s with s = isl + step, the KV length including the
  new token; rows clamped up to SOL at load; linear in num_heads between collected counts.
  aiconfigurator averages 5 samples over s +-10% (decode lengths drift within a request);
  this takes the measured point at s itself.
* Context attention (`query_context`): grid num_heads x isl x batch, no clamp; linear in
  num_heads. The RoPE and KV-write memory-op estimates aiconfigurator adds on top are
  formulas, not measurements, and are left out.
* Custom all-reduce (`communication.rs` `query_custom_allreduce`): the CUDA-graph rows only
  (aiconfigurator drops the eager ones at load), linear in message_size (BF16 elements,
  tokens x hidden) between collected sizes.

`--check` rebuilds in memory and fails if the committed CSV differs.
"""

from __future__ import annotations

import argparse
import io
import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from simctl.sim.models import ModelSpec, get_model

COMMIT = "095f58a51c4ca8e61b66ec108d86f223f8d559ce"
VLLM = "0.24.0"
DATA = "aic-core/src/aiconfigurator_core/systems/data/h100_sxm"
GEMM_FILE = f"{DATA}/gemm/vllm/{VLLM}/gemm_perf.parquet"
GEN_FILE = f"{DATA}/attention/vllm/{VLLM}/generation_attention_perf.parquet"
CTX_FILE = f"{DATA}/attention/vllm/{VLLM}/context_attention_perf.parquet"
AR_FILE = f"{DATA}/comm/vllm/{VLLM}/custom_allreduce_perf.parquet"
OUT = Path(__file__).resolve().parent / "aiconfigurator_h100_vllm_ops.csv"

#: aiconfigurator's H100 SXM system spec (systems/h100_sxm.yaml): the SOL its lookups use
MEM_BW = 3350e9
BF16_FLOPS = 989e12
#: aiconfigurator's GEMM site transfer (gemm.rs `gemm_engine_config`)
NN_SITES = 4
MAX_SITE_DISTANCE = 2.0

#: (catalogue name, TP degrees): the Llamas are aiconfigurator model configs
#: (model_configs/meta-llama--Meta-Llama-3.1-{8B,70B}_config.json); the Qwen2.5 shapes are
#: simctl's calibration models, looked up in the same shape-keyed tables.
LAYOUTS: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("Qwen2.5-7B", (1,)),
    ("Llama-3.1-8B", (1,)),
    ("Qwen2.5-32B", (2, 4, 8)),
    ("Llama-3.1-70B", (2, 4, 8)),
)
DECODE_BATCHES = (1, 8, 32, 128)
DECODE_CONTEXTS = (1024, 4096, 16384)
#: the generation grid of these shapes stops at 32 sequences of 16k (b x s <= 2**19)
MAX_DECODE_KV = 1 << 19
PREFILL_TOKENS = (512, 1024, 2048, 4096, 8192)
DIGITS = 5  # ms, i.e. 10 ns


def read_table(mirror: Path, path: str) -> pd.DataFrame:
    """One parquet file of the pinned commit, read from the mirror's object store."""
    blob = subprocess.run(
        ["git", "-C", str(mirror), "show", f"{COMMIT}:{path}"], check=True, capture_output=True
    ).stdout
    return pd.read_parquet(io.BytesIO(blob))


def gemm_sol_ms(m: float, n: float, k: float) -> float:
    """aiconfigurator's BF16 GEMM speed of light (gemm.rs `gemm_sol_with_flops`), ms."""
    return 1e3 * max(2.0 * m * n * k / BF16_FLOPS, 2.0 * (m * n + m * k + n * k) / MEM_BW)


class GemmTable:
    """The BF16 rows of gemm_perf.parquet as (n, k) sites, each with an m-curve."""

    def __init__(self, raw: pd.DataFrame) -> None:
        rows = raw[raw["gemm_dtype"] == "bfloat16"]
        # Python dict-walk order of data[m][n][k] (first-seen m, then n, then k): the
        # engine's tie-break between sites at equal distance
        nested: dict[int, dict[int, dict[int, float]]] = {}
        for m, n, k, lat in rows[["m", "n", "k", "latency"]].itertuples(index=False):
            nested.setdefault(int(m), {}).setdefault(int(n), {}).setdefault(int(k), float(lat))
        self.order: list[tuple[int, int]] = []
        seen: set[tuple[int, int]] = set()
        for by_n in nested.values():
            for n, by_k in by_n.items():
                for k in by_k:
                    if (n, k) not in seen:
                        seen.add((n, k))
                        self.order.append((n, k))
        self.curves: dict[tuple[int, int], dict[int, float]] = {site: {} for site in self.order}
        for m, by_n in nested.items():
            for n, by_k in by_n.items():
                for k, lat in by_k.items():
                    self.curves[(n, k)][m] = max(lat, gemm_sol_ms(m, n, k))  # load-time clamp

    def _curve(self, site: tuple[int, int], m: int) -> float:
        curve = self.curves[site]
        if m in curve:
            return curve[m]
        ms = sorted(curve)
        if not ms[0] < m < ms[-1]:
            raise ValueError(f"m={m} outside the collected sweep of site {site}")
        hi = next(x for x in ms if x > m)
        lo = max(x for x in ms if x < m)
        return curve[lo] + (curve[hi] - curve[lo]) * (m - lo) / (hi - lo)

    def query(self, m: int, n: int, k: int) -> float:
        """Latency (ms) of x[m, k] @ W[k, n] in BF16, by aiconfigurator's rule."""
        if (n, k) in self.curves:
            return self._curve((n, k), m)
        ranked = []
        for i, (sn, sk) in enumerate(self.order):
            d = math.hypot(math.log2(sn) - math.log2(n), math.log2(sk) - math.log2(k))
            if d <= MAX_SITE_DISTANCE:
                ranked.append((d, i))
        if not ranked:
            raise ValueError(f"no collected GEMM within {MAX_SITE_DISTANCE} octaves of n={n}, k={k}")
        ranked.sort()
        w_sum = u_sum = 0.0
        for d, i in ranked[:NN_SITES]:
            sn, sk = self.order[i]
            w = 1.0 / (d * d + 1e-12)
            u_sum += w * gemm_sol_ms(m, sn, sk) / self._curve((sn, sk), m)
            w_sum += w
        return gemm_sol_ms(m, n, k) / (u_sum / w_sum)


def generation_sol_ms(n: float, n_kv: float, b: float, s: float) -> float:
    """aiconfigurator's BF16-KV decode attention SOL (attention.rs), head dim 128, ms."""
    h, kv_len = 128.0, s - 1.0
    ops = 2.0 * b * n * h * 2.0 * kv_len
    mem = b * (n * h * 2.0 + 2.0 * n_kv * kv_len * h * 2.0 + n * h * 2.0)
    return 1e3 * max(ops / BF16_FLOPS, mem / MEM_BW)


@dataclass
class AttentionTables:
    """Generation and context attention rows of BF16 Q/KV, head dim 128, no window."""

    gen: pd.DataFrame
    ctx: pd.DataFrame

    @classmethod
    def from_raw(cls, gen: pd.DataFrame, ctx: pd.DataFrame) -> AttentionTables:
        def keep(t: pd.DataFrame) -> pd.DataFrame:
            sel = (t["head_dim"] == 128) & (t["kv_cache_dtype"] == "bfloat16") & (t["window_size"] == 0)
            return t[sel & (t["attn_dtype"] == "bfloat16")]

        g = keep(gen).assign(s=lambda t: t["isl"] + t["step"])
        return cls(g, keep(ctx))

    @staticmethod
    def _heads(table: pd.DataFrame, n: int, n_kv: int, point: dict[str, int], sol: bool) -> float:
        """The measured point at `n` query heads, or linear between the collected counts
        around it (same kv heads); generation rows clamped up to their SOL."""
        sel = table["num_key_value_heads"] == n_kv
        for col, v in point.items():
            sel &= table[col] == v
        rows = table[sel]
        if (rows["num_heads"] == n).sum() > 1:
            raise ValueError(f"duplicate rows at n={n}, {point}")

        def at(heads: int) -> float:
            lat = float(rows.loc[rows["num_heads"] == heads, "latency"].iloc[0])
            return max(lat, generation_sol_ms(heads, n_kv, point["batch_size"], point["s"])) if sol else lat

        heads = sorted(int(x) for x in rows["num_heads"] if int(x) != n_kv)  # n == n_kv is MHA's key
        if n in heads:
            return at(n)
        lo, hi = max(x for x in heads if x < n), min(x for x in heads if x > n)
        return at(lo) + (at(hi) - at(lo)) * (n - lo) / (hi - lo)

    def generation(self, n: int, n_kv: int, b: int, s: int) -> float:
        return self._heads(self.gen, n, n_kv, {"batch_size": b, "s": s}, sol=True)

    def context(self, n: int, n_kv: int, tokens: int) -> float:
        return self._heads(self.ctx, n, n_kv, {"batch_size": 1, "isl": tokens}, sol=False)


def allreduce_ms(table: pd.DataFrame, tp: int, elements: int) -> float:
    """vLLM custom all-reduce (CUDA-graph rows) of `elements` BF16 values over `tp` GPUs."""
    rows = table[(table["backend"] == "vllm_graph") & (table["num_gpus"] == tp)]
    rows = rows.sort_values("message_size")
    x, y = rows["message_size"].to_numpy(float), rows["latency"].to_numpy(float)
    if not x[0] <= elements <= x[-1]:
        raise ValueError(f"{elements} elements outside the collected sizes")
    return float(np.interp(elements, x, y))


def layer_shapes(model: ModelSpec, tp: int) -> dict[str, tuple[int, int]]:
    """(n, k) of each linear layer at the TP shard, as vLLM merges them (QKV and gate/up
    column-parallel, o and down row-parallel; aiconfigurator's sdk/models/llama.py)."""
    d, h = model.head_dim, model.hidden
    return {
        "qkv": (model.heads * d // tp + 2 * d * max(model.kv_heads // tp, 1), h),
        "o": (h, model.heads * d // tp),
        "gate_up": (2 * model.ffn // tp, h),
        "down": (h, model.ffn // tp),
    }


def build(mirror: Path) -> pd.DataFrame:
    gemm = GemmTable(read_table(mirror, GEMM_FILE))
    attn = AttentionTables.from_raw(read_table(mirror, GEN_FILE), read_table(mirror, CTX_FILE))
    ar = read_table(mirror, AR_FILE)
    out = []
    for name, tps in LAYOUTS:
        model = get_model(name)
        for tp in tps:
            n_q, n_kv = model.heads // tp, max(model.kv_heads // tp, 1)
            shapes = layer_shapes(model, tp)
            points = [
                ("decode", b, b, s) for s in DECODE_CONTEXTS for b in DECODE_BATCHES if b * s <= MAX_DECODE_KV
            ]
            points += [("prefill", 1, t, t) for t in PREFILL_TOKENS]
            for kind, batch, tokens, context in points:
                row: dict[str, object] = {
                    "model": name,
                    "tp": tp,
                    "kind": kind,
                    "batch": batch,
                    "tokens": tokens,
                    "context": context,
                }
                for op, (n, k) in shapes.items():
                    row[f"{op}_ms"] = round(gemm.query(tokens, n, k), DIGITS)
                if kind == "decode":
                    row["attn_ms"] = round(attn.generation(n_q, n_kv, batch, context), DIGITS)
                else:
                    row["attn_ms"] = round(attn.context(n_q, n_kv, tokens), DIGITS)
                row["allreduce_ms"] = (
                    round(allreduce_ms(ar, tp, tokens * model.hidden), DIGITS) if tp > 1 else 0.0
                )
                out.append(row)
    return pd.DataFrame(out)


HEADER = f"""\
# aiconfigurator's H100 SXM vLLM {VLLM} per-operator timings, per transformer layer, as
# simctl's bench/aiconfigurator_crosscheck.py reads them (rebuilt by
# bench/data/make_aiconfigurator_ops.py, which says the lookups in full).
# Source: ai-dynamo/aiconfigurator @ {COMMIT} (Apache-2.0),
#   {DATA}/
#     gemm/vllm/{VLLM}/gemm_perf.parquet (gemm_dtype bfloat16, kernel torch.nn.functional.linear:
#       columns m, n, k, latency),
#     attention/vllm/{VLLM}/generation_attention_perf.parquet and context_attention_perf.parquet
#       (vllm_flash_attn_fa3; attn_dtype = kv_cache_dtype = bfloat16, head_dim 128,
#       window_size 0: columns batch_size, isl, step, num_heads, num_key_value_heads, latency),
#     comm/vllm/{VLLM}/custom_allreduce_perf.parquet (backend vllm_graph: num_gpus,
#       message_size in BF16 elements, latency).
#   Collected by its collector/vllm/collect_gemm.py, collect_attn.py and
#   collector/network/collect_all_reduce.py: CUDA-graph replay timed with CUDA events, ms.
# One row per (model, tp, kind, batch, tokens, context); every value in ms, rounded to 5
# decimals, for one layer on one GPU:
#   qkv/o/gate_up/down_ms: the GEMM at m = tokens and the layer's (n, k) at the TP shard
#     (qkv n = (heads + 2 kv_heads) x 128 / tp, k = hidden; o n = hidden, k = heads x 128 / tp;
#     gate_up n = 2 ffn / tp, k = hidden; down n = hidden, k = ffn / tp). A collected (n, k)
#     is read at m; any other by aiconfigurator's rule: the inverse-squared-log2-distance
#     mean of the SOL/latency utilisation of the 4 nearest collected (n, k) within 2
#     octaves at the same m, times SOL(m, n, k) (rows clamped up to SOL first).
#   attn_ms: decode: generation attention of `batch` sequences of `context` KV tokens each
#     (s = isl + step, the new token included); prefill: context attention of one prompt of
#     `tokens` tokens (batch_size 1, isl = tokens). Heads per GPU = heads / tp, kv heads =
#     kv_heads / tp; Qwen2.5-7B's 28 query heads (4 kv) are linear between the collected 24
#     and 32. Generation rows clamped up to aiconfigurator's SOL (none of these is below it).
#   allreduce_ms: ONE custom all-reduce of tokens x hidden BF16 elements over tp GPUs,
#     linear in message_size between the collected sizes; 0 at TP1 (a layer has two).
# Not here: norms, activation, RoPE and residual adds (aiconfigurator prices them with a
# memory formula, not a measurement), embedding and LM head.
"""


def render(table: pd.DataFrame) -> str:
    return HEADER + table.to_csv(index=False, float_format=f"%.{DIGITS}f", lineterminator="\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--repo",
        type=Path,
        required=True,
        help=f"a git clone of ai-dynamo/aiconfigurator holding {COMMIT[:7]}",
    )
    ap.add_argument("--check", action="store_true", help="fail if the committed CSV differs")
    args = ap.parse_args(argv)
    text = render(build(args.repo))
    if args.check:
        same = OUT.read_text() == text
        print("up to date" if same else f"{OUT.name} differs from a rebuild")
        return 0 if same else 1
    OUT.write_text(text)
    print(f"wrote {OUT} ({text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
