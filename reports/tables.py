"""Report tables: one definition, rendered to HTML, Markdown, CSV and JSON.

The numbers in every format come from the same `Table` rows, so the page, the Markdown
pasted into a paper draft and the JSON a script reads cannot disagree. Values stay raw
floats in CSV/JSON (format only for humans); "best" is decided once, here.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from simctl.reports.errors import Notes
from simctl.reports.load import Series, Study


def fmt_num(digits: int = 1, suffix: str = "") -> Callable[[Any], str]:
    def f(v: Any) -> str:
        if v is None or (isinstance(v, float) and not math.isfinite(v)):
            return "–"
        if isinstance(v, str):
            return v
        return f"{v:,.{digits}f}{suffix}"

    return f


def fmt_pct(v: Any) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    return f"{100 * v:.1f}%"


def fmt_signed_pct(v: Any) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    return f"{100 * v:+.1f}%"


def fmt_text(v: Any) -> str:
    return "–" if v is None else str(v)


@dataclass(frozen=True)
class Col:
    key: str
    header: str
    fmt: Callable[[Any], str] = fmt_text
    better: str | None = None  # "min" | "max" | None: whether a best value is marked


@dataclass
class Table:
    name: str
    title: str
    columns: list[Col]
    rows: list[dict[str, Any]]
    note: str = ""
    best: dict[str, list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.best = mark_best(self.columns, self.rows)

    def is_best(self, i: int, key: str) -> bool:
        return i in self.best.get(key, [])

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows, columns=[c.key for c in self.columns])

    def markdown(self) -> str:
        head = "| " + " | ".join(c.header for c in self.columns) + " |"
        align = "|" + "|".join("---" if i == 0 else "---:" for i in range(len(self.columns))) + "|"
        lines = [head, align]
        for i, row in enumerate(self.rows):
            cells = []
            for c in self.columns:
                text = c.fmt(row.get(c.key)).replace("|", "\\|")
                cells.append(f"**{text}**" if self.is_best(i, c.key) else text)
            lines.append("| " + " | ".join(cells) + " |")
        if any(self.best.values()):
            lines.append("")
            lines.append("Bold: best value in its column.")
        if self.note:
            lines += ["", self.note]
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict[str, Any]:
        labels = [c.key for c in self.columns]
        return {
            "title": self.title,
            "columns": [{"key": c.key, "header": c.header, "better": c.better} for c in self.columns],
            "rows": [{k: _json_value(r.get(k)) for k in labels} for r in self.rows],
            "best": {k: [self.rows[i][self.columns[0].key] for i in v] for k, v in self.best.items()},
            "note": self.note,
        }

    def html(self, table_id: str | None = None) -> str:
        ident = f' id="{html.escape(table_id)}"' if table_id else ""
        out = [f'<table class="data"{ident}>', "<thead><tr>"]
        out += [f"<th>{html.escape(c.header)}</th>" for c in self.columns]
        out.append("</tr></thead><tbody>")
        for i, row in enumerate(self.rows):
            out.append("<tr>")
            for j, c in enumerate(self.columns):
                text = html.escape(c.fmt(row.get(c.key)))
                if self.is_best(i, c.key):
                    out.append(f'<td class="best" title="best in column">{text}&nbsp;★</td>')
                else:
                    out.append(f'<td class="{"name" if j == 0 else "num"}">{text}</td>')
            out.append("</tr>")
        out.append("</tbody></table>")
        return "".join(out)

    def write(self, out_dir: Path) -> list[Path]:
        """name.md, name.csv, name.json: for papers, spreadsheets and scripts."""
        out_dir.mkdir(parents=True, exist_ok=True)
        md = out_dir / f"{self.name}.md"
        md.write_text(f"### {self.title}\n\n" + self.markdown())
        csv = out_dir / f"{self.name}.csv"
        frame = self.frame()
        frame["best_in"] = [
            ";".join(k for k, idx in self.best.items() if i in idx) for i in range(len(self.rows))
        ]
        frame.to_csv(csv, index=False)
        js = out_dir / f"{self.name}.json"
        js.write_text(json.dumps(self.to_json(), indent=1, allow_nan=False))
        return [md, csv, js]


def _json_value(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if hasattr(v, "item"):  # numpy scalar
        return _json_value(v.item())
    return v


def mark_best(columns: list[Col], rows: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Row indices holding the best value per column; ties all marked, one row marks nothing."""
    best: dict[str, list[int]] = {}
    if len(rows) < 2:
        return best
    for c in columns:
        if c.better is None:
            continue
        vals = [
            (i, float(r[c.key]))
            for i, r in enumerate(rows)
            if isinstance(r.get(c.key), int | float) and math.isfinite(float(r[c.key]))
        ]
        if len(vals) < 2:
            continue
        target = min(v for _, v in vals) if c.better == "min" else max(v for _, v in vals)
        tol = 1e-9 * max(1.0, abs(target))
        best[c.key] = [i for i, v in vals if abs(v - target) <= tol]
    return best


# ----------------------------------------------------------------------------- baseline
def baseline_for(study: Study, baseline: str) -> dict[str, Series | None]:
    """Per series label, the series its speedup divides by.

    The baseline policy of the same run if it has one, so that a live run is compared
    with live verl and a simulation with simulated verl; otherwise the first series of
    that policy anywhere.
    """
    anywhere = next((s for s in study.series if s.policy == baseline), None)
    out: dict[str, Series | None] = {}
    for s in study.series:
        same_run = next((b for b in study.series if b.run is s.run and b.policy == baseline), None)
        out[s.label] = same_run or anywhere
    return out


def _steps_text(steps: list[int]) -> str:
    if not steps:
        return "none"
    if steps == list(range(steps[0], steps[-1] + 1)):
        return f"{steps[0]}" if len(steps) == 1 else f"{steps[0]}..{steps[-1]}"
    return ",".join(map(str, steps[:8])) + (",…" if len(steps) > 8 else "")


def warn_cross_run_baseline(base: dict[str, Series | None], study: Study, notes: Notes) -> None:
    """Warn where a run's speedups divide by the baseline of another run whose cluster or
    step set differs: a 2-step mean on 8 GPUs over a 1-step mean on 16 GPUs is no like-for-
    like speedup, and the page would not otherwise say which run the baseline came from.
    The speedups stay (comparing a live run with a simulated baseline is intended, as is
    comparing clusters on purpose); the warning, echoed on stderr and shown at the top of
    the page, names both runs and what differs, in the style of the different-traces one."""
    done: set[tuple[int, int]] = set()
    for s in study.series:
        b = base[s.label]
        if b is None or b.run is s.run or (id(s.run), id(b.run)) in done:
            continue
        done.add((id(s.run), id(b.run)))
        diffs = []
        mine, theirs = str(s.run.doc.get("cluster", "?")), str(b.run.doc.get("cluster", "?"))
        if mine != theirs:
            diffs.append(f"cluster {mine} vs {theirs}")
        mine_steps = sorted({int(x) for se in study.series if se.run is s.run for x in se.steps.index})
        base_steps = [int(x) for x in b.steps.index]
        if mine_steps != base_steps:
            diffs.append(f"steps {_steps_text(mine_steps)} vs {_steps_text(base_steps)}")
        if diffs:
            notes.warn(
                f"run {s.run.name} has no {b.policy}: its speedups divide by {b.label} of run {b.run.name} "
                f"({'; '.join(diffs)}); those speedups are not like-for-like"
            )


def _ratio(a: float, b: float) -> float:
    return a / b if b and math.isfinite(a) and math.isfinite(b) and b > 0 else float("nan")


def headline_table(study: Study, baseline: str, notes: Notes) -> Table:
    base = baseline_for(study, baseline)
    if all(b is None for b in base.values()):
        have = ", ".join(sorted({s.policy for s in study.series}))
        notes.leave_out("speedup columns", f"baseline policy '{baseline}' is not in the runs (have: {have})")
    warn_cross_run_baseline(base, study, notes)
    rows = []
    for s in study.series:
        b = base[s.label]
        acc = s.steps["mean_accept_len"].astype(float).dropna()
        rows.append(
            {
                "policy": s.label,
                "source": s.run.source,
                "steps": len(s.steps),
                "makespan_s": s.mean_rollout_makespan_s,
                "step_time_s": s.mean_step_time_s,
                "speedup": _ratio(b.mean_rollout_makespan_s, s.mean_rollout_makespan_s)
                if b
                else float("nan"),
                "step_speedup": _ratio(b.mean_step_time_s, s.mean_step_time_s) if b else float("nan"),
                "tail_time_s": s.mean("tail_time_s"),
                "gpu_idle_fraction": s.mean("gpu_idle_fraction"),
                "throughput_tok_s": s.mean("throughput_tok_s"),
                "mean_accept_len": float(acc.mean()) if len(acc) else None,
                "baseline": b.label if b else None,
            }
        )
    cols = [
        Col("policy", "policy"),
        Col("source", "source"),
        Col("steps", "steps", fmt_num(0)),
        Col("makespan_s", "rollout makespan (s)", fmt_num(1), "min"),
        Col("step_time_s", "step time (s)", fmt_num(1), "min"),
        Col("speedup", f"speedup vs {baseline}", fmt_num(2, "×"), "max"),
        Col("step_speedup", "step speedup", fmt_num(2, "×"), "max"),
        Col("tail_time_s", "tail time (s)", fmt_num(1), "min"),
        Col("gpu_idle_fraction", "GPU idle", fmt_pct, "min"),
        Col("throughput_tok_s", "throughput (tok/s)", fmt_num(0), "max"),
        Col("mean_accept_len", "accept length", fmt_num(2), "max"),
    ]
    note = (
        "Means over steps. Speedup = baseline makespan / makespan (step speedup: same for end-to-end "
        "step time); tail time = time spent only on the last 10% of requests; accept length = tokens "
        "per verify iteration incl. the bonus token (– without speculation)."
    )
    return Table("headline", "Headline: means over steps", cols, rows, note)


def per_step_table(study: Study, baseline: str) -> Table:
    base = baseline_for(study, baseline)
    rows = []
    for s in study.series:
        b = base[s.label]
        for step, r in s.steps.iterrows():
            bm = b.makespan(int(step)) if b else float("nan")
            rows.append(
                {
                    "policy": s.label,
                    "step": int(step),
                    **{k: (None if pd.isna(v) else float(v)) for k, v in r.items()},
                    "speedup": _ratio(bm, float(r["rollout_makespan_s"])),
                }
            )
    cols = [Col("policy", "policy"), Col("step", "step", fmt_num(0))]
    cols += [Col(k, k, fmt_num(3)) for k in rows[0] if k not in ("policy", "step")] if rows else []
    return Table("per_step", "Per-step metrics", cols, rows)
