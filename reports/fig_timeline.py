"""Per-worker timeline (Gantt) of one step, one chart per series (cf. SpecActor Fig. 16).

Each row is a worker. Busy segments are shaded by batch size (running requests), blue
for plain decoding and purple for speculative decoding; the row background shows the
worker's role when it is lent out (drafter, verifier, spot-trainer, trainer, idle); red
hatching marks Fastest-of-N replica work where the run records it (optional timeline
column `replicas`); white is idle.

A 128-worker step has ~16K segments, far more than the pixels they land on. Segments are
merged per worker into pixel-wide bins (batch time-weighted) before drawing, so the
drawing cost is bounded by workers x pixels, not by the simulation's event count.

Past SAMPLE_WORKERS workers (and without `--workers`) a series gets two charts: a sample
of the workers, spread evenly and with the one busy last, in view, and every worker folded
behind a control on the page (FigureOut.collapsed).
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.cm import ScalarMappable
from matplotlib.collections import PolyCollection
from matplotlib.colors import LinearSegmentedColormap, Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from simctl.reports.context import Context, FigureOut, slug
from simctl.reports.load import Series
from simctl.reports.style import ROLE_COLORS, save, subplots

PIXEL_BINS = 1200  # merge resolution along time
RAW_LIMIT = 6000  # below this many segments, draw them as they are
SAMPLE_WORKERS = 16  # past this many workers the page shows a sample, all behind a control


def _cmap(name: str) -> LinearSegmentedColormap:
    """Sequential map without its near-white end, so a batch of 1 is still visible."""
    base = colormaps[name]
    return LinearSegmentedColormap.from_list(f"{name}-trunc", base(np.linspace(0.3, 1.0, 64)))


PLAIN_CMAP = _cmap("Blues")
SPEC_CMAP = _cmap("Purples")


def merge_segments(df: pd.DataFrame, end: float, bins: int = PIXEL_BINS) -> pd.DataFrame:
    """Merge each worker's contiguous segments inside one time bin (batch time-weighted).

    Gaps narrower than half a bin disappear, which is below what the chart can show.
    """
    if len(df) <= RAW_LIMIT:
        return df
    dt = max(end, 1e-9) / bins
    df = df.sort_values(["worker", "t0_s"], kind="stable")
    w = df["worker"].to_numpy()
    t0 = df["t0_s"].to_numpy()
    t1 = df["t1_s"].to_numpy()
    b = np.floor(t0 / dt)
    new = np.ones(len(df), dtype=bool)
    new[1:] = (w[1:] != w[:-1]) | (b[1:] != b[:-1]) | (t0[1:] - t1[:-1] > dt / 2)
    dur = t1 - t0
    frame = pd.DataFrame(
        {
            "gid": np.cumsum(new),
            "worker": w,
            "t0_s": t0,
            "t1_s": t1,
            "bdur": df["batch"].to_numpy() * dur,
            "sdur": np.where(df["gamma_mean"].to_numpy() > 0, dur, 0.0),
            "dur": dur,
            "replicas": df["replicas"].to_numpy() if "replicas" in df else 0,
        }
    )
    g = frame.groupby("gid", sort=False).agg(
        worker=("worker", "first"),
        t0_s=("t0_s", "min"),
        t1_s=("t1_s", "max"),
        bdur=("bdur", "sum"),
        sdur=("sdur", "sum"),
        dur=("dur", "sum"),
        replicas=("replicas", "max"),
    )
    safe = np.where(g["dur"] > 0, g["dur"], 1.0)
    return pd.DataFrame(
        {
            "worker": g["worker"].to_numpy(),
            "t0_s": g["t0_s"].to_numpy(),
            "t1_s": g["t1_s"].to_numpy(),
            "batch": g["bdur"].to_numpy() / safe,
            "gamma_mean": np.where(g["sdur"] > g["dur"] / 2, 1.0, 0.0),
            "replicas": g["replicas"].to_numpy(),
        }
    )


def role_intervals(roles: pd.DataFrame, end: float) -> pd.DataFrame:
    """Role changes -> [t0, t1) intervals per worker, ending at the step's makespan."""
    if roles is None or roles.empty:
        return pd.DataFrame(columns=["worker", "t0_s", "t1_s", "role"])
    r = roles.sort_values(["worker", "time_s"], kind="stable")
    nxt = r.groupby("worker")["time_s"].shift(-1)
    out = pd.DataFrame(
        {
            "worker": r["worker"].to_numpy(),
            "t0_s": r["time_s"].to_numpy(),
            "t1_s": nxt.fillna(max(end, float(r["time_s"].max()))).to_numpy(),
            "role": r["role"].astype(str).to_numpy(),
        }
    )
    return out[out["t1_s"] > out["t0_s"]]


def _chosen_workers(n: int, limit: int | None) -> np.ndarray:
    if limit is None or limit >= n:
        return np.arange(n)
    return np.arange(max(limit, 1))


def sample_workers(seg: pd.DataFrame, n: int, k: int = SAMPLE_WORKERS) -> np.ndarray:
    """k workers spread evenly over 0..n-1, one of them the worker busy last (the straggler
    that sets the makespan), in id order."""
    if n <= k:
        return np.arange(n)
    last = int(seg.loc[seg["t1_s"].idxmax(), "worker"]) if len(seg) else n - 1
    spread = np.unique(np.linspace(0, n - 1, k).round().astype(int))
    if last not in spread:
        spread[np.argmin(np.abs(spread - last))] = last  # the nearest one gives way
    return np.unique(spread)


def gantt_one(ctx: Context, s: Series, xmax: float, index: int, sample: bool = False) -> FigureOut | None:
    """One series' timeline: the workers `--workers` asks for (default all), or with
    `sample` an evenly spread sample of SAMPLE_WORKERS of them."""
    seg = ctx.step_rows(s, "timeline")
    if seg is None or seg.empty:
        return None
    roles = ctx.step_rows(s, "roles")
    nworkers = max(ctx.num_workers(s, seg), int(seg["worker"].max()) + 1)
    shown = sample_workers(seg, nworkers) if sample else _chosen_workers(nworkers, ctx.workers)
    seg = seg[seg["worker"].isin(shown)]
    end = s.makespan(ctx.step)
    end = end if np.isfinite(end) and end > 0 else float(seg["t1_s"].max())
    drawn = merge_segments(seg, xmax)
    rows = len(shown)
    row_in = float(np.clip(9.0 / rows, 0.05, 0.22))
    fig, axes = subplots(1, 1, height_in=rows * row_in + 1.3)
    ax = axes[0][0]
    ax.grid(False)
    norm = Normalize(0, max(1.0, float(seg["batch"].max())))
    ypos = {int(w): i for i, w in enumerate(shown)}
    _draw_roles(ax, role_intervals(roles, end), ypos)
    has_replicas = _draw_segments(ax, drawn, norm, ypos, xmax / PIXEL_BINS)

    ax.set_xlim(0, xmax * 1.01)
    ax.set_ylim(rows - 0.5, -0.5)
    ax.axvline(end, color="#444444", linestyle="--", linewidth=0.8)
    ax.set_xlabel("seconds since step start")
    ax.set_ylabel("worker")
    if rows > 40:  # shown workers are 0..rows-1, so positions are worker ids
        ax.yaxis.set_major_locator(MaxNLocator(nbins=12, integer=True))
    else:
        ax.set_yticks(range(rows), [str(w) for w in shown])
    title = f"{s.label}: step {ctx.step}, makespan {end:,.1f} s"
    if sample:
        title += f" — a sample of {len(shown)} of {nworkers} workers"
    elif len(shown) < nworkers:
        title += f" — workers {shown[0]}..{shown[-1]} of {nworkers}"
    ax.set_title(title, loc="left")
    present = set(role_intervals(roles, end)["role"]) if roles is not None else set()
    _legend(ax, present, has_replicas)
    _colorbar(fig, ax, norm)
    name = f"gantt-{index:02d}-{slug(s.label)}" + ("-sample" if sample else "")
    path = save(fig, ctx.fig_dir / f"{name}.png")
    caption = (
        f"Each row is a worker ({rows} of {nworkers} shown"
        + (", spread evenly, with the one busy last" if sample else "")
        + "); bars are busy segments shaded by batch size (cf. SpecActor, arXiv:2511.16193, Fig. 16). "
        "Dashed line: makespan. "
        + ("Segments merged to the chart's resolution. " if len(drawn) < len(seg) else "")
    )
    many = not sample and ctx.workers is None and nworkers > SAMPLE_WORKERS
    fold = f"Show all {nworkers} workers of {s.label}" if many else ""
    return FigureOut("timeline", path.stem, f"Worker timeline — {s.label}", caption, path, fold)


def _bars(ax: Axes, rows: pd.DataFrame, ypos: dict[int, int], height: float, **style: Any) -> None:
    """The rows' [t0_s, t1_s] intervals as rectangles `height` tall centred on their worker's
    row: what `broken_barh` draws, as one collection for every worker (one per worker made
    the timeline of a 128-worker cluster most of a report's rendering time)."""
    y = np.array([ypos[int(w)] for w in rows["worker"].to_numpy()], dtype=np.float64)
    x0, x1 = rows["t0_s"].to_numpy(np.float64), rows["t1_s"].to_numpy(np.float64)
    lo, hi = y - height / 2, y + height / 2
    verts = np.stack([np.column_stack(c) for c in ((x0, lo), (x0, hi), (x1, hi), (x1, lo))], axis=1)
    bars = PolyCollection(cast(Any, verts), **style)  # (an (n, 4, 2) array: n rectangles)
    ax.add_collection(bars, autolim=False)  # (the limits are set after)


def _draw_roles(ax: Axes, intervals: pd.DataFrame, ypos: dict[int, int]) -> None:
    """Row backgrounds: the role a worker is lent out in, where the style has a colour for it."""
    for role, part in intervals.groupby("role"):
        if role not in ROLE_COLORS:
            continue
        part = part[part["worker"].astype(int).isin(list(ypos))]
        if len(part):
            _bars(ax, part, ypos, 1.0, facecolors=ROLE_COLORS[role], alpha=0.45, linewidth=0)


def _draw_segments(
    ax: Axes, drawn: pd.DataFrame, norm: Normalize, ypos: dict[int, int], gap: float = 0.0
) -> bool:
    """Busy segments shaded by batch (plain blue, speculative purple), then red hatching over
    Fastest-of-N replica work (a worker's replica segments less than `gap` apart hatched as
    one: hatching costs per rectangle); says whether there was any."""
    spec = drawn["gamma_mean"].to_numpy() > 0
    colors = np.where(
        spec[:, None],
        SPEC_CMAP(norm(drawn["batch"].to_numpy())),
        PLAIN_CMAP(norm(drawn["batch"].to_numpy())),
    )
    if len(drawn):
        _bars(ax, drawn, ypos, 0.76, facecolors=colors, linewidth=0)
    has_replicas = "replicas" in drawn and bool((drawn["replicas"] > 0).any())
    if has_replicas:
        rep = joined_spans(drawn[drawn["replicas"] > 0], gap)
        _bars(ax, rep, ypos, 0.76, facecolors="none", edgecolors="#C00000", hatch="////", linewidth=0)
    return has_replicas


def joined_spans(rows: pd.DataFrame, gap: float) -> pd.DataFrame:
    """Each worker's [t0_s, t1_s] intervals with those less than `gap` apart joined (worker,
    t0_s, t1_s).

    >>> joined_spans(pd.DataFrame({"worker": [0, 0, 0, 1], "t0_s": [0.0, 1.05, 3.0, 1.1],
    ...                            "t1_s": [1.0, 2.0, 4.0, 2.0]}), 0.1).values.tolist()
    [[0.0, 0.0, 2.0], [0.0, 3.0, 4.0], [1.0, 1.1, 2.0]]
    """
    rows = rows.sort_values(["worker", "t0_s"], kind="stable")
    w, t0, t1 = rows["worker"].to_numpy(), rows["t0_s"].to_numpy(), rows["t1_s"].to_numpy()
    new = np.ones(len(rows), np.bool_)
    if len(rows) > 1:
        reach = pd.Series(t1).groupby(w).cummax().to_numpy()  # latest end so far, per worker
        new[1:] = (w[1:] != w[:-1]) | (t0[1:] - reach[:-1] >= gap)
    group = np.cumsum(new)
    out = pd.DataFrame({"worker": w, "t0_s": t0, "t1_s": t1, "g": group}).groupby("g", sort=True)
    joined = out.agg(worker=("worker", "first"), t0_s=("t0_s", "min"), t1_s=("t1_s", "max"))
    return joined.reset_index(drop=True)


def _legend(ax: Axes, roles_present: set[str], has_replicas: bool) -> None:
    handles = [
        Patch(color=PLAIN_CMAP(0.7), label="decoding"),
        Patch(color=SPEC_CMAP(0.7), label="speculative decoding"),
        Patch(facecolor="white", edgecolor="#999999", label="idle (no work)"),
    ]
    handles += [
        Patch(color=c, alpha=0.45, label=f"role: {r}") for r, c in ROLE_COLORS.items() if r in roles_present
    ]
    if has_replicas:
        handles.append(
            Patch(facecolor="none", edgecolor="#C00000", hatch="////", label="Fastest-of-N replica")
        )
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)


def _colorbar(fig: Figure, ax: Axes, norm: Normalize) -> None:
    cbar = fig.colorbar(
        ScalarMappable(norm=norm, cmap=PLAIN_CMAP),
        ax=ax,
        fraction=0.03,
        pad=0.01,
        location="bottom",
        shrink=0.4,
        aspect=40,
    )
    cbar.set_label("running requests (batch) — darker = larger batch")


def gantt_inputs(ctx: Context) -> None:
    """Read the tables `gantt_figures` draws from into the context's cache (so that a child
    forked to draw them reads no file: reports/fork_family.py)."""
    for s in ctx.series:
        if s.run.has("timeline"):
            ctx.step_rows(s, "timeline")
            ctx.step_rows(s, "roles")


def gantt_figures(ctx: Context) -> list[FigureOut]:
    out = []
    spans = [s.makespan(ctx.step) for s in ctx.series]
    xmax = max([v for v in spans if np.isfinite(v)] or [1.0])
    for i, s in enumerate(ctx.series):
        if not s.run.has("timeline"):
            ctx.notes.leave_out(
                f"worker timeline of {s.label}", f"run {s.run.name} has no usable timeline.parquet"
            )
            continue
        fig = gantt_one(ctx, s, xmax, i)
        if fig is None:
            ctx.notes.leave_out(f"worker timeline of {s.label}", f"no timeline rows at step {ctx.step}")
            continue
        if fig.collapsed:  # many workers: a sample in view, every worker behind a control
            sample = gantt_one(ctx, s, xmax, i, sample=True)
            out += [sample] if sample is not None else []
        out.append(fig)
    return out
