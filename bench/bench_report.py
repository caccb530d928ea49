"""Benchmark `build_report` on a study of realistic size.

    python bench/bench_report.py                      # synthesise 200 steps x 6 policies, time it
    python bench/bench_report.py --runs DIR [DIR ...] # time real run directories instead
    python bench/bench_report.py --steps 20 --keep /tmp/bench   # keep inputs and report

The synthetic study has the shape of `dapo-32b-20k` on `h100x512` (128 tp4 workers):
16,384 requests per step, ~16K timeline segments per step and policy (one per change of a
worker's batch, as the simulator writes them), so its Parquet tables have the row counts
of a real 200-step replay (~20M timeline rows) without the hours of simulation. What is
measured is the report, so the numbers only need the right sizes and a plausible shape.

Budget (issue "Comparison reports"): render < 60 s, page < 20 MB.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from simctl.reports.build import build_report  # noqa: E402

PRESET = "dapo-32b-20k"
WORKERS = 128
# (name, speed vs veRL, draft length gamma or 0, accept length, role lent to when a worker drains)
POLICIES = (
    ("verl", 1.00, 0, None, None),
    ("ngram", 0.93, 4, 1.4, None),
    ("spec-coupled", 0.80, 4, 2.6, None),
    ("rlhfuse", 1.00, 0, None, "trainer"),
    ("tlt", 0.72, 6, 3.0, "spot-trainer"),
    ("specactor", 0.65, 8, 3.4, "verifier"),
)


def _preset_shape() -> dict:
    """Workload numbers from the preset when the generator's catalogue is importable."""
    shape = {
        "prompts": 1024,
        "group": 16,
        "max_tokens": 20480,
        "median0": 3000.0,
        "sigma": 0.85,
        "growth": 0.004,
        "model": "qwen2.5-32b",
    }
    try:
        from simctl.traces.presets import get_preset

        p = get_preset(PRESET)
        shape.update(
            prompts=p.prompts_per_step,
            group=p.group_size,
            max_tokens=p.max_tokens,
            median0=p.len_median0,
            sigma=p.len_sigma,
            growth=p.growth_per_step,
            model=p.model,
        )
    except Exception:  # the bench must run on any checkout; the defaults are the preset's values
        pass
    return shape


def _step_lengths(shape: dict, step: int, rng: np.random.Generator) -> np.ndarray:
    n = shape["prompts"] * shape["group"]
    median = shape["median0"] * (1 + shape["growth"] * step)
    prompt_effect = np.repeat(rng.normal(0, shape["sigma"] * 0.77, shape["prompts"]), shape["group"])
    noise = rng.normal(0, shape["sigma"] * 0.64, n)
    return np.clip(np.exp(np.log(median) + prompt_effect + noise), 1, shape["max_tokens"]).astype(np.int64)


def _synth_step(policy: tuple, step: int, lens: np.ndarray, shape: dict, rng: np.random.Generator) -> dict:
    """One policy-step: each worker decodes its share in one batch; a segment per finish."""
    name, speed, gamma, accept, lent_role = policy
    n = len(lens)
    groups = np.arange(n) // shape["group"]
    worker = (groups % WORKERS).astype(np.int64)
    tok_s = 40.0 / speed * rng.uniform(0.95, 1.05, WORKERS)  # per-request decode speed per worker
    finish = lens / tok_s[worker] * rng.uniform(0.9, 1.1, n)
    order = np.lexsort((finish, worker))
    w_sorted, f_sorted = worker[order], finish[order]
    first = np.ones(n, dtype=bool)
    first[1:] = w_sorted[1:] != w_sorted[:-1]
    t0 = np.where(first, 0.0, np.roll(f_sorted, 1))
    counts = np.bincount(worker, minlength=WORKERS)
    start_idx = np.flatnonzero(first)
    rank = np.arange(n) - np.repeat(start_idx, counts[w_sorted[start_idx]])
    batch = counts[w_sorted] - rank
    iter_s = 0.025 + 0.0001 * batch
    dur = f_sorted - t0
    spec_on = (gamma > 0) & (batch < 64) if name == "tlt" else np.full(n, gamma > 0)
    makespan = float(finish.max())
    done = np.sort(finish)
    tail = makespan - done[int(np.ceil(0.9 * n)) - 1]
    last = np.zeros(WORKERS)
    np.maximum.at(last, worker, finish)
    idle = float((makespan - last).sum() / (WORKERS * makespan))
    spec_iters = np.where(gamma > 0, np.ceil(lens / (accept or 1.0)), 0).astype(np.int64)
    accepted = np.where(gamma > 0, lens - spec_iters, 0).astype(np.int64)
    roles_w = [np.arange(WORKERS)]
    roles_t = [np.zeros(WORKERS)]
    roles_r = [np.full(WORKERS, "rollout", dtype=object)]
    if lent_role:
        roles_w.append(np.arange(WORKERS))
        roles_t.append(last)
        roles_r.append(np.full(WORKERS, lent_role, dtype=object))
    tokens = int(lens.sum())
    metrics = {
        "step": step,
        "rollout_makespan_s": makespan,
        "step_time_s": makespan + 120.0 - (40.0 if lent_role else 0.0),
        "output_tokens": tokens,
        "throughput_tok_s": tokens / makespan,
        "tail_time_s": float(tail),
        "gpu_idle_fraction": 0.0 if lent_role else idle,
        "mean_accept_len": accept,
    }
    return {
        "metrics": metrics,
        "requests": {
            "policy": np.full(n, name, dtype=object),
            "step": np.full(n, step, dtype=np.int32),
            "request": np.arange(n, dtype=np.int32),
            "prompt_id": groups.astype(np.int64),
            "sample": (np.arange(n) % shape["group"]).astype(np.int32),
            "worker": worker.astype(np.int32),
            "prompt_len": np.full(n, 180, dtype=np.int64),
            "response_len": lens,
            "finish_s": finish,
            "preemptions": np.zeros(n, dtype=np.int32),
            "dispatches": np.ones(n, dtype=np.int32),
            "drafted": spec_iters * gamma,
            "accepted": accepted,
            "spec_iters": spec_iters,
            "start_s": np.zeros(n),  # one batch per worker, admitted at the step start
            "first_token_s": 0.025 + 0.0001 * counts[worker],  # its first iteration
        },
        "timeline": {
            "worker": w_sorted,
            "t0_s": t0,
            "t1_s": f_sorted,
            "iterations": np.maximum(1, (dur / iter_s).astype(np.int64)),
            "batch": batch.astype(np.int64),
            "kv_tokens": (batch * 2500).astype(np.int64),
            "gamma_mean": np.where(spec_on, float(gamma), 0.0),
            "policy": np.full(n, name, dtype=object),
            "step": np.full(n, step, dtype=np.int32),
        },
        "roles": {
            "worker": np.concatenate(roles_w).astype(np.int64),
            "time_s": np.concatenate(roles_t),
            "role": np.concatenate(roles_r),
            "policy": np.full(sum(len(x) for x in roles_w), name, dtype=object),
            "step": np.full(sum(len(x) for x in roles_w), step, dtype=np.int64),
        },
    }


def synthesise(out: Path, steps: int, npolicies: int, seed: int = 0) -> Path:
    """A run directory in the format of simctl/replay_cmd.py `write_run_dir`."""
    out.mkdir(parents=True, exist_ok=True)
    shape = _preset_shape()
    rng = np.random.default_rng(seed)
    lengths = [_step_lengths(shape, s, rng) for s in range(steps)]
    writers: dict[str, pq.ParquetWriter] = {}
    doc_policies = {}
    try:
        for policy in POLICIES[:npolicies]:
            chunks: dict[str, list[pa.Table]] = {"requests": [], "timeline": [], "roles": []}
            step_metrics = []
            for s in range(steps):
                part = _synth_step(policy, s, lengths[s], shape, rng)
                step_metrics.append(part["metrics"])
                for kind in chunks:
                    chunks[kind].append(pa.table(part[kind]))
            for kind, tables in chunks.items():
                table = pa.concat_tables(tables)
                if kind not in writers:
                    writers[kind] = pq.ParquetWriter(out / f"{kind}.parquet", table.schema)
                writers[kind].write_table(table)
            mk = [m["rollout_makespan_s"] for m in step_metrics]
            st = [m["step_time_s"] for m in step_metrics]
            doc_policies[policy[0]] = {
                "steps": step_metrics,
                "mean_rollout_makespan_s": float(np.mean(mk)),
                "mean_step_time_s": float(np.mean(st)),
                "sim_wall_s": 0.0,
                "events": 0,
                "counters": {},
                "params": {"synthetic": {"speed": policy[1], "gamma": policy[2]}},
            }
    finally:
        for w in writers.values():
            w.close()
    doc = {
        "trace": f"{PRESET}-{steps}steps.parquet",
        "cluster": "64x8 H100-SXM-80GB tp4",
        "seed": seed,
        "policies": doc_policies,
        "provenance": {
            "simctl_version": "bench",
            "command": "bench/bench_report.py (synthetic run directory)",
            "date": "1970-01-01T00:00:00+00:00",
            "mode": "synthetic",
            "source": "sim",
            "model": shape["model"],
            "cost_model": "synthetic",
            "cluster": {
                "nodes": 64,
                "gpus_per_node": 8,
                "total_gpus": 512,
                "tp": 4,
                "num_workers": WORKERS,
                "gpu_mem_util": 0.9,
                "gpu": {"name": "H100-SXM-80GB"},
                "source": "h100x512",
            },
            "engine": {"max_num_seqs": 256},
            "trace_meta": {"preset": PRESET, "seed": seed, "model": shape["model"], "source": "generated"},
            "steps": list(range(steps)),
        },
    }
    (out / "run.json").write_text(json.dumps(doc, indent=1))
    return out


def _dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", nargs="+", type=Path, help="real run directories (skip synthesis)")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--policies", type=int, default=6, choices=range(1, len(POLICIES) + 1))
    ap.add_argument("--keep", type=Path, help="write inputs and report here and keep them")
    ap.add_argument("--budget-s", type=float, default=60.0)
    ap.add_argument("--budget-mb", type=float, default=20.0)
    args = ap.parse_args(argv)

    base = args.keep or Path(tempfile.mkdtemp(prefix="bench-report-"))
    base.mkdir(parents=True, exist_ok=True)
    try:
        if args.runs:
            runs = args.runs
        else:
            t = time.perf_counter()
            runs = [synthesise(base / "run", args.steps, args.policies)]
            rows = pq.ParquetFile(runs[0] / "timeline.parquet").metadata.num_rows
            print(
                f"synthesised {args.steps} steps x {args.policies} policies: {rows:,} timeline rows, "
                f"{_dir_size(runs[0]) / 1e6:.0f} MB in {time.perf_counter() - t:.1f} s",
                file=sys.stderr,
            )
        out = base / "report"
        t = time.perf_counter()
        index = build_report(runs, out)
        render_s = time.perf_counter() - t
        page_mb = index.stat().st_size / 1e6
        total_mb = _dir_size(out) / 1e6
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        result = {
            "render_s": round(render_s, 2),
            "index_html_mb": round(page_mb, 3),
            "report_dir_mb": round(total_mb, 2),
            "figures": len(list((out / "figures").glob("*.png"))),
            "peak_rss_mb": round(peak_mb),
            "within_budget": render_s < args.budget_s and total_mb < args.budget_mb,
            "report": str(index),
        }
        print(json.dumps(result))
        return 0 if result["within_budget"] else 1
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
