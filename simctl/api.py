"""The Python API: what a notebook needs to replay a trace and look at the results.

::

    import simctl

    trace = simctl.load_trace("traces/samples/efficientrollout-qwen7b-8k-6steps.parquet")
    result = simctl.replay(trace, ["verl", "ngram:gamma=4"], cluster="a100x8:tp1", steps="0:2")
    result.steps          # pandas: one row per policy and step, the metrics of `simctl replay`
    result.requests       # one row per request (requests.parquet)
    result.timeline       # one row per busy segment of a worker (timeline.parquet)
    result.report("out")  # out/run (a run directory) and out/index.html (the comparison report)

    done = simctl.sweep("sweep.toml", "sweep_out")  # or the spec as a dict: what SPEC.toml holds
    done.table            # sweep.parquet: one row per point (axes, param_<name>, metrics)

The same code paths as `simctl replay` (sim/replay.py, the run format of
traces/run_format.py, reports/build.py) and `simctl sweep` (simctl/sweep_runner.py);
errors are the CLI's one-line exceptions (`TraceError`, `PolicySpecError`, `SimError`,
`SweepSpecError`, `ValueError` for a bad cluster or steps).
Policies are spec strings (`"ngram:gamma=4"`, `"my_policies.py:Mine"`), `Policy`
subclasses (built with their default parameters) or `Policy` objects (used as they are).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from simctl.policies.contract import Policy
from simctl.sim.cluster import parse_cluster
from simctl.sim.cost_model import load_cost_model
from simctl.sim.engine_config import EngineConfig
from simctl.sim.models import model_of_trace
from simctl.sim.replay import PolicyRun, ReplaySetup, run_policy, run_tables
from simctl.traces.io import Trace
from simctl.traces.plugins import class_family
from simctl.traces.run_format import RunDoc
from simctl.traces.validate import load_valid_trace

if TYPE_CHECKING:
    from simctl.sweep_estimate import SweepEstimate
    from simctl.sweep_spec import SweepSpec

__all__ = ["Result", "Sweep", "estimate_sweep", "load_trace", "replay", "sweep"]

PolicyLike = str | type[Policy] | Policy


def load_trace(path: str | Path) -> Trace:
    """Read and validate a trace (`TraceError`, one line per problem, if it is not valid)."""
    return load_valid_trace(Path(path))


def _steps(steps: int | str | Sequence[int] | None, available: list[int]) -> list[int]:
    if steps is None:
        return list(available)
    if isinstance(steps, str):
        a, colon, b = steps.partition(":")
        try:
            lo = int(a) if a else min(available)
            hi = (int(b) if b else max(available) + 1) if colon else lo + 1
        except ValueError:
            raise ValueError(f"steps {steps!r} is not N or A:B") from None
        chosen = [s for s in available if lo <= s < hi]
    else:
        wanted = {int(steps)} if isinstance(steps, int) else {int(s) for s in steps}
        chosen = [s for s in available if s in wanted]
    if not chosen:
        raise ValueError(
            f"steps {steps!r} selects no step; the trace has steps {available[0]}..{available[-1]}"
        )
    return chosen


def _policy(p: PolicyLike) -> str | Policy:
    if isinstance(p, str | Policy):
        return p
    return class_family(p, None, getattr(p, "__name__", repr(p))).make("")


@dataclass
class Result:
    """A replay's results: pandas frames of the run directory's tables, run.json as `doc`."""

    setup: ReplaySetup
    runs: dict[str, PolicyRun]
    doc: RunDoc

    def _table(self, name: str) -> pd.DataFrame:
        frames = [f for f in run_tables(self.runs)[name] if len(f)]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    @property
    def steps(self) -> pd.DataFrame:
        """One row per policy and step: makespan, step time, tokens, throughput, tail, GPU
        idle fraction, mean accept length (sim/metrics.py)."""
        rows = [
            {"policy": name, **dataclasses.asdict(m)} for name, run in self.runs.items() for m in run.steps
        ]
        return pd.DataFrame(rows)

    @property
    def requests(self) -> pd.DataFrame:
        """One row per request and step (traces/run_format.py REQUESTS)."""
        return self._table("requests")

    @property
    def timeline(self) -> pd.DataFrame:
        """One row per busy segment of a worker (traces/run_format.py TIMELINE)."""
        return self._table("timeline")

    @property
    def roles(self) -> pd.DataFrame:
        """One row per role change of a worker."""
        return self._table("roles")

    def write_run(self, out: str | Path) -> Path:
        """The run directory (what `simctl replay --out` writes; `simctl report` reads it)."""
        from simctl.traces.outputs import check_output_dir
        from simctl.traces.run_format import check_replaceable, write_run_dir

        out = Path(out)
        check_output_dir(out, inputs=[], what="run directory")
        check_replaceable(out)
        write_run_dir(out, self.doc, run_tables(self.runs))
        return out

    def report(self, out: str | Path, baseline: str = "verl") -> Path:
        """Write the run directory to `out/run` and render the comparison report into `out`;
        returns `out/index.html`."""
        from simctl.reports.build import build_report, check_report_dir
        from simctl.traces.outputs import check_output_dir

        out = Path(out)
        check_output_dir(out, inputs=[], what="report directory")
        check_report_dir(out, [out / "run"])
        run_dir = self.write_run(out / "run")
        return build_report(
            [run_dir], out, baseline=baseline if baseline in self.runs else next(iter(self.runs))
        )

    def chrome_trace(self, path: str | Path) -> Path:
        """The worker timeline as a Chrome/Perfetto trace (JSON) at `path`."""
        from simctl.traces.chrome_trace import write_run_chrome_trace

        write_run_chrome_trace(Path(path), run_tables(self.runs), self.doc)
        return Path(path)


def replay(
    trace: Trace | str | Path,
    policies: PolicyLike | Sequence[PolicyLike],
    cluster: str = "h100x512",
    steps: int | str | Sequence[int] | None = None,
    seed: int = 0,
    profile: str | Path | None = None,
    *,
    model: str | None = None,
    max_num_seqs: int = 256,
    per_iteration: bool = False,
) -> Result:
    """Replay `trace` (a Trace or a trace file) under each policy on `cluster`, as `simctl
    replay` does; `steps`: all, N, "A:B" or a list of step numbers."""
    from simctl.replay_cmd import run_document

    loaded = trace if isinstance(trace, Trace) else load_trace(trace)
    source = "trace" if isinstance(trace, Trace) else f"trace {trace}"
    model_spec = model_of_trace(loaded.meta, source, model)
    spec = parse_cluster(cluster)
    setup = ReplaySetup(
        trace=loaded,
        cluster=spec,
        model=model_spec,
        cost=load_cost_model(model_spec, spec, Path(profile) if profile else None),
        steps=_steps(steps, loaded.steps),
        seed=seed,
        engine=EngineConfig(max_num_seqs=max_num_seqs, per_iteration=per_iteration),
        cost_source=str(profile) if profile else "roofline",
    )
    listed: Sequence[PolicyLike] = [policies] if isinstance(policies, str | Policy | type) else policies
    runs: dict[str, PolicyRun] = {}
    for p in listed:
        run = run_policy(setup, _policy(p))
        runs[run.name] = run
    label = Path(str(loaded.path)) if loaded.path is not None else Path("<in-memory trace>")
    return Result(setup=setup, runs=runs, doc=run_document(setup, runs, label))


@dataclass
class Sweep:
    """A sweep's results: its tables (`sweep.parquet`, `sweep_steps.parquet`) and report."""

    out: Path
    table: pd.DataFrame
    steps: pd.DataFrame
    report: Path
    ran: int
    skipped: int
    backend: str


def sweep(
    spec: str | Path | Mapping[str, Any],
    out: str | Path,
    *,
    workers: int | None = None,
    ray: bool | None = None,
    ray_address: str | None = None,
    plugins: Sequence[str] = (),
) -> Sweep:
    """Replay every point of a design space into the sweep directory `out`, as `simctl sweep`
    does: `spec` is a SPEC.toml file, or its content as a dict (relative trace paths then
    against the current directory); `plugins` as `--plugin` (never named by the spec).
    Resumable: a second call skips the complete points. `ray`: None uses Ray where it is
    installed and more than one worker runs (or `ray_address` is given), as the command
    does; False runs on a local process pool (the same results)."""
    from simctl.sweep_runner import default_workers, ray_available, run_sweep
    from simctl.sweep_table import write_outputs

    loaded = _sweep_spec(spec, plugins)
    out = Path(out)
    if workers is None and not ray_address:
        workers = default_workers()
    if ray is None:
        ray = bool(ray_address) or (workers != 1 and ray_available())
    if ray_address and not ray:
        raise ValueError("ray_address needs ray=True (or None)")
    done = run_sweep(loaded, out, workers, ray, ray_address, command="simctl.sweep (Python API)")
    table, steps, index = write_outputs(loaded, out, done.backend)
    return Sweep(out, table, steps, index, done.ran, done.skipped, done.backend)


def _sweep_spec(spec: str | Path | Mapping[str, Any], plugins: Sequence[str]) -> SweepSpec:
    from simctl.sweep_spec import load_spec, spec_from_data

    if isinstance(spec, Mapping):
        return spec_from_data(dict(spec), Path.cwd() / "<sweep spec>", plugins)
    return load_spec(Path(spec), plugins)


def estimate_sweep(
    spec: str | Path | Mapping[str, Any],
    out: str | Path | None = None,
    *,
    workers: int | None = None,
    plugins: Sequence[str] = (),
) -> SweepEstimate:
    """What `simctl sweep --dry-run` prints, as data: the points, those already complete in
    `out` (if given), and the estimated simulator CPU and wall time on `workers` (default:
    this machine's cores), from veRL measured on one step per trace
    (simctl/sweep_estimate.py). Runs no point and writes nothing."""
    from simctl.sweep_estimate import estimate_in

    return estimate_in(_sweep_spec(spec, plugins), None if out is None else Path(out), workers)
