"""Benchmark `simctl sweep`: points per second with 1 and 2 workers, and their ratio.

    python bench/bench_sweep.py                 # 48 points, 6 steps each, of the efficientrollout sample
    python bench/bench_sweep.py --seeds 2 --steps 0:2 --keep /tmp/bench-sweep

Each configuration runs the same sweep into a fresh directory and times `run_sweep` (the
points, not the table or report): one worker on the local process pool (what `--workers
1` runs), two on the pool (`--no-ray`), and two on a local Ray (the default; Ray's own
start-up is timed apart, since a cluster is started once and then serves many sweeps).
Target (issue 17): 2 workers >= 1.7x the points per second of 1. The numbers depend on the
machine and on what else runs on it: they are printed, never asserted.

    python bench/bench_sweep.py --study 4       # the six-policy dapo study, 4 steps of it

`--study STEPS` measures issue 17's study instead: verl, speactor, seer, tlt, rhymerl and
composite on STEPS steps of a generated dapo-32b-20k trace (seed 0, 16,384 requests a step)
on h100x512, swept with 1 worker (the local pool) and 2 (a local Ray), each timed around
`run_sweep`. It prints both walls, their ratio, each point's simulator CPU per step (from
`sweep.parquet`) and the 200-step study projected from those CPU seconds: points are
indivisible (a policy carries what it learned from step to step), so on any number of
workers the study takes at least its longest point (`bench_sim_speed.pack`).
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
for _path in (ROOT, ROOT / "bench"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from simctl.sweep_runner import run_sweep, start_local_ray  # noqa: E402
from simctl.sweep_spec import load_spec  # noqa: E402
from simctl.sweep_table import sweep_tables  # noqa: E402

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


STUDY_PRESET = "dapo-32b-20k"
STUDY_CLUSTER = "h100x512"


def write_study_spec(folder: Path, steps: int) -> Path:
    """The study's sweep over a freshly generated `steps`-step dapo trace."""
    from bench_sim_speed import STUDY

    from simctl.traces.generate import generate_trace
    from simctl.traces.io import write_trace

    df, meta, lists = generate_trace(STUDY_PRESET, steps, 0)
    trace = write_trace(folder / f"{STUDY_PRESET}-{steps}steps.parquet", df, meta, lists)
    policies = "".join(f"{name} = {{}}\n" for name in STUDY)
    path = folder / "study.toml"
    path.write_text(
        f'[sweep]\ntraces = ["{trace}"]\nsteps = "0:{steps}"\nclusters = ["{STUDY_CLUSTER}"]\n'
        f"seeds = [0]\n[policies]\n{policies}"
    )
    return path


def study(work: Path, steps: int, use_ray: bool) -> dict:
    """Issue 17's study on `steps` steps: walls with 1 and 2 workers, and the 200-step
    projection from each point's simulator CPU."""
    from bench_sim_speed import STUDY_STEPS, STUDY_TARGET_S, pack

    spec = write_study_spec(work, steps)
    res: dict = {"steps": steps, "one": timed(spec, work / "one", 1, False)}
    if use_ray:
        import ray

        start_local_ray(2)
        try:
            res["two"] = timed(spec, work / "two", 2, True)
        finally:
            ray.shutdown()
    else:
        res["two"] = timed(spec, work / "two", 2, False)
    res["two_vs_one"] = round(res["one"]["wall_s"] / res["two"]["wall_s"], 2)
    table, _ = sweep_tables(load_spec(spec), work / "one")
    per_step = {str(r.policy): float(r.sim_cpu_s) / steps for r in table.itertuples()}
    res["cpu_s_per_step"] = {k: round(v, 2) for k, v in per_step.items()}
    points = [STUDY_STEPS * v for v in per_step.values()]
    res["projected_200_steps_min"] = {n: round(pack(points, n) / 60, 1) for n in (1, 2, 64)}
    two = res["projected_200_steps_min"][2]
    for name, cpu in sorted(per_step.items(), key=lambda kv: -kv[1]):
        print(f"{name:12s} {cpu:7.2f} cpu s/step  {STUDY_STEPS * cpu / 60:6.1f} min for {STUDY_STEPS} steps")
    print(
        f"{steps} steps: 1 worker {res['one']['wall_s']:.0f} s, 2 workers {res['two']['wall_s']:.0f} s "
        f"({res['two_vs_one']:.2f}x); {STUDY_STEPS} steps projected: "
        + ", ".join(f"{n} workers {m} min" for n, m in res["projected_200_steps_min"].items())
        + ("" if two * 60 <= STUDY_TARGET_S else f"  * (target <= {STUDY_TARGET_S / 60:g} min on 2)")
    )
    return res


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
    ap.add_argument("--study", type=int, metavar="STEPS", help="time the six-policy dapo study instead")
    args = ap.parse_args(argv)
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        if args.study:
            print(json.dumps(study(work, args.study, not args.no_ray)))
            return 0
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
