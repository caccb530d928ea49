"""Live executor vs simulator (issue 5). Run: .venv/bin/python bench/bench_live.py [--model smollm2]

One pipeline, each stage a `simctl` command run in its own process (as a user would):
1. `simctl calibrate` of the torch backend on the model -> PROFILE (skipped with --profile);
2. `simctl live` under each --policy (default verl and ngram) -> a recorded trace + run dir;
3. `simctl replay RECORDED --profile PROFILE --cluster h100xN:tp1` (the GPU name only labels
   the cluster: a profile replaces its cost model) -> simulated run dir.
Reports per policy the measured and simulated rollout makespan and their error (target
within 15%), and the executor's overhead over engine time (target < 2%).

A second simulated makespan prototypes a simulator change proposed with issue 5 (not in
sim/ yet): price a speculative iteration by the draft tokens really proposed,
b + sum(gamma_i * fill_i), with fill = the recorded `draft_fill_<method>`, instead of
b + sum(gamma_i). An n-gram drafter at temperature 1 fills ~15% of its slots, so the
unchanged simulator prices its iterations several times too high.

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


class FillAwareCost:
    """The proposed simulator change, as a cost-model wrapper: verify iterations see
    b + (new_tokens - b) * fill query tokens."""

    def __init__(self, inner, fill: float) -> None:
        self.inner, self.fill = inner, fill
        self.kv_capacity_tokens = inner.kv_capacity_tokens
        self.weight_bytes_per_gpu = inner.weight_bytes_per_gpu

    def iteration_time(self, num_seqs, new_tokens, context_tokens):
        import numpy as np

        b, n = np.asarray(num_seqs, float), np.asarray(new_tokens, float)
        return self.inner.iteration_time(
            num_seqs, np.where(n > b, b + (n - b) * self.fill, n), context_tokens
        )

    def prefill_time(self, tokens):
        return self.inner.prefill_time(tokens)

    def draft_time(self, drafter, num_seqs, context_tokens, gamma):
        return self.inner.draft_time(drafter, num_seqs, context_tokens, gamma)


def fill_aware_makespans(
    trace_path: Path, profile: Path, workers: int, policies: list[str]
) -> dict[str, float]:
    from policies.registry import make_policy
    from sim.cluster import parse_cluster
    from sim.cost_model import load_cost_model
    from sim.models import get_model
    from sim.replay import ReplaySetup, run_policy
    from traces.validate import load_valid_trace

    trace = load_valid_trace(trace_path)
    spec = parse_cluster(f"h100x{workers}:tp1")
    model = get_model(trace.meta.model)
    cost = load_cost_model(model, spec, profile)
    out = {}
    for p in policies:
        params = make_policy(p).params()
        method = next(
            (v.get("method") for v in params.values() if isinstance(v, dict) and "method" in v), None
        )
        col = f"draft_fill_{method}"
        fill = float(trace.df[col].mean()) if col in trace.df.columns else 1.0
        setup = ReplaySetup(
            trace=trace, cluster=spec, model=model, cost=FillAwareCost(cost, fill), steps=trace.steps
        )
        run = run_policy(setup, p)
        out[run.name] = run.summary()["mean_rollout_makespan_s"]
    return out


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
    fill = fill_aware_makespans(root / "recorded.parquet", profile, a.workers, policies)
    rows = {}
    for p in live:
        lm, sm, fm = live[p]["mean_rollout_makespan_s"], sim[p]["mean_rollout_makespan_s"], fill[p]
        rows[p] = {
            "live_makespan_s": lm,
            "sim_makespan_s": sm,
            "error": (sm - lm) / lm,
            "sim_fill_aware_makespan_s": fm,
            "fill_aware_error": (fm - lm) / lm,
            "overhead_fraction": live[p]["overhead"]["fraction_of_engine"],
        }
        print(
            f"{p:>12}: live {lm:7.2f} s | sim {sm:7.2f} s ({rows[p]['error']:+.1%}) | "
            f"sim fill-aware {fm:7.2f} s ({rows[p]['fill_aware_error']:+.1%}) | "
            f"overhead {rows[p]['overhead_fraction']:.2%}"
        )
    (root / "summary.json").write_text(json.dumps(rows, indent=1))
    print(f"artefacts in {root}")


if __name__ == "__main__":
    main()
