"""Loading and validating run directories (`simctl replay --out`, `simctl live --out`).

A run directory is run.json plus Parquet tables, read and checked through
traces/run_format.py, the one definition of the format; a table that is absent or not in
the format is left out with a note, and so are the figures that need it.

The tables of a long study are large (a 200-step, 6-policy run at 16K requests per step
holds ~20M timeline rows), so nothing here reads a table whole: callers ask for the columns
and the step or policy they need, and Parquet filtering keeps memory proportional to what
is plotted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from simctl.reports.errors import Notes, ReportError
from simctl.reports.run_check import check_policies
from simctl.traces.run_format import (
    FORMAT_VERSION,
    RUN_JSON,
    RUN_TABLES,
    MissingTableError,
    RunFormatError,
    RunMismatchError,
    read_run_doc,
    read_table_info,
)

STEP_METRICS = (
    "rollout_makespan_s",
    "step_time_s",
    "output_tokens",
    "throughput_tok_s",
    "tail_time_s",
    "gpu_idle_fraction",
    "mean_accept_len",
)


@dataclass
class Run:
    """One run directory: its run.json document and the tables it has that are usable."""

    path: Path
    doc: dict[str, Any]
    tables: dict[str, Path] = field(default_factory=dict)
    columns: dict[str, tuple[str, ...]] = field(default_factory=dict)
    name: str = ""
    format_version: int = FORMAT_VERSION

    @property
    def provenance(self) -> dict[str, Any]:
        prov = self.doc.get("provenance")
        return prov if isinstance(prov, dict) else {}

    @property
    def cluster(self) -> dict[str, Any]:
        """The cluster's provenance (a simulated run's; {} where absent or not a table)."""
        c = self.provenance.get("cluster")
        return c if isinstance(c, dict) else {}

    @property
    def source(self) -> str:
        return str(self.provenance.get("source") or "sim")

    @property
    def trace_meta(self) -> dict[str, Any]:
        meta = self.provenance.get("trace_meta")
        return meta if isinstance(meta, dict) else {}

    @property
    def workload_key(self) -> tuple:
        """What makes two runs 'the same workload'.

        A live run records its own trace file, so the file name alone would call a
        simulation of that recording a different workload; the generator preset and
        seed (plus the model) identify it wherever the file went. Traces without a
        preset fall back to their file name.
        """
        m = self.trace_meta
        if m.get("preset"):
            return ("preset", m.get("preset"), m.get("seed"), m.get("model"))
        return ("file", Path(str(self.doc.get("trace", "?"))).name)

    @property
    def workload_label(self) -> str:
        m = self.trace_meta
        trace = Path(str(self.doc.get("trace", "?"))).name
        if m.get("preset"):
            return f"{trace} (preset {m.get('preset')}, seed {m.get('seed')})"
        return trace

    def has(self, kind: str) -> bool:
        return kind in self.tables

    def read(
        self,
        kind: str,
        columns: list[str] | None = None,
        policy: str | None = None,
        step: int | None = None,
    ) -> pd.DataFrame:
        """Rows of one table for one policy and/or step, only the columns asked for."""
        filters: list[tuple[str, str, object]] = []
        if policy is not None:
            filters.append(("policy", "==", policy))
        if step is not None:
            filters.append(("step", "==", int(step)))
        if columns is not None:
            have = self.columns[kind]
            columns = [c for c in columns if c in have]
        table = pq.read_table(self.tables[kind], columns=columns, filters=filters or None)
        return table.to_pandas()

    def batches(self, kind: str, columns: list[str]) -> Iterator[pa.RecordBatch]:
        """Stream a table in record batches: whole-run aggregates in bounded memory."""
        pf = pq.ParquetFile(self.tables[kind])
        yield from pf.iter_batches(columns=columns, batch_size=1 << 20)


@dataclass
class Series:
    """One policy of one run: a line in every plot, a row in every table."""

    run: Run
    policy: str
    label: str
    summary: dict[str, Any]
    steps: pd.DataFrame  # index: step; columns: STEP_METRICS

    def mean(self, metric: str) -> float:
        col = self.steps[metric].astype(float)
        col = col[np.isfinite(col)]
        return float(col.mean()) if len(col) else float("nan")

    @property
    def mean_rollout_makespan_s(self) -> float:
        """The mean over the steps shown, recomputed rather than read from run.json's
        `mean_rollout_makespan_s`: the simplest way to keep the headline and the per-step
        table of one page in agreement whatever was edited in the file (a writer computes
        the stored mean from the same steps, so the two agree for an unedited run)."""
        return self.mean("rollout_makespan_s")

    @property
    def mean_step_time_s(self) -> float:
        """Recomputed from the steps, as mean_rollout_makespan_s."""
        return self.mean("step_time_s")

    def makespan(self, step: int) -> float:
        try:
            return float(self.steps.loc[step, "rollout_makespan_s"])
        except KeyError:
            return float("nan")


@dataclass
class Study:
    """Everything the report compares: the usable runs and their policies as series."""

    runs: list[Run]
    series: list[Series]
    notes: Notes

    @property
    def all_steps(self) -> list[int]:
        return sorted({int(s) for se in self.series for s in se.steps.index})

    def common_steps(self, series: list[Series] | None = None) -> list[int]:
        chosen = series or self.series
        sets = [set(int(s) for s in se.steps.index) for se in chosen]
        return sorted(set.intersection(*sets)) if sets else []


def _check_table(run: Run, kind: str, notes: Notes) -> None:
    stamp = run.doc.get("run_id")
    try:
        info = read_table_info(run.path, kind, run.format_version, stamp if isinstance(stamp, str) else None)
    except RunMismatchError as exc:
        raise ReportError(str(exc)) from None
    except MissingTableError:
        notes.warn(f"run {run.name}: no {kind}.parquet; figures that need it are left out for this run")
        return
    except RunFormatError as exc:
        notes.warn(f"run {run.name}: {exc}")
        return
    if len(info.schema.names) == 0 or info.num_rows == 0:
        notes.warn(f"run {run.name}: {kind}.parquet has no rows")
        return
    run.tables[kind] = info.path
    run.columns[kind] = tuple(info.schema.names)


def _steps_frame(steps: Any) -> pd.DataFrame | None:
    """The per-step metrics of one policy, indexed by step (run_check.py has checked
    them: numbers, distinct steps); None when the policy recorded no step."""
    if not isinstance(steps, list) or not steps:
        return None
    df = pd.DataFrame([{k: s.get(k) for k in ("step", *STEP_METRICS)} for s in steps])
    for m in STEP_METRICS:
        df[m] = pd.to_numeric(df[m], errors="coerce").astype(float)
    df["step"] = df["step"].astype(np.int64)
    return df.set_index("step").sort_index()[list(STEP_METRICS)]


def _labels(series: list[tuple[Run, str]]) -> list[str]:
    """Policy names, made unique only where needed (by source, else by run name)."""
    count = Counter(p for _, p in series)
    out = []
    for run, policy in series:
        if count[policy] == 1:
            out.append(policy)
            continue
        same = [r for r, p in series if p == policy]
        by_source = Counter(r.source for r in same)
        tag = run.source if by_source[run.source] == 1 else run.name
        out.append(f"{policy} [{tag}]")
    return out


def _run_names(paths: list[Path]) -> list[str]:
    names = [p.name or str(p) for p in paths]
    count = Counter(names)
    return [f"{p.parent.name}/{p.name}" if count[n] > 1 else n for p, n in zip(paths, names, strict=True)]


def load_study(run_dirs: list[Path], notes: Notes) -> Study:
    """Usable runs and series; unusable ones become notes. Fatal only if nothing is left."""
    if not run_dirs:
        raise ReportError("no run directory given")
    paths: list[Path] = []
    for p in map(Path, run_dirs):
        if any(p.resolve() == q.resolve() for q in paths):
            notes.warn(f"run {p} given more than once; using it once")
        else:
            paths.append(p)
    runs: list[Run] = []
    problems: list[str] = []
    for path, name in zip(paths, _run_names(paths), strict=True):
        try:
            read = read_run_doc(path)
            check_policies(path / RUN_JSON, read.doc["policies"])
        except RunFormatError as exc:
            problems.append(str(exc))
            notes.leave_out(f"run {path}", str(exc))
            continue
        run = Run(path=path, doc=read.doc, name=name, format_version=read.version)
        for kind in RUN_TABLES:
            _check_table(run, kind, notes)
        if (path / "iterations.parquet").is_file():  # live runs only: absent is no gap
            _check_table(run, "iterations", notes)
        runs.append(run)
    pairs: list[tuple[Run, str, pd.DataFrame]] = []
    for run in runs:
        for policy, summary in run.doc["policies"].items():
            frame = _steps_frame(summary.get("steps") if isinstance(summary, dict) else None)
            if frame is None:
                notes.leave_out(f"policy {policy} of run {run.name}", "run.json has no per-step metrics")
                continue
            pairs.append((run, str(policy), frame))
    if not pairs:
        detail = "; ".join(problems)
        if not problems:
            where = f"{runs[0].path / 'run.json'}: " if runs else ""
            detail = f"{where}no policy has per-step metrics"
        raise ReportError(f"no usable run: {detail}")
    labels = _labels([(r, p) for r, p, _ in pairs])
    series = [
        Series(run=r, policy=p, label=lab, summary=r.doc["policies"][p], steps=f)
        for (r, p, f), lab in zip(pairs, labels, strict=True)
    ]
    used = [r for r in runs if any(s.run is r for s in series)]
    keys = {r.workload_key for r in used}
    if len(keys) > 1:
        listed = ", ".join(f"{r.name}: {r.workload_label}" for r in used)
        notes.warn(f"runs come from different traces ({listed}); their numbers are not like-for-like")
    return Study(runs=used, series=series, notes=notes)
