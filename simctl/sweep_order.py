"""The order a sweep hands its points to the workers (and `simctl replay --jobs` starts its
policies in): longest first.

A point (one policy over its steps) runs on one worker from start to end, and points differ
in cost by more than an order of magnitude (a composite point costs ~28 verl points on the
same steps). Handed out in the spec's order, a long point listed last starts when the others
are done and the sweep waits for it alone: the six-policy dapo study lists composite last,
and on 2 workers that order takes ~74 minutes where longest-first takes ~52 (barely more
than the longest point, ~51; from `bench/bench_sim_speed.py`'s CPU per step). Workers take
the next point as they free up, so handing points out longest first is the LPT rule.

The estimate is the point's requests (rows of its trace in its steps) times its policy's
simulator cost per request relative to verl's. It only orders the points: results, tables
and run directories do not depend on it, and a policy missing from the table counts as
verl's cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# Simulator CPU per step relative to verl's, by policy family: `bench/bench_sim_speed.py
# --factor 1 --repeat 2` on the dapo sample (512 GPUs, the costlier of its two steps), to one
# decimal (2026-11-29). Only the order of magnitude matters for the order; the dry run's
# estimate uses them as they are. Policies not listed cost about veRL's (0.9-1.0x).
RELATIVE_COST: dict[str, float] = {
    "composite": 28.1,
    "composite-fixed-drafter": 25.9,
    "composite-no-fon": 27.1,
    "seer": 10.9,
    "seer-no-adapt": 10.4,
    "seer-no-group-context": 11.1,
    "seer-divided": 2.8,
    "seer-divided-context": 2.8,
    "seer-oracle": 2.6,
    "tlt": 10.0,
    "tlt-static-drafter": 9.6,
    "tlt-base": 1.6,
    "speactor": 6.7,
    "speactor-decoupled-reconfig": 4.0,
    "speactor-decoupled": 2.5,
    "speactor-vanilla": 2.6,
    "spec-coupled": 2.3,
    "ngram": 2.5,
    "efficientrollout": 2.6,
    "efficientrollout-fixed-gamma": 2.7,
    "quantized-selfspec": 1.9,
}


def relative_cost(policy: str) -> float:
    """A family's simulator cost per request relative to verl's (1 where not measured)."""
    return RELATIVE_COST.get(policy, 1.0)


def point_work(points: Sequence[Any], traces: dict[str, Any]) -> list[float]:
    """Each point's estimated simulator cost, in verl-request units: its requests times its
    policy's relative cost. The sweep orders points by it, and its progress bar counts it
    (an ETA over points would run slow while the long points go first)."""
    return [n * relative_cost(p.policy) for p, n in zip(points, point_requests(points, traces), strict=True)]


def longest_first(costs: Sequence[float]) -> list[int]:
    """Indices by cost, the costliest first; equal costs keep the given order (a stable
    sort), so a sweep of one policy over one trace runs in the spec's order.

    >>> longest_first([10.0, 280.0, 20.0])
    [1, 2, 0]
    """
    return sorted(range(len(costs)), key=lambda i: -costs[i])


def packed_wall(costs: Sequence[float], workers: int) -> float:
    """Wall time of indivisible points of `costs` seconds on `workers` workers: longest
    first, each to the least loaded worker (LPT, what a pool taking points in that order
    does). No packing beats the longest point, however many workers there are.

    >>> packed_wall([6.0, 1.0, 1.0, 1.0], 2), packed_wall([6.0, 1.0, 1.0, 1.0], 10**30)
    (6.0, 6.0)
    """
    loads = [0.0] * max(1, min(workers, len(costs)))  # (a worker beyond one per point idles)
    for c in sorted(costs, reverse=True):
        i = loads.index(min(loads))
        loads[i] += c
    return max(loads)


def costliest_first(policy_specs: Sequence[str]) -> list[int]:
    """The order `simctl replay --jobs` starts its policies in, by the family named before
    a spec's parameters ("ngram:gamma=4" is n-gram); on one trace every policy replays the
    same requests, so its relative cost alone orders them.

    >>> costliest_first(["verl", "seer:chunk_tokens=4096", "composite", "ngram"])
    [2, 1, 3, 0]
    """
    return longest_first([relative_cost(spec.split(":", 1)[0]) for spec in policy_specs])


def point_requests(points: Sequence[Any], traces: dict[str, Any]) -> list[int]:
    """Requests each point replays: its trace's rows in its steps (`traces`: label ->
    loaded trace, as the spec holds them; 1 for a trace not loaded)."""
    return [sum(counts.values()) if counts else 1 for counts in point_step_requests(points, traces)]


def point_step_requests(points: Sequence[Any], traces: dict[str, Any]) -> list[dict[int, int]]:
    """Per point, the requests of each step it replays (trace step -> rows; empty for a
    trace not loaded): a point's progress within its run counts its steps by them."""
    from simctl.traces.cli_options import parse_steps

    per_step: dict[str, dict[int, int]] = {}
    out: list[dict[int, int]] = []
    for p in points:
        trace = traces.get(p.trace)
        if trace is None:
            out.append({})
            continue
        counts = per_step.get(p.trace)
        if counts is None:
            counts = per_step[p.trace] = {int(k): int(v) for k, v in trace.df["step"].value_counts().items()}
        steps = parse_steps(None if p.steps == "all" else p.steps, trace.steps)
        out.append({s: counts.get(s, 0) for s in steps})
    return out
