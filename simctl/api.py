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
subclasses (built with their default parameters) or `Policy` objects (used as they are:
a second replay of the same object continues from the state the first left, so pass a new
object, a class or a spec string for an independent run). Two policies of one name are
refused (results are kept by name). A `Trace` given as an object is checked as a trace file
is (an edited `trace.df` may hold what no valid file does) and that checked copy replayed.
A file plug-in is loaded again when its content changed.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from numbers import Integral
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import pandas as pd

from simctl.policies.action_checks import names_problem
from simctl.policies.contract import Policy
from simctl.policies.params import PolicySpecError
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

PolicyLike: TypeAlias = str | type[Policy] | Policy


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
        values = [steps] if not isinstance(steps, Sequence) else list(steps)
        if isinstance(steps, bytes) or not all(
            isinstance(v, Integral) and not isinstance(v, bool) for v in values
        ):
            raise ValueError(f"steps {steps!r} is not all, N, 'A:B' or a list of step numbers")
        wanted = {int(v) for v in values if isinstance(v, Integral)}
        chosen = [s for s in available if s in wanted]
    if not chosen:
        raise ValueError(
            f"steps {steps!r} selects no step; the trace has steps {available[0]}..{available[-1]}"
        )
    return chosen


def _policy(p: PolicyLike) -> str | Policy:
    if isinstance(p, str | Policy):
        return p
    if not isinstance(p, type):
        raise PolicySpecError(f"policy {p!r} is not a spec string, a Policy subclass or a Policy object")
    return class_family(p, None, getattr(p, "__name__", repr(p))).make("")


def _named_policies(policies: PolicyLike | Sequence[PolicyLike]) -> list[str | Policy]:
    """The policies to replay, each once: the same spec string given twice is one run (the
    same results), the same object twice is refused (the second run would start from the
    state the first left), and two policies of one name are refused (the results are kept
    by name: the second replaced the first, a plug-in named verl the baseline)."""
    from simctl.traces.plugins import make_policy

    if isinstance(policies, str | Policy | type):
        listed: list[Any] = [policies]
    elif isinstance(policies, Sequence) and not isinstance(policies, bytes):
        listed = list(policies)
    else:
        raise PolicySpecError(f"policies {policies!r} is not a policy or a list of policies")
    if not listed:
        raise PolicySpecError("no policy given")
    out: list[str | Policy] = []
    named: list[tuple[str, Any]] = []
    for given in listed:
        p = _policy(given)
        if isinstance(p, str):
            if p in out:
                continue
            named.append((repr(p), make_policy(p).name))
        else:
            if any(q is p for q in out):
                raise PolicySpecError(
                    f"policy object {p.name!r} is listed twice: the second run would start from the "
                    "state the first left; give two objects"
                )
            named.append((f"{type(p).__name__} object", p.name))
        out.append(p)
    problem = names_problem(named)
    if problem:
        raise PolicySpecError(problem)
    return out


# Points run at once: more processes than this is a typo, not a machine
MAX_WORKERS = 1 << 20


def _integer(value: Any, what: str, low: int, high: int) -> None:
    """An integer argument in low..high (not a bool, not a float), as the CLI takes it."""
    if not isinstance(value, Integral) or isinstance(value, bool) or not low <= int(value) <= high:
        raise ValueError(f"{what} {value!r} is not an integer in {low}..{high}")


def _path(value: Any, what: str) -> Path:
    """A path argument: a non-empty str or PathLike (an empty one meant '.')."""
    if isinstance(value, bytes) or not isinstance(value, str | PathLike) or not str(value):
        raise ValueError(f"{what} {value!r} is not a path")
    return Path(value)


def _unwritable_column(df: pd.DataFrame) -> str | None:
    """The first column whose values do not convert to the schema's type (pyarrow's error
    does not name it), as "column 'x'"."""
    import pyarrow as pa

    from simctl.traces.schema import column_type

    for name in df.columns:
        kind = column_type(str(name))
        if kind is None:
            continue
        try:
            pa.array(df[name], type=kind, from_pandas=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError, TypeError, OverflowError):
            return f"column '{name}' does not hold {kind} values"
        if not pa.types.is_floating(kind) and df[name].isna().any():
            return f"column '{name}' has missing values"
    return None


def revalidated(trace: Trace) -> Trace:
    """An in-memory trace checked as a trace file is: written to a temporary file and read
    back through every check of `simctl trace validate` (a notebook's edited `trace.df`
    may hold what no valid file does: acceptance 5, negative lengths, float steps). The
    trace read back is replayed, as `simctl replay` would replay that file."""
    from simctl.traces.io import TraceError, write_trace

    if not isinstance(trace.df, pd.DataFrame) or trace.meta is None:
        raise TraceError("in-memory trace: its df is not a DataFrame or it has no metadata")
    with tempfile.TemporaryDirectory(prefix="simctl-trace-") as tmp:
        path = Path(tmp) / "trace.parquet"
        try:
            write_trace(path, trace.df, trace.meta, lists=trace.lists)
        except TraceError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
            where = _unwritable_column(trace.df)
            raise TraceError(
                f"in-memory trace: {where or 'cannot be written as a trace'} ({first})"
            ) from None
        try:
            checked = load_valid_trace(path)
        except TraceError as exc:
            raise TraceError(str(exc).replace(str(path), "in-memory trace")) from None
    return dataclasses.replace(checked, path=trace.path)


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
        returns `out/index.html`. All or nothing: when the report cannot be built, `out` is
        as it was (a run directory it held before is put back). `baseline`: the policy
        speedups divide by (the default, verl, falls back to the first policy when verl was
        not replayed; a baseline named otherwise must be one of the runs)."""
        from simctl.reports.build import build_report, check_report_dir
        from simctl.traces.atomic import temp_sibling
        from simctl.traces.outputs import check_output_dir

        out = _path(out, "out")
        if baseline not in self.runs:
            if baseline != "verl":
                raise ValueError(f"baseline {baseline!r} is not one of the runs ({', '.join(self.runs)})")
            baseline = next(iter(self.runs))
        check_output_dir(out, inputs=[], what="report directory")
        check_report_dir(out, [out / "run"])
        existed, old_run = out.exists(), out / "run"
        aside = temp_sibling(out) if old_run.exists() else None  # (outside: not a foreign entry)
        if aside is not None:
            old_run.rename(aside)
        try:
            run_dir = self.write_run(old_run)
            index = build_report([run_dir], out, baseline=baseline)
        except BaseException:
            if not existed:
                shutil.rmtree(out, ignore_errors=True)
            else:
                shutil.rmtree(old_run, ignore_errors=True)
                if aside is not None:
                    aside.rename(old_run)
            raise
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)
        return index

    def chrome_trace(self, path: str | Path) -> Path:
        """The worker timeline as a Chrome/Perfetto trace (JSON) at `path`, checked as
        `simctl replay --chrome-trace` checks it (never the trace replayed, nor a file that
        is not JSON)."""
        from simctl.traces.chrome_trace import write_run_chrome_trace
        from simctl.traces.outputs import check_output_file

        path = _path(path, "path")
        inputs = [Path(str(self.setup.trace.path))] if self.setup.trace.path is not None else []
        check_output_file(path, inputs=inputs, what="Chrome trace file", kind="json")
        write_run_chrome_trace(path, run_tables(self.runs), self.doc)
        return path


def replay(
    trace: Trace | str | Path,
    policies: PolicyLike | Sequence[PolicyLike],
    cluster: str | Path | None = None,
    steps: int | str | Sequence[int] | None = None,
    seed: int = 0,
    profile: str | Path | None = None,
    *,
    model: str | None = None,
    max_num_seqs: int = 256,
    per_iteration: bool = False,
) -> Result:
    """Replay `trace` (a Trace or a trace file) under each policy on `cluster`, as `simctl
    replay` does; `steps`: all, N, "A:B" or a list of step numbers. `cluster` None: the
    layout the trace's metadata records (a generated trace's paper layout), else h100x512,
    as `simctl replay` without --cluster."""
    from simctl.replay_cmd import run_document, trace_cluster
    from simctl.traces.cli_options import MAX_NUM_SEQS_LIMIT, MAX_SEED

    _integer(seed, "seed", 0, MAX_SEED)
    _integer(max_num_seqs, "max_num_seqs", 1, MAX_NUM_SEQS_LIMIT)
    if cluster is not None and not isinstance(cluster, str | Path):
        raise ValueError(f"cluster {cluster!r} is not a layout name or a cluster file")
    loaded = revalidated(trace) if isinstance(trace, Trace) else load_trace(_path(trace, "trace"))
    cluster, _ = trace_cluster(loaded.meta.cluster, None if cluster is None else str(cluster))
    source = "trace" if isinstance(trace, Trace) else f"trace {trace}"
    model_spec = model_of_trace(loaded.meta, source, None if model is None else str(_path(model, "model")))
    spec = parse_cluster(cluster)
    setup = ReplaySetup(
        trace=loaded,
        cluster=spec,
        model=model_spec,
        cost=load_cost_model(model_spec, spec, _path(profile, "profile") if profile is not None else None),
        steps=_steps(steps, loaded.steps),
        seed=seed,
        engine=EngineConfig(max_num_seqs=max_num_seqs, per_iteration=bool(per_iteration)),
        cost_source=str(profile) if profile is not None else "roofline",
    )
    runs: dict[str, PolicyRun] = {}
    for p in _named_policies(policies):
        run = run_policy(setup, p)
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

    if workers is not None:
        _integer(workers, "workers", 1, MAX_WORKERS)
    loaded = _sweep_spec(spec, plugins)
    out = _path(out, "out")
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

    if isinstance(plugins, str | bytes) or not all(isinstance(p, str) for p in plugins):
        raise ValueError(f"plugins {plugins!r} is not a list of plug-in specs")
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

    if workers is not None:
        _integer(workers, "workers", 1, MAX_WORKERS)
    return estimate_in(_sweep_spec(spec, plugins), None if out is None else Path(out), workers)
