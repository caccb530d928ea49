"""The reproduction page of `simctl reproduce`: `DIR/index.html` with one PNG per paper.

Per experiment the paper's value (with its table or figure) beside simctl's mean and 95%
interval over seeds and steps and the verdict; each ablation ladder side by side; a figure
per paper (simctl's interval against the paper's range); for every experiment that misses,
its sensitivity curve (the metric over the paper's unpublished input, sim/sensitivity.py)
with the input value at which it reaches the paper's range. Built beside its target and
swapped in whole (traces/atomic.py).
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from simctl.reports.page import CSS, SELF_CHECK
from simctl.reports.style import RC, save, subplots
from simctl.sim.calibration_points import TOLERANCE, CalibrationRow, evaluate
from simctl.sim.experiments import METRICS, PAPERS
from simctl.sim.reproduce_stats import Result
from simctl.sim.sensitivity import Curve
from simctl.traces.atomic import replace_dir

VERDICT_COLORS = {"in-range": "#d9f2d9", "below": "#fde0dc", "above": "#fde0dc", "not-expressible": "#eeeeee"}


def _e(x: Any) -> str:
    return html.escape(str(x))


def _num(x: float) -> str:
    return f"{x:.3f}" if abs(x) < 10 else f"{x:,.1f}"


def _paper_cell(r: Result) -> str:
    v = r.experiment.value
    val = _num(v.lo) if v.lo == v.hi else f"{_num(v.lo)} - {_num(v.hi)}"
    return f"{val}<br><span class='note'>{_e(v.source)}: {_e(v.text)}</span>"


def _simctl_cell(r: Result) -> str:
    s = r.summary
    if s is None:
        return f"<span class='note'>{_e(r.reason)}</span>"
    sens = "" if r.sensitivity is None else f"<br><span class='note'>{_e(reach_line(r.sensitivity))}</span>"
    n = f"<span class='note'>n={s.n}</span>"
    return f"{_num(s.mean)} [{_num(s.lo)}, {_num(s.hi)}] {n}{_run_note(r)}{sens}"


def _g(x: float) -> str:
    return f"{x:.4g}"


def reach_line(c: Curve) -> str:
    """One line: where the curve reaches the paper's range, against the calibrated value."""
    name = c.input.split(":", 1)[1]
    if not c.values:
        return f"neither run reads {c.input}: this input cannot move the result"
    if c.reaches_paper_at is None:
        return (
            f"not reached on the grid {name} = {_g(c.values[0])} .. {_g(c.values[-1])} "
            f"(calibrated: {_g(c.calibrated)})"
        )
    return f"reaches the paper's range at {name} = {_g(c.reaches_paper_at)} (calibrated: {_g(c.calibrated)})"


def idle_line(c: Curve) -> str:
    """The baseline's GPU idle share at each swept value (what a paper's own idleness
    measurement can be set against), or nothing for a curve without it."""
    pairs = [(x, i) for x, i in zip(c.values, c.baseline_idle, strict=False) if math.isfinite(i)]
    if not pairs:
        return ""
    name = c.input.split(":", 1)[1]
    return " Baseline GPU idle: " + ", ".join(f"{_g(x)}: {i:.0%}" for x, i in pairs) + f" (by {name})."


def _run_note(r: Result) -> str:
    """Where it ran: cluster (and the baseline's), trace scale, measured steps, seeds."""
    d = r.detail
    if not d:
        return ""
    steps = d["steps"]
    shown = f"{steps[0]}-{steps[-1]} ({len(steps)})" if len(steps) > 3 else ", ".join(map(str, steps))
    base = f" (baseline {d['baseline_cluster']})" if d["baseline_cluster"] != d["cluster"] else ""
    return (
        f"<br><span class='note'>{_e(d['cluster'])}{_e(base)}, scale {d['trace_scale']:g}, "
        f"steps {_e(shown)}, {d['seeds']} seed(s)</span>"
    )


def _verdict_cell(r: Result) -> str:
    color = VERDICT_COLORS.get(r.verdict, "#fff3c4")
    return f"<td style='background:{color}'>{_e(r.verdict)}</td>"


def _row(r: Result) -> str:
    e = r.experiment
    return (
        f"<tr><td>{_e(PAPERS[e.paper])}</td><td><code>{_e(e.id)}</code><br>{_e(e.title)}</td>"
        f"<td>{_e(e.metric)}<br><span class='note'>{_e(e.policy)} vs {_e(e.baseline)}</span></td>"
        f"<td class='num'>{_paper_cell(r)}</td><td class='num'>{_simctl_cell(r)}</td>{_verdict_cell(r)}</tr>"
    )


def results_table(results: Sequence[Result], table_id: str = "") -> str:
    head = "<tr><th>paper</th><th>experiment</th><th>metric</th><th>paper</th>"
    head += "<th>simctl mean [95% interval]</th><th>verdict</th></tr>"
    ident = f' id="{table_id}"' if table_id else ""
    return f'<table class="data"{ident}>{head}{"".join(_row(r) for r in results)}</table>'


def _ladders(results: Sequence[Result]) -> str:
    by: dict[str, list[Result]] = {}
    for r in results:
        if r.experiment.ladder:
            by.setdefault(r.experiment.ladder, []).append(r)
    if not by:
        return "<p class='note'>No ablation ladder among these experiments.</p>"
    out = []
    for name, rungs in by.items():
        rows = "".join(
            f"<tr><td>{_e(r.experiment.title)}</td><td class='num'>{_paper_cell(r)}</td>"
            f"<td class='num'>{_simctl_cell(r)}</td>{_verdict_cell(r)}</tr>"
            for r in rungs
        )
        out.append(
            f"<h3>{_e(name)}</h3><table class='data'><tr><th>rung</th><th>paper</th>"
            f"<th>simctl</th><th>verdict</th></tr>{rows}</table>"
        )
    return "".join(out)


def paper_figure(paper: str, results: Sequence[Result], path: Path) -> Path:
    """simctl's mean and interval (points, bars) against the paper's range (shaded)."""
    fig, axes = subplots(1, 1, height_in=0.45 * len(results) + 1.2)
    ax = axes[0][0]
    for i, r in enumerate(results):
        v = r.experiment.value
        ax.fill_betweenx([i - 0.35, i + 0.35], v.lo, v.hi, color="#0072b2", alpha=0.25, lw=0)
        ax.plot([v.lo, v.lo], [i - 0.35, i + 0.35], color="#0072b2", lw=1)
        s = r.summary
        if s is not None:
            ax.errorbar(
                [s.mean], [i], xerr=[[s.mean - s.lo], [s.hi - s.mean]], fmt="o", color="#d55e00", ms=4
            )
        else:
            ax.text(v.hi, i, f"  {r.verdict}", va="center", fontsize=7, color="#555555")
    ax.set_yticks(range(len(results)))
    ax.set_yticklabels([r.experiment.id.split("/", 1)[1] for r in results], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("value (ratio; tail_reduction: fraction)")
    ax.set_title(f"{PAPERS[paper]}: paper range (blue) vs simctl mean and 95% interval (orange)", fontsize=8)
    return save(fig, path)


def sensitivity_figure(r: Result, path: Path) -> Path:
    """The metric over the input (points, line) against the paper's range (shaded band);
    dashed, the calibrated value; a diamond where the curve enters the range."""
    c, v = r.sensitivity, r.experiment.value
    if c is None or not c.values:
        raise ValueError(f"{r.experiment.id}: no sensitivity curve to draw")
    fig, axes = subplots(1, 1, height_in=2.4)
    ax = axes[0][0]
    ax.axhspan(v.lo, v.hi, color="#0072b2", alpha=0.25, lw=0, label="paper")
    ax.plot(c.values, c.metric, "o-", color="#d55e00", ms=4, label="simctl (seed 0)")
    ax.axvline(c.calibrated, color="#555555", ls="--", lw=1, label="calibrated")
    if c.reaches_paper_at is not None:
        y = float(np.interp(c.reaches_paper_at, c.values, c.metric))
        ax.plot([c.reaches_paper_at], [y], "D", color="#009e73", ms=6, label="reaches paper")
    ax.set_xlabel(f"{c.input}: {c.label}", fontsize=7)
    ax.set_ylabel(r.experiment.metric, fontsize=7)
    ax.set_title(r.experiment.id, fontsize=8)
    ax.legend(fontsize=6, loc="best")
    return save(fig, path)


def _slug(r: Result) -> str:
    return r.experiment.id.replace("/", "-")


def _sensitivity_section(results: Sequence[Result], figures: Mapping[str, Path], root: Path) -> str:
    swept = [r for r in results if r.sensitivity is not None]
    if not swept:
        return (
            '<section id="sensitivity"><h2>Sensitivity of the misses</h2><p class="note">No experiment '
            "misses the paper, or none was swept.</p></section>"
        )
    out = []
    for r in swept:
        c = r.sensitivity
        assert c is not None
        img = ""
        if r.experiment.id in figures:
            rel = figures[r.experiment.id].relative_to(root).as_posix()
            img = f'<img src="{_e(rel)}" alt="sensitivity of {_e(r.experiment.id)}">'
        steps = ", ".join(map(str, c.steps))
        out.append(
            f'<figure id="sens-{_e(_slug(r))}" class="sensitivity">{img}'
            f"<figcaption><b>{_e(r.experiment.id)}</b> "
            f"({_e(r.verdict)}), input <code>{_e(c.input)}</code> ({_e(c.label)}): {_e(reach_line(c))}."
            f"<br><span class='note'>Why this input: {_e(c.why)} "
            f"Curve: seed 0, steps {_e(steps)}, linear between grid points.{_e(idle_line(c))}</span>"
            "</figcaption></figure>"
        )
    return (
        '<section id="sensitivity"><h2>Sensitivity of the misses</h2><p>For each experiment outside '
        "the paper's range, the one input the paper leaves unpublished that moves it most, swept "
        "over a grid with nothing else changed; no constant is tuned to these curves.</p>"
        f"{''.join(out)}</section>"
    )


def calibration_table(rows: Sequence[CalibrationRow]) -> str:
    """The cost model's micro figures: paper value, simctl value, error (sim/calibration_points.py)."""
    head = "<tr><th>micro figure</th><th>quantity</th><th>paper</th><th>simctl</th><th>error</th></tr>"
    body = "".join(
        f"<tr><td>{_e(r.paper)}<br><code>{_e(r.id)}</code><br><span class='note'>{_e(r.source)}</span></td>"
        f"<td>{_e(r.quantity)}<br><span class='note'>{_e('fitted: ' + r.fitted if r.fitted else 'check')}"
        f"{_e('; ' + r.note if r.note else '')}</span></td>"
        f"<td class='num'>{'&le; ' if r.at_most else ''}{r.paper_value:.4g} {_e(r.unit)}</td>"
        f"<td class='num'>{r.simctl:.4g} {_e(r.unit)}</td>"
        f"<td class='num' style='background:{'#d9f2d9' if r.within_tolerance else '#fde0dc'}'>"
        f"{r.error:+.1%}</td></tr>"
        for r in rows
    )
    return f'<table class="data" id="calibration-table">{head}{body}</table>'


def _calibration_section() -> str:
    rows = evaluate()
    n_in = sum(r.within_tolerance for r in rows)
    return (
        f'<section id="calibration"><h2>Calibration</h2><p>The cost model (one per GPU, the same '
        f"for every paper) against the papers' micro-measurements: {n_in} of {len(rows)} within "
        f"{TOLERANCE:.0%}. Constants are fitted to these points or read from datasheets, never to "
        "the experiments above (docs/calibration.md). Reward, training and weight sync are "
        "modelled from each step's work with the same constants for every paper.</p>"
        f"{calibration_table(rows)}</section>"
    )


def render_page(
    results: Sequence[Result],
    figures: Mapping[str, Path],
    root: Path,
    meta: Mapping,
    sensitivity: Mapping[str, Path] | None = None,
) -> str:
    sensitivity = sensitivity or {}
    counts = {v: sum(r.verdict == v for r in results) for v in dict.fromkeys(r.verdict for r in results)}
    summary = ", ".join(f"{n} {v}" for v, n in counts.items())
    kv = "".join(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in meta.items())
    metrics = "".join(f"<li><code>{_e(k)}</code>: {_e(v)}</li>" for k, v in METRICS.items())
    figs = "".join(
        f'<figure><img src="{_e(p.relative_to(root).as_posix())}" alt="{_e(PAPERS[paper])}">'
        f"<figcaption>{_e(PAPERS[paper])}: shaded, the paper's value or range; point and bar, "
        "simctl's mean and 95% interval over seeds and steps.</figcaption></figure>"
        for paper, p in figures.items()
    )
    parts = [
        f'<section id="headline"><h2>Experiments</h2><p>{_e(summary)}. A verdict is '
        "<b>in-range</b> when simctl's 95% interval overlaps the paper's value or range.</p>"
        f"{results_table(results, 'headline-table')}</section>",
        f'<section id="ladders"><h2>Ablation ladders</h2>{_ladders(results)}</section>',
        f'<section id="figures"><h2>Per paper</h2>{figs}</section>',
        _sensitivity_section(results, sensitivity, root),
        _calibration_section(),
        f'<section id="metrics"><h2>Metrics</h2><ul>{metrics}</ul></section>',
        f'<section id="provenance"><h2>Provenance</h2><table class="kv">{kv}</table></section>',
    ]
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>simctl reproduce</title><style>{CSS}</style></head><body>"
        "<h1>simctl reproduce: the papers' experiments</h1>"
        f"{''.join(parts)}<div id='selfcheck'>pending</div><script>{SELF_CHECK}</script></body></html>\n"
    )


def build_reproduce_page(results: Sequence[Result], out_dir: Path, meta: Mapping[str, Any]) -> Path:
    """Render the page into `out_dir` (replaced whole); returns its index.html."""
    if not results:
        raise ValueError("reproduction page: no experiments")

    def fill(tmp: Path) -> None:
        figures: dict[str, Path] = {}
        with plt.rc_context(RC):
            for paper in dict.fromkeys(r.experiment.paper for r in results):
                mine = [r for r in results if r.experiment.paper == paper]
                figures[paper] = paper_figure(paper, mine, tmp / "figures" / f"{paper}.png")
            sens = {
                r.experiment.id: sensitivity_figure(r, tmp / "figures" / "sensitivity" / f"{_slug(r)}.png")
                for r in results
                if r.sensitivity is not None and r.sensitivity.values
            }
        (tmp / "index.html").write_text(render_page(results, figures, tmp, meta, sens), encoding="utf-8")

    replace_dir(Path(out_dir), fill)
    return Path(out_dir) / "index.html"
