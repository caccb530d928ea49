"""Live executor vs simulator (issues 5, 14). Run: .venv/bin/python bench/bench_live.py [--repeats 3]
(vLLM: .venv-vllm/bin/python bench/bench_live.py --backend vllm --workers 2 --prompts-per-step 32)

One pipeline, each stage a `simctl` command run in its own process (as a user would):
1. `simctl calibrate` of the torch backend on the model -> a profile;
2. `simctl live` under each --policy (default verl and ngram) -> a recorded trace + run dir;
3. `simctl replay RECORDED --profile PROFILE --cluster h100xN:tp1` (the GPU name only labels
   the cluster: a profile replaces its cost model) -> simulated run dir.
Reports per policy the measured and simulated rollout makespan and their error (target
within 15%), and the executor's overhead over engine time (target < 2%).

A shared 2-core host is noisy: the same live run took 55-85 s from one run to the next, and
a calibration taken a minute before a live run can be 30% off it. So the bench repeats the
pipeline (--repeats) and reports the median error and its spread, and it interleaves
calibrations with live runs: cal0, live1, cal1, live2, cal2, ... and live i is replayed with
the measurements of cal(i-1) and cal(i) together (one profile, both sets of rows: the fit
averages the host's state before and after the run). Torch runs one thread everywhere.

Two checks split the error:
- "model": the profile priced on the iterations the live run really ran (its
  iterations.parquet: batch, query tokens, context, prefill, draft method): the cost model's
  error alone, host noise included;
- "error": the simulated makespan, which adds what the replay does differently (sampled
  acceptance instead of the engine's drafts, verification priced at the recorded mean fill).
"cpu" is the live engine's CPU share (thread CPU time over wall time in its steps): well
below 1, other processes took the core during the run.
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
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RUNNER = r"""
import sys
from simctl.live.calibrate import calibrate_cmd
from simctl.live.cli import live_cmd
from simctl.replay_cmd import replay_cmd
cmd = {"live": live_cmd, "calibrate": calibrate_cmd, "replay": replay_cmd}[sys.argv[1]]
cmd(sys.argv[2:], prog_name="simctl " + sys.argv[1])
"""


def simctl(*args: str, quiet: bool = False) -> None:
    """Run one simctl command; `quiet` keeps its output unless it fails."""
    print("$ simctl " + " ".join(args), flush=True)
    cmd = [sys.executable, "-c", RUNNER, *args]
    if not quiet:
        subprocess.run(cmd, check=True, cwd=ROOT)
        return
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if res.returncode:
        sys.stderr.write(res.stdout[-4000:] + res.stderr[-4000:])
        raise SystemExit(f"simctl {args[0]} failed (exit {res.returncode})")


def batch_grid(max_batch: int) -> list[int]:
    """Powers of two up to the largest batch a worker runs, and that batch."""
    out, b = [], 1
    while b < max_batch:
        out.append(b)
        b *= 2
    return [*out, max_batch]


def merge_profiles(paths: list[Path], out: Path) -> Path:
    """One profile holding every measurement of `paths` (same model and backend)."""
    docs = [json.loads(p.read_text()) for p in paths]
    doc = dict(docs[0])
    doc["measurements"] = [m for d in docs for m in d["measurements"]]
    doc["notes"] = dict(docs[0].get("notes", {}), merged_from=[str(p) for p in paths])
    shares = [d.get("notes", {}).get("cpu_share") for d in docs]
    if all(s is not None for s in shares):
        doc["notes"]["cpu_share"] = min(shares)
    out.write_text(json.dumps(doc, indent=1))
    return out


def model_check(iterations: Path, profile: Path, clock: str = "engine_s") -> dict[str, dict[str, float]]:
    """Per policy: the profile's price of the live run's own iterations against their
    measured engine time (`clock`: engine_s, or engine_cpu_s with a CPU-time profile), over
    all iterations and over those that verified drafts; and the live engine's CPU share."""
    import numpy as np
    import pandas as pd

    from simctl.sim.cost_model import ProfiledCostModel
    from simctl.sim.engine import DRAFTERS

    prof = ProfiledCostModel.from_json(profile)
    it = pd.read_parquet(iterations)
    out = {}
    for policy, g in it.groupby("policy", sort=False):
        b = g["batch"].to_numpy(np.float64)
        n = g["new_tokens"].to_numpy(np.float64)
        ctx = g["context_tokens"].to_numpy(np.float64)
        pre = g["prefill_tokens"].to_numpy(np.float64)
        pred = prof.iteration_time(b, n, ctx) + np.where(pre > 0, prof.prefill_time(pre), 0.0)
        for method, rows in g[g["speculating"] > 0].groupby("method"):
            idx = g.index.get_indexer(rows.index)
            pred[idx] += prof.draft_time(
                DRAFTERS[method],
                rows["speculating"].to_numpy(np.float64),
                ctx[idx] * rows["speculating"].to_numpy() / b[idx],
                rows["gamma"].to_numpy(np.float64),
            )
        meas = g[clock].to_numpy(np.float64)
        verify = (g["drafted"] > 0).to_numpy() & (pre == 0)
        out[str(policy)] = {
            "model_error": float(pred.sum() / meas.sum()) - 1.0,
            "model_error_verify": float(pred[verify].sum() / meas[verify].sum()) - 1.0
            if verify.any()
            else None,
            "cpu_share": float(g["engine_cpu_s"].sum() / g["engine_s"].sum()),
            "iterations": len(g),
            "iterations_no_draft": int(((g["speculating"] > 0) & ~(g["drafted"] > 0)).sum()),
        }
    return out


def cpu_profile(profile: Path, out: Path) -> Path:
    """The profile with each measurement's CPU time (`cpu_s`, where recorded) as its time."""
    doc = json.loads(profile.read_text())
    doc["measurements"] = [dict(m, time_s=m.get("cpu_s", m["time_s"])) for m in doc["measurements"]]
    out.write_text(json.dumps(doc, indent=1))
    return out


def live_cpu_makespans(run_dir: Path) -> dict[str, float]:
    """Per policy, the mean over steps of the makespan with each engine iteration's wall time
    replaced by its CPU time (one worker: the makespan is its iterations plus bookkeeping)."""
    import pandas as pd

    it = pd.read_parquet(run_dir / "iterations.parquet")
    run = json.loads((run_dir / "run.json").read_text())["policies"]
    out = {}
    for policy, s in run.items():
        vals = []
        for st in s["steps"]:
            g = it[(it["policy"] == policy) & (it["step"] == st["step"])]
            g = g[g["t0_s"] < st["rollout_makespan_s"]]
            vals.append(st["rollout_makespan_s"] - g["engine_s"].sum() + g["engine_cpu_s"].sum())
        out[policy] = float(statistics.mean(vals)) if vals else 0.0
    return out


def replay_stats(run_dir: Path) -> dict[str, dict[str, float]]:
    """Per policy: iterations, speculative iterations and tokens per speculative iteration
    (per request), from a run directory's timeline and requests tables."""
    import pandas as pd

    tl = pd.read_parquet(run_dir / "timeline.parquet")
    rq = pd.read_parquet(run_dir / "requests.parquet")
    out = {}
    for policy, g in tl.groupby("policy", sort=False):
        r = rq[rq["policy"] == policy]
        spec = int(r["spec_iters"].sum())
        out[str(policy)] = {
            "iterations": int(g["iterations"].sum()),
            "spec_iterations": spec,
            "accepted": int(r["accepted"].sum()),
            "tokens_per_spec_iteration": (float(r["accepted"].sum()) + spec) / spec if spec else 0.0,
        }
    return out


def _spread(xs: list[float]) -> tuple[float, float, float]:
    return statistics.median(xs), min(xs), max(xs)


def _pct(label: str, v: float | None) -> str:
    return "" if v is None else f"{label}{v:+.1%}"


def _fmt(v: tuple[float, float, float], mid: str, ends: str) -> str:
    return f"{v[0]:{mid}} [{v[1]:{ends}}, {v[2]:{ends}}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--backend", default="torch", choices=["torch", "vllm"])
    ap.add_argument("--lockstep", action="store_true", help="Live runs in lockstep (default: concurrent).")
    ap.add_argument("--policy", action="append", dest="policies")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--prompts-per-step", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3, help="Live runs (each with its own replay).")
    ap.add_argument(
        "--contexts",
        help="Calibration contexts per sequence (default: calibrate's). Measure where the run "
        "lives: vLLM CPU decode steps are not monotonic in context (SmolLM2, batch 64: 0.17 s at "
        "66 tokens per sequence, 0.11 s at 258), so a fit across far-off contexts misprices the run.",
    )
    ap.add_argument(
        "--drafters",
        default="ngram,suffix",
        help="Drafters to calibrate (the policies' draft methods; model-free ones cost ~1 s).",
    )
    ap.add_argument(
        "--sim-model",
        help="Catalogue model for `simctl replay --model` when --model is not in the catalogue "
        "(random:<config>); a profile's costs replace the catalogue model's anyway.",
    )
    ap.add_argument("--profile", type=Path, help="Reuse one profile for every repeat instead of calibrating.")
    ap.add_argument("--dir", type=Path, help="Keep the artefacts here (default: a temp dir).")
    a = ap.parse_args()
    policies = a.policies or ["verl", "ngram"]
    root = a.dir or Path(tempfile.mkdtemp(prefix="bench-live-"))
    root.mkdir(parents=True, exist_ok=True)
    max_batch = -(-a.prompts_per_step * a.group_size // a.workers)

    def calibrate(i: int) -> Path:
        out = root / f"cal{i}.json"
        batches = ",".join(map(str, batch_grid(max_batch)))
        simctl(
            "calibrate",
            "--backend",
            a.backend,
            "--model",
            a.model,
            "--batches",
            batches,
            "--drafters",
            a.drafters,
            *(["--contexts", a.contexts] if a.contexts else []),
            "-o",
            str(out),
            quiet=True,
        )
        return out

    cals = [a.profile] if a.profile else [calibrate(0)]
    rows: list[dict] = []
    for i in range(1, a.repeats + 1):
        rep = root / f"rep{i}"
        live_args = [
            "--backend", a.backend,
            *(["--lockstep"] if a.lockstep else []),
            "--model", a.model,
            "--workers", str(a.workers),
            "--prompts-per-step", str(a.prompts_per_step),
            "--group-size", str(a.group_size),
            "--max-tokens", str(a.max_tokens),
            "--steps", str(a.steps),
            "--record", str(rep / "recorded.parquet"),
            "--out", str(rep / "live"),
        ]  # fmt: skip
        for p in policies:
            live_args += ["--policy", p]
        simctl("live", *live_args, quiet=True)
        if a.profile:
            profile = a.profile
        else:
            cals.append(calibrate(i))
            profile = merge_profiles(cals[-2:], rep / "profile.json")
        replays = {"wall": (profile, rep / "sim")}
        if a.workers == 1:  # several workers share this host's cores: no CPU-time makespan
            replays["cpu"] = (cpu_profile(profile, rep / "profile-cpu.json"), rep / "sim-cpu")
        for prof, out in replays.values():
            replay_args = [
                str(rep / "recorded.parquet"),
                "--profile", str(prof),
                "--cluster", f"h100x{a.workers}:tp1",
                "--out", str(out),
            ]  # fmt: skip
            for p in policies:
                replay_args += ["--policy", p]
            if a.sim_model:
                replay_args += ["--model", a.sim_model]
            simctl("replay", *replay_args, quiet=True)
        live = json.loads((rep / "live" / "run.json").read_text())["policies"]
        sim = json.loads((rep / "sim" / "run.json").read_text())["policies"]
        sim_cpu = (
            json.loads((rep / "sim-cpu" / "run.json").read_text())["policies"] if "cpu" in replays else {}
        )
        live_cpu = live_cpu_makespans(rep / "live") if "cpu" in replays else {}
        check = model_check(rep / "live" / "iterations.parquet", profile)
        check_cpu = (
            model_check(rep / "live" / "iterations.parquet", replays["cpu"][0], "engine_cpu_s")
            if "cpu" in replays
            else {}
        )
        live_it, sim_it = replay_stats(rep / "live"), replay_stats(rep / "sim")
        cal_share = json.loads(Path(profile).read_text()).get("notes", {}).get("cpu_share")
        for p in live:
            lm, sm = live[p]["mean_rollout_makespan_s"], sim[p]["mean_rollout_makespan_s"]
            row = {
                "repeat": i,
                "policy": p,
                "live_makespan_s": lm,
                "sim_makespan_s": sm,
                "error": (sm - lm) / lm,
                "model_error": check[p]["model_error"],
                "model_error_verify": check[p]["model_error_verify"],
                "model_cpu_error": check_cpu[p]["model_error"] if check_cpu else None,
                "model_cpu_error_verify": check_cpu[p]["model_error_verify"] if check_cpu else None,
                "overhead_fraction": live[p]["overhead"]["fraction_of_engine"],
                "live_cpu_share": check[p]["cpu_share"],
                "calibration_cpu_share": cal_share,
                "live_iterations": live_it[p]["iterations"],
                "sim_iterations": sim_it[p]["iterations"],
                "live_tokens_per_spec_iteration": live_it[p]["tokens_per_spec_iteration"],
                "sim_tokens_per_spec_iteration": sim_it[p]["tokens_per_spec_iteration"],
                "live_iterations_no_draft": check[p]["iterations_no_draft"],
            }
            if p in live_cpu:
                lc, sc = live_cpu[p], sim_cpu[p]["mean_rollout_makespan_s"]
                row |= {"live_cpu_makespan_s": lc, "sim_cpu_makespan_s": sc, "cpu_error": (sc - lc) / lc}
            rows.append(row)
            cpu = (
                f"cpu time: live {row['live_cpu_makespan_s']:5.1f} s sim {row['sim_cpu_makespan_s']:5.1f} s "
                f"({row['cpu_error']:+6.1%}) | "
                if "cpu_error" in row
                else ""
            )
            print(
                f"  rep {i} {p:>8}: live {lm:6.1f} s | sim {sm:6.1f} s ({row['error']:+6.1%}) | {cpu}"
                f"model {row['model_error']:+6.1%}{_pct(' verify ', row['model_error_verify'])}"
                f"{_pct(' cpu ', row['model_cpu_error'])} | overhead {row['overhead_fraction']:.2%} | "
                f"cpu share {row['live_cpu_share']:.2f} | iterations {row['live_iterations']}/"
                f"{row['sim_iterations']} live/sim",
                flush=True,
            )
    keys = ["live_makespan_s", "sim_makespan_s", "error", "cpu_error", "model_error", "overhead_fraction"]
    print(
        f"\nmedian [min, max] over {a.repeats} repeat(s). error: simulated vs measured makespan; "
        "cpu error: the same on CPU time\n(profile and live engine time taken as thread CPU time: "
        "what a dedicated core would have shown); model: the profile priced on the live iterations"
    )
    head = ["policy", "live s", "sim s", "error", "cpu error", "model", "overhead"]
    widths = [8, 20, 20, 20, 20, 20, 8]
    print(" | ".join(f"{h:>{w}}" for h, w in zip(head, widths, strict=True)))
    summary = {}
    for p in dict.fromkeys(r["policy"] for r in rows):
        rs = [r for r in rows if r["policy"] == p]
        cols = {k: _spread([r[k] for r in rs]) for k in keys if all(k in r for r in rs)}
        summary[p] = {k: dict(zip(("median", "min", "max"), v, strict=True)) for k, v in cols.items()}
        cells = [
            _fmt(cols[k], fmt, ends) if k in cols else "-"
            for k, fmt, ends in (
                ("live_makespan_s", "6.1f", "5.1f"),
                ("sim_makespan_s", "6.1f", "5.1f"),
                ("error", "+6.1%", "+.0%"),
                ("cpu_error", "+6.1%", "+.0%"),
                ("model_error", "+6.1%", "+.0%"),
            )
        ]
        cells.append(f"{cols['overhead_fraction'][0]:.2%}")
        print(" | ".join(f"{c:>{w}}" for c, w in zip([p, *cells], widths, strict=True)))
    (root / "summary.json").write_text(json.dumps({"repeats": rows, "summary": summary}, indent=1))
    print(f"artefacts in {root}")


if __name__ == "__main__":
    main()
