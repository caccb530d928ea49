"""Run the experiments of sim/experiments.py: generate each trace from its preset (seeded),
replay baseline and policy on the paper's layout, and compute the paper's metric per seed
and measured step.

Runs are shared: one trace per (preset, scale, replayed steps, seed), one replay per
(trace, cluster, policy), whatever number of experiments reads it. Seed k generates the
trace with seed k and replays it with seed k.

Reward, training and weight sync are modelled from the work each step does
(sim/step_time.py), with the same constants for every paper: the generated trace's phase
seconds (the preset's fixed shares of a nominal rollout) are dropped before replay.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from simctl.sim.cluster import parse_cluster
from simctl.sim.cost_model import load_cost_model
from simctl.sim.engine import SimError
from simctl.sim.experiments import PIPELINED_POLICIES, Experiment, Scale
from simctl.sim.metrics import StepMetrics
from simctl.sim.models import get_model
from simctl.sim.pipeline import pipeline_seconds
from simctl.sim.replay import ReplaySetup, run_policy
from simctl.sim.reproduce_stats import Result, finished
from simctl.traces.generate import generate_trace
from simctl.traces.io import Trace
from simctl.traces.schema import StepTiming

TraceKey = tuple[str, float, tuple[int, ...], int]  # preset, scale, replayed steps, seed


@dataclass
class Outcome:
    """What the metrics need of one replay: per-step metrics and the pipeline's seconds."""

    steps: dict[int, StepMetrics]
    pipeline_s: float | None = None


@dataclass
class Runner:
    """Replays on demand and keeps what the experiments' metrics read."""

    log: Callable[[str], None] = field(default=lambda _msg: None)
    traces: dict[TraceKey, Trace] = field(default_factory=dict)
    outcomes: dict[tuple[TraceKey, str, str], Outcome] = field(default_factory=dict)

    def trace(self, key: TraceKey) -> Trace:
        if key not in self.traces:
            preset, scale, steps, seed = key
            df, meta, lists = generate_trace(preset, max(steps) + 1, seed, scale=scale)
            meta = dataclasses.replace(meta, timing=StepTiming(), step_timing={})
            self.traces[key] = Trace(df=df, meta=meta, lists=lists)
        return self.traces[key]

    def outcome(self, key: TraceKey, cluster: str, policy: str, measured: Sequence[int] | None) -> Outcome:
        """The replay's outcome; with `measured`, also the pipeline seconds over those steps."""
        if (key, cluster, policy) not in self.outcomes:
            self.log(f"{key[0]} seed {key[3]}: {policy} on {cluster}")
            setup = _setup(self.trace(key), cluster, key)
            run = run_policy(setup, policy)
            steps = {m.step: m for m in run.steps}
            pipe = None
            if measured is not None:
                pipe = pipeline_seconds(run, setup, measured, run.name in PIPELINED_POLICIES)
            self.outcomes[(key, cluster, policy)] = Outcome(steps, pipe)
        return self.outcomes[(key, cluster, policy)]


def _setup(trace: Trace, cluster: str, key: TraceKey) -> ReplaySetup:
    spec = parse_cluster(cluster)
    model = get_model(trace.meta.model)
    return ReplaySetup(
        trace=trace,
        cluster=spec,
        model=model,
        cost=load_cost_model(model, spec),
        steps=list(key[2]),
        seed=key[3],
    )


def metric_value(metric: str, base: StepMetrics, pol: StepMetrics) -> float:
    """One sample of a per-step metric (sim/experiments.py METRICS)."""
    if metric == "rollout_speedup":
        return base.rollout_makespan_s / pol.rollout_makespan_s
    if metric == "step_speedup":
        return base.step_time_s / pol.step_time_s
    if metric == "throughput_gain":
        return pol.throughput_tok_s / base.throughput_tok_s
    if metric == "tail_reduction":
        return 1.0 - pol.tail_time_s / base.tail_time_s if base.tail_time_s > 0 else float("nan")
    raise ValueError(f"unknown per-step metric {metric!r}")


def _samples(runner: Runner, e: Experiment, scale: Scale, seeds: int) -> list[tuple[int, int, float]]:
    out = []
    for seed in range(seeds):
        key: TraceKey = (e.preset, scale.trace_scale, scale.replayed, seed)
        pipe = scale.steps if e.metric == "training_throughput" else None
        base = runner.outcome(key, scale.baseline_cluster or scale.cluster, e.baseline, pipe)
        pol = runner.outcome(key, scale.cluster, e.policy, pipe)
        if pipe is not None:
            if base.pipeline_s is None or pol.pipeline_s is None:
                raise ValueError(f"{e.id}: a run shared with a per-step metric has no pipeline seconds")
            out.append((seed, -1, base.pipeline_s / pol.pipeline_s))
            continue
        out += [(seed, s, metric_value(e.metric, base.steps[s], pol.steps[s])) for s in scale.steps]
    return out


def _detail(e: Experiment, scale: Scale, seeds: int) -> dict:
    return {
        "cluster": scale.cluster,
        "baseline_cluster": scale.baseline_cluster or scale.cluster,
        "trace_scale": scale.trace_scale,
        "steps": list(scale.steps),
        "warmup_steps": len(scale.warmup),
        "seeds": seeds,
        "ladder": e.ladder,
    }


def run_experiment(runner: Runner, e: Experiment, quick: bool, seeds: int | None) -> Result:
    """Reproduce one experiment; a simulation error becomes the result's 'error' verdict."""
    mode = "quick" if quick else "full"
    scale = e.quick if quick else e.full
    if e.not_expressible or scale is None:
        return Result(e, mode, reason=e.not_expressible or "no layout")
    n = seeds if seeds is not None else scale.seeds
    try:
        samples = _samples(runner, e, scale, n)
    except (SimError, ValueError) as exc:
        return Result(e, mode, verdict="error", reason=str(exc).splitlines()[0], detail=_detail(e, scale, n))
    return finished(e, mode, samples, _detail(e, scale, n))


def run_experiments(
    experiments: Iterable[Experiment], quick: bool, seeds: int | None = None, verbose: bool = False
) -> list[Result]:
    """Every experiment in order; replays shared between them run once."""
    runner = Runner(
        log=(lambda msg: print(msg, file=sys.stderr, flush=True)) if verbose else (lambda _m: None)
    )
    results, preset = [], None
    for e in experiments:
        if e.preset != preset:  # experiments come grouped by preset: free the last one's traces
            runner.traces.clear()
            runner.outcomes.clear()
            preset = e.preset
        results.append(run_experiment(runner, e, quick, seeds))
    return results
