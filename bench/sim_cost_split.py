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
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench_sim_speed import DAPO, STUDY, TARGET_VS_VERL


def _timed(fn: Callable[..., Any], into: Counter[str], key: str) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        t = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            into[key] += time.process_time() - t

    return timed


def split(policy: str, trace_path: Path = DAPO, cluster: str = "h100x512") -> dict[str, float]:
    """CPU seconds of one replay of every step of `trace_path`: total, policy, planning."""
    from simctl.policies.registry import make_policy
    from simctl.sim.cluster import parse_cluster
    from simctl.sim.cost_model import load_cost_model
    from simctl.sim.models import get_model
    from simctl.sim.replay import ReplaySetup, run_policy
    from simctl.sim.spec_planner import SpecPlanner
    from simctl.traces.validate import load_valid_trace

    trace = load_valid_trace(trace_path)
    spec = parse_cluster(trace.meta.cluster or cluster)
    model = get_model(trace.meta.model)
    steps = sorted(int(s) for s in trace.df["step"].unique())
    cost = load_cost_model(model, spec)
    setup = ReplaySetup(trace=trace, cluster=spec, model=model, cost=cost, steps=steps)
    spent: Counter[str] = Counter()
    pol = make_policy(policy)
    pol.on_event = _timed(pol.on_event, spent, "policy")  # type: ignore[method-assign]
    plan = SpecPlanner.plan
    SpecPlanner.plan = _timed(plan, spent, "planning")  # type: ignore[method-assign]
    try:
        run = run_policy(setup, pol)
    finally:
        SpecPlanner.plan = plan  # type: ignore[method-assign]
    return {"total": run.sim_cpu_s, "policy": spent["policy"], "planning": spent["planning"]}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", action="append", help="these policies (default: the study's six)")
    args = ap.parse_args(argv)
    names = args.policy or list(STUDY)
    verl = split("verl")
    base = verl["total"]
    parts = "".join(f" {p:>14s}" for p in ("policy", "planning", "rest"))
    print(f"{'policy':28s} {'cpu s':>7s}{parts} {'x verl':>7s} {'free plan':>9s}")
    for name in names:
        s = verl if name == "verl" else split(name)
        rest = s["total"] - s["policy"] - s["planning"]
        cells = "".join(f" {v:6.2f} ({v / s['total']:4.0%})" for v in (s["policy"], s["planning"], rest))
        free = (s["total"] - s["planning"]) / base
        flag = "" if free <= TARGET_VS_VERL else "  *"
        print(f"{name:28s} {s['total']:7.2f}{cells} {s['total'] / base:7.2f} {free:9.2f}{flag}")
    print(f"(free plan: x verl with speculative planning at no cost; * = still over {TARGET_VS_VERL:g}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
