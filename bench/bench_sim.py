"""Simulator benchmarks (issue: simulator core). Run: .venv/bin/python bench/bench_sim.py

Reports, each measured in this one run (ratios, not absolute timings, are the point):
1. one dapo-32b-20k step (16,384 requests, 128 TP4 workers, 512 H100) under verl:
   simulator wall time on one core and peak RSS (target < 2 s, < 2 GB);
2. fast-forward vs --per-iteration on the same (scaled) step: speed ratio (target >= 100x)
   and makespan difference (target < 1%);
3. verl's GPU idle fraction and tail share on that step (the papers report ~50% waste).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

CHILD = r"""
import json, resource, sys, time
from simctl.traces.generate import generate_trace
from simctl.traces.io import Trace
from simctl.sim.cluster import parse_cluster
from simctl.sim.cost_model import load_cost_model
from simctl.sim.engine import EngineConfig
from simctl.sim.models import get_model
from simctl.sim.replay import ReplaySetup, replay
preset, scale, cluster, policy = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
per_it, seed = sys.argv[5] == "1", int(sys.argv[6])
df, meta, lists = generate_trace(preset, steps=1, seed=seed, scale=scale)
tr = Trace(df=df, meta=meta, lists=lists)
spec = parse_cluster(cluster); model = get_model(meta.model)
setup = ReplaySetup(trace=tr, cluster=spec, model=model, cost=load_cost_model(model, spec), steps=tr.steps,
                    seed=seed, engine=EngineConfig(per_iteration=per_it))
t = time.perf_counter()
run = replay(setup, [policy])[policy]
wall = time.perf_counter() - t
s = run.steps[0]
print(json.dumps({"wall_s": wall, "requests": len(df), "makespan_s": s.rollout_makespan_s,
                  "idle": s.gpu_idle_fraction, "tail_s": s.tail_time_s,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def measure(preset: str, scale: float, cluster: str, policy: str, per_iteration: bool, seed: int = 0) -> dict:
    """Each measurement in a fresh single-threaded process so peak RSS is its own."""
    env = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PATH": ""}
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            preset,
            str(scale),
            cluster,
            policy,
            "1" if per_iteration else "0",
            str(seed),
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**env, **_py_env()},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _py_env() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if k.startswith(("PYTHON", "HOME", "VIRTUAL_ENV"))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="dapo-32b-20k")
    ap.add_argument(
        "--scale-per-iteration",
        type=float,
        default=0.25,
        help="batch scale for the per-iteration comparison (it is slow)",
    )
    ap.add_argument("--cluster-scaled", default="h100x128", help="cluster for the scaled comparison")
    args = ap.parse_args()
    full = measure(args.preset, 1.0, "h100x512", "verl", False)
    print(
        f"[1] {args.preset} one step, {full['requests']} requests, h100x512 verl: "
        f"wall {full['wall_s']:.2f} s (target < 2), peak RSS {full['peak_rss_mb']:.0f} MB (target < 2048)"
    )
    t = time.perf_counter()
    ff = measure(args.preset, args.scale_per_iteration, args.cluster_scaled, "verl", False)
    it = measure(args.preset, args.scale_per_iteration, args.cluster_scaled, "verl", True)
    diff = abs(ff["makespan_s"] - it["makespan_s"]) / it["makespan_s"]
    print(
        f"[2] scaled step ({ff['requests']} requests, {args.cluster_scaled}): "
        f"fast-forward {ff['wall_s']:.3f} s, "
        f"per-iteration {it['wall_s']:.2f} s -> {it['wall_s'] / ff['wall_s']:.0f}x faster (target >= 100x); "
        f"makespan diff {diff:.2e} (target < 1e-2)"
    )
    ffs = measure(args.preset, args.scale_per_iteration, args.cluster_scaled, "spec-coupled", False)
    its = measure(args.preset, args.scale_per_iteration, args.cluster_scaled, "spec-coupled", True)
    print(
        f"    spec-coupled: fast-forward {ffs['wall_s']:.3f} s, per-iteration {its['wall_s']:.2f} s -> "
        f"{its['wall_s'] / ffs['wall_s']:.0f}x; "
        f"makespan {ffs['makespan_s']:.1f} vs {its['makespan_s']:.1f} s "
        f"(one seed; tests/sim/test_engine.py checks agreement over seeds)"
    )
    print(
        f"[3] verl on {args.preset}: GPU idle fraction {full['idle']:.1%} (papers: ~50%), "
        f"tail {full['tail_s']:.0f} s of {full['makespan_s']:.0f} s makespan"
    )
    print(f"(bench wall {time.perf_counter() - t:.0f} s)")


if __name__ == "__main__":
    main()
