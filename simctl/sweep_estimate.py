"""`simctl sweep SPEC.toml --dry-run`: what a sweep would run, and about how long it would
take here, before anything runs.

A design space grows as the product of its axes, and its points differ in cost by more than
an order of magnitude (a composite point costs ~28 veRL points on the same requests), so a
researcher wants the bill before launching. The estimate of a point is its requests times
its policy's simulator cost relative to veRL's (`simctl.sweep_order.RELATIVE_COST`, from
`bench/bench_sim_speed.py` on the dapo sample) times veRL's simulator CPU per request,
measured now on this machine: veRL replays the first step of each trace the spec names,
with the first point's cluster, model and batch limit for that trace (a fraction of a
second for a 16K-request step). The points still to run are then packed onto the workers
longest first, as the sweep hands them out (`packed_wall`); no number of workers finishes
before the longest point.

It is a planning figure, not a promise: the relative costs were measured on one trace and
cluster, and a policy's cost per request moves with the trace's lengths and the batch per
worker. So where the sweep directory already holds complete points of a policy on a trace
(a sweep resumed, or grown by new values), the pending points of that policy on that trace
are priced at the median CPU per request those points measured instead. Nothing is written.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from simctl.sweep_order import packed_wall, point_requests, point_step_requests, relative_cost
from simctl.sweep_spec import Point, SweepSpec


@dataclass(frozen=True)
class SweepEstimate:
    points: int
    by_policy: dict[str, int]  # points per policy family, in the spec's order
    complete: int  # points already complete in the sweep directory
    verl_s_per_request: dict[str, float]  # per trace label: veRL's measured CPU per request
    cpu_s: float  # estimated simulator CPU of the points still to run
    cpu_by_policy: dict[str, float]  # the same per policy family, the costliest first
    from_sweep: int  # pending points priced from complete points of their policy and trace
    longest_s: float  # the costliest of them
    workers: int
    wall_s: float  # cpu_s packed onto `workers`

    def lines(self, spec_path: Path) -> list[str]:
        """What `--dry-run` prints."""
        counts = ", ".join(f"{p} {n}" for p, n in self.by_policy.items())
        rates = ", ".join(f"{Path(t).name} {1e6 * r:.0f} us" for t, r in self.verl_s_per_request.items())
        return [
            f"{spec_path}: {self.points} points ({counts}); {self.complete} already complete",
            f"veRL simulator CPU per request, measured here: {rates or 'not measured (nothing to run)'}",
            f"estimated simulator CPU of the {self.points - self.complete} points to run: "
            f"{_duration(self.cpu_s)} ({self._priced_by()})",
            f"on {self.workers} worker{'s' if self.workers != 1 else ''}: about {_duration(self.wall_s)} "
            f"(the longest point alone: {_duration(self.longest_s)})",
            *(
                ["by policy: " + ", ".join(f"{p} {_duration(s)}" for p, s in self.cpu_by_policy.items())]
                if self.cpu_by_policy
                else []
            ),
        ]

    def _priced_by(self) -> str:
        relative = "policy costs relative to veRL from bench/bench_sim_speed.py"
        if not self.from_sweep:
            return relative
        rest = self.points - self.complete - self.from_sweep
        own = f"{self.from_sweep} at what this sweep's complete points of their policy and trace measured"
        return f"{own}, {rest} by {relative}" if rest else own


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def measure_verl(spec: SweepSpec, points: list[Point]) -> tuple[dict[str, float], dict[str, float]]:
    """Per trace of `points`, replayed with veRL on its first step as the trace's first
    point is (cluster, model, batch limit): the step's simulator CPU seconds per request,
    and the CPU a replay spends outside its steps (setting up: every point pays it once)."""
    from simctl.sim.replay import run_policy
    from simctl.sweep_runner import point_setup

    rates: dict[str, float] = {}
    setup_s: dict[str, float] = {}
    for point in points:
        if point.trace in rates:
            continue
        counts = point_step_requests([point], spec.traces)[0]
        if not counts:
            continue
        first = min(counts)
        setup = point_setup(point, str(first))
        start = time.process_time()
        run = run_policy(setup, "verl")
        total = time.process_time() - start
        step = float(run.step_cpu_s[0]) if run.step_cpu_s else total
        rates[point.trace] = step / max(1, counts[first])
        setup_s[point.trace] = max(0.0, total - step)
    return rates, setup_s


def sweep_progress(spec: SweepSpec, out: Path) -> tuple[set[str], dict[str, float]]:
    """Ids of the points complete in the sweep directory `out`, and the simulator CPU each
    measured (not for a point resumed from a checkpoint: its CPU covers the later steps)."""
    from simctl.sweep_runner import complete_doc, point_dir

    done: set[str] = set()
    cpu: dict[str, float] = {}
    for p in spec.points:
        doc = complete_doc(point_dir(out, p), p)
        if doc is None:
            continue
        done.add(p.point_id)
        try:
            spent = doc["sweep_cpu"]
            if "resumed_after_steps" not in spent:
                cpu[p.point_id] = float(spent["sim_cpu_s"])
        except (ValueError, KeyError, TypeError):
            continue
    return done, cpu


def estimate_in(spec: SweepSpec, out: Path | None, workers: int | None) -> SweepEstimate:
    """`estimate` of the points not complete in sweep directory `out` (None: none is), on
    `workers` (None: this machine's cores): the dry run of the command and of the API."""
    from simctl.sweep_runner import default_workers

    done, observed = sweep_progress(spec, out) if out is not None else (set(), {})
    return estimate(spec, done, workers or default_workers(), observed=observed)


def estimate(
    spec: SweepSpec,
    complete: set[str],
    workers: int,
    measured: tuple[dict[str, float], dict[str, float]] | None = None,
    observed: dict[str, float] | None = None,
) -> SweepEstimate:
    """The sweep's bill: `complete` holds the ids of points already done; `measured` veRL's
    CPU per request and per replay's setup, by trace label (None: measured now,
    `measure_verl`); `observed` the simulator CPU of complete points, by id
    (`sweep_progress`). A point costs its setup plus its requests at its policy's rate:
    the median its policy's complete points on its trace measured, else the relative one."""
    pending = [p for p in spec.points if p.point_id not in complete]
    rates, setup_s = measured if measured is not None else measure_verl(spec, pending)
    own = _observed_rates(spec, observed or {})
    requests = point_requests(pending, spec.traces)
    costs = []
    for p, n in zip(pending, requests, strict=True):
        rate = own.get((p.policy, p.trace))
        per_request = rate if rate is not None else relative_cost(p.policy) * rates.get(p.trace, 0.0)
        costs.append(setup_s.get(p.trace, 0.0) + n * per_request)
    by_policy: dict[str, float] = {}
    for p, c in zip(pending, costs, strict=True):
        by_policy[p.policy] = by_policy.get(p.policy, 0.0) + c
    return SweepEstimate(
        cpu_by_policy=dict(sorted(by_policy.items(), key=lambda kv: -kv[1])),
        from_sweep=sum((p.policy, p.trace) in own for p in pending),
        points=len(spec.points),
        by_policy=dict(Counter(p.policy for p in spec.points)),
        complete=len(spec.points) - len(pending),
        verl_s_per_request=rates,
        cpu_s=sum(costs),
        longest_s=max(costs, default=0.0),
        workers=workers,
        wall_s=packed_wall(costs, workers),
    )


def _observed_rates(spec: SweepSpec, observed: dict[str, float]) -> dict[tuple[str, str], float]:
    """(policy family, trace) -> median simulator CPU per request of its complete points."""
    done = [p for p in spec.points if p.point_id in observed]
    per: dict[tuple[str, str], list[float]] = {}
    for p, n in zip(done, point_requests(done, spec.traces), strict=True):
        per.setdefault((p.policy, p.trace), []).append(observed[p.point_id] / max(1, n))
    return {key: statistics.median(values) for key, values in per.items()}
