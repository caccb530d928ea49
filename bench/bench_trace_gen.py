"""Time generating, writing and loading a full-size synthetic trace.

Targets (2-core machine): generation + write < 60 s, load < 10 s, peak RSS < 2 GB.
The load runs in a fresh subprocess so its peak RSS is its own, not the generator's.

    .venv/bin/python bench/bench_trace_gen.py [--preset dapo-32b-20k] [--steps 200] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from simctl.traces.generate import generate_trace  # noqa: E402
from simctl.traces.io import write_trace  # noqa: E402

TARGETS = {"gen_write_s": 60.0, "load_s": 10.0, "peak_rss_gb": 2.0}

_LOAD_SNIPPET = """
import json, resource, sys, time
sys.path.insert(0, {root!r})
from simctl.traces.io import read_trace
t = time.perf_counter()
trace = read_trace({path!r})
elapsed = time.perf_counter() - t
print(json.dumps({{"load_s": elapsed, "rows": len(trace.df), "columns": len(trace.df.columns),
                   "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}}))
"""


def peak_rss_gb() -> float:
    """Peak resident set of this process (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def bench(preset: str, steps: int, seed: int, scale: float, out: Path) -> dict[str, float]:
    t0 = time.perf_counter()
    df, meta, lists = generate_trace(preset, steps=steps, seed=seed, scale=scale)
    t1 = time.perf_counter()
    write_trace(out, df, meta, lists=lists)
    t2 = time.perf_counter()
    rows = len(df)
    del df, lists
    load = subprocess.run(
        [sys.executable, "-c", _LOAD_SNIPPET.format(root=str(ROOT), path=str(out))],
        check=True,
        capture_output=True,
        text=True,
    )
    loaded = json.loads(load.stdout)
    return {
        "rows": rows,
        "generate_s": t1 - t0,
        "write_s": t2 - t1,
        "gen_write_s": t2 - t0,
        "file_mb": out.stat().st_size / 2**20,
        "gen_peak_rss_gb": peak_rss_gb(),
        "load_s": loaded["load_s"],
        "load_peak_rss_gb": loaded["peak_rss_gb"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="dapo-32b-20k")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=float, default=1.0)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        r = bench(args.preset, args.steps, args.seed, args.scale, Path(tmp) / "trace.parquet")
    for key, value in r.items():
        print(f"{key:>16}: {value:,.2f}" if isinstance(value, float) else f"{key:>16}: {value:,}")
    checks = {
        "gen_write_s": r["gen_write_s"],
        "load_s": r["load_s"],
        "peak_rss_gb": max(r["gen_peak_rss_gb"], r["load_peak_rss_gb"]),
    }
    ok = True
    for key, value in checks.items():
        passed = value < TARGETS[key]
        ok &= passed
        print(f"{'ok ' if passed else 'MISS'} {key} {value:.2f} < {TARGETS[key]}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
