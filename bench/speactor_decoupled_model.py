"""When does SpecActor's decoupled plan beat coupled speculation? (issue #15, root cause)

SpecActor (Fast LLM Post-training via Decoupled and Fastest-of-N Speculation,
arXiv:2511.16193) §4.1 scores a decoupled plan by TGS = tau_w / max(w * D(b), V_w(b)),
where a partially accepted window yields (a+1)/2 tokens per cycle, and Fig. 15 reports
decoupled ~1.3x over vanilla (coupled) speculation. This script evaluates the paper's own
model (policies/speactor_model.py, the functions the policy plans with) under simctl's
H800 cost model for Qwen2.5-32B at TP4 (the dapo-32b-20k layout, per-worker batch 128,
4,096-token context) over the two inputs the paper does not publish: the 0.5B drafter's
per-token acceptance p (the preset assumes 0.60) and the drafter's per-step latency
(simctl prices a 0.5B step from the roofline plus 0.3 ms of launch overhead).

Per row it prints (1) Fig. 5b's quantity, plain time / speculative time at batch 128
(the paper: "no or negative gain", i.e. <= 1.0), and (2) decoupled over coupled
throughput per GPU, both plans as Algorithm 1 and the coupled window search choose them
(coupled drafts at the target's TP, vLLM's default; decoupled drafters run on their own
GPU at TP1). Decoupled wins only where (2) > 1.

Run: .venv/bin/python bench/speactor_decoupled_model.py
"""

from __future__ import annotations

import dataclasses

from simctl.policies.speactor_model import Affine, CostLaws, best_window, plan_search, tgs_coupled
from simctl.sim.cluster import parse_cluster
from simctl.sim.cost_model import RooflineCostModel, load_cost_model
from simctl.sim.models import get_model

CLUSTER = "h800x512:tp4"  # SpecActor §5.1 layout of the dapo-32b-20k trace
BATCH = 128  # SpecActor §3: the common per-worker batch size (Fig. 5a)
CONTEXT = 4096.0  # Fig. 5b generates at most 4,096 tokens
DRAFTER = "model:qwen2.5-0.5b"  # §5.1: "for 32B training, we found 0.5B is a sweet point"


def laws(cost: RooflineCostModel) -> CostLaws:
    verify = {
        w: Affine.fit(lambda b, w=w: float(cost.iteration_time(b, b * (w + 1), b * CONTEXT)))
        for w in range(1, 9)
    }
    return CostLaws(
        draft=Affine.fit(lambda b: float(cost.draft_time(DRAFTER, b, b * CONTEXT, 1))),
        verify=verify.__getitem__,
        decode=Affine.fit(lambda b: float(cost.iteration_time(b, b, b * CONTEXT))),
    )


def row(p: float, extra_s: float) -> tuple[float, float, float]:
    model, spec = get_model("qwen2.5-32b"), parse_cluster(CLUSTER)
    base = load_cost_model(model, spec)
    assert isinstance(base, RooflineCostModel)
    prm = dataclasses.replace(base.params, draft_step_overhead_s=base.params.draft_step_overhead_s + extra_s)
    own_gpu = laws(RooflineCostModel(model, base.gpu, spec.tp, prm, spec.gpu_mem_util))
    at_tp = laws(
        RooflineCostModel(
            model, base.gpu, spec.tp, dataclasses.replace(prm, draft_model_tp=spec.tp), spec.gpu_mem_util
        )
    )
    _, t_coupled = best_window(lambda w: tgs_coupled(at_tp, p, w, BATCH), 8)
    fig5b = t_coupled * at_tp.decode(BATCH)
    gpus = spec.total_gpus
    plan = plan_search(own_gpu, p, gpus // spec.tp * BATCH, gpus, [spec.tp], 8)
    per_gpu_d = plan.batch * plan.tgs / (plan.verifier_gpus + plan.drafter_gpus)
    per_gpu_c = BATCH * t_coupled / spec.tp
    return at_tp.draft(BATCH), fig5b, per_gpu_d / per_gpu_c


def main() -> None:
    print(
        f"{'p':>5s} {'+draft ms':>9s} {'D(128) ms':>9s} {'fig5b plain/spec':>16s} {'decoupled/coupled':>17s}"
    )
    both: list[tuple[float, float, float]] = []
    for p in (0.5, 0.6, 0.7, 0.8, 0.9):
        for extra_ms in (0.0, 4.0, 8.0, 16.0, 32.0):
            d, fig5b, ratio = row(p, extra_ms * 1e-3)
            print(f"{p:5.2f} {extra_ms:9.1f} {d * 1e3:9.2f} {fig5b:16.2f} {ratio:17.2f}")
            if fig5b <= 1.05:  # Fig. 5b: no (or at most a rounding's) gain at batch 128
                both.append((ratio, p, d))
    ratio, p, d = max(both)
    print(
        f"largest decoupled/coupled where Fig. 5b holds: {ratio:.2f} (p {p:.2f}, D(128) {d * 1e3:.1f} ms); "
        "Fig. 15 reports ~1.3"
    )


if __name__ == "__main__":
    main()
