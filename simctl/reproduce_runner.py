"""Run the experiments of sim/experiments.py: generate each trace from its preset (seeded),
replay baseline and policy on the paper's layout, and compute the paper's metric per seed
and measured step.

Runs are shared: one trace per (preset, scale, replayed steps, seed), one replay per
(trace, cluster, policy), whatever number of experiments reads it. Seed k generates the
trace with seed k and replays it with seed k.

An experiment that misses the paper (verdict below or above) is swept over its paper's
unpublished input (sim/sensitivity.py): seed 0 on the same scale (the middle step only in
quick mode where replays are slow), and replays of policies that cannot read the input shared.

Reward, training and weight sync are modelled from the work each step does
(sim/step_time.py), with the same constants for every paper: the generated trace's phase
seconds (the preset's fixed shares of a nominal rollout) are dropped before replay.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context

from simctl.sim.cluster import parse_cluster
from simctl.sim.cost_model import DEFAULT_PARAMS, CostModelError, load_cost_model
from simctl.sim.engine import SimError
from simctl.sim.experiments import PIPELINED_POLICIES, Experiment, Scale
from simctl.sim.metrics import StepMetrics
from simctl.sim.models import get_model
from simctl.sim.parallel_replay import single_threaded
from simctl.sim.pipeline import pipeline_seconds
from simctl.sim.replay import ReplaySetup, run_policy
from simctl.sim.reproduce_stats import Result, finished
from simctl.sim.sensitivity import (
    Curve,
    Sensitivity,
    apply_trace,
    cluster_spec,
    cost_params,
    crossing,
    generated,
    sensitivity_for,
)
from simctl.traces.generate import generate_trace
from simctl.traces.io import Trace

TraceKey = tuple[str, float, tuple[int, ...], int]  # preset, scale, replayed steps, seed
# A point of a sensitivity sweep (sim/sensitivity.py): the input and its value; None is the
# calibrated run.
Variant = tuple[Sensitivity, float] | None
MISSES = ("below", "above")  # verdicts that get a sensitivity curve


@dataclass
class Outcome:
    """What the metrics need of one replay: per-step metrics and the pipeline's seconds."""

    steps: dict[int, StepMetrics]
    pipeline_s: float | None = None


@dataclass
class Runner:
    """Replays on demand and keeps what the experiments' metrics read."""

    log: Callable[[str], None] = field(default=lambda _msg: None)
    traces: dict[tuple[TraceKey, Variant], Trace] = field(default_factory=dict)
    outcomes: dict[tuple[TraceKey, str, str, Variant], Outcome] = field(default_factory=dict)

    def trace(self, key: TraceKey, variant: Variant = None) -> Trace:
        if (key, variant) not in self.traces:
            if variant is None:
                preset, scale, steps, seed = key
                df, meta, lists = generate_trace(preset, max(steps) + 1, seed, scale=scale)
                self.traces[(key, None)] = Trace(df=df, meta=meta, lists=lists)
            elif variant[0].kind == "gen":
                preset, scale, steps, seed = key
                s, value = variant
                self.traces[(key, variant)] = generated(s, preset, max(steps) + 1, seed, scale, value)
            else:
                self.traces[(key, variant)] = apply_trace(variant[0], self.trace(key), variant[1])
        return self.traces[(key, variant)]

    def outcome(
        self,
        key: TraceKey,
        cluster: str,
        policy: str,
        measured: Sequence[int] | None,
        variant: Variant = None,
    ) -> Outcome:
        """The replay's outcome; with `measured`, also the pipeline seconds over those steps.
        A policy that cannot read the variant's input shares the calibrated replay."""
        if variant is not None and not variant[0].reads(policy):
            variant = None
        ident = (key, cluster, policy, variant)
        if ident not in self.outcomes:
            at = "" if variant is None else f" at {variant[0].input}={variant[1]:g}"
            self.log(f"{key[0]} seed {key[3]}: {policy} on {cluster}{at}")
            setup = _setup(self.trace(key, variant), cluster, key, variant)
            run = run_policy(setup, policy)
            steps = {m.step: m for m in run.steps}
            pipe = None
            if measured is not None:
                pipe = pipeline_seconds(run, setup, measured, run.name in PIPELINED_POLICIES)
            self.outcomes[ident] = Outcome(steps, pipe)
        return self.outcomes[ident]


def _setup(trace: Trace, cluster: str, key: TraceKey, variant: Variant = None) -> ReplaySetup:
    spec = parse_cluster(cluster)
    if variant is not None:
        spec = cluster_spec(variant[0], spec, variant[1])
    model = get_model(trace.meta.model)
    params = DEFAULT_PARAMS if variant is None else cost_params(variant[0], variant[1])
    return ReplaySetup(
        trace=trace,
        cluster=spec,
        model=model,
        cost=load_cost_model(model, spec, params=params),
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


def _samples(
    runner: Runner, e: Experiment, scale: Scale, seeds: int, variant: Variant = None
) -> list[tuple[int, int, float]]:
    out = []
    for seed in range(seeds):
        key: TraceKey = (e.preset, scale.trace_scale, scale.replayed, seed)
        pipe = scale.steps if e.metric == "training_throughput" else None
        base = runner.outcome(key, scale.baseline_cluster or scale.cluster, e.baseline, pipe, variant)
        pol = runner.outcome(key, scale.cluster, e.policy, pipe, variant)
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


def sweep(runner: Runner, e: Experiment, s: Sensitivity, quick: bool) -> Curve:
    """The experiment's metric over the input's grid: seed 0 on the experiment's scale (in
    quick mode its middle steps where the input says so), the mean of its samples per value."""
    scale = e.quick if quick else e.full
    if scale is None:
        raise ValueError(f"{e.id}: no scale to sweep")
    scale = dataclasses.replace(scale, steps=s.sweep_steps(scale.steps, quick))
    values = s.grid(quick)
    metric: list[float] = []
    idle: list[float] = []  # only where the baseline reads the input (else one replay)
    if s.reads(e.policy) or s.reads(e.baseline):
        for v in values:
            variant: Variant = None if v == s.calibrated else (s, v)
            try:
                samples = _samples(runner, e, scale, 1, variant)
            except CostModelError:  # the model does not fit at this value: no point
                if variant is None:
                    raise
                metric.append(math.nan)
                if s.reads(e.baseline):
                    idle.append(math.nan)
                continue
            finite = [x for _, _, x in samples if math.isfinite(x)]
            metric.append(sum(finite) / len(finite) if finite else math.nan)
            if s.reads(e.baseline):
                idle.append(_baseline_idle(runner, e, scale, variant))
    else:
        values = ()  # neither run reads the input: no curve to draw
    reach = crossing(values, metric, e.value.lo, e.value.hi, s.calibrated) if values else None
    return Curve(
        s.input,
        s.label,
        s.calibrated,
        values,
        tuple(metric),
        reach,
        1,
        scale.steps,
        s.why,
        baseline_idle=tuple(idle),
    )


def _baseline_idle(runner: Runner, e: Experiment, scale: Scale, variant: Variant) -> float:
    """The baseline's GPU idle fraction (mean over the measured steps, seed 0) at a point of
    a sweep: what a paper's own idle measurement can be set against (RhymeRL §1: veRL idles
    'over 46%'). Reads the replay the point already ran."""
    key: TraceKey = (e.preset, scale.trace_scale, scale.replayed, 0)
    pipe = scale.steps if e.metric == "training_throughput" else None
    base = runner.outcome(key, scale.baseline_cluster or scale.cluster, e.baseline, pipe, variant)
    return sum(base.steps[s].gpu_idle_fraction for s in scale.steps) / len(scale.steps)


def run_experiment(
    runner: Runner, e: Experiment, quick: bool, seeds: int | None, sensitivity: bool = True
) -> Result:
    """Reproduce one experiment; a simulation error becomes the result's 'error' verdict.
    A miss (below or above) gets its paper's sensitivity curve unless `sensitivity` is off."""
    mode = "quick" if quick else "full"
    scale = e.quick if quick else e.full
    if e.not_expressible or scale is None:
        return Result(e, mode, reason=e.not_expressible or "no layout")
    n = seeds if seeds is not None else scale.seeds
    try:
        samples = _samples(runner, e, scale, n)
    except (SimError, ValueError) as exc:
        return Result(e, mode, verdict="error", reason=str(exc).splitlines()[0], detail=_detail(e, scale, n))
    result = finished(e, mode, samples, _detail(e, scale, n))
    s = sensitivity_for(e)
    if not sensitivity or s is None or result.verdict not in MISSES:
        return result
    try:
        return dataclasses.replace(result, sensitivity=sweep(runner, e, s, quick))
    except (SimError, ValueError) as exc:
        return dataclasses.replace(result, reason=f"sensitivity sweep failed: {str(exc).splitlines()[0]}")


def _by_preset(experiments: Iterable[Experiment]) -> list[list[Experiment]]:
    """Consecutive experiments of one preset: they share traces and replays, others none."""
    groups: list[list[Experiment]] = []
    for e in experiments:
        if groups and groups[-1][0].preset == e.preset:
            groups[-1].append(e)
        else:
            groups.append([e])
    return groups


def _run_group(
    group: Sequence[Experiment], quick: bool, seeds: int | None, verbose: bool, sensitivity: bool
) -> list[Result]:
    runner = Runner(
        log=(lambda msg: print(msg, file=sys.stderr, flush=True)) if verbose else (lambda _m: None)
    )
    return [run_experiment(runner, e, quick, seeds, sensitivity) for e in group]


def run_experiments(
    experiments: Iterable[Experiment],
    quick: bool,
    seeds: int | None = None,
    verbose: bool = False,
    sensitivity: bool = True,
    jobs: int = 1,
) -> list[Result]:
    """Every experiment, results in their order; replays shared between them run once.

    Experiments of one preset share a Runner (traces, replays); each preset's group starts
    from nothing, so with `jobs` > 1 the groups run in up to `jobs` spawned processes with
    exactly the results of running them one after another (every draw is seeded per run)."""
    groups = _by_preset(experiments)
    if jobs <= 1 or len(groups) <= 1:
        return [r for g in groups for r in _run_group(g, quick, seeds, verbose, sensitivity)]
    with ProcessPoolExecutor(
        max_workers=min(jobs, len(groups)), mp_context=get_context("spawn"), initializer=single_threaded
    ) as pool:
        futures = [pool.submit(_run_group, g, quick, seeds, verbose, sensitivity) for g in groups]
        return [r for fut in futures for r in fut.result()]
