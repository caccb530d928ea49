"""Simulated vs measured: the same workload and policy from `replay` and from `live`.

This is the check that the simulator's conclusions transfer to hardware, so the error
is reported per metric and per step, together with the cost model (roofline or a
calibration profile) the simulation used: an error is only meaningful next to it.
Error is (simulated - measured) / measured, so +10% means the simulator is pessimistic
about time (or optimistic about throughput).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from simctl.reports.context import Context, FigureOut
from simctl.reports.fig_dynamics import cdf_points
from simctl.reports.load import Series
from simctl.reports.style import legend, save, step_axis, subplots
from simctl.reports.tables import Col, Table, fmt_num, fmt_signed_pct, fmt_text

METRICS = (
    ("rollout_makespan_s", "rollout makespan (s)"),
    ("throughput_tok_s", "throughput (tok/s)"),
    ("tail_time_s", "tail time (s)"),
    ("iteration_s", "decode time per iteration (ms)"),
)


@dataclass
class Pair:
    sim: Series
    live: Series

    @property
    def label(self) -> str:
        return self.sim.policy


def find_pairs(ctx: Context) -> list[Pair]:
    """Each live series with the first simulated series of the same workload and policy."""
    pairs = []
    for live in (s for s in ctx.series if s.run.source == "live"):
        sim = next(
            (
                s
                for s in ctx.series
                if s.run.source == "sim"
                and s.policy == live.policy
                and s.run.workload_key == live.run.workload_key
            ),
            None,
        )
        if sim is None:
            ctx.notes.leave_out(
                f"simulated vs measured for {live.label}", "no simulated run of the same workload and policy"
            )
        else:
            pairs.append(Pair(sim, live))
    return pairs


def _per_step(ctx: Context, s: Series) -> pd.DataFrame:
    """Per-step metrics plus decode time per iteration (busy seconds / iterations, in ms)."""
    df = s.steps[[m for m, _ in METRICS[:3]]].astype(float).copy()
    agg = ctx.timeline_per_step(s.run)
    if agg is not None and s.policy in agg.index.get_level_values(0):
        a = agg.loc[s.policy]
        it = (a["busy_s"] / a["iterations"].where(a["iterations"] > 0)) * 1e3
        df["iteration_s"] = it.reindex(df.index)
    else:
        df["iteration_s"] = np.nan
    return df


def _err(sim: float, live: float) -> float:
    return (sim - live) / live if np.isfinite(sim) and np.isfinite(live) and live != 0 else float("nan")


def simlive(ctx: Context) -> tuple[list[FigureOut], Table | None]:
    pairs = find_pairs(ctx)
    if not pairs:
        return [], None
    rows = []
    fig, axes = subplots(2, 2, height_in=5.6)
    flat = [axes[0][0], axes[0][1], axes[1][0], axes[1][1]]
    for p in pairs:
        a, b = _per_step(ctx, p.sim), _per_step(ctx, p.live)
        common = a.index.intersection(b.index)
        color = ctx.style(p.sim).color
        for ax, (m, title) in zip(flat, METRICS, strict=True):
            sa, sb = a.loc[common, m], b.loc[common, m]
            ax.plot(common, sa, color=color, linestyle="-", marker="o", markersize=3, label=f"{p.label} sim")
            ax.plot(
                common, sb, color=color, linestyle="--", marker="s", markersize=3, label=f"{p.label} live"
            )
            ax.set(title=title, xlabel="step")
            per_step = (sa - sb) / sb.where(sb != 0)
            rows.append(
                {
                    "policy": p.label,
                    "metric": title,
                    "sim": float(sa.mean()) if sa.notna().any() else float("nan"),
                    "live": float(sb.mean()) if sb.notna().any() else float("nan"),
                    "error": _err(float(sa.mean()), float(sb.mean())),
                    "mean_abs_step_error": float(per_step.abs().mean())
                    if per_step.notna().any()
                    else float("nan"),
                    "steps": len(common),
                    "cost_model": str(p.sim.run.provenance.get("cost_model", "?")),
                }
            )
    for ax in flat:
        ax.set_ylim(bottom=0)
        step_axis(ax)
    legend(flat[0])
    path = save(fig, ctx.fig_dir / "sim-vs-live.png")
    figs = [
        FigureOut(
            "simlive",
            path.stem,
            "Simulated vs measured, per step",
            "Solid: simulation (`replay`); dashed: measurement (`live`); one colour per policy.",
            path,
        )
    ]
    figs += _cdf_overlay(ctx, pairs)
    cols = [
        Col("policy", "policy"),
        Col("metric", "metric"),
        Col("sim", "simulated", fmt_num(2)),
        Col("live", "measured", fmt_num(2)),
        Col("error", "error", fmt_signed_pct),
        Col("mean_abs_step_error", "mean |error| per step", fmt_signed_pct),
        Col("steps", "steps", fmt_num(0)),
        Col("cost_model", "cost model", fmt_text),
    ]
    note = "Error = (simulated - measured) / measured of the means over the steps both runs have."
    return figs, Table("sim_vs_live", "Simulated vs measured", cols, rows, note)


def _cdf_overlay(ctx: Context, pairs: list[Pair]) -> list[FigureOut]:
    fig, axes = subplots(1, 1, height_in=3.4)
    ax = axes[0][0]
    drawn = 0
    for p in pairs:
        color = ctx.style(p.sim).color
        for s, ls, tag in ((p.sim, "-", "sim"), (p.live, "--", "live")):
            df = ctx.step_rows(s, "requests")
            if df is None or df.empty:
                continue
            x, y = cdf_points(df["finish_s"].to_numpy(dtype=float), len(df))
            ax.step(x, y, where="post", color=color, linestyle=ls, label=f"{p.label} {tag}")
            drawn += 1
    if not drawn:
        ctx.notes.leave_out("simulated vs measured completion CDF", f"no request rows at step {ctx.step}")
        return []
    ax.set(
        title=f"Completion CDF, simulated vs measured (step {ctx.step})",
        xlabel="seconds since step start",
        ylabel="fraction of requests finished",
        ylim=(0, 1.02),
    )
    ax.set_xlim(left=0)
    legend(ax)
    path = save(fig, ctx.fig_dir / "sim-vs-live-cdf.png")
    return [FigureOut("simlive", path.stem, "Completion CDF: simulated vs measured", "", path)]
