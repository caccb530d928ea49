"""The page: every figure written and referenced, layout of DIR, atomic replacement, CLI."""

from __future__ import annotations

import html
import json
import re
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from simctl.reports.build import build_report
from simctl.reports.cli import report_cmd
from simctl.reports.errors import ReportError

EXPECTED_FIGURES = {
    "steps.png",
    "trace-lengths.png",
    "running-kv.png",
    "completion-cdf.png",
    "acceptance.png",
    "speculation.png",
    "makespan-breakdown.png",
    "step-breakdown.png",
    "gpu-busy.png",
    "request-times.png",
    "gantt-00-verl.png",
    "gantt-01-ngram.png",
    "gantt-02-rlhfuse.png",
}


def _imgs(index):
    return re.findall(r'<img src="([^"]+)"', index.read_text())


def test_every_figure_written_and_referenced(report):
    root = report.parent
    written = {p.name for p in (root / "figures").glob("*.png")}
    assert written == EXPECTED_FIGURES
    srcs = _imgs(report)
    assert {s.split("/")[-1] for s in srcs} == EXPECTED_FIGURES
    for s in srcs:
        assert (root / s).is_file() and (root / s).stat().st_size > 1000
    meta = json.loads((root / "report.json").read_text())
    assert meta["left_out"] == [] and meta["warnings"] == []
    assert sorted(p.split("/")[-1] for p in meta["figures"]) == sorted(EXPECTED_FIGURES)


def test_page_content(report, run_dir):
    page = report.read_text()
    assert 'id="headline-table"' in page
    assert "Nothing: every section had the data it needs." in page
    doc = json.loads((run_dir / "run.json").read_text())
    for needle in (
        "tiny-0.parquet",
        "preset tiny, seed 0",
        "h100x16",
        html.escape(doc["provenance"]["command"]),  # the command line as pytest was started
        "roofline",
    ):
        assert needle in page, needle
    # each policy's resolved parameters, as run.json records them, in the footer
    params = {name: pol["params"] for name, pol in doc["policies"].items()}
    assert any(params.values())
    assert html.escape(json.dumps(params, indent=1, sort_keys=True)) in page
    assert "http://" not in page and "https://" not in page  # nothing fetched from the network


def test_rebuild_replaces_atomically_and_carries_inner_run(run_dir, tmp_path):
    """`simctl replay --report DIR` writes its run to DIR/run and reports into DIR; a rebuild
    replaces the report (stale files gone) but keeps that run."""
    out = tmp_path / "rep"
    inner = shutil.copytree(run_dir, out / "run")
    build_report([inner], out)
    (out / "figures" / "stale.png").write_bytes(b"x")
    build_report([inner], out, step=0, workers=2)
    assert not (out / "figures" / "stale.png").exists()
    assert json.loads((out / "report.json").read_text())["step"] == 0
    assert (out / "run" / "run.json").is_file() and (out / "index.html").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".rep.")]  # no temp dirs left


def test_refuses_to_replace_foreign_dir(run_dir, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    with pytest.raises(ReportError, match="refusing to replace"):
        build_report([run_dir], out)
    assert (out / "thesis.tex").read_text() == "precious"


def test_bad_step_is_fatal(run_dir, tmp_path):
    with pytest.raises(ReportError, match="--step 7"):
        build_report([run_dir], tmp_path / "x", step=7)
    assert not (tmp_path / "x").exists()


def test_cli_with_worker_subset_and_replicas(fresh_run, tmp_path):
    """--workers draws a subset; an optional `replicas` timeline column (Fastest-of-N) is drawn."""
    table = pq.read_table(fresh_run / "timeline.parquet")
    tl = table.to_pandas()
    tl["replicas"] = (tl.index % 3 == 0).astype("int32")
    # rewritten in place, keeping the run id every table of the directory carries
    edited = pa.Table.from_pandas(tl, preserve_index=False).replace_schema_metadata(table.schema.metadata)
    pq.write_table(edited, fresh_run / "timeline.parquet")
    out = tmp_path / "cli"
    args = [str(fresh_run), str(fresh_run), "-o", str(out), "--baseline", "ngram", "--workers", "1"]
    res = CliRunner().invoke(report_cmd, args)
    assert res.exit_code == 0, res.output
    assert f"report: {out / 'index.html'}" in res.stdout
    assert "given more than once" in res.stderr
    head = json.loads((out / "tables" / "headline.json").read_text())
    assert len(head["rows"]) == 3  # the run given twice counts once
    assert next(r for r in head["rows"] if r["policy"] == "ngram")["speedup"] == pytest.approx(1.0)
    meta = json.loads((out / "report.json").read_text())
    assert meta["left_out"] == [] and meta["workers"] == 1
    assert "first 1 workers" in (out / "index.html").read_text()
    res = CliRunner().invoke(report_cmd, [str(tmp_path / "nope"), "-o", str(tmp_path / "o2")])
    assert res.exit_code == 1
    assert "no usable run" in res.output and "no such directory" in res.output


def test_a_failed_rebuild_keeps_the_old_report_and_its_inner_run(run_dir, tmp_path, monkeypatch):
    """The carried run is linked, not moved: a failure at the swap leaves DIR as it was."""
    import simctl.reports.build as build

    out = tmp_path / "rep"
    inner = shutil.copytree(run_dir, out / "run")
    build_report([inner], out)
    before = sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))

    def fail(a, b):
        raise OSError(5, "Input/output error", str(b))

    monkeypatch.setattr(build, "exchange", fail)
    with pytest.raises(OSError):
        build_report([inner], out, step=0)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == before
    assert (out / "run" / "run.json").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".rep.")]
