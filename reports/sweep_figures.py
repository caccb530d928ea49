"""Figures of a sweep (`simctl sweep`): metric against each swept policy parameter, the
best configuration per trace and cluster, and the Pareto front of makespan against
GPU-seconds across clusters.

Inputs are the sweep's tidy tables (simctl/sweep_table.py): `table` has one row per point
(axes, `param_<name>` columns, metrics as means over steps), `steps` one row per point and
step. A configuration is a point without its seed; medians over seeds (and steps) stand
for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from simctl.reports.style import legend, save, series_styles, subplots

PARAM_PREFIX = "param_"
CONFIG = ["trace", "steps", "cluster", "gpus", "model", "max_num_seqs", "policy", "policy_spec"]
# axes of the engine, swept like every policy's parameters (a column of their own name)
ENGINE_AXES = ("max_num_seqs",)
# what a makespan is compared within: the same requests on the same cluster and target
GROUP = ["trace", "steps", "cluster", "model"]
PARAM_METRICS = {
    "makespan_s": "rollout makespan (s)",
    "throughput_tok_s": "throughput (tok/s)",
    "gpu_seconds": "GPU-seconds",
    "accept_len": "accept length",
    "speedup_vs_verl": "speedup over veRL",
}
MAX_LINES = 8


@dataclass(frozen=True)
class SweepFigure:
    path: Path
    title: str
    caption: str


def configs(table: pd.DataFrame) -> pd.DataFrame:
    """Medians over seeds per configuration, in the table's order (the paired speedup over
    veRL too, where the table has it)."""
    metrics = ["makespan_s", "step_time_s", "throughput_tok_s", "tail_s", "gpu_idle_fraction"]
    metrics += ["accept_len", "gpu_seconds"]
    metrics += [m for m in ("speedup_vs_verl",) if m in table]
    grouped = table.groupby(CONFIG, sort=False, dropna=False)[metrics].median()
    seeds = table.groupby(CONFIG, sort=False, dropna=False)["seed"].nunique().rename("seeds")
    return grouped.join(seeds).reset_index()


def best_points(table: pd.DataFrame) -> pd.DataFrame:
    """Per (trace, steps, cluster, model): the configuration of least median makespan, with
    its speedup over veRL at the same engine batch limit: the median of the table's paired
    `speedup_vs_verl`, or for a table without it the ratio of the median makespans."""
    cfg = configs(table)
    idx = cfg.groupby(GROUP, sort=False)["makespan_s"].idxmin()
    best = cfg.loc[idx.to_numpy()].reset_index(drop=True)
    if "speedup_vs_verl" not in best:
        # (a sweep of several batch limits has a veRL configuration per limit)
        keys = GROUP + [a for a in ENGINE_AXES if a in cfg]
        base = cfg[cfg["policy_spec"] == "verl"].drop_duplicates(keys).set_index(keys)["makespan_s"]
        best["speedup_vs_verl"] = [
            base.get(tuple(row[k] for k in keys), np.nan) / row["makespan_s"] for _, row in best.iterrows()
        ]
    return best


def pareto_front(xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Mask of the points no other point beats on both (smaller x and y are better).

    >>> pareto_front(np.array([1.0, 2.0, 3.0, 2.5]), np.array([3.0, 1.0, 0.5, 2.0])).tolist()
    [True, True, True, False]
    """
    keep = np.ones(len(xs), dtype=bool)
    for i in range(len(xs)):
        others = (xs <= xs[i]) & (ys <= ys[i]) & ((xs < xs[i]) | (ys < ys[i]))
        keep[i] = not others.any()
    return keep


def _param_columns(table: pd.DataFrame) -> list[str]:
    """The columns of parameters a design varies: every policy parameter, then the engine's."""
    return [c for c in table.columns if c.startswith(PARAM_PREFIX)] + [a for a in ENGINE_AXES if a in table]


def param_column(param: str) -> str:
    """The table column of a parameter `swept_params` names."""
    return param if param in ENGINE_AXES else PARAM_PREFIX + param


def swept_params(table: pd.DataFrame, policy: str) -> list[str]:
    """Parameters of `policy` that take at least two values in the sweep, the engine's
    batch limit among them (a design is tuned against it like a policy parameter)."""
    rows = table[table["policy"] == policy]
    cols = _param_columns(table)
    return [c.removeprefix(PARAM_PREFIX) for c in cols if rows[c].dropna().nunique() >= 2]


def _line_key(table: pd.DataFrame, policy: str, param: str) -> list[str]:
    """Columns that tell the lines of a parameter's figure apart: those that vary."""
    rows = table[table["policy"] == policy]
    col = param_column(param)
    others = [c for c in _param_columns(rows) if c != col]
    # a parameter zipped with this one moves with it: it does not split the lines
    tied = [c for c in others if rows.groupby(col, dropna=False)[c].nunique(dropna=False).max() <= 1]
    return [c for c in [*GROUP, *others] if c not in tied and rows[c].dropna().nunique() >= 2]


def _band(values: pd.Series) -> tuple[float, float, float]:
    v = values.dropna().to_numpy(dtype=float)
    if not len(v):
        return np.nan, np.nan, np.nan
    lo, med, hi = np.percentile(v, [2.5, 50.0, 97.5])
    return float(lo), float(med), float(hi)


def param_figure(
    steps: pd.DataFrame, table: pd.DataFrame, policy: str, param: str, path: Path
) -> SweepFigure:
    """Each metric against one parameter: median and 95% band over seeds and steps."""
    col = param_column(param)
    rows = steps[steps["policy"] == policy]
    key = _line_key(table, policy, param)
    lines = list(rows.groupby(key, sort=False, dropna=False)) if key else [((), rows)]
    numeric = pd.api.types.is_numeric_dtype(rows[col]) and not pd.api.types.is_bool_dtype(rows[col])
    cats = list(dict.fromkeys(rows[col].dropna().tolist()))
    metrics = [m for m in PARAM_METRICS if m in rows and rows[m].notna().any()]
    fig, axes = subplots(1, len(metrics), height_in=3.2)
    labels = [_label(key, k) for k, _ in lines[:MAX_LINES]]
    styles = series_styles(labels)
    for ax, metric in zip(axes[0], metrics, strict=True):
        for (_k, g), label in zip(lines[:MAX_LINES], labels, strict=False):
            pts = sorted(g.groupby(col, dropna=True)[metric], key=lambda kv: _order(kv[0], cats, numeric))
            xs = [_order(x, cats, numeric) for x, _ in pts]
            band = np.array([_band(v) for _, v in pts]).reshape(-1, 3)
            ax.fill_between(xs, band[:, 0], band[:, 2], color=styles[label].color, alpha=0.18, lw=0)
            ax.plot(xs, band[:, 1], label=label, **styles[label].kw(markers=True))
        ax.set_xlabel(param)
        ax.set_title(PARAM_METRICS[metric])
        if not numeric:
            ax.set_xticks(range(len(cats)), [str(c) for c in cats])
    if len(labels) > 1 or labels[0]:
        legend(axes[0][0])
    fig.suptitle(f"{policy}: metrics against {param}")
    more = f"; {len(lines) - MAX_LINES} further lines left out" if len(lines) > MAX_LINES else ""
    caption = (
        f"Policy {policy}, parameter {param}: median (line) and 95% band (2.5-97.5th percentile) "
        f"over seeds and steps; one line per {', '.join(key) or 'sweep'}{more}."
        + (
            " Speedup over veRL divides veRL's makespan on the same step and seed by the point's."
            if "speedup_vs_verl" in metrics
            else ""
        )
    )
    return SweepFigure(save(fig, path), f"{policy}: {param}", caption)


def _order(value: object, cats: list[object], numeric: bool) -> float:
    return float(value) if numeric else float(cats.index(value))  # type: ignore[arg-type]


def _label(key: list[str], values: object) -> str:
    vals = values if isinstance(values, tuple) else (values,)
    return ", ".join(f"{k.removeprefix(PARAM_PREFIX)}={v}" for k, v in zip(key, vals, strict=False))


def best_figure(table: pd.DataFrame, path: Path) -> SweepFigure:
    """Per (trace, steps, cluster, model): each policy's best configuration, the best one
    marked."""
    cfg = configs(table)
    groups = list(cfg.groupby(GROUP, sort=False))
    per_group = 0.3 * cfg["policy"].nunique() + 0.9
    fig, axes = subplots(len(groups), 1, height_in=max(2.4, per_group * len(groups) + 0.6))
    styles = series_styles(list(dict.fromkeys(cfg["policy"])))
    for ax, (key, g) in zip(axes[:, 0], groups, strict=True):
        per_policy = g.loc[g.groupby("policy", sort=False)["makespan_s"].idxmin()]
        per_policy = per_policy.sort_values("makespan_s", kind="stable")
        ys = np.arange(len(per_policy))
        colors = [styles[p].color for p in per_policy["policy"]]
        ax.barh(ys, per_policy["makespan_s"], color=colors, alpha=0.85)
        ax.set_yticks(ys, list(per_policy["policy_spec"]))
        ax.invert_yaxis()
        ax.barh([0], [per_policy["makespan_s"].iloc[0]], fill=False, edgecolor="black", lw=1.5)
        ax.set_xlabel("median rollout makespan (s)")
        ax.set_title(f"{Path(str(key[0])).name}, steps {key[1]}, {key[2]}, {key[3]}", fontsize=9, loc="left")
    fig.suptitle("best configuration of each policy (outlined: best overall)")
    caption = (
        "Per trace, step range, cluster and target model: each policy's best configuration by median "
        "makespan over seeds."
    )
    return SweepFigure(save(fig, path), "best points", caption)


def pareto_figure(table: pd.DataFrame, path: Path) -> SweepFigure | None:
    """Makespan against GPU-seconds where the cluster varies (None when it never does)."""
    cfg = configs(table)
    by = ["trace", "steps", "model"]
    groups = [(k, g) for k, g in cfg.groupby(by, sort=False) if g["cluster"].nunique() >= 2]
    if not groups:
        return None
    fig, axes = subplots(1, len(groups), height_in=3.6)
    styles = series_styles(list(dict.fromkeys(cfg["policy"])))
    markers = dict(zip(dict.fromkeys(cfg["cluster"]), "osD^vPX*<>", strict=False))
    for ax, (key, g) in zip(axes[0], groups, strict=True):
        for (policy, cluster), h in g.groupby(["policy", "cluster"], sort=False):
            ax.scatter(
                h["gpu_seconds"],
                h["makespan_s"],
                color=styles[policy].color,
                marker=markers.get(cluster, "o"),
                s=22,
                label=f"{policy} @ {cluster}",
            )
        front = g[pareto_front(g["gpu_seconds"].to_numpy(float), g["makespan_s"].to_numpy(float))]
        front = front.sort_values("gpu_seconds")
        ax.step(
            front["gpu_seconds"],
            front["makespan_s"],
            where="post",
            color="black",
            lw=1.0,
            label="Pareto front",
        )
        ax.set_xlabel("GPU-seconds per step (makespan x GPUs)")
        ax.set_ylabel("rollout makespan (s)")
        ax.set_title(f"{Path(str(key[0])).name}, steps {key[1]}, {key[2]}", fontsize=9)
        legend(ax, where="axes", fontsize=7)
    fig.suptitle("makespan against GPU-seconds across clusters")
    caption = (
        "Each configuration's median over seeds; "
        "the line joins the configurations no other beats on both axes."
    )
    return SweepFigure(save(fig, path), "Pareto front", caption)
