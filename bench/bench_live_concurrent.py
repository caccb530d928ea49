"""Concurrent vs lockstep live execution (issue 14). Run:

    .venv/bin/python bench/bench_live_concurrent.py --backend torch
    .venv-vllm/bin/python bench/bench_live_concurrent.py --backend vllm

The same `simctl live` run (same workload, policy, seed; default 2 workers x 64 requests,
one thread each) twice per repeat: engines looping side by side in their own processes
(the default) and stepped one iteration at a time in the controller (`--lockstep`), in
alternating order so that a change in the host's load does not favour one mode. Reports
per mode the policy's wall time (engines already started: run.json `wall_s`), the
measured makespan, the executor's overhead over engine time, and the controller's reaction
time (report received -> answer sent; concurrent only), and the ratio concurrent/lockstep
wall per repeat (target <= 0.65 with two workers on two cores).

Ratios are measured within one run of this script: a shared host is noisy, absolute times
are not comparable across runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNNER = "import sys; from simctl.live.cli import live_cmd; live_cmd(sys.argv[1:], prog_name='simctl live')"


def live(args: list[str], out: Path) -> dict:
    """One `simctl live` in its own process; its run.json."""
    cmd = [sys.executable, "-c", RUNNER, *args, "--out", str(out)]
    print("$ simctl live " + " ".join(args), flush=True)
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if res.returncode:
        sys.stderr.write(res.stdout[-3000:] + res.stderr[-3000:])
        raise SystemExit(f"simctl live failed (exit {res.returncode})")
    return json.loads((out / "run.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="torch", choices=["torch", "vllm"])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--policy", default="verl")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--requests-per-worker", type=int, default=64)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--dir", type=Path)
    a = ap.parse_args()
    root = a.dir or Path(tempfile.mkdtemp(prefix="bench-conc-"))
    prompts = a.workers * a.requests_per_worker // a.group_size
    base = [
        "--backend", a.backend, "--model", a.model, "--policy", a.policy,
        "--workers", str(a.workers), "--threads", "1",
        "--prompts-per-step", str(prompts), "--group-size", str(a.group_size),
        "--max-tokens", str(a.max_tokens),
    ]  # fmt: skip
    rows = []
    for i in range(a.repeats):
        modes = ["concurrent", "lockstep"] if i % 2 == 0 else ["lockstep", "concurrent"]
        got = {}
        for mode in modes:
            args = [*base, "--lockstep"] if mode == "lockstep" else base
            doc = live(args, root / f"rep{i}-{mode}")
            p = doc["policies"][a.policy]
            got[mode] = {
                "wall_s": p["wall_s"],
                "makespan_s": p["mean_rollout_makespan_s"],
                "overhead": p["overhead"]["fraction_of_engine"],
                "engine_s": p["overhead"]["engine_s"],
                "reaction": p.get("reaction_s"),
            }
        ratio = got["concurrent"]["wall_s"] / got["lockstep"]["wall_s"]
        rows.append(
            {"repeat": i, **{f"{m}_{k}": v for m, d in got.items() for k, v in d.items()}, "ratio": ratio}
        )
        c, lk = got["concurrent"], got["lockstep"]
        react = c["reaction"] or {}
        print(
            f"  rep {i}: concurrent wall {c['wall_s']:6.1f} s (makespan {c['makespan_s']:6.1f} s, overhead "
            f"{c['overhead']:.3%}, reaction median {react.get('median', 0) * 1e3:.2f} ms p99 "
            f"{react.get('p99', 0) * 1e3:.2f} ms over {react.get('reports', 0):.0f} reports) | lockstep wall "
            f"{lk['wall_s']:6.1f} s (makespan {lk['makespan_s']:6.1f} s, overhead {lk['overhead']:.3%}) | "
            f"ratio {ratio:.2f}",
            flush=True,
        )
    ratios = [r["ratio"] for r in rows]
    print(
        f"\n{a.backend}, {a.workers} workers x {a.requests_per_worker} requests, {a.max_tokens} tokens: "
        f"concurrent/lockstep wall median {statistics.median(ratios):.2f} "
        f"[{min(ratios):.2f}, {max(ratios):.2f}] over {len(rows)} repeat(s) (target <= 0.65)"
    )
    (root / "summary.json").write_text(json.dumps(rows, indent=1))
    print(f"artefacts in {root}")


if __name__ == "__main__":
    main()
