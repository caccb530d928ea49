"""Audit findings on `simctl report`: edited run.json metrics, a baseline taken from another
run, file names from long policy names, raw control characters on the terminal, and a
report written inside a run directory."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from simctl.reports.build import build_report
from simctl.reports.cli import report_cmd
from simctl.reports.context import SLUG_CHARS, slug
from simctl.reports.errors import Notes, ReportError, terminal_text
from simctl.reports.load import load_study
from simctl.reports.tables import headline_table
from tests.reports.conftest import make_run


def _edit(run: Path, change: Any) -> None:
    doc = json.loads((run / "run.json").read_text())
    change(doc)
    (run / "run.json").write_text(json.dumps(doc))  # (NaN and Infinity as Python writes them)


def _set(policy: str, i: int, key: str, value: Any) -> Any:
    def change(doc: dict) -> None:
        doc["policies"][policy]["steps"][i][key] = value

    return change


# ------------------------------------------------------------------ 11 / 8: run.json metrics
BAD_VALUES = [
    ("rollout_makespan_s", -5, "-5"),
    ("rollout_makespan_s", float("nan"), "NaN"),
    ("rollout_makespan_s", float("inf"), "Infinity"),
    ("rollout_makespan_s", "fast", '"fast"'),
    ("rollout_makespan_s", None, "null"),
    ("rollout_makespan_s", True, "true"),
    ("step_time_s", float("-inf"), "-Infinity"),
    ("tail_time_s", -0.5, "-0.5"),
    ("gpu_idle_fraction", 1.5, "1.5"),
    ("throughput_tok_s", [1], "[1]"),
    ("output_tokens", 10**30, str(10**30)),
    ("mean_accept_len", "x", '"x"'),
    ("step", 10**30, str(10**30)),
    ("step", -1, "-1"),
    ("step", 1.0, "1.0"),
    ("step", "1", '"1"'),
]


@pytest.mark.parametrize(("key", "value", "shown"), BAD_VALUES)
def test_bad_step_value_is_refused_naming_file_field_value(fresh_run, tmp_path, key, value, shown):
    _edit(fresh_run, _set("verl", 1, key, value))
    with pytest.raises(ReportError) as exc:
        build_report([fresh_run], tmp_path / "out")
    msg = str(exc.value)
    assert "\n" not in msg
    assert f"{fresh_run / 'run.json'}: policies.verl.steps[1].{key} is {shown} (" in msg
    assert not (tmp_path / "out").exists()


def test_duplicate_step_numbers_are_refused(fresh_run, tmp_path):
    _edit(fresh_run, _set("ngram", 1, "step", 0))
    with pytest.raises(
        ReportError, match=r"policies\.ngram\.steps\[1\]\.step is 0, also the step of steps\[0\]"
    ):
        build_report([fresh_run], tmp_path / "out")


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (lambda d: d["policies"]["verl"]["steps"].__setitem__(0, 3), r"policies\.verl\.steps\[0\] is 3"),
        (
            lambda d: d["policies"]["verl"]["steps"][0].pop("step"),
            r"policies\.verl\.steps\[0\] has no 'step'",
        ),
        (
            lambda d: d["policies"]["verl"]["steps"][0].pop("rollout_makespan_s"),
            r"steps\[0\] has no 'rollout_makespan_s'",
        ),
        (lambda d: d["policies"]["verl"].__setitem__("steps", "many"), r"policies\.verl\.steps is \"many\""),
        (lambda d: d["policies"].__setitem__("verl", 7), r"policies\.verl is 7"),
        (
            lambda d: d["policies"]["verl"]["steps"][0]["parts"].__setitem__("train_s", "slow"),
            r"steps\[0\]\.parts\.train_s is \"slow\"",
        ),
    ],
)
def test_malformed_step_entries_are_refused(fresh_run, tmp_path, change, where):
    _edit(fresh_run, change)
    with pytest.raises(ReportError, match=where):
        build_report([fresh_run], tmp_path / "out")


def test_cli_refuses_in_one_line_with_nonzero_exit(fresh_run, tmp_path):
    _edit(fresh_run, _set("verl", 0, "rollout_makespan_s", -5))
    res = CliRunner().invoke(report_cmd, [str(fresh_run), "-o", str(tmp_path / "out")])
    assert res.exit_code != 0
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "policies.verl.steps[0].rollout_makespan_s is -5" in lines[0]
    assert res.exception is None or isinstance(res.exception, SystemExit)


def test_bad_run_beside_a_good_one_is_left_out_like_invalid_json(run_dir, fresh_run, tmp_path, capsys):
    """Treated as read_run_doc treats invalid JSON: beside usable runs it is left out, loudly."""
    _edit(fresh_run, _set("verl", 0, "rollout_makespan_s", float("nan")))
    index = build_report([run_dir, fresh_run], tmp_path / "out")
    err = capsys.readouterr().err
    assert "warning: left out run" in err and "policies.verl.steps[0].rollout_makespan_s is NaN" in err
    meta = json.loads((index.parent / "report.json").read_text())
    assert meta["runs"] == [str(run_dir)]


def test_headline_means_come_from_the_steps_not_the_stored_mean(fresh_run):
    def change(doc: dict) -> None:
        doc["policies"]["verl"]["mean_rollout_makespan_s"] = 1.0
        doc["policies"]["verl"]["mean_step_time_s"] = "bogus"

    _edit(fresh_run, change)
    doc = json.loads((fresh_run / "run.json").read_text())
    notes = Notes()
    table = headline_table(load_study([fresh_run], notes), "verl", notes)
    verl = next(r for r in table.rows if r["policy"] == "verl")
    steps = doc["policies"]["verl"]["steps"]
    assert verl["makespan_s"] == pytest.approx(sum(s["rollout_makespan_s"] for s in steps) / len(steps))
    assert verl["step_time_s"] == pytest.approx(sum(s["step_time_s"] for s in steps) / len(steps))
    assert verl["speedup"] == pytest.approx(1.0)


def test_null_accept_length_and_empty_steps_still_load(fresh_run, capsys):
    """What writers really write stays accepted: null accept length (no speculation), and
    a policy that recorded no step (left out with a note, as before)."""
    _edit(fresh_run, lambda d: d["policies"]["rlhfuse"].__setitem__("steps", []))
    notes = Notes()
    study = load_study([fresh_run], notes)
    assert [s.policy for s in study.series] == ["verl", "ngram"]
    assert math.isnan(study.series[0].steps["mean_accept_len"].iloc[0])
    assert any("rlhfuse" in w for w, _ in notes.left_out)


# ------------------------------------------------------------------ 12: cross-run baseline
@pytest.fixture(scope="module")
def ngram_one_step(tmp_path_factory) -> Path:
    """A run of the same workload without verl, over step 0 only."""
    return make_run(tmp_path_factory.mktemp("cross") / "ngram1", steps=1, policies=("ngram",))


def test_baseline_from_another_run_with_other_steps_and_cluster_warns(run_dir, ngram_one_step, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    for p in ngram_one_step.iterdir():
        (other / p.name).write_bytes(p.read_bytes())
    _edit(other, lambda d: d.__setitem__("cluster", "a100x8:tp1"))
    notes = Notes()
    study = load_study([run_dir, other], notes)
    table = headline_table(study, "verl", notes)
    cross = [w for w in notes.warnings if "has no verl" in w]
    assert len(cross) == 1
    assert "run other has no verl: its speedups divide by verl of run sim" in cross[0]
    assert "steps 0 vs 0..1" in cross[0] and "cluster a100x8:tp1 vs" in cross[0]
    # the speedup is still given (the warning says it is not like-for-like)
    row = next(r for r in table.rows if r["policy"] == "ngram [other]")
    assert math.isfinite(row["speedup"])


def test_cross_run_baseline_warning_reaches_page_and_stderr(run_dir, ngram_one_step, tmp_path, capsys):
    index = build_report([run_dir, ngram_one_step], tmp_path / "out")
    err = capsys.readouterr().err
    assert "warning: run ngram1 has no verl" in err and "steps 0 vs 0..1" in err
    assert "run ngram1 has no verl" in index.read_text()


def test_same_cluster_and_steps_give_no_cross_run_warning(run_dir, tmp_path):
    alike = tmp_path / "alike"
    alike.mkdir()
    for p in run_dir.iterdir():
        (alike / p.name).write_bytes(p.read_bytes())
    _edit(alike, lambda d: d["policies"].pop("verl"))
    notes = Notes()
    headline_table(load_study([run_dir, alike], notes), "verl", notes)
    assert not [w for w in notes.warnings if "has no verl" in w]


# ------------------------------------------------------------------ 17: -o inside a run
def test_report_inside_an_input_run_is_refused(run_dir, tmp_path):
    for out in (run_dir / "sub", run_dir / "a" / "b"):
        with pytest.raises(ReportError, match=r"is inside the input run directory .*; choose another"):
            build_report([run_dir], out)
    assert not (run_dir / "sub").exists() and not (run_dir / "a").exists()


def test_report_inside_another_run_is_refused(run_dir, fresh_run, tmp_path):
    out = fresh_run / "nested" / "rep"
    with pytest.raises(ReportError, match=r"is inside the run directory .*copy; choose another"):
        build_report([run_dir], out)
    assert not (fresh_run / "nested").exists()


def test_cli_refuses_report_inside_input_run(fresh_run):
    res = CliRunner().invoke(report_cmd, [str(fresh_run), "-o", str(fresh_run / "sub")])
    assert res.exit_code == 1
    assert len(res.output.strip().splitlines()) == 1 and "is inside the input run directory" in res.output
    assert not (fresh_run / "sub").exists()


# ------------------------------------------------------------------ 16: odd policy names
def test_slug_is_bounded_and_keeps_long_names_apart():
    a, b = slug("x" * 300), slug("x" * 299 + "y")
    assert len(a) <= SLUG_CHARS + 9 and len(b) <= SLUG_CHARS + 9
    assert a != b
    assert slug("ngram:gamma=4") == "ngram-gamma-4"  # short names unchanged


def _rename_policy(run: Path, old: str, new: str) -> None:
    """Rename a policy in run.json and every table (their schema and run stamp kept)."""
    _edit(
        run,
        lambda d: d.__setitem__("policies", {new if k == old else k: v for k, v in d["policies"].items()}),
    )
    for path in run.glob("*.parquet"):
        table = pq.read_table(path)
        if "policy" not in table.column_names:
            continue
        i = table.schema.get_field_index("policy")
        col = pc.cast(table.column("policy"), pa.string())
        renamed = pc.if_else(pc.equal(col, old), pa.scalar(new), col).cast(table.schema.field(i).type)
        pq.write_table(table.set_column(i, table.schema.field(i), renamed), path)


def test_long_policy_name_keeps_its_worker_timeline(fresh_run, tmp_path, capsys):
    _rename_policy(fresh_run, "verl", "v" * 300)
    index = build_report([fresh_run], tmp_path / "out", baseline="ngram")
    assert "File name too long" not in capsys.readouterr().err
    gantt = sorted(p.name for p in (index.parent / "figures").glob("gantt-*.png"))
    assert len(gantt) == 3
    assert all(len(name) < 100 for name in gantt)


def test_control_characters_are_escaped_on_the_terminal(fresh_run, tmp_path, capsys):
    odd = "tab\there\x1b[31mred"
    _rename_policy(fresh_run, "verl", odd)
    build_report([fresh_run], tmp_path / "out", baseline="nope")
    notes_out = capsys.readouterr().err
    assert "\x1b" not in notes_out and "\t" not in notes_out
    assert "tab\\there\\x1b[31mred" in notes_out
    _edit(fresh_run, _set(odd, 0, "rollout_makespan_s", -1))
    res = CliRunner().invoke(report_cmd, [str(fresh_run), "-o", str(tmp_path / "out2")])
    assert res.exit_code == 1 and "\x1b" not in res.output and "\t" not in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_terminal_text():
    assert terminal_text("plain name") == "plain name"
    assert terminal_text("a\nb\x1b[0m") == "a\\nb\\x1b[0m"
