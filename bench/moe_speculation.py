"""Why speculation in the tail loses on sparse MoE models in simctl (TLT on gpt-oss)

TLT (Taming the Long-Tail, arXiv:2511.16665) speculates with an EAGLE drafter once a worker
has fewer than 32 requests left, and its Table 4 profiles (Qwen-32B, dense) pick 48 tokens to
verify at batch 2-4 and 16 from batch 8. On the TLT preset's trace replayed with a sparse
MoE target instead (gpt-oss-120b, Qwen3-30B-A3B, GLM-4.5-Air) TLT is slower than veRL.

This prints, per model on the preset's layout (one TP4 worker of H100s), the roofline's
prices of one iteration at small batches -- plain decode, verification of TLT's strategy
for that batch, the EAGLE cycle (draft steps plus the fixed cycle cost) -- and the acceptance
length at which speculation breaks even; then veRL and TLT replayed on the preset's trace
(seed 0, step 0 warms the drafter up, steps 1-3 measured) with each model, with the fixed
cycle cost as calibrated (3.70 ms) and at 0.

What it shows (docs/calibration.md, "Speculation on MoE models"): two costs that a dense
model hides. Verifying many tokens per sequence routes them to many more experts than one
token does, so the verify pass reads up to the whole expert set where decode read a few
(MoESD, arXiv:2505.19645, and MoE-Spec, arXiv:2602.16052, describe the same effect); and a
sparse model's small-batch decode (2.6 ms for gpt-oss-120b at batch 4) is shorter than the
speculative cycle's fixed cost alone.

Run: .venv/bin/python bench/moe_speculation.py [--models gpt-oss-120b,Qwen3-30B-A3B]
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np

from simctl.policies.beg_mab import DEFAULT_THRESHOLDS, DEFAULT_TOPK, BegMab, default_strategies
from simctl.sim.cluster import parse_cluster
from simctl.sim.cost_model import DEFAULT_PARAMS, RooflineParams, load_cost_model
from simctl.sim.experiments import _layout
from simctl.sim.models import get_model
from simctl.sim.replay import ReplaySetup, run_policy
from simctl.traces.generate import generate_trace
from simctl.traces.io import Trace
from simctl.traces.presets import get_preset

PRESET = "tlt-qwen32b-32k"
STEPS = (0, 1, 2, 3)  # step 0 warms up (§6.1)
MODELS = ("Qwen2.5-32B", "gpt-oss-120b", "Qwen3-30B-A3B", "GLM-4.5-Air")
BATCHES = (4, 16)
CONTEXT = 12_000  # tokens per sequence (the preset's tail holds long responses)
NO_CYCLE = dataclasses.replace(DEFAULT_PARAMS, spec_cycle_overhead_s=0.0)


def tlt_strategy(batch: int) -> tuple[int, int]:
    """(depth, tokens to verify) of the middle strategy of the group TLT's bandit chooses
    among at `batch` (its batch buckets, beg_mab.DEFAULT_THRESHOLDS)."""
    group = BegMab(default_strategies(), DEFAULT_THRESHOLDS).candidates(batch)
    middle = group[len(group) // 2]
    return middle.depth, middle.verify


def prices(model: str, cluster: str) -> list[str]:
    """One line per batch: decode, verify, EAGLE cycle (ms), break-even acceptance length."""
    cost = load_cost_model(get_model(model), parse_cluster(cluster))
    lines = []
    for b in BATCHES:
        ctx = float(b * CONTEXT)
        depth, verify = tlt_strategy(b)
        decode = float(cost.iteration_time(b, b, ctx))
        check = float(cost.iteration_time(b, b * verify, ctx))
        draft = float(cost.draft_time("eagle", b * DEFAULT_TOPK, ctx * DEFAULT_TOPK, depth))
        cycle = DEFAULT_PARAMS.spec_cycle_overhead_s
        lines.append(
            f"  batch {b:3d}: decode {decode * 1e3:5.2f} ms | depth {depth}, topK {DEFAULT_TOPK}, "
            f"verify {verify}: verify {check * 1e3:5.2f} ms ({check / decode:.2f}x decode), "
            f"EAGLE {draft * 1e3:5.2f} ms (of it {cycle * 1e3:.2f} fixed) "
            f"-> breaks even at {(check + draft) / decode:.2f} tokens per iteration "
            f"({(check + draft - cycle) / decode:.2f} without the fixed cost)"
        )
    return lines


REPEATS = (0.0, 0.5, 0.8, 0.9, 0.95)


def routed_weight_ratio(
    model: str, cluster: str, batch: int, tokens: int, repeat: float
) -> tuple[float, float]:
    """(share of each MoE layer's experts a verify pass reads, its weight bytes over decode's)
    at `batch` sequences of `tokens` each, when each token of a sequence after its first
    reuses the previous token's experts with probability `repeat` and is routed
    independently otherwise: a sequence then routes like 1 + (tokens - 1)(1 - repeat)
    independent tokens (the roofline's form, RooflineCostModel, is repeat = 0). Decode's
    one token per sequence is unchanged. The roofline's own pass fields are read."""
    p = load_cost_model(get_model(model), parse_cluster(cluster))._pass  # type: ignore[attr-defined]

    def touched(n: float) -> float:
        return float(p.num_experts * -np.expm1(n * np.log1p(-p.top_k / p.num_experts)))

    n_verify = batch * (1.0 + (tokens - 1) * (1.0 - repeat))
    verify = p.dense_bytes + p.moe_layers * touched(n_verify) * p.expert_bytes
    decode = p.dense_bytes + p.moe_layers * touched(float(batch)) * p.expert_bytes
    return touched(n_verify) / p.num_experts, verify / decode


def rollout_speedups(trace: Trace, cluster: str, model: str, params: RooflineParams) -> tuple[float, float]:
    """(TLT's rollout speedup over veRL, its mean acceptance length), steps 1-3."""
    spec = parse_cluster(cluster)
    target = get_model(model)
    runs = {}
    for policy in ("verl", "tlt"):
        setup = ReplaySetup(
            trace=trace,
            cluster=spec,
            model=target,
            cost=load_cost_model(target, spec, params=params),
            steps=list(STEPS),
        )
        runs[policy] = [m for m in run_policy(setup, policy).steps if m.step != STEPS[0]]
    gain = np.mean(
        [v.rollout_makespan_s / t.rollout_makespan_s for v, t in zip(runs["verl"], runs["tlt"], strict=True)]
    )
    accept = np.mean([m.mean_accept_len or 1.0 for m in runs["tlt"]])
    return float(gain), float(accept)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    models = args.models.split(",")
    cluster = _layout(PRESET, 1.0)
    tp = parse_cluster(cluster).tp
    print(f"roofline prices on one TP{tp} H100 worker, {CONTEXT:,} tokens of context per sequence")
    for model in models:
        print(model)
        for line in prices(model, cluster):
            print(line)
    _, verify = tlt_strategy(4)
    print(f"\nrouting correlation: batch 4, {verify} tokens per sequence verified; a token repeats the")
    print("previous token's experts with probability r (else routed independently; r = 0 is the roofline's)")
    for model in models:
        if not get_model(model).is_moe:
            continue
        cells = "  ".join(
            f"r={r:.2f}: {share:4.0%} of experts, weights {ratio:.2f}x decode"
            for r in REPEATS
            for share, ratio in [routed_weight_ratio(model, cluster, 4, verify, r)]
        )
        print(f"  {model:16s} {cells}")
    df, meta, lists = generate_trace(get_preset(PRESET), len(STEPS), 0, scale=1.0)
    trace = Trace(df=df, meta=meta, lists=lists)
    print(f"\n{PRESET} (seed 0, {cluster}), TLT over veRL, rollout, steps 1-3")
    for model in models:
        gain, accept = rollout_speedups(trace, cluster, model, DEFAULT_PARAMS)
        bare, _ = rollout_speedups(trace, cluster, model, NO_CYCLE)
        print(
            f"  {model:16s} {gain:.2f}x (acceptance length {accept:.2f}); "
            f"with no fixed cycle cost {bare:.2f}x"
        )


if __name__ == "__main__":
    main()
