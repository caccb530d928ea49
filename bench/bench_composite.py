"""`composite` (policies/composite.py) against every single-paper policy on every preset.

    .venv/bin/python bench/bench_composite.py [--scale 1.0] [--presets a,b] [--policies x,y]
        [--json out.json]

Traces are generated from scratch (seed 0) from every preset in traces/presets.py, on the
paper's instance layout scaled down with the prompts (each instance keeps the paper's
load), using the other benches' setup helpers:

| preset | paper layout | bench scale | measured |
|---|---|---|---|
| dapo-32b-20k | 512 H100, TP4 (SpecActor §5.1) | 1/16 | step 0 |
| grpo-32b-20k, ppo-32b-20k | 256 H100, TP4 (SpecActor §5.1) | 1/8 | step 0 |
| seer-moonlight-64k | 32 H800, TP1 (Seer Table 5) | 1/4 | step 0 |
| seer-qwen2vl-72b-40k | 128 H800, TP8 (Seer Table 5) | 1/2 | step 0 |
| seer-kimi-k2-96k | 8 x 32 H800, DP32/EP32 (Seer Table 5) | 1/4 | step 0 |
| rhymerl-math-14b-16k | 128 H800, TP2 (RhymeRL §7) | 1/8 | epoch 1 (below) |
| efficientrollout-qwen7b-8k | 8 A100, TP1 (EfficientRollout §4.1) | 1 | step 0 |
| tlt-qwen32b-32k | 64 H100, TP4 (TLT §6.1) | 1/4 | step 1 (after spot training) |

`--scale` multiplies every bench scale (1.0 = the table; the papers' full layouts are
e.g. `--scale 16` for dapo). RhymeRL's history drafting needs an earlier epoch: the bench
replays step 0 (epoch 0) and then, as step 1, the same prompts' responses of epoch 1
(taken from a 64-step trace), and measures step 1. The whole bench (9 presets x 13
policies) runs in about four to five minutes on two cores.

One seed: a makespan is set by the last straggler, so a small change in any decision can
move it by a few percent (a composite variant that read its estimates a moment earlier
finished seer-moonlight-64k 5% later); differences below ~5% are within that spread.

Metric: rollout makespan of the measured steps; the table gives the speedup over veRL per
(preset, policy), the best per preset in bold, then the simulator's wall time per step.
RhymeRL's HistoPipe gains across steps (bench/bench_scheduling_policies.py composes its
pipeline) and RLHFuse overlaps training with the tail: neither shows in rollout time.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scheduling_policies import rhymerl_setup, seer_setup
from bench_speactor import setup as speactor_setup
from bench_speculation_policies import setup_for

from simctl.sim.replay import ReplaySetup, run_policy
from simctl.traces.io import Trace

COMPOSITE = ["composite", "composite-no-fon", "composite-fixed-drafter"]
PAPERS = ["speactor", "efficientrollout", "tlt", "seer", "rhymerl"]
BASELINES = ["verl", "spec-coupled", "ngram", "rlhfuse"]
POLICIES = BASELINES + PAPERS + ["seer-divided-context"] + COMPOSITE


def _gpus(full: int, scale: float, per: int = 8) -> int:
    """GPUs at a scale, a whole number of 8-GPU nodes (or one partial node)."""
    return max(per, round(full * scale / per) * per)


def _speactor(preset: str, full_gpus: int) -> Callable[[float], ReplaySetup]:
    def build(scale: float) -> ReplaySetup:
        return speactor_setup(preset, f"h100x{_gpus(full_gpus, scale)}:tp4", 1, scale)

    return build


def _seer(preset: str) -> Callable[[float], ReplaySetup]:
    def build(scale: float) -> ReplaySetup:
        return seer_setup(preset, scale)

    return build


def _rhymerl(scale: float) -> ReplaySetup:
    """Step 0 (epoch 0), then its prompts' epoch-1 responses as step 1."""
    base = rhymerl_setup(scale, 64)
    df = base.trace.df
    first = df[df["step"] == 0]
    again = df[(df["epoch"] == 1) & df["prompt_id"].isin(set(first["prompt_id"]))].assign(step=1)
    assert len(again) == len(first), "epoch 1 must repeat every prompt of step 0"
    trace = Trace(df=pd.concat([first, again], ignore_index=True), meta=base.trace.meta)
    return dataclasses.replace(base, trace=trace, steps=[0, 1])


def _er(scale: float) -> ReplaySetup:
    return setup_for("efficientrollout-qwen7b-8k", "a100x8:tp1", 1, scale)


def _tlt(scale: float) -> ReplaySetup:
    return setup_for("tlt-qwen32b-32k", f"h100x{_gpus(64, scale)}", 2, scale)


@dataclass(frozen=True)
class Bench:
    build: Callable[[float], ReplaySetup]
    scale: float
    measured: int  # steps of the replay measured (the last ones)


PRESETS: dict[str, Bench] = {
    "dapo-32b-20k": Bench(_speactor("dapo-32b-20k", 512), 1 / 16, 1),
    "grpo-32b-20k": Bench(_speactor("grpo-32b-20k", 256), 1 / 8, 1),
    "ppo-32b-20k": Bench(_speactor("ppo-32b-20k", 256), 1 / 8, 1),
    "seer-moonlight-64k": Bench(_seer("seer-moonlight-64k"), 1 / 4, 1),
    "seer-qwen2vl-72b-40k": Bench(_seer("seer-qwen2vl-72b-40k"), 1 / 2, 1),
    "seer-kimi-k2-96k": Bench(_seer("seer-kimi-k2-96k"), 1 / 4, 1),
    "rhymerl-math-14b-16k": Bench(_rhymerl, 1 / 8, 1),
    "efficientrollout-qwen7b-8k": Bench(_er, 1.0, 1),
    "tlt-qwen32b-32k": Bench(_tlt, 1 / 4, 1),
}


@dataclass
class Result:
    preset: str
    policy: str
    layout: str
    requests: int
    rollout_s: float
    speedup: float
    wall_s_per_step: float
    replicas: int
    replica_wins: int
    error: str = ""


def run_preset(preset: str, bench: Bench, scale: float, names: list[str]) -> list[Result]:
    setup = bench.build(bench.scale * scale)
    steps = setup.steps[-bench.measured :]
    frame = setup.trace.df
    requests = int((frame["step"] == steps[-1]).sum())
    out: list[Result] = []
    for name in names:
        t0 = time.perf_counter()
        try:
            run = run_policy(setup, name)
        except Exception as exc:  # a policy that cannot run a preset is reported, not fatal
            out.append(
                Result(
                    preset,
                    name,
                    setup.cluster.label,
                    requests,
                    float("nan"),
                    float("nan"),
                    0.0,
                    0,
                    0,
                    f"{type(exc).__name__}: {exc}",
                )
            )
            print(f"  {preset:28s} {name:26s} FAILED {exc}", file=sys.stderr)
            continue
        mk = [s.rollout_makespan_s for s in run.steps if s.step in steps]
        out.append(
            Result(
                preset,
                name,
                setup.cluster.label,
                requests,
                sum(mk) / len(mk),
                float("nan"),
                run.sim_wall_s / len(run.steps),
                int(run.counters.get("replicas", 0)),
                int(run.counters.get("replica_wins", 0)),
            )
        )
        print(
            f"  {preset:28s} {name:26s} {out[-1].rollout_s:8.1f} s rollout "
            f"{time.perf_counter() - t0:6.1f} s wall",
            file=sys.stderr,
        )
    base = next((r.rollout_s for r in out if r.policy == "verl"), float("nan"))
    for r in out:
        r.speedup = base / r.rollout_s if r.rollout_s == r.rollout_s and r.rollout_s > 0 else float("nan")
    return out


def markdown(results: list[Result], names: list[str]) -> str:
    presets = list(dict.fromkeys(r.preset for r in results))
    cell = {(r.preset, r.policy): r for r in results}
    lines = ["| preset (layout, requests/step) | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for p in presets:
        rows = [cell[(p, n)] for n in names if (p, n) in cell]
        best = max((r.speedup for r in rows if r.speedup == r.speedup), default=float("nan"))
        cells = []
        for n in names:
            r = cell.get((p, n))
            if r is None or r.speedup != r.speedup:
                cells.append("fail" if r is not None else "-")
            elif abs(r.speedup - best) < 5e-4:
                cells.append(f"**{r.speedup:.2f}x**")
            else:
                cells.append(f"{r.speedup:.2f}x")
        first = rows[0]
        lines.append(f"| {p} ({first.layout}, {first.requests}) | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Simulator wall time per step (s):",
        "",
        "| preset | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for p in presets:
        walls = [f"{cell[(p, n)].wall_s_per_step:.1f}" if (p, n) in cell else "-" for n in names]
        lines.append(f"| {p} | " + " | ".join(walls) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies every preset's bench scale")
    ap.add_argument("--presets", default=",".join(PRESETS), help="comma-separated preset names")
    ap.add_argument("--policies", default=",".join(POLICIES), help="comma-separated policy specs")
    ap.add_argument("--json", type=Path, help="also write every result as JSON")
    args = ap.parse_args(argv)
    names = [n for n in args.policies.split(",") if n]
    if "verl" not in names:
        names.insert(0, "verl")
    t0 = time.perf_counter()
    results: list[Result] = []
    for preset in filter(None, args.presets.split(",")):
        if preset not in PRESETS:
            ap.error(f"unknown preset {preset!r}; known: {', '.join(PRESETS)}")
        results += run_preset(preset, PRESETS[preset], args.scale, names)
    print(f"rollout-time speedup over veRL (seed 0, scale x{args.scale}, {time.perf_counter() - t0:.0f} s)\n")
    print(markdown(results, names))
    if args.json:
        args.json.write_text(json.dumps([dataclasses.asdict(r) for r in results], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
