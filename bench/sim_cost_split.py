"""Where a policy's simulator CPU goes: its own code, speculative planning, the rest.

    .venv/bin/python bench/sim_cost_split.py                      # the study's six policies
    .venv/bin/python bench/sim_cost_split.py --policy seer --policy tlt

Replays the bundled dapo-32b-20k sample (both steps, h100x512) under each policy and times,
with `time.process_time` around the calls (not a profiler, which inflates Python-heavy
code): the policy's `on_event` (the user's code: what no simulator speed-up removes), the
speculative planner (`SpecPlanner.plan`: sampling, block layout and pricing) and everything
else (the event loop, applying progress, plain plans, the run's frames). It then prints what
each policy would cost relative to verl if speculative planning were free: the ceiling of
any planner speed-up (issue #17). Timers add a little to every event, verl's included, so
ratios here run slightly under `bench_sim_speed.py`'s.

Planning is then split once more, by a least-squares fit of each plan's CPU seconds on its
cells (rows x iterations sampled): a fixed cost per plan (the Python and the numpy calls
that every plan makes, whatever its size) and a cost per cell (the arithmetic on the
block's arrays). The fixed part is what a compiled planner would remove and vectorising
cannot; the cell part is what it would only speed up.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from bench_sim_speed import DAPO, STUDY, TARGET_VS_VERL


def _timed(fn: Callable[..., Any], into: Counter[str], key: str) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        t = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            into[key] += time.process_time() - t

    return timed


def _timed_plans(
    fn: Callable[..., Any], into: Counter[str], blocks: list[tuple[int, int, float]]
) -> Callable[..., Any]:
    """`_timed` for `SpecPlanner.plan`, also noting each plan's (rows, iterations, seconds)."""

    def timed(self: Any, ids: Any, *args: Any, **kwargs: Any) -> Any:
        t = time.process_time()
        plan = fn(self, ids, *args, **kwargs)
        dt = time.process_time() - t
        into["planning"] += dt
        blocks.append((len(ids), len(plan.cum_s), dt))
        return plan

    return timed


def _collector_seconds(into: Counter[str]) -> Callable[[str, dict[str, Any]], None]:
    """A `gc.callbacks` entry adding each collection's seconds to `into["gc"]` (the clock
    of a single-threaded process: its collections are inside the other parts' times)."""
    started = [0.0]

    def callback(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.process_time()
        else:
            into["gc"] += time.process_time() - started[0]

    return callback


def fit_plans(blocks: Sequence[tuple[int, int, float]]) -> dict[str, float]:
    """Least squares of plan seconds on cells (rows x iterations): seconds per plan and per
    cell, and the planning seconds each accounts for (zeros without plans)."""
    if len(blocks) < 2:
        return {
            "plans": float(len(blocks)),
            "per_plan_s": 0.0,
            "per_cell_s": 0.0,
            "fixed_s": 0.0,
            "cells_s": 0.0,
        }
    b = np.array(blocks, dtype=np.float64)
    cells, dt = b[:, 0] * b[:, 1], b[:, 2]
    (per_plan, per_cell), *_ = np.linalg.lstsq(np.c_[np.ones(len(b)), cells], dt, rcond=None)
    return {
        "plans": float(len(b)),
        "per_plan_s": float(per_plan),
        "per_cell_s": float(per_cell),
        "fixed_s": float(per_plan) * len(b),
        "cells_s": float(per_cell * cells.sum()),
    }


def split(policy: str, trace_path: Path = DAPO, cluster: str | None = None) -> dict[str, float]:
    """CPU seconds of one replay of every step of `trace_path`: total, policy, planning,
    and planning's fixed and per-cell parts (`fit_plans`). `cluster`: as replay's
    --cluster (None: the trace's recorded layout, else replay's default)."""
    from simctl.policies.registry import make_policy
    from simctl.replay_cmd import trace_cluster
    from simctl.sim.cluster import parse_cluster
    from simctl.sim.cost_model import load_cost_model
    from simctl.sim.models import get_model
    from simctl.sim.replay import ReplaySetup, run_policy
    from simctl.sim.spec_planner import SpecPlanner
    from simctl.traces.validate import load_valid_trace

    trace = load_valid_trace(trace_path)
    spec = parse_cluster(trace_cluster(trace.meta.cluster, cluster)[0])
    model = get_model(trace.meta.model)
    steps = sorted(int(s) for s in trace.df["step"].unique())
    cost = load_cost_model(model, spec)
    setup = ReplaySetup(trace=trace, cluster=spec, model=model, cost=cost, steps=steps)
    spent: Counter[str] = Counter()
    pol = make_policy(policy)
    pol.on_event = _timed(pol.on_event, spent, "policy")  # type: ignore[method-assign]
    plan = SpecPlanner.plan
    blocks: list[tuple[int, int, float]] = []
    SpecPlanner.plan = _timed_plans(plan, spent, blocks)  # type: ignore[method-assign]
    collector = _collector_seconds(spent)
    gc.callbacks.append(collector)
    try:
        run = run_policy(setup, pol)
    finally:
        SpecPlanner.plan = plan  # type: ignore[method-assign]
        gc.callbacks.remove(collector)
    fit = fit_plans(blocks)
    return {
        "total": run.sim_cpu_s,
        "policy": spent["policy"],
        "planning": spent["planning"],
        "plans": fit["plans"],
        "per_plan_us": 1e6 * fit["per_plan_s"],
        "per_cell_ns": 1e9 * fit["per_cell_s"],
        "planning_fixed": fit["fixed_s"],
        "gc": spent["gc"],
    }


def policy_alone(parts: dict[str, float], verl_total: float) -> float | None:
    """The policy's own code (`on_event`) as a multiple of verl's whole replay, where it
    alone exceeds the target: no simulator speed-up brings that policy within it (None:
    within the target)."""
    alone = parts["policy"] / verl_total
    return alone if alone > TARGET_VS_VERL else None


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", action="append", help="these policies (default: the study's six)")
    args = ap.parse_args(argv)
    names = args.policy or list(STUDY)
    verl = split("verl")
    base = verl["total"]
    parts = "".join(f" {p:>14s}" for p in ("policy", "planning", "rest"))
    fixed = f"{'plans':>7s} {'us/plan':>7s} {'ns/cell':>7s} {'fixed':>13s} {'gc':>13s}"
    print(f"{'policy':28s} {'cpu s':>7s}{parts} {'x verl':>7s} {'free plan':>9s}  {fixed}")
    bound: list[str] = []  # policies whose own code alone costs more than the target
    for name in names:
        s = verl if name == "verl" else split(name)
        alone = policy_alone(s, base)
        if alone is not None:
            bound.append(f"{name} {alone:.1f}x")
        rest = s["total"] - s["policy"] - s["planning"]
        cells = "".join(f" {v:6.2f} ({v / s['total']:4.0%})" for v in (s["policy"], s["planning"], rest))
        free = (s["total"] - s["planning"]) / base
        flag = "" if free <= TARGET_VS_VERL else "  *"
        fit = f"  {'':7s} {'':7s} {'':7s} {'':13s}"  # (no plans: the gc column stays in place)
        if s["plans"] >= 2:
            share = s["planning_fixed"] / s["planning"] if s["planning"] else 0.0
            fit = (
                f"  {s['plans']:7.0f} {s['per_plan_us']:7.0f} {s['per_cell_ns']:7.1f}"
                f" {s['planning_fixed']:6.2f} ({share:4.0%})"
            )
        fit += f" {s['gc']:6.2f} ({s['gc'] / s['total']:4.0%})"
        print(f"{name:28s} {s['total']:7.2f}{cells} {s['total'] / base:7.2f} {free:9.2f}{flag:3s}{fit}")
    print(f"(free plan: x verl with speculative planning at no cost; * = still over {TARGET_VS_VERL:g}x)")
    print("(fixed: planning's per-plan part, plans x us/plan, and its share of planning: the fit of")
    print(" each plan's CPU on its cells; what a compiled planner removes and vectorising cannot)")
    print("(gc: seconds in the cyclic collector, inside the parts above; sim.gc_thresholds spaces")
    print(" its passes out while a step's event loop runs)")
    if bound:
        print(f"(own code alone over {TARGET_VS_VERL:g}x verl's whole replay: {', '.join(bound)};")
        print(" no simulator speed-up brings these to the target, only a faster policy)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
