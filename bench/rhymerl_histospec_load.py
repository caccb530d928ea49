"""Is RhymeRL HistoSpec's overshoot a load effect? (issue #15, root cause)

RhymeRL (History Rhymes, arXiv:2508.18588) Fig. 14 credits HistoSpec with 1.50x, and §7.4
reports 1.80-1.86x at "batch sizes of 4,928 rollouts/TP for Math-32B and 2,176 rollouts/TP
for Math-8B"; simctl's preset gives each TP2 worker 64 requests a step and its HistoSpec
rung comes out at 2.4-2.8x. This script replays the preset's trace (seed 0, the measured
steps after the first epoch's warm-up) under veRL placement with and without HistoSpec
(`verl` vs `histospec-only`) on fewer workers, so that each worker holds more requests, and
prints per cluster: requests per worker, veRL's time-weighted running batch, the rollout
gain, tokens per verification (tau) and the share of tokens speculated.

What it shows (docs/calibration.md, "RhymeRL HistoSpec"): the gain stays at 2.6-2.9x from
64 to 2,048 requests per worker, so load does not explain the overshoot.

Run: .venv/bin/python bench/rhymerl_histospec_load.py [--clusters h800x128:tp2,h800x4:tp2]
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from simctl.reproduce_runner import _setup
from simctl.sim.replay import run_policy
from simctl.traces.generate import generate_trace
from simctl.traces.io import Trace
from simctl.traces.presets import get_preset

PRESET = "rhymerl-math-14b-16k"
CLUSTERS = "h800x128:tp2,h800x32:tp2,h800x8:tp2,h800x4:tp2"


def _one(trace: Trace, cluster: str, key: tuple, policy: str, measured: tuple[int, ...]) -> dict:
    run = run_policy(_setup(trace, cluster, key), policy)
    req = pd.concat(run.requests)
    req = req[req["step"].isin(measured)]
    tl = pd.concat(run.timeline)
    tl = tl[tl["step"].isin(measured)]
    span = tl["t1_s"] - tl["t0_s"]
    verifies = float(req["spec_iters"].sum())
    speculated = verifies + float(req["accepted"].sum())
    return {
        "rollout_s": float(np.mean([m.rollout_makespan_s for m in run.steps if m.step in measured])),
        "batch": float((tl["batch"] * span).sum() / span.sum()),
        "tau": speculated / verifies if verifies else float("nan"),
        "speculated": speculated / float(req["response_len"].sum()),
        "requests": len(req) / len(measured),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clusters", default=CLUSTERS)
    ap.add_argument("--measured", type=int, default=2, help="steps measured after the warm-up epoch")
    args = ap.parse_args()
    epoch = get_preset(PRESET).steps_per_epoch or 1
    measured = tuple(range(epoch, epoch + args.measured))
    steps = tuple(range(epoch)) + measured
    df, meta, lists = generate_trace(PRESET, max(steps) + 1, 0, scale=1.0)
    trace = Trace(df=df, meta=meta, lists=lists)
    key = (PRESET, 1.0, steps, 0)
    head = ("req/worker", "veRL batch", "gain", "tau", "speculated")
    print(f"{'cluster':14s} {head[0]:>10s} {head[1]:>10s} {head[2]:>6s} {head[3]:>5s} {head[4]:>10s}")
    for cluster in args.clusters.split(","):
        base = _one(trace, cluster, key, "verl", measured)
        spec = _one(trace, cluster, key, "histospec-only", measured)
        workers = _setup(trace, cluster, key).cluster.num_workers
        print(
            f"{cluster:14s} {base['requests'] / workers:10.0f} {base['batch']:10.0f} "
            f"{base['rollout_s'] / spec['rollout_s']:6.2f} {spec['tau']:5.2f} {spec['speculated']:10.0%}"
        )


if __name__ == "__main__":
    main()
