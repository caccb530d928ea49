"""Where simctl's TLT end-to-end gain comes from (issue #15, root cause)

TLT (Taming the Long-Tail, arXiv:2511.16665) reports 1.7-2.1x end to end over veRL (Fig. 11);
simctl gives about 1.6. This script replays the TLT preset (seed 0, warm-up step 0,
measured steps 1-3, the preset's own layout) under veRL and TLT variants and prints per
step the rollout and step speedups, veRL's share of the step spent in rollout and of its
rollout spent with fewer than 32 requests per worker (where TLT speculates, §5), and the
rollout gain the paper's range would need at simctl's non-rollout share.

What it shows (docs/calibration.md, "TLT end to end"): rollout 1.88x, bounded by the part
of veRL's rollout at 32 or more requests per worker; a threshold of 64 adds little (1.64 end
to end), 128 loses.

Run: .venv/bin/python bench/tlt_e2e_decomposition.py [--policies tlt,tlt:threshold=64]
     [--len-sigma 1.2]   (the trace generated again with another length spread)
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np
import pandas as pd

from simctl.reproduce_runner import _setup
from simctl.sim.experiments import _layout
from simctl.sim.replay import run_policy
from simctl.traces.generate import generate_trace
from simctl.traces.io import Trace
from simctl.traces.presets import get_preset

PRESET = "tlt-qwen32b-32k"
STEPS = (0, 1, 2, 3)  # step 0 warms up (§6.1)
THRESHOLD = 32  # TLT's default: speculate below this many requests per worker
PAPER_LOW = 1.7


def _steps(trace: Trace, cluster: str, policy: str) -> dict[int, tuple[float, float, float]]:
    """Per measured step: (rollout s, step s, share of rollout below THRESHOLD requests)."""
    run = run_policy(_setup(trace, cluster, (PRESET, 1.0, STEPS, 0)), policy)
    timeline = pd.concat(run.timeline)
    out = {}
    for m in run.steps:
        if m.step == STEPS[0]:
            continue
        tl = timeline[timeline["step"] == m.step]
        span = tl["t1_s"] - tl["t0_s"]
        small = float((span * (tl["batch"] < THRESHOLD)).groupby(tl["worker"]).sum().mean())
        out[m.step] = (m.rollout_makespan_s, m.step_time_s, small / m.rollout_makespan_s)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", default="tlt,tlt:threshold=64,tlt:threshold=128")
    ap.add_argument("--len-sigma", type=float, help="the preset's length spread (default: its own)")
    args = ap.parse_args()
    cluster = _layout(PRESET, 1.0)
    preset = get_preset(PRESET)
    if args.len_sigma is not None:
        preset = dataclasses.replace(preset, len_sigma=args.len_sigma)
    df, meta, lists = generate_trace(preset, len(STEPS), 0, scale=1.0)
    trace = Trace(df=df, meta=meta, lists=lists)
    base = _steps(trace, cluster, "verl")
    for step, (rollout, total, small) in base.items():
        outside = total - rollout
        need = rollout / ((total / PAPER_LOW) - outside)
        print(
            f"verl step {step}: rollout {rollout:.0f} s of {total:.0f} s ({rollout / total:.1%}), "
            f"{small:.0%} of it below {THRESHOLD} requests per worker; "
            f"{PAPER_LOW}x end to end needs {need:.2f}x on rollout"
        )
    for policy in args.policies.split(","):
        got = _steps(trace, cluster, policy)
        rollout = np.mean([base[s][0] / got[s][0] for s in got])
        step = np.mean([base[s][1] / got[s][1] for s in got])
        print(f"{policy:24s} rollout {rollout:.3f}x  end to end {step:.3f}x")


if __name__ == "__main__":
    main()
