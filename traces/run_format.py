"""The run directory: the one definition of what `simctl replay --out` and `simctl live --out`
write and what `simctl report` reads.

A run directory holds `run.json` (the run document: metrics per policy and step, each
policy's resolved parameters, provenance) and Parquet tables: requests, timeline and roles
from every run, iterations from live runs only. The simulator and the live executor write
through `write_run_dir`, so their tables have identical schemas (names, order, dtypes) and
their documents the same required fields; the report reads through `read_run_doc` and
`read_table_info`, which check a directory against this definition.

All or nothing: `write_run_dir` builds the whole directory beside its target and swaps it
in at once (traces/atomic.py), and stamps every table and run.json with one `run_id` (a
hash of the run's content, so the same inputs and seed give the same id); a reader refuses
a directory whose parts carry different ids.

Versions: `run.json` carries `format_version` (FORMAT_VERSION). A directory without it is
version 1, written before this module existed: the sim and live writers differed (sim's
timeline had a `replicas` column, live's did not; integer widths varied), so version 1 is
read as before, checking only the columns the report needs.

This module sits in traces/ (layer order policies -> traces -> sim -> live -> reports ->
simctl): it imports nothing from sim, live or reports.
"""

# No `from __future__ import annotations` here: on Python 3.11 the TypedDicts below know
# which keys are NotRequired (their __required_keys__, which the writer checks) only when
# their annotations are evaluated.
import dataclasses
import hashlib
import json
import os
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version as package_version
from pathlib import Path
from typing import NotRequired, Protocol, TypedDict

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from simctl.traces.atomic import atomic_write, replace_dir
from simctl.traces.outputs import OutputPathError

FORMAT_VERSION = 2
RUN_JSON = "run.json"
#: Parquet schema metadata key of the run id every table of a run directory carries.
RUN_ID_KEY = b"simctl.run_id"

# ---------------------------------------------------------------------------- tables


@dataclass(frozen=True)
class TableSpec:
    """One Parquet table of a run directory."""

    name: str
    schema: pa.Schema
    # Columns a version-1 file must have: what the report needs (version 1 is read as before)
    v1_columns: tuple[str, ...]
    doc: str
    # Columns added to version 2 after its first writers: a version-2 file may lack them, and
    # a reader treats their absence as "not recorded" (every writer of today writes them).
    late_columns: tuple[str, ...] = ()

    @property
    def file(self) -> str:
        return f"{self.name}.parquet"

    @property
    def columns(self) -> list[str]:
        return list(self.schema.names)


# Timeline columns splitting a segment's busy time (added to version 2 later: optional)
PHASE_COLUMNS = ("prefill_s", "recompute_s", "draft_s")

REQUESTS = TableSpec(
    "requests",
    pa.schema(
        [
            ("policy", pa.string()),
            ("step", pa.int32()),
            ("request", pa.int32()),  # row of the request in its step
            ("prompt_id", pa.int64()),
            ("sample", pa.int32()),
            ("worker", pa.int32()),  # last worker it ran on (-1: never dispatched)
            ("prompt_len", pa.int64()),
            ("response_len", pa.int64()),
            ("finish_s", pa.float64()),  # NaN: not finished (deferred, or the step was cut)
            ("preemptions", pa.int32()),
            ("dispatches", pa.int32()),
            ("drafted", pa.int64()),
            ("accepted", pa.int64()),
            ("spec_iters", pa.int64()),
            ("replicas", pa.int32()),  # Fastest-of-N copies; their counters are added above
            ("start_s", pa.float64()),  # first admitted into a running batch (NaN: never)
            ("first_token_s", pa.float64()),  # its first generated token (NaN: none)
        ]
    ),
    ("policy", "step", "worker", "response_len", "finish_s", "accepted", "spec_iters"),
    "one row per request and step; times in seconds since step start, earliest of its copies",
    late_columns=("start_s", "first_token_s"),
)

TIMELINE = TableSpec(
    "timeline",
    pa.schema(
        [
            ("worker", pa.int32()),
            ("t0_s", pa.float64()),
            ("t1_s", pa.float64()),
            ("iterations", pa.int64()),  # engine iterations in the segment
            ("batch", pa.int64()),  # running requests
            ("kv_tokens", pa.int64()),
            ("gamma_mean", pa.float64()),  # mean draft length of the speculating requests (0: none)
            ("replicas", pa.int32()),  # Fastest-of-N replicas running; null where not recorded (live)
            # Seconds of the segment that were prefill of first-admitted prompts, recompute of
            # context whose KV was lost (preemption, re-dispatch without KV) and drafting on
            # the worker's own GPUs (with any wait for a decoupled drafter); the rest is
            # verification where gamma_mean > 0, else decoding. As the simulator priced them;
            # null where not recorded (live: iterations.parquet splits its time).
            ("prefill_s", pa.float64()),
            ("recompute_s", pa.float64()),
            ("draft_s", pa.float64()),
            ("policy", pa.string()),
            ("step", pa.int32()),
        ]
    ),
    ("policy", "step", "worker", "t0_s", "t1_s", "iterations", "batch", "kv_tokens", "gamma_mean"),
    "one row per busy segment of a worker (iterations with the same batch merged)",
    late_columns=PHASE_COLUMNS,
)

ROLES = TableSpec(
    "roles",
    pa.schema(
        [
            ("worker", pa.int32()),
            ("time_s", pa.float64()),
            ("role", pa.string()),  # policies.contract.Role values
            ("policy", pa.string()),
            ("step", pa.int32()),
        ]
    ),
    ("policy", "step", "worker", "time_s", "role"),
    "one row per role change of a worker (every worker starts as 'rollout' at 0)",
)

ITERATIONS = TableSpec(
    "iterations",
    pa.schema(
        [
            ("worker", pa.int32()),
            ("t0_s", pa.float64()),  # the worker's clock when the iteration started
            ("engine_s", pa.float64()),  # measured engine step
            ("engine_cpu_s", pa.float64()),  # CPU time of the engine thread in it
            ("batch", pa.int64()),  # running requests
            ("new_tokens", pa.int64()),  # batch + draft tokens verified (prefill apart)
            ("context_tokens", pa.int64()),  # prompt + generated tokens of the running requests
            ("prefill_tokens", pa.int64()),  # uncached tokens admitted since the last iteration
            ("drafted", pa.int64()),  # draft tokens proposed (and verified)
            ("drafting", pa.int64()),  # requests that proposed at least one token
            ("speculating", pa.int64()),  # requests running with a drafter (gamma > 0)
            ("gamma", pa.int64()),  # widest draft length asked (0: none)
            ("method", pa.string()),  # draft method most of them use ("" when none)
            ("accepted", pa.int64()),
            ("draft_s", pa.float64()),  # the engine's own split of engine_s (else 0)
            ("forward_s", pa.float64()),
            ("sample_s", pa.float64()),
            ("policy", pa.string()),
            ("step", pa.int32()),
        ]
    ),
    (),
    "live runs only: one row per engine iteration, what a cost profile is checked against",
)

TABLES: dict[str, TableSpec] = {t.name: t for t in (REQUESTS, TIMELINE, ROLES, ITERATIONS)}
# Every run writes these; iterations.parquet only where an engine ran (live)
RUN_TABLES = ("requests", "timeline", "roles")


def record_columns(spec: TableSpec) -> list[str]:
    """A table's columns less `policy` and `step`: the fields of the records a writer keeps
    per step, to which it adds those two."""
    return [c for c in spec.columns if c not in ("policy", "step")]


# sim.engine segments; live.executor segments lack `replicas` and PHASE_COLUMNS (the live
# timeline has them null)
SEGMENT_COLUMNS = record_columns(TIMELINE)
ROLE_CHANGE_COLUMNS = record_columns(ROLES)  # sim.engine and live.executor role changes
ITERATION_COLUMNS = record_columns(ITERATIONS)  # live.executor.StepRecord.iterations

# ------------------------------------------------------------------------- run.json


class StepParts(TypedDict):
    """Where a step's end-to-end time went (sim/metrics.py `parts`); they add up to
    step_time_s. `source`: "trace" (the trace's timing) or "model" (sim/step_time.py)."""

    rollout_s: float
    reward_s: float
    train_s: float  # training after the rollout (less what ran overlapped during it)
    weight_sync_s: float
    source: str


class StepEntry(TypedDict):
    """One step's metrics (sim/metrics.py defines each)."""

    step: int
    rollout_makespan_s: float
    step_time_s: float
    output_tokens: int
    throughput_tok_s: float
    tail_time_s: float
    gpu_idle_fraction: float
    mean_accept_len: float | None
    parts: NotRequired[StepParts]  # absent where the executor does not split the step (live)


class OverheadEntry(TypedDict):
    engine_s: float
    policy_s: float
    bookkeeping_s: float
    fraction_of_engine: float


class WorkerLossEntry(TypedDict):
    """One worker lost during a run (a real engine death live, `--fail-worker` in either
    executor): when, how many requests it held, and how many of those the executor placed
    itself because the policy left them unassigned (policies/worker_loss.py)."""

    worker: int
    step: int
    time_s: float
    requests: int
    placed_by_executor: int
    cause: str  # "injected" (--fail-worker) or what ended the engine, in one line


class PolicyEntry(TypedDict):
    """One policy's results. `params`: the policy's resolved parameters (`policy.params()`)."""

    steps: list[StepEntry]
    mean_rollout_makespan_s: float
    mean_step_time_s: float
    sim_wall_s: float  # wall seconds spent running the policy (simulating, or executing live)
    events: int
    counters: dict[str, int]
    params: dict[str, object]
    worker_losses: NotRequired[list[WorkerLossEntry]]  # absent: no worker was lost
    # live runs only
    reaction_s: NotRequired[dict[str, float]]  # concurrent: report received -> answer sent
    approximated: NotRequired[dict[str, int]]
    overhead: NotRequired[OverheadEntry]
    wall_s: NotRequired[float]
    error: NotRequired[str]


class CommandProvenance(TypedDict):
    simctl_version: str
    command: str
    date: str  # ISO 8601, UTC


class Provenance(CommandProvenance):
    source: str  # "sim" or "live"
    mode: str  # sim: "fast-forward" or "per-iteration"; live: "live"
    model: str
    cost_model: str
    engine: dict[str, object]
    trace_meta: dict[str, object]
    steps: list[int]
    # sim only
    cluster: NotRequired[dict[str, object]]
    # live only
    backend: NotRequired[str]
    model_path: NotRequired[str]
    device: NotRequired[str]
    workers: NotRequired[int]
    clock: NotRequired[str]
    workload: NotRequired[str]
    error: NotRequired[str]


class RunDoc(TypedDict):
    """run.json."""

    format_version: int
    trace: str  # the trace file replayed (live: the trace recorded, "" when none)
    cluster: str
    seed: int
    policies: dict[str, PolicyEntry]
    provenance: Provenance
    approximated: NotRequired[dict[str, int]]  # live: policy actions carried out approximately
    run_id: NotRequired[str]  # set by write_run_dir: the id every table of the directory carries


class StepMetricsLike(Protocol):
    """sim.metrics.StepMetrics, without importing sim."""

    @property
    def step(self) -> int: ...
    @property
    def rollout_makespan_s(self) -> float: ...
    @property
    def step_time_s(self) -> float: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def throughput_tok_s(self) -> float: ...
    @property
    def tail_time_s(self) -> float: ...
    @property
    def gpu_idle_fraction(self) -> float: ...
    @property
    def mean_accept_len(self) -> float | None: ...


def step_entry(m: StepMetricsLike) -> StepEntry:
    entry = _step_entry(m)
    # optional: sim.metrics.StepMetrics splits the step; live's does not
    reward, train, sync = (getattr(m, k, None) for k in ("reward_s", "train_s", "weight_sync_s"))
    source = getattr(m, "post_source", None)
    if isinstance(reward, float) and isinstance(train, float) and isinstance(sync, float) and source:
        entry["parts"] = {
            "rollout_s": float(m.rollout_makespan_s),
            "reward_s": reward,
            "train_s": train,
            "weight_sync_s": sync,
            "source": str(source),
        }
    return entry


def _step_entry(m: StepMetricsLike) -> StepEntry:
    return {
        "step": m.step,
        "rollout_makespan_s": m.rollout_makespan_s,
        "step_time_s": m.step_time_s,
        "output_tokens": m.output_tokens,
        "throughput_tok_s": m.throughput_tok_s,
        "tail_time_s": m.tail_time_s,
        "gpu_idle_fraction": m.gpu_idle_fraction,
        "mean_accept_len": m.mean_accept_len,
    }


def params_entry(params: object) -> dict[str, object]:
    """`policy.params()` as a JSON object: a mapping, or a dataclass of parameters."""
    if dataclasses.is_dataclass(params) and not isinstance(params, type):
        return dataclasses.asdict(params)
    if isinstance(params, Mapping):
        return {str(k): v for k, v in params.items()}
    raise TypeError(f"policy parameters must be a mapping or a dataclass, got {type(params).__name__}")


def policy_entry(
    steps: Sequence[StepMetricsLike],
    *,
    sim_wall_s: float,
    events: int,
    counters: Mapping[str, int],
    params: object,
) -> PolicyEntry:
    """The fields every run records for a policy; live adds its own (PolicyEntry)."""
    mk = [s.rollout_makespan_s for s in steps]
    st = [s.step_time_s for s in steps]
    return {
        "steps": [step_entry(s) for s in steps],
        "mean_rollout_makespan_s": float(np.mean(mk)) if mk else 0.0,
        "mean_step_time_s": float(np.mean(st)) if st else 0.0,
        "sim_wall_s": sim_wall_s,
        "events": events,
        "counters": {k: int(v) for k, v in counters.items()},
        "params": params_entry(params),
    }


def command_provenance() -> CommandProvenance:
    """Who wrote the run and when: the first keys of every run's provenance."""
    return {
        "simctl_version": package_version("simctl"),
        "command": shlex.join(["simctl", *sys.argv[1:]]),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def missing_fields(doc: Mapping[str, object]) -> list[str]:
    """Required fields (RunDoc, Provenance, each PolicyEntry) a document lacks, dotted."""
    out = [k for k in sorted(RunDoc.__required_keys__) if k not in doc]
    prov = doc.get("provenance")
    if isinstance(prov, Mapping):
        out += [f"provenance.{k}" for k in sorted(Provenance.__required_keys__) if k not in prov]
    policies = doc.get("policies")
    if isinstance(policies, Mapping):
        for name, entry in policies.items():
            if isinstance(entry, Mapping):
                out += [
                    f"policies.{name}.{k}" for k in sorted(PolicyEntry.__required_keys__) if k not in entry
                ]
    return out


# --------------------------------------------------------------------------- writing


def write_json(path: Path, doc: Mapping[str, object]) -> None:
    """A JSON document (run.json, or `--json`), atomically; NaN is refused (not JSON)."""
    text = json.dumps(doc, indent=1, allow_nan=False, default=_json_default)
    atomic_write(path, lambda tmp: Path(tmp).write_text(text))


def _json_default(x: object) -> object:
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x)
    return str(x)


def table_from_frames(spec: TableSpec, frames: Sequence[pd.DataFrame]) -> pa.Table:
    """Frames -> one Arrow table in the format's schema (columns reordered, dtypes cast).

    A frame with a column too many or too few is a programming error of its writer: the
    format is what both writers agree on, so it fails here rather than in a report."""
    parts = []
    for df in frames:
        if not len(df):
            continue
        extra = [c for c in df.columns if c not in spec.schema.names]
        missing = [c for c in spec.columns if c not in df.columns]
        if extra or missing:
            raise ValueError(f"{spec.file}: frame has extra columns {extra}, lacks {missing}")
        table = pa.Table.from_pandas(df[spec.columns], schema=spec.schema, preserve_index=False)
        parts.append(table.replace_schema_metadata(None))
    return pa.concat_tables(parts) if parts else spec.schema.empty_table()


def run_id(doc: Mapping[str, object], tables: Mapping[str, pa.Table]) -> str:
    """A hash of what defines the run: trace, cluster, seed, each policy's parameters, and
    every table's data; not the date, command or wall times. Same inputs and seed, same id;
    any other run, another id."""
    h = hashlib.sha256()
    policies = doc.get("policies")
    params = (
        {name: entry.get("params") for name, entry in policies.items() if isinstance(entry, Mapping)}
        if isinstance(policies, Mapping)
        else {}
    )
    defining = {k: doc.get(k) for k in ("format_version", "trace", "cluster", "seed")}
    h.update(json.dumps([defining, params], sort_keys=True, default=_json_default).encode())
    for name in sorted(tables):
        table = tables[name]
        h.update(f"{name}:{table.num_rows}:{table.schema}".encode())
        # by value (pandas' row hashes), not by Arrow buffers: the same values in other
        # chunks (`--jobs` joins each policy's tables in another order of pieces), a slice's
        # whole buffer, or what sits under a null would give another id
        rows = pd.util.hash_pandas_object(table.to_pandas(), index=False)
        h.update(rows.to_numpy().tobytes())
    return h.hexdigest()[:16]


def check_replaceable(out: Path, keep: Sequence[str] = ()) -> None:
    """Refuse (OutputPathError, one line) an --out that is not ours to replace: a file, or a
    directory with other things in it (beyond `keep`) and no run.json. Called by the
    commands before any simulation, and again by the writer."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise OutputPathError(f"{out}: exists and is not a directory")
    if out.is_dir() and not (out / RUN_JSON).is_file() and any(p.name not in keep for p in out.iterdir()):
        raise OutputPathError(f"{out}: exists, is not empty and holds no run.json: not replacing it")
    if out.is_dir() and (out / RUN_JSON).is_file():
        # a run directory is replaced whole: anything else in it (a report written into
        # it, the user's notes) would go with it
        own = {RUN_JSON, *(t.file for t in TABLES.values()), *keep}
        foreign = sorted(p.name for p in out.iterdir() if p.name not in own)
        if foreign:
            raise OutputPathError(
                f"{out}: a run directory that also holds {foreign[0]!r:.60}"
                f"{f' and {len(foreign) - 1} more' if len(foreign) > 1 else ''}: not replacing it"
            )
    parent = out.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise OutputPathError(f"{out}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputPathError(f"{out}: cannot write in {parent} (permission denied)")


def write_run_dir(
    out: Path, doc: RunDoc, tables: Mapping[str, Sequence[pd.DataFrame]], keep: Sequence[str] = ()
) -> None:
    """run.json and the tables given (name -> frames of it, e.g. one per policy and step),
    all or nothing: the directory is built beside `out` and swapped in whole, every part
    stamped with one run id (module docstring). `keep` names files this same run already
    wrote into `out` (live's recorded trace.parquet) that go into the new directory too."""
    unknown = [k for k in tables if k not in TABLES]
    absent = [k for k in RUN_TABLES if k not in tables]
    if unknown or absent:
        raise ValueError(f"run tables: unknown {unknown}, missing {absent}")
    if doc.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"run document has format_version {doc.get('format_version')}, not {FORMAT_VERSION}")
    lacking = missing_fields(doc)
    if lacking:
        raise ValueError(f"run document lacks {', '.join(lacking)}")
    check_replaceable(out, keep)
    arrow = {name: table_from_frames(TABLES[name], frames) for name, frames in tables.items()}
    stamp = run_id(doc, arrow)
    stamped_doc = {**doc, "run_id": stamp}
    text = json.dumps(stamped_doc, indent=1, allow_nan=False, default=_json_default)

    def fill(tmp: Path) -> None:
        for name, table in arrow.items():
            pq.write_table(
                table.replace_schema_metadata({RUN_ID_KEY: stamp.encode()}), tmp / TABLES[name].file
            )
        (tmp / RUN_JSON).write_text(text)
        for name in keep:
            if (out / name).is_file():
                shutil.copy2(out / name, tmp / name)

    replace_dir(out, fill)


# --------------------------------------------------------------------------- reading


class RunFormatError(ValueError):
    """A directory or file that is not in the run format; the message is one line."""


class RunMismatchError(RunFormatError):
    """Parts of a run directory written by different runs (an interrupted older writer)."""


class MissingTableError(RunFormatError):
    """A table the directory does not have (every table is optional to a reader)."""


@dataclass(frozen=True)
class RunDocument:
    """A run.json as read: its document and the format version it was written in."""

    doc: dict[str, object]
    version: int


def read_run_doc(path: Path) -> RunDocument:
    """run.json of a run directory, or a RunFormatError saying in one line why not."""
    if not path.exists():
        raise RunFormatError(f"{path}: no such directory")
    if not path.is_dir():
        raise RunFormatError(f"{path}: not a directory (expected the --out directory of `simctl replay`)")
    if not any(path.iterdir()):
        raise RunFormatError(f"{path}: empty directory (expected run.json from `simctl replay --out`)")
    doc_path = path / RUN_JSON
    if not doc_path.is_file():
        raise RunFormatError(f"{path}: no run.json (not a run directory of `simctl replay --out`)")
    try:
        doc = json.loads(doc_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RunFormatError(f"{doc_path}: unreadable JSON ({str(exc).splitlines()[0]})") from None
    except RecursionError:
        raise RunFormatError(f"{doc_path}: unreadable JSON (nested too deeply)") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("policies"), dict) or not doc["policies"]:
        raise RunFormatError(f"{doc_path}: no 'policies' object (not a run document)")
    ver = doc.get("format_version", 1)
    if not isinstance(ver, int) or isinstance(ver, bool) or not 1 <= ver <= FORMAT_VERSION:
        raise RunFormatError(
            f"{doc_path}: format_version {ver!r} is not one this simctl reads (1..{FORMAT_VERSION})"
        )
    return RunDocument(doc=doc, version=ver)


@dataclass(frozen=True)
class TableInfo:
    path: Path
    schema: pa.Schema
    num_rows: int


def _same_type(expected: pa.DataType, found: pa.DataType) -> bool:
    # pandas >= 3 writes large_string for the same strings: one logical type
    if pa.types.is_string(expected):
        return bool(pa.types.is_string(found) or pa.types.is_large_string(found))
    return bool(expected.equals(found))


def schema_problems(spec: TableSpec, schema: pa.Schema, version: int = FORMAT_VERSION) -> list[str]:
    """Each column missing or of a wrong dtype, as 'column C: expected T, found U'.
    Version 1 is checked as it was read before: only the columns the report needs."""
    wanted = spec.columns if version >= 2 else list(spec.v1_columns)
    out = []
    for col in wanted:
        expected = spec.schema.field(col).type
        if col not in schema.names and col in spec.late_columns:
            continue
        if col not in schema.names:
            out.append(f"column '{col}': expected {expected}, found none (missing)")
        elif version >= 2 and not _same_type(expected, schema.field(col).type):
            out.append(f"column '{col}': expected {expected}, found {schema.field(col).type}")
    return out


def read_table_info(run_dir: Path, name: str, version: int, run_id: str | None = None) -> TableInfo:
    """A table's schema and row count, checked against the format of `version`.

    MissingTableError when the directory has no such file; RunFormatError (one line,
    naming file, column, expected and found dtype) when it is unreadable or not in the
    format. An empty version-1 table is not checked (version 1 wrote it without columns)."""
    spec = TABLES[name]
    path = run_dir / spec.file
    if not path.is_file():
        raise MissingTableError(f"{path}: no such file")
    try:
        pf = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as exc:
        raise RunFormatError(f"{path}: unreadable ({str(exc).splitlines()[0]})") from None
    info = TableInfo(path=path, schema=pf.schema_arrow, num_rows=pf.metadata.num_rows)
    if version < 2 and (info.num_rows == 0 or len(info.schema.names) == 0):
        return info
    # (the format first: a file that is no table of a run has no run id either, and is
    # better described by what it lacks than as part of another run)
    problems = schema_problems(spec, info.schema, version)
    if problems:
        raise RunFormatError(f"{path}: {'; '.join(problems)}")
    if run_id is not None and version >= 2:
        found = (info.schema.metadata or {}).get(RUN_ID_KEY, b"").decode(errors="replace") or "none"
        if found != run_id:
            raise RunMismatchError(
                f"{run_dir}: parts of different runs: {spec.file} is from run {found}, "
                f"{RUN_JSON} from run {run_id}; write the run again"
            )
    return info
