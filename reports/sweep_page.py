"""The sweep report: `DIR/report/index.html` with PNG figures beside it in `figures/`.

Sections: what was swept, the best point per trace and cluster, metric against each swept
parameter (per policy), the Pareto front of makespan against GPU-seconds where the cluster
varies, and every configuration (medians over seeds). The directory is built beside its
target and swapped in whole (traces/atomic.py): a reader never sees half a report.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from simctl.reports.page import CSS
from simctl.reports.style import RC
from simctl.reports.sweep_figures import (
    GROUP,
    SweepFigure,
    best_figure,
    best_points,
    configs,
    param_figure,
    pareto_figure,
    swept_params,
)
from simctl.sim.engine_config import EngineConfig
from simctl.traces.atomic import replace_dir

COLUMNS = {
    "policy_spec": "policy",
    "trace": "trace",
    "steps": "steps",
    "cluster": "cluster",
    "model": "model",
    "max_num_seqs": "max seqs",
    "seeds": "seeds",
    "makespan_s": "makespan s",
    "step_time_s": "step s",
    "throughput_tok_s": "tok/s",
    "tail_s": "tail s",
    "gpu_idle_fraction": "GPU idle",
    "accept_len": "accept len",
    "gpu_seconds": "GPU-s",
    "speedup_vs_verl": "vs verl",
}


BEST_NOTE = (
    "<p>vs verl: veRL's makespan over the point's on the same steps, cluster, target, batch "
    "limit, costs and seed, median over seeds.</p>"
)


def _cell(value: object) -> str:
    if isinstance(value, float):
        if value != value:
            return "-"
        return f"{value:.3g}" if abs(value) < 10 else f"{value:,.1f}"
    return html.escape(str(value))


def _table(df: pd.DataFrame) -> str:
    cols = [c for c in COLUMNS if c in df.columns]
    head = "".join(f"<th>{COLUMNS[c]}</th>" for c in cols)
    body = "".join(
        "<tr>" + "".join(f"<td>{_cell(row[c])}</td>" for c in cols) + "</tr>" for _, row in df.iterrows()
    )
    return f'<table class="data"><tr>{head}</tr>{body}</table>'


def _figure(fig: SweepFigure, root: Path) -> str:
    src = html.escape(fig.path.relative_to(root).as_posix())
    return (
        f'<figure><img src="{src}" alt="{html.escape(fig.title)}">'
        f"<figcaption>{html.escape(fig.caption)}</figcaption></figure>"
    )


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "_", text).strip("_") or "x"


def _figures(table: pd.DataFrame, steps: pd.DataFrame, fig_dir: Path) -> tuple[dict[str, list], list[str]]:
    """Every figure by section; a figure that fails is named under 'left out'."""
    out: dict[str, list[SweepFigure]] = {"best": [], "params": [], "pareto": []}
    left_out: list[str] = []
    with plt.rc_context(RC):
        try:
            out["best"].append(best_figure(table, fig_dir / "best.png"))
        except Exception as exc:  # a plotting bug must not cost the whole report
            left_out.append(f"best points: failed ({type(exc).__name__}: {exc})")
        for policy in dict.fromkeys(table["policy"]):
            for param in swept_params(table, policy):
                path = fig_dir / f"param-{_slug(policy)}-{_slug(param)}.png"
                try:
                    out["params"].append(param_figure(steps, table, policy, param, path))
                except Exception as exc:
                    left_out.append(f"{policy} against {param}: failed ({type(exc).__name__}: {exc})")
        try:
            pareto = pareto_figure(table, fig_dir / "pareto.png")
            if pareto is None:
                left_out.append("Pareto front: the cluster does not vary for any trace")
            else:
                out["pareto"].append(pareto)
        except Exception as exc:
            left_out.append(f"Pareto front: failed ({type(exc).__name__}: {exc})")
    if not out["params"]:
        left_out.append("metric against parameter: no policy parameter takes two values")
    return out, left_out


def _summary(table: pd.DataFrame, meta: Mapping[str, object]) -> str:
    rows = [
        ("points", str(len(table))),
        ("traces", ", ".join(dict.fromkeys(table["trace"]))),
        ("steps", ", ".join(dict.fromkeys(table["steps"]))),
        ("clusters", ", ".join(dict.fromkeys(table["cluster"]))),
        ("models", ", ".join(dict.fromkeys(table["model"]))),
        ("batch limits (max_num_seqs)", ", ".join(str(v) for v in dict.fromkeys(table["max_num_seqs"]))),
        ("costs", ", ".join(dict.fromkeys(table["cost_model"]))),
        ("policies", ", ".join(dict.fromkeys(table["policy_spec"]))),
        ("seeds", ", ".join(str(s) for s in dict.fromkeys(table["seed"]))),
        *((str(k), str(v)) for k, v in meta.items()),
    ]
    return (
        '<table class="kv">'
        + "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>" for k, v in rows)
        + "</table>"
    )


def render_page(
    table: pd.DataFrame,
    figs: Mapping[str, Sequence[SweepFigure]],
    left_out: list[str],
    root: Path,
    meta: Mapping[str, object],
) -> str:
    def section(anchor: str, title: str, body: str) -> str:
        return f'<section id="{anchor}"><h2>{html.escape(title)}</h2>{body}</section>'

    best = best_points(table)
    parts = [
        section("sweep", "Sweep", _summary(table, meta)),
        section(
            "best",
            "Best point per trace, cluster and model",
            _table(best) + BEST_NOTE + "".join(_figure(f, root) for f in figs["best"]),
        ),
        section("params", "Metrics against parameters", "".join(_figure(f, root) for f in figs["params"])),
        section("pareto", "Makespan against GPU-seconds", "".join(_figure(f, root) for f in figs["pareto"])),
        section("configs", "Every configuration (medians over seeds)", _table(configs(table))),
    ]
    if left_out:
        items = "".join(f"<li>{html.escape(x)}</li>" for x in left_out)
        parts.append(section("leftout", "Left out", f'<ul class="leftout">{items}</ul>'))
    nav = " ".join(
        f'<a href="#{a}">{t}</a>'
        for a, t in [
            ("sweep", "Sweep"),
            ("best", "Best"),
            ("params", "Parameters"),
            ("pareto", "Pareto"),
            ("configs", "Configurations"),
        ]
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>simctl sweep</title><style>{CSS}</style></head><body>"
        f"<h1>simctl sweep</h1><nav>{nav}</nav>{''.join(parts)}</body></html>\n"
    )


def build_sweep_report(
    table: pd.DataFrame, steps: pd.DataFrame, out_dir: Path, meta: Mapping[str, object] | None = None
) -> Path:
    """Render the sweep report of the tidy tables into `out_dir`; returns its index.html."""
    out_dir = Path(out_dir)
    if table.empty:
        raise ValueError("sweep report: the table has no points")
    if "model" not in table:  # a table written before sweeps had a model axis
        table, steps = table.assign(model=""), steps.assign(model="")
    if "max_num_seqs" not in table:  # before the batch-limit axis: every point ran the default
        limit = EngineConfig().max_num_seqs
        table, steps = table.assign(max_num_seqs=limit), steps.assign(max_num_seqs=limit)
    if "cost_model" not in table:  # before sweeps took a measured profile: the roofline
        table, steps = table.assign(cost_model="roofline"), steps.assign(cost_model="roofline")

    def fill(tmp: Path) -> None:
        figs, left_out = _figures(table, steps, tmp / "figures")
        page = render_page(table, figs, left_out, tmp, meta or {})
        (tmp / "index.html").write_text(page, encoding="utf-8")

    replace_dir(out_dir, fill)
    return out_dir / "index.html"


__all__ = ["GROUP", "build_sweep_report", "render_page"]
