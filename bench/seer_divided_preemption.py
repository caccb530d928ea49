"""Why Seer's divided-rollout rung gains little in simctl (issue #15, root cause)

Seer (arXiv:2511.14617) Table 6 credits divided rollout alone with 1.27x / 1.31x / 1.35x
(Moonlight / Qwen2-VL-72B / Kimi-K2) over its baseline, from two effects (§4.2, §6.3):
load balance across instances, and no preemption where "insufficient KVCache capacity
causes frequent request preemptions" (Fig. 3, Qwen2-VL-72B). This script replays each Table
6 experiment's baseline (`verl`) and rung (`seer-divided`) on the paper's layout, step 4, seed 0
(as `simctl reproduce seer --quick` does) and prints, per run, the rollout makespan and
throughput, the preemptions, the seconds spent recomputing preempted context, the busy
GPU-seconds and the idle fraction.

What it shows: where veRL preempts (Qwen2-VL), a preemption costs simctl only its re-prefill
(a few % of busy time), while divided rollout's KV budget lowers concurrency and raises busy
time by more than that, so the rung is ~1.0; where veRL does not preempt (Moonlight, Kimi),
the rung is load balance alone (veRL's idle fraction is what it recovers).

Run: .venv/bin/python bench/seer_divided_preemption.py
"""

from __future__ import annotations

import pandas as pd

from simctl.reproduce_runner import Runner, _setup
from simctl.sim.experiments import experiments_of
from simctl.sim.replay import run_policy


def main() -> None:
    for model in ("moonlight", "qwen2vl", "kimi"):
        e = next(x for x in experiments_of("seer") if x.id == f"seer/{model}-table6-divided")
        scale = e.quick
        assert scale is not None
        key = (e.preset, scale.trace_scale, scale.replayed, 0)
        trace = Runner().trace(key)
        rows = {}
        for policy in (e.baseline, e.policy):
            run = run_policy(_setup(trace, scale.cluster, key), policy)
            req = pd.concat(run.requests)
            tl = pd.concat(run.timeline)
            m = next(x for x in run.steps if x.step == scale.steps[0])
            rows[policy] = m.throughput_tok_s
            busy = float((tl["t1_s"] - tl["t0_s"]).sum())
            print(
                f"{model:9s} {scale.cluster:22s} {policy:13s} makespan {m.rollout_makespan_s:6.0f} s  "
                f"{m.throughput_tok_s:6.0f} tok/s  preemptions {int(req['preemptions'].sum()):5d}  "
                f"recompute {tl['recompute_s'].sum():5.0f} s  busy {busy:6.0f} worker-s  "
                f"idle {m.gpu_idle_fraction:.2f}"
            )
        rung = rows[e.policy] / rows[e.baseline]
        print(f"{model:9s} rung: {rung:.2f}x (paper {e.value.lo:.2f}-{e.value.hi:.2f})")


if __name__ == "__main__":
    main()
