"""Inside one step: load, completion, acceptance and speculation over time.

These are the plots the papers argue from: running requests and KV use falling into a
long tail (Seer Fig. 3/9), the request-completion CDF (EfficientRollout Fig. 6), and
when speculation is on and how long the drafts are. All series share axes so the
policies read against each other; time axes are sampled on a fixed grid (one point per
pixel) so the cost does not grow with the number of segments.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from simctl.reports.context import Context, FigureOut, sum_on_grid, time_grid
from simctl.reports.load import Series
from simctl.reports.style import legend, save, step_axis, subplots

CDF_POINTS = 1000


def _end(ctx: Context) -> float:
    spans = [s.makespan(ctx.step) for s in ctx.series]
    return max([v for v in spans if np.isfinite(v)] or [1.0])


def _with(ctx: Context, kind: str, what: str) -> list[tuple[Series, pd.DataFrame]]:
    """Series with rows of `kind` at the chosen step; the rest are noted as left out."""
    out = []
    for s in ctx.series:
        df = ctx.step_rows(s, kind)
        if df is None:
            ctx.notes.leave_out(f"{what} for {s.label}", f"run {s.run.name} has no usable {kind}.parquet")
        elif df.empty:
            ctx.notes.leave_out(f"{what} for {s.label}", f"no {kind} rows at step {ctx.step}")
        else:
            out.append((s, df))
    return out


def load_figure(ctx: Context) -> list[FigureOut]:
    data = _with(ctx, "timeline", "running requests / KV use")
    if not data:
        return []
    grid = time_grid(_end(ctx))
    fig, axes = subplots(2, 1, height_in=5.0, sharex=True)
    ax_run, ax_kv = axes[0][0], axes[1][0]
    for s, df in data:
        t0, t1 = df["t0_s"].to_numpy(), df["t1_s"].to_numpy()
        kw = ctx.style(s).kw()
        ax_run.plot(grid, sum_on_grid(t0, t1, df["batch"].to_numpy(), grid), label=s.label, **kw)
        kv = sum_on_grid(t0, t1, df["kv_tokens"].to_numpy(), grid)
        ax_kv.plot(grid, kv / 1e6, label=s.label, **kw)
    ax_run.set(title=f"Running requests over time (step {ctx.step})", ylabel="requests")
    ax_kv.set(
        title="KV cache in use (all workers)", ylabel="million tokens", xlabel="seconds since step start"
    )
    for ax in (ax_run, ax_kv):
        ax.set_ylim(bottom=0)
        ax.set_xlim(0, grid[-1])
    legend(ax_run)
    path = save(fig, ctx.fig_dir / "running-kv.png")
    caption = (
        "Sum over workers of running requests and of KV tokens held at segment start; "
        "the tail is where few requests keep many GPUs waiting."
    )
    return [FigureOut("dynamics", path.stem, "Running requests and KV cache", caption, path)]


def cdf_points(finish: np.ndarray, total: int) -> tuple[np.ndarray, np.ndarray]:
    """Completion CDF as (time, fraction of all requests), at most CDF_POINTS points.

    The denominator counts unfinished (deferred) requests too, so a policy that leaves
    work for later does not look complete.
    """
    done = np.sort(finish[np.isfinite(finish)])
    if len(done) == 0:
        return np.zeros(1), np.zeros(1)
    k = np.unique(np.linspace(0, len(done) - 1, min(CDF_POINTS, len(done))).round().astype(int))
    return np.concatenate([[0.0], done[k]]), np.concatenate([[0.0], (k + 1) / total])


def completion_figure(ctx: Context) -> list[FigureOut]:
    data = _with(ctx, "requests", "completion CDF")
    if not data:
        return []
    fig, axes = subplots(1, 1, height_in=3.6)
    ax = axes[0][0]
    for s, df in data:
        x, y = cdf_points(df["finish_s"].to_numpy(dtype=float), len(df))
        ax.step(x, y, where="post", label=s.label, **ctx.style(s).kw())
    ax.axhline(0.9, color="#888888", linewidth=0.8, linestyle=":")
    ax.set(
        title=f"Request completion CDF (step {ctx.step})",
        xlabel="seconds since step start",
        ylabel="fraction of requests finished",
        ylim=(0, 1.02),
    )
    ax.set_xlim(left=0)
    legend(ax)
    path = save(fig, ctx.fig_dir / "completion-cdf.png")
    caption = "Dotted line: 90% of requests; time after it is the tail."
    return [FigureOut("dynamics", path.stem, "Request completion", caption, path)]


def _accept_by_time(df: pd.DataFrame, edges: np.ndarray) -> np.ndarray:
    """Tokens per verify iteration of requests, binned by when they finished.

    A request's accepted tokens plus one bonus token per verify iteration over its
    verify iterations: the same definition as the step metric, per completion bin.
    """
    iters = df["spec_iters"].to_numpy(dtype=float)
    ok = (iters > 0) & np.isfinite(df["finish_s"].to_numpy(dtype=float))
    if not ok.any():
        return np.full(len(edges) - 1, np.nan)
    fin = df["finish_s"].to_numpy(dtype=float)[ok]
    tokens = df["accepted"].to_numpy(dtype=float)[ok] + iters[ok]
    b = np.clip(np.searchsorted(edges, fin, side="right") - 1, 0, len(edges) - 2)
    num = np.bincount(b, tokens, minlength=len(edges) - 1)
    den = np.bincount(b, iters[ok], minlength=len(edges) - 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, np.nan)


def acceptance_figure(ctx: Context) -> list[FigureOut]:
    spec = [s for s in ctx.series if s.steps["mean_accept_len"].notna().any()]
    if not spec:
        ctx.notes.leave_out("acceptance length over time", "no policy speculated (no acceptance length)")
        return []
    fig, axes = subplots(1, 2, height_in=3.4)
    ax_steps, ax_time = axes[0]
    nsteps = len(ctx.study.all_steps)
    for s in spec:
        a = s.steps["mean_accept_len"].astype(float)
        ax_steps.plot(a.index, a.to_numpy(), label=s.label, **ctx.style(s).kw(nsteps <= 40))
    ax_steps.set(title="Mean acceptance length per step", ylabel="tokens / verify iteration")
    step_axis(ax_steps)
    edges = np.linspace(0, _end(ctx), 41)
    mids = (edges[:-1] + edges[1:]) / 2
    drawn = 0
    for s in spec:
        df = ctx.step_rows(s, "requests")
        if df is None or df.empty:
            continue
        acc = _accept_by_time(df, edges)
        if np.isfinite(acc).any():
            ax_time.plot(mids, acc, label=s.label, **ctx.style(s).kw(True))
            drawn += 1
    ax_time.set(
        title=f"Acceptance length by completion time (step {ctx.step})",
        xlabel="request finished at (s)",
        ylabel="tokens / verify iteration",
    )
    if not drawn:
        ax_time.text(0.5, 0.5, "no per-request data", transform=ax_time.transAxes, ha="center")
    legend(ax_steps)
    path = save(fig, ctx.fig_dir / "acceptance.png")
    caption = (
        "Left: across steps (drafter quality drifts as the policy model is updated). Right: requests of "
        "the chosen step grouped by when they finished (40 bins); includes the bonus token."
    )
    return [FigureOut("dynamics", path.stem, "Acceptance length over time", caption, path)]


def speculation_figure(ctx: Context) -> list[FigureOut]:
    data = _with(ctx, "timeline", "speculation on/off and draft length")
    if not data:
        return []
    grid = time_grid(_end(ctx))
    fig, axes = subplots(2, 2, height_in=5.6)
    (ax_on, ax_g), (ax_son, ax_sg) = axes
    nsteps = len(ctx.study.all_steps)
    for s, df in data:
        t0, t1 = df["t0_s"].to_numpy(), df["t1_s"].to_numpy()
        g = np.nan_to_num(df["gamma_mean"].to_numpy(dtype=float))
        b = df["batch"].to_numpy(dtype=float)
        busy = sum_on_grid(t0, t1, np.ones(len(df)), grid)
        on = sum_on_grid(t0, t1, (g > 0).astype(float), grid)
        gb = sum_on_grid(t0, t1, g * b, grid)
        sb = sum_on_grid(t0, t1, np.where(g > 0, b, 0.0), grid)
        kw = ctx.style(s).kw()
        with np.errstate(invalid="ignore", divide="ignore"):
            ax_on.plot(grid, np.where(busy > 0, on / busy, np.nan), label=s.label, **kw)
            ax_g.plot(grid, np.where(sb > 0, gb / sb, np.nan), label=s.label, **kw)
        agg = ctx.timeline_per_step(s.run)
        if agg is not None and s.policy in agg.index.get_level_values(0):
            a = agg.loc[s.policy]
            with np.errstate(invalid="ignore", divide="ignore"):
                share = np.where(a["busy_s"] > 0, a["spec_s"] / a["busy_s"], np.nan)
                gmean = np.where(a["spec_s"] > 0, a["gamma_s"] / a["spec_s"], np.nan)
            ax_son.plot(a.index, share, label=s.label, **ctx.style(s).kw(nsteps <= 40))
            ax_sg.plot(a.index, gmean, label=s.label, **ctx.style(s).kw(nsteps <= 40))
    ax_on.set(
        title=f"Busy workers speculating (step {ctx.step})",
        ylabel="fraction",
        ylim=(-0.02, 1.02),
        xlabel="seconds since step start",
    )
    ax_g.set(
        title="Mean draft length γ of speculating requests",
        ylabel="γ (tokens)",
        xlabel="seconds since step start",
    )
    ax_son.set(
        title="Share of busy time speculating, per step", ylabel="fraction", ylim=(-0.02, 1.02), xlabel="step"
    )
    ax_sg.set(title="Mean draft length per step (time-weighted)", ylabel="γ (tokens)", xlabel="step")
    for ax in (ax_on, ax_g):
        ax.set_xlim(0, grid[-1])
    for ax in (ax_g, ax_sg):
        ax.set_ylim(bottom=0)
    for ax in (ax_son, ax_sg):
        step_axis(ax)
    legend(ax_on)
    path = save(fig, ctx.fig_dir / "speculation.png")
    caption = (
        "From the timeline's per-segment mean draft length (γ = 0: no speculation). Top: the chosen "
        "step over time (draft length weighted by batch); bottom: every step."
    )
    return [FigureOut("dynamics", path.stem, "Speculation on/off and draft length", caption, path)]
