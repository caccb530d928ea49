"""Benchmark `simctl sweep`: points per second with 1 and 2 workers, and their ratio.

    python bench/bench_sweep.py                 # 48 points, 6 steps each, of the efficientrollout sample
    python bench/bench_sweep.py --seeds 2 --steps 0:2 --keep /tmp/bench-sweep

Each configuration runs the same sweep into a fresh directory and times `run_sweep` (the
points, not the table or report): one worker on the local process pool (what `--workers
1` runs), two on the pool (`--no-ray`), and two on a local Ray (the default; Ray's own
start-up is timed apart, since a cluster is started once and then serves many sweeps).
Target (issue 17): 2 workers >= 1.7x the points per second of 1. The numbers depend on the
machine and on what else runs on it: they are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from simctl.sweep_runner import run_sweep, start_local_ray  # noqa: E402
from simctl.sweep_spec import load_spec  # noqa: E402

TRACE = ROOT / "traces" / "samples" / "efficientrollout-qwen7b-8k-6steps.parquet"
TARGET = 1.7


def write_spec(folder: Path, steps: str, seeds: int) -> Path:
    path = folder / "bench.toml"
    path.write_text(
        f'[sweep]\ntraces = ["{TRACE}"]\nsteps = "{steps}"\nclusters = ["a100x8:tp1"]\n'
        f"seeds = {list(range(seeds))}\n"
        "[policies]\nverl = {}\nngram = { gamma = [2, 4, 6] }\n"
    )
    return path


def timed(spec_path: Path, out: Path, workers: int, use_ray: bool) -> dict:
    spec = load_spec(spec_path)
    t0 = time.perf_counter()
    result = run_sweep(spec, out, workers=workers, use_ray=use_ray)
    wall = time.perf_counter() - t0
    assert result.ran == len(spec.points)
    return {"points": result.ran, "wall_s": round(wall, 3), "points_per_s": round(result.ran / wall, 3)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", default="0:6", help="step range of every point")
    ap.add_argument("--seeds", type=int, default=12, help="seeds per configuration (4 configurations)")
    ap.add_argument("--no-ray", action="store_true", help="skip the Ray measurement")
    ap.add_argument("--keep", type=Path, help="keep the sweeps in this directory")
    args = ap.parse_args(argv)
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        spec = write_spec(work, args.steps, args.seeds)
        res = {
            "pool_1": timed(spec, work / "pool1", 1, False),
            "pool_2": timed(spec, work / "pool2", 2, False),
        }
        if not args.no_ray:
            import ray

            t0 = time.perf_counter()
            start_local_ray(2)
            res["ray_start_s"] = round(time.perf_counter() - t0, 3)
            try:
                res["ray_2"] = timed(spec, work / "ray2", 2, True)
            finally:
                ray.shutdown()
        base = res["pool_1"]["points_per_s"]
        for key in ("pool_2", "ray_2"):
            if key in res:
                ratio = res[key]["points_per_s"] / base
                res[f"speedup_{key}"] = round(ratio, 2)
                print(
                    f"{key}: {res[key]['points_per_s']:.2f} points/s vs 1 worker {base:.2f}: {ratio:.2f}x "
                    f"(target >= {TARGET}x)"
                )
        res["target"] = TARGET
        print(json.dumps(res))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
