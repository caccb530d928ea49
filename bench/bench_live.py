"""Live executor vs simulator (issue 5). Run: .venv/bin/python bench/bench_live.py [--model smollm2]

One pipeline, each stage a `simctl` command run in its own process (as a user would):
1. `simctl calibrate` of the torch backend on the model -> PROFILE (skipped with --profile);
2. `simctl live` under each --policy (default verl and ngram) -> a recorded trace + run dir;
3. `simctl replay RECORDED --profile PROFILE --cluster h100xN:tp1` (the GPU name only labels
   the cluster: a profile replaces its cost model) -> simulated run dir.
Reports per policy the measured and simulated rollout makespan and their error (target
within 15%), and the executor's overhead over engine time (target < 2%).

The simulator prices a speculative iteration by the draft slots really filled (the recorded
`draft_fill_<method>`): an n-gram drafter at temperature 1 fills ~15% of them.

Timings on a shared 2-core host are noisy: calibrate and run back to back, one thread.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

RUNNER = r"""
import sys
from live.calibrate import calibrate_cmd
from live.cli import live_cmd
from sim.replay_cli import replay_cmd
cmd = {"live": live_cmd, "calibrate": calibrate_cmd, "replay": replay_cmd}[sys.argv[1]]
cmd(sys.argv[2:], prog_name="simctl " + sys.argv[1])
"""


def simctl(*args: str) -> None:
    print("$ simctl " + " ".join(args), flush=True)
    subprocess.run([sys.executable, "-c", RUNNER, *args], check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--policy", action="append", dest="policies")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--prompts-per-step", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--profile", type=Path, help="Reuse a profile instead of calibrating.")
    ap.add_argument("--dir", type=Path, help="Keep the artefacts here (default: a temp dir).")
    a = ap.parse_args()
    policies = a.policies or ["verl", "ngram"]
    root = a.dir or Path(tempfile.mkdtemp(prefix="bench-live-"))
    root.mkdir(parents=True, exist_ok=True)
    profile = a.profile or root / "profile.json"
    if a.profile is None:
        simctl("calibrate", "--model", a.model, "-o", str(profile))
    live_args = [
        "--model",
        a.model,
        "--workers",
        str(a.workers),
        "--prompts-per-step",
        str(a.prompts_per_step),
        "--group-size",
        str(a.group_size),
        "--max-tokens",
        str(a.max_tokens),
        "--steps",
        str(a.steps),
        "--record",
        str(root / "recorded.parquet"),
        "--out",
        str(root / "live"),
    ]
    for p in policies:
        live_args += ["--policy", p]
    simctl("live", *live_args)
    replay_args = [
        str(root / "recorded.parquet"),
        "--profile",
        str(profile),
        "--cluster",
        f"h100x{a.workers}:tp1",
        "--out",
        str(root / "sim"),
    ]
    for p in policies:
        replay_args += ["--policy", p]
    simctl("replay", *replay_args)
    live = json.loads((root / "live" / "run.json").read_text())["policies"]
    sim = json.loads((root / "sim" / "run.json").read_text())["policies"]
    rows = {}
    for p in live:
        lm, sm = live[p]["mean_rollout_makespan_s"], sim[p]["mean_rollout_makespan_s"]
        rows[p] = {
            "live_makespan_s": lm,
            "sim_makespan_s": sm,
            "error": (sm - lm) / lm,
            "overhead_fraction": live[p]["overhead"]["fraction_of_engine"],
        }
        print(
            f"{p:>12}: live {lm:7.2f} s | sim {sm:7.2f} s ({rows[p]['error']:+.1%}) | "
            f"overhead {rows[p]['overhead_fraction']:.2%}"
        )
    (root / "summary.json").write_text(json.dumps(rows, indent=1))
    print(f"artefacts in {root}")


if __name__ == "__main__":
    main()
