"""Across steps: makespan, step time and speedup per step, one line per series.

Averages hide the steps where a policy loses (a drafter that degrades after each policy
update, a history drafter that only helps from the second epoch), so the per-step
curves sit next to the headline table.
"""

from __future__ import annotations

import numpy as np

from simctl.reports.context import Context, FigureOut
from simctl.reports.style import legend, save, step_axis, subplots
from simctl.reports.tables import baseline_for


def steps_figure(ctx: Context) -> list[FigureOut]:
    base = baseline_for(ctx.study, ctx.baseline)
    nsteps = len(ctx.study.all_steps)
    markers = nsteps <= 40
    fig, axes = subplots(1, 3, height_in=3.4)
    ax_mk, ax_st, ax_sp = axes[0]
    for s in ctx.series:
        kw = ctx.style(s).kw(markers)
        steps = s.steps.index.to_numpy()
        ax_mk.plot(steps, s.steps["rollout_makespan_s"], label=s.label, **kw)
        ax_st.plot(steps, s.steps["step_time_s"], label=s.label, **kw)
        b = base[s.label]
        if b is not None:
            bm = b.steps["rollout_makespan_s"].reindex(s.steps.index)
            ratio = (bm / s.steps["rollout_makespan_s"]).replace([np.inf, -np.inf], np.nan)
            ax_sp.plot(steps, ratio, label=s.label, **kw)
    ax_mk.set(title="Rollout makespan per step", xlabel="step", ylabel="seconds")
    ax_st.set(title="End-to-end step time per step", xlabel="step", ylabel="seconds")
    ax_sp.set(title=f"Speedup vs {ctx.baseline} (makespan)", xlabel="step", ylabel="×")
    ax_sp.axhline(1.0, color="#888888", linewidth=0.8)
    for ax in (ax_mk, ax_st):
        ax.set_ylim(bottom=0)
    for ax in (ax_mk, ax_st, ax_sp):
        step_axis(ax)
    legend(ax_mk)
    path = save(fig, ctx.fig_dir / "steps.png")
    caption = (
        f"{nsteps} step(s). Speedup divides the baseline's makespan at the same step "
        "(the baseline of the same run where it has one)."
    )
    return [FigureOut("steps", "steps", "Across steps", caption, path)]
