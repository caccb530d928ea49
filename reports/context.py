"""Shared state of one report build: the study, the chosen step, and cached table reads.

Several figure families need the same rows (the chosen step's timeline feeds the Gantt
charts, the running-requests plot and the speculation plot). Reading each Parquet
slice once per run and sharing it keeps a large study inside the time budget.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from simctl.reports.errors import Notes
from simctl.reports.load import Run, Series, Study
from simctl.reports.style import LineStyle, series_styles

GRID_POINTS = 600  # samples per time axis: about one per pixel of a full-width plot


@dataclass
class FigureOut:
    """One rendered figure and where on the page it goes."""

    section: str
    slug: str
    title: str
    caption: str
    path: Path
    # Non-empty: the page folds the figure behind a control with this text (details/summary)
    collapsed: str = ""


@dataclass
class Context:
    study: Study
    step: int
    baseline: str
    fig_dir: Path
    notes: Notes
    workers: int | None = None
    styles: dict[str, LineStyle] = field(default_factory=dict)
    breakdown: list[Any] = field(default_factory=list)  # breakdown.PhaseSeconds, by its figure
    _step_cache: dict[tuple[int, str, int], pd.DataFrame] = field(default_factory=dict)
    _agg_cache: dict[int, pd.DataFrame] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.styles = series_styles([s.label for s in self.study.series])

    @property
    def series(self) -> list[Series]:
        return self.study.series

    def style(self, s: Series) -> LineStyle:
        return self.styles[s.label]

    def step_rows(self, s: Series, kind: str, step: int | None = None) -> pd.DataFrame | None:
        """Rows of `kind` for series `s` at `step` (default: the chosen step); None if absent."""
        run = s.run
        if not run.has(kind):
            return None
        step = self.step if step is None else step
        key = (id(run), kind, step)
        if key not in self._step_cache:
            self._step_cache[key] = run.read(kind, step=step)
        df = self._step_cache[key]
        return df[df["policy"] == s.policy]

    def timeline_per_step(self, run: Run) -> pd.DataFrame | None:
        """Per (policy, step): busy seconds, decode iterations, speculative busy seconds,
        and gamma x seconds, streamed over the whole timeline in bounded memory."""
        if not run.has("timeline"):
            return None
        if id(run) in self._agg_cache:
            return self._agg_cache[id(run)]
        parts = []
        cols = ["policy", "step", "t0_s", "t1_s", "iterations", "gamma_mean"]
        for b in run.batches("timeline", cols):
            dur = pc.subtract(b.column("t1_s"), b.column("t0_s"))
            gamma = pc.fill_null(b.column("gamma_mean"), 0.0)
            spec = pc.greater(gamma, 0.0)
            table = pa.table(
                {
                    "policy": b.column("policy"),
                    "step": b.column("step"),
                    "busy_s": dur,
                    "iterations": b.column("iterations"),
                    "spec_s": pc.if_else(spec, dur, 0.0),
                    "gamma_s": pc.multiply(gamma, dur),
                }
            )
            sums = table.group_by(["policy", "step"]).aggregate(
                [(c, "sum") for c in ("busy_s", "iterations", "spec_s", "gamma_s")]
            )
            parts.append(sums.to_pandas())
        agg = None
        if parts:
            frame = pd.concat(parts, ignore_index=True)
            frame.columns = [c.removesuffix("_sum") for c in frame.columns]
            agg = frame.groupby(["policy", "step"]).sum().sort_index()
        self._agg_cache[id(run)] = agg
        return agg

    def num_workers(self, s: Series, seen: pd.DataFrame | None = None) -> int:
        prov = s.run.provenance
        n = s.run.cluster.get("num_workers") or prov.get("workers")  # sim, live
        if isinstance(n, int) and n > 0:
            return n
        return int(seen["worker"].max()) + 1 if seen is not None and len(seen) else 0


SLUG_CHARS = 40


def slug(text: str) -> str:
    """A file-name part for `text` (a policy label): lower-case ASCII words joined by '-',
    at most SLUG_CHARS + 9 characters. A longer one is cut and given a short hash of the
    whole text, so a 300-character policy name still makes a valid file name (the limit is
    255 bytes) and two long names that share a prefix still get different files."""
    out = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"
    if len(out) <= SLUG_CHARS:
        return out
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{out[:SLUG_CHARS].rstrip('-')}-{digest}"


def sum_on_grid(t0: np.ndarray, t1: np.ndarray, value: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Sum over intervals [t0, t1) of `value`, sampled at `grid`.

    The sum of all busy segments at time t is a step function; an event sweep (+v at
    t0, -v at t1, cumulative sum) evaluates it exactly at any set of times in
    O(n log n), whatever the number of workers.
    """
    if len(t0) == 0:
        return np.zeros_like(grid, dtype=float)
    times = np.concatenate([t0, t1])
    deltas = np.concatenate([value, -value]).astype(float)
    order = np.argsort(times, kind="stable")
    ct, cv = times[order], np.cumsum(deltas[order])
    idx = np.searchsorted(ct, grid, side="right") - 1
    out = np.where(idx >= 0, cv[np.clip(idx, 0, None)], 0.0)
    out[np.abs(out) < 1e-9 * max(1.0, float(np.abs(value).max()))] = 0.0
    return out


def time_grid(end: float) -> np.ndarray:
    return np.linspace(0.0, end if end > 0 else 1.0, GRID_POINTS)
