"""Where the time goes: GPU-seconds of the rollout by phase, the RL step by part, GPU busy
fraction over time, and when each request started and produced its first token.

The numbers come from reports/breakdown.py (what each run records, never estimated); the
makespan breakdown is the view SpecActor (arXiv:2511.16193) and Seer (arXiv:2511.14617)
argue from, idle GPU-seconds in the long tail; the step breakdown is RhymeRL's
(arXiv:2508.18588) and TLT's (arXiv:2511.16665) end-to-end view, where rollout is one part.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.patches import Patch

from simctl.reports.breakdown import (
    PHASES,
    STEP_PART_LABELS,
    STEP_PARTS,
    PhaseSeconds,
    gpus_per_worker,
    phase_seconds,
    step_parts,
)
from simctl.reports.context import Context, FigureOut, sum_on_grid, time_grid
from simctl.reports.fig_dynamics import cdf_points
from simctl.reports.style import legend, save, step_axis, subplots

PHASE_COLORS = {
    "prefill": "#332288",
    "prefill + decode": "#56B4E9",
    "decode": "#0072B2",
    "speculative (draft + verify)": "#CC79A7",
    "verify": "#882255",
    "draft": "#E69F00",
    "preemption recompute": "#D55E00",
    "executor / policy": "#999933",
    "lent to another role": "#009E73",
    "idle": "#DDDDDD",
}
PART_COLORS = {
    "rollout_s": "#0072B2",
    "reward_s": "#E69F00",
    "train_s": "#D55E00",
    "weight_sync_s": "#009E73",
    "after_rollout_s": "#999999",
}


def _bar_height(n: int) -> float:
    return 1.2 + 0.32 * n


def _stacked(ax: Axes, labels: list[str], values: list[dict[str, float]], keys, colors) -> set[str]:
    """Horizontal stacked bars, one per label; the keys drawn (a legend entry each)."""
    left = np.zeros(len(labels))
    drawn = set()
    y = np.arange(len(labels))
    for k in keys:
        v = np.array([row.get(k) or 0.0 for row in values], dtype=float)
        if not (v > 0).any():
            continue
        ax.barh(y, v, left=left, color=colors[k], edgecolor="white", linewidth=0.5, height=0.7)
        left += v
        drawn.add(k)
    ax.set_yticks(y, labels)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.grid(axis="y", visible=False)
    return drawn


def breakdown_figure(ctx: Context) -> list[FigureOut]:
    rows: list[PhaseSeconds] = []
    for s in ctx.series:
        r = phase_seconds(ctx, s)
        if r is None:
            ctx.notes.leave_out(
                f"makespan breakdown of {s.label}", f"no timeline rows or makespan at step {ctx.step}"
            )
        else:
            rows.append(r)
    ctx.breakdown = rows
    if not rows:
        return []
    labels = [r.label for r in rows]
    fig, axes = subplots(1, 2, height_in=_bar_height(len(rows)))
    ax_abs, ax_rel = axes[0]
    drawn = _stacked(ax_abs, labels, [r.seconds for r in rows], PHASES, PHASE_COLORS)
    shares = [{k: v / r.total for k, v in r.seconds.items()} if r.total > 0 else {} for r in rows]
    _stacked(ax_rel, labels, shares, PHASES, PHASE_COLORS)
    ax_abs.set(title=f"GPU-seconds by phase (step {ctx.step})", xlabel="GPU-seconds (makespan × GPUs)")
    ax_rel.set(title="Share of makespan × GPUs", xlabel="fraction", xlim=(0, 1))
    ax_rel.set_yticklabels([])
    handles = [Patch(color=PHASE_COLORS[k], label=k) for k in PHASES if k in drawn]
    fig.legend(handles=handles, loc="outside right upper", frameon=False)
    path = save(fig, ctx.fig_dir / "makespan-breakdown.png")
    missing = sorted({p for r in rows for p in r.not_recorded})
    caption = (
        "Each worker's GPUs over the makespan: busy (by phase), lent to another role, or idle; "
        "the parts add up to makespan × GPUs (table: breakdown). Simulated runs split what the "
        "simulator priced: prefill, preemption recompute and drafting apart, the rest verify or "
        "decode; live runs split engine iterations by the engine's own timing (an iteration that "
        "admitted a prompt is 'prefill + decode': one forward does both). Not recorded apart "
        f"(inside the busy phases): {', '.join(missing) or 'nothing'}."
    )
    return [FigureOut("breakdown", path.stem, "Makespan breakdown", caption, path)]


def step_breakdown_figure(ctx: Context) -> list[FigureOut]:
    values = [step_parts(s) for s in ctx.series]
    keep = [(s, v) for s, v in zip(ctx.series, values, strict=True) if v]
    if not keep:
        ctx.notes.leave_out("step breakdown", "no run records per-step times")
        return []
    fig, axes = subplots(1, 1, height_in=_bar_height(len(keep)))
    ax = axes[0][0]
    drawn = _stacked(ax, [s.label for s, _ in keep], [v for _, v in keep], STEP_PARTS, PART_COLORS)
    ax.set(title="End-to-end RL step, mean over steps", xlabel="seconds")
    handles = [Patch(color=PART_COLORS[k], label=STEP_PART_LABELS[k]) for k in STEP_PARTS if k in drawn]
    fig.legend(handles=handles, loc="outside right upper", frameon=False)
    path = save(fig, ctx.fig_dir / "step-breakdown.png")
    caption = (
        "Rollout (the makespan), then reward, training and weight sync as they follow it; training "
        "that trainer-role workers did during the rollout is not counted again, so the parts add up "
        "to the step time. From the trace's timing where it has it, else the documented model "
        "(sim/step_time.py); live runs do not split the time after the rollout."
    )
    return [FigureOut("breakdown", path.stem, "End-to-end step breakdown", caption, path)]


def busy_figure(ctx: Context) -> list[FigureOut]:
    spans = [s.makespan(ctx.step) for s in ctx.series]
    grid = time_grid(max([v for v in spans if np.isfinite(v)] or [1.0]))
    fig, axes = subplots(1, 2, height_in=3.4)
    ax_t, ax_s = axes[0]
    nsteps = len(ctx.study.all_steps)
    for s in ctx.series:
        kw = ctx.style(s).kw()
        seg = ctx.step_rows(s, "timeline")
        if seg is not None and not seg.empty:
            total = gpus_per_worker(s) * max(ctx.num_workers(s, seg), int(seg["worker"].max()) + 1)
            t0, t1 = seg["t0_s"].to_numpy(float), seg["t1_s"].to_numpy(float)
            busy = sum_on_grid(t0, t1, np.full(len(seg), gpus_per_worker(s)), grid) / total
            mk = s.makespan(ctx.step)
            ax_t.plot(grid, np.where(grid <= mk, busy, np.nan), label=s.label, **kw)
        else:
            ctx.notes.leave_out(f"GPU busy fraction of {s.label}", f"no timeline rows at step {ctx.step}")
        busy_steps = 1.0 - s.steps["gpu_idle_fraction"].astype(float)
        ax_s.plot(busy_steps.index, busy_steps.to_numpy(), label=s.label, **ctx.style(s).kw(nsteps <= 40))
    ax_t.set(
        title=f"GPU busy fraction over time (step {ctx.step})",
        xlabel="seconds since step start",
        ylabel="fraction of rollout GPUs busy",
        ylim=(-0.02, 1.02),
        xlim=(0, grid[-1]),
    )
    ax_s.set(title="GPUs not idle (busy or lent), per step", ylabel="fraction", ylim=(-0.02, 1.02))
    step_axis(ax_s)
    steps = ctx.study.all_steps
    if len(steps) == 1:
        ax_s.set_xlim(steps[0] - 1, steps[0] + 1)
    legend(ax_t)
    path = save(fig, ctx.fig_dir / "gpu-busy.png")
    caption = (
        "Left: share of the rollout GPUs running requests at each moment of the chosen step (lines end "
        "at each policy's makespan). Right: 1 − gpu_idle_fraction per step (lent GPUs count as not idle)."
    )
    return [FigureOut("breakdown", path.stem, "GPU busy fraction", caption, path)]


def request_times_figure(ctx: Context) -> list[FigureOut]:
    data: list[tuple] = []
    for s in ctx.series:
        df = ctx.step_rows(s, "requests")
        if df is None or df.empty:
            ctx.notes.leave_out(
                f"request start / first token of {s.label}", f"no requests at step {ctx.step}"
            )
        elif "start_s" not in df or "first_token_s" not in df:
            ctx.notes.leave_out(
                f"request start / first token of {s.label}",
                f"run {s.run.name} does not record start_s / first_token_s (written before they existed)",
            )
        else:
            data.append((s, df))
    if not data:
        return []
    fig, axes = subplots(1, 2, height_in=3.4)
    ax_start, ax_ttft = axes[0]
    for s, df in data:
        kw = ctx.style(s).kw()
        for ax, col in ((ax_start, "start_s"), (ax_ttft, "first_token_s")):
            x, y = cdf_points(pd.to_numeric(df[col]).to_numpy(dtype=float), len(df))
            ax.step(x, y, where="post", label=s.label, **kw)
    ax_start.set(
        title=f"Request start: first admitted to a batch (step {ctx.step})",
        xlabel="seconds since step start",
        ylabel="fraction of requests",
        ylim=(0, 1.02),
    )
    ax_ttft.set(
        title="Time to first token",
        xlabel="seconds since step start (all requests arrive at it)",
        ylabel="fraction of requests",
        ylim=(0, 1.02),
    )
    for ax in (ax_start, ax_ttft):
        right = max(ax.get_xlim()[1], 1e-3)
        ax.set_xlim(-0.02 * right, right)  # a jump at 0 (all admitted at once) stays visible
    legend(ax_start)
    path = save(fig, ctx.fig_dir / "request-times.png")
    caption = (
        "CDFs over the step's requests (requests.parquet start_s, first_token_s); a request submitted "
        "with the step waits in a queue until its start. Unstarted requests keep the curve below 1."
    )
    return [FigureOut("breakdown", path.stem, "Request start and time to first token", caption, path)]
