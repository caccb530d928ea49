"""The workload itself: response-length distribution of the trace, and its drift per step.

Every speedup on the page depends on how long the long tail is, so the page shows it.
All policies of one run replay the same trace, so one policy's rows per workload are
enough (and a 200-step trace is read for three columns only).
"""

from __future__ import annotations

import numpy as np

from simctl.reports.context import Context, FigureOut
from simctl.reports.style import PALETTE, legend, save, step_axis, subplots


def trace_figure(ctx: Context) -> list[FigureOut]:
    workloads: dict[tuple, tuple[str, np.ndarray, np.ndarray]] = {}
    for s in ctx.series:
        key = s.run.workload_key
        if key in workloads or not s.run.has("requests"):
            continue
        df = s.run.read("requests", ["step", "response_len"], policy=s.policy)
        if len(df):
            workloads[key] = (
                s.run.workload_label,
                df["step"].to_numpy(),
                df["response_len"].to_numpy(dtype=float),
            )
    if not workloads:
        ctx.notes.leave_out("response-length distribution", "no run has a usable requests.parquet")
        return []
    fig, axes = subplots(1, 2, height_in=3.4)
    ax_h, ax_s = axes[0]
    hi = max(float(v[2].max()) for v in workloads.values())
    bins = np.linspace(0, hi, 61)
    for i, (label, steps, lens) in enumerate(workloads.values()):
        color = PALETTE[i % len(PALETTE)]
        ax_h.hist(
            lens,
            bins=bins,
            histtype="step",
            color=color,
            linewidth=1.4,
            weights=np.full(len(lens), 1.0 / len(lens)),
            label=label,
        )
        for q, ls in ((50, "--"), (99, ":")):
            ax_h.axvline(np.percentile(lens, q), color=color, linestyle=ls, linewidth=0.9)
        order = np.argsort(steps, kind="stable")
        st, ln = steps[order], lens[order]
        uniq, start = np.unique(st, return_index=True)
        parts = np.split(ln, start[1:])
        for q, ls, name in ((50, "-", "p50"), (90, "--", "p90"), (100, ":", "max")):
            ax_s.plot(
                uniq,
                [np.percentile(p, q) for p in parts],
                color=color,
                linestyle=ls,
                label=f"{name}" if len(workloads) == 1 else f"{name} {label}",
                marker="o" if len(uniq) <= 40 else None,
                markersize=3,
            )
    ax_h.set_yscale("log")
    ax_h.set(
        title="Response-length distribution (all steps)",
        xlabel="response length (tokens)",
        ylabel="fraction of responses",
    )
    ax_s.set(title="Response length per step", xlabel="step", ylabel="tokens")
    ax_s.set_ylim(bottom=0)
    step_axis(ax_s)
    legend(ax_h)
    legend(ax_s, where="axes")
    path = save(fig, ctx.fig_dir / "trace-lengths.png")
    caption = (
        "Left: histogram (log scale), dashed = median, dotted = p99. Right: median, p90 and max per step."
    )
    return [FigureOut("trace", path.stem, "Workload: response lengths", caption, path)]
