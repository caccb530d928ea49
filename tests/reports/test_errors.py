"""Missing or mismatched inputs: a clear message, and the page shows what it can."""

from __future__ import annotations

import json
import math
import re

import pytest

from simctl.reports.build import build_report
from simctl.reports.errors import Notes, ReportError
from simctl.reports.load import load_study
from simctl.reports.tables import headline_table
from tests.reports.conftest import make_run


def _meta(index):
    return json.loads((index.parent / "report.json").read_text())


def test_empty_directory_alone_is_fatal(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportError, match=r"empty directory") as exc:
        build_report([tmp_path / "empty"], tmp_path / "out")
    assert "\n" not in str(exc.value)
    assert not (tmp_path / "out").exists()


def test_missing_run_json_is_fatal(tmp_path):
    d = tmp_path / "r"
    d.mkdir()
    (d / "requests.parquet").write_bytes(b"")
    with pytest.raises(ReportError, match=r"no run\.json"):
        build_report([d], tmp_path / "out")


def test_unusable_run_beside_a_good_one_is_left_out(run_dir, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    index = build_report([run_dir, tmp_path / "empty"], tmp_path / "out")
    err = capsys.readouterr().err
    assert "warning: left out run" in err and "empty directory" in err
    page = index.read_text()
    assert 'id="headline-table"' in page
    assert "empty directory" in page.split("id='leftout'")[1]


def test_different_traces_warn_but_render(run_dir, tmp_path, capsys):
    other = make_run(tmp_path / "other", preset="other", seed=3, policies=("verl",))
    index = build_report([run_dir, other], tmp_path / "out")
    err = capsys.readouterr().err
    assert "warning: runs come from different traces" in err
    page = index.read_text()
    assert "different traces" in page and "role='alert'" in page
    # both runs are simulations: the labels fall back to the run directory names
    assert "verl [other]" in page and "verl [sim]" in page
    assert _meta(index)["warnings"]
    for src in re.findall(r'<img src="([^"]+)"', page):
        assert (index.parent / src).is_file()


def test_run_without_timeline_leaves_figures_out(fresh_run, tmp_path, capsys):
    (fresh_run / "timeline.parquet").unlink()
    index = build_report([fresh_run], tmp_path / "out")
    err = capsys.readouterr().err
    assert "no timeline.parquet" in err
    left = {w for w, _ in ((d["what"], d["why"]) for d in _meta(index)["left_out"])}
    assert {"worker timeline of verl", "running requests / KV use for verl"} <= left
    figs = {p.name for p in (index.parent / "figures").glob("*.png")}
    assert not any(f.startswith("gantt") for f in figs)
    assert {"running-kv.png", "speculation.png"}.isdisjoint(figs)
    assert {"steps.png", "completion-cdf.png", "trace-lengths.png"} <= figs  # the rest still renders
    page = index.read_text()
    assert "worker timeline of verl" in page.split("id='leftout'")[1]


def test_missing_baseline_leaves_speedup_out(run_dir, capsys):
    notes = Notes()
    table = headline_table(load_study([run_dir], notes), "nope", notes)
    assert all(math.isnan(r["speedup"]) for r in table.rows)
    assert "speedup" not in table.best
    notes.echo()
    assert "left out speedup columns: baseline policy 'nope' is not in the runs" in capsys.readouterr().err


def test_corrupt_run_json(tmp_path):
    d = tmp_path / "r"
    d.mkdir()
    (d / "run.json").write_text("{not json")
    with pytest.raises(ReportError, match="unreadable JSON"):
        build_report([d], tmp_path / "out")


@pytest.mark.parametrize("bad", ["x", [1], 7, None])
@pytest.mark.parametrize("where", ["provenance", "provenance.cluster"])
def test_provenance_of_other_types_renders(fresh_run, tmp_path, bad, where):
    """Every provenance field (or every field of its cluster) of another type than a run
    writes: the page renders what it can, or the build fails in one ReportError line;
    never a crash in the page's code."""
    doc = json.loads((fresh_run / "run.json").read_text())
    prov = doc["provenance"]
    target = prov if where == "provenance" else prov["cluster"]
    for key in list(target):
        if key != "source" or where != "provenance":  # (the run's kind: sim or live)
            target[key] = bad
    (fresh_run / "run.json").write_text(json.dumps(doc))
    try:
        index = build_report([fresh_run], tmp_path / "out")
    except ReportError as exc:
        assert "\n" not in str(exc)
    else:
        assert index.is_file()


def test_run_json_nested_too_deeply_names_the_file(tmp_path):
    d = tmp_path / "r"
    d.mkdir()
    (d / "run.json").write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(ReportError, match=r"r/run\.json: unreadable JSON \(nested too deeply\)"):
        build_report([d], tmp_path / "out")
