"""Headline and per-step tables: numbers straight from run.json, speedups, best marks, files."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from simctl.reports.errors import Notes
from simctl.reports.load import load_study
from simctl.reports.tables import Col, Table, headline_table, mark_best


def _doc(run_dir):
    return json.loads((run_dir / "run.json").read_text())


def test_headline_equals_run_json_means(run_dir):
    doc = _doc(run_dir)
    study = load_study([run_dir], Notes())
    table = headline_table(study, "verl", Notes())
    rows = {r["policy"]: r for r in table.rows}
    assert set(rows) == set(doc["policies"])
    base_mk = doc["policies"]["verl"]["mean_rollout_makespan_s"]
    base_st = doc["policies"]["verl"]["mean_step_time_s"]
    for name, pol in doc["policies"].items():
        r = rows[name]
        steps = pd.DataFrame(pol["steps"])
        assert r["makespan_s"] == pytest.approx(pol["mean_rollout_makespan_s"])
        assert r["step_time_s"] == pytest.approx(pol["mean_step_time_s"])
        assert r["speedup"] == pytest.approx(base_mk / pol["mean_rollout_makespan_s"])
        assert r["step_speedup"] == pytest.approx(base_st / pol["mean_step_time_s"])
        assert r["tail_time_s"] == pytest.approx(steps["tail_time_s"].mean())
        assert r["gpu_idle_fraction"] == pytest.approx(steps["gpu_idle_fraction"].mean())
        acc = steps["mean_accept_len"].dropna()
        if len(acc):
            assert r["mean_accept_len"] == pytest.approx(acc.mean())
        else:
            assert r["mean_accept_len"] is None
    assert rows["verl"]["speedup"] == pytest.approx(1.0)
    assert rows["ngram"]["mean_accept_len"] is not None  # the fixture speculates with n-gram


def test_best_marked_per_column(run_dir):
    table = headline_table(load_study([run_dir], Notes()), "verl", Notes())
    for col in table.columns:
        if col.better is None:
            continue
        vals = [r[col.key] for r in table.rows if isinstance(r[col.key], float) and math.isfinite(r[col.key])]
        if len(vals) < 2:
            continue
        want = min(vals) if col.better == "min" else max(vals)
        marked = [table.rows[i][col.key] for i in table.best[col.key]]
        assert marked and all(v == pytest.approx(want) for v in marked)
    # HTML and Markdown carry the marks
    html = table.html("headline-table")
    assert html.count('class="best"') == sum(len(v) for v in table.best.values())
    assert "**" in table.markdown()


def test_mark_best_ties_and_missing():
    cols = [Col("p", "p"), Col("x", "x", better="min"), Col("y", "y", better="max")]
    rows = [{"p": "a", "x": 1.0, "y": None}, {"p": "b", "x": 1.0, "y": 2.0}, {"p": "c", "x": 3.0, "y": 1.0}]
    best = mark_best(cols, rows)
    assert best["x"] == [0, 1]
    assert best["y"] == [1]
    assert mark_best(cols, rows[:1]) == {}  # one row: nothing to compare


def test_tables_written(report):
    tables = report.parent / "tables"
    for name in ("headline", "per_step"):
        for ext in ("md", "csv", "json"):
            assert (tables / f"{name}.{ext}").is_file(), f"{name}.{ext}"
    doc = json.loads((tables / "headline.json").read_text())
    csv = pd.read_csv(tables / "headline.csv")
    assert [r["policy"] for r in doc["rows"]] == list(csv["policy"])
    assert list(csv["makespan_s"]) == pytest.approx([r["makespan_s"] for r in doc["rows"]])
    assert set(doc["best"]) <= {c["key"] for c in doc["columns"]}
    md = (tables / "headline.md").read_text()
    assert md.count("\n| ") >= 1 + len(doc["rows"])
    per_step = pd.read_csv(tables / "per_step.csv")
    assert len(per_step) == 2 * len(doc["rows"])  # 2 steps per policy
    base = per_step[per_step["policy"] == "verl"].set_index("step")["rollout_makespan_s"]
    for _, r in per_step.iterrows():
        assert r["speedup"] == pytest.approx(base[r["step"]] / r["rollout_makespan_s"])


def test_table_json_has_no_nan():
    t = Table("t", "t", [Col("p", "p"), Col("v", "v", better="min")], [{"p": "a", "v": float("nan")}])
    assert t.to_json()["rows"][0]["v"] is None
