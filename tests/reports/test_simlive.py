"""Simulated vs measured: pairing by workload and policy, error per metric."""

from __future__ import annotations

import json

import pytest

from simctl.reports.build import build_report
from simctl.reports.context import Context
from simctl.reports.errors import Notes
from simctl.reports.fig_simlive import simlive
from simctl.reports.load import load_study
from tests.reports.conftest import LIVE_SLOWDOWN, make_live_copy


@pytest.fixture(scope="module")
def simlive_report(run_dir, tmp_path_factory):
    base = tmp_path_factory.mktemp("simlive")
    live = make_live_copy(run_dir, base / "live")
    return build_report([run_dir, live], base / "out")


def test_errors_per_metric(simlive_report):
    doc = json.loads((simlive_report.parent / "tables" / "sim_vs_live.json").read_text())
    rows = doc["rows"]
    assert {r["policy"] for r in rows} == {"verl", "ngram", "rlhfuse"}
    by = {(r["policy"], r["metric"]): r for r in rows}
    want_time = 1 / LIVE_SLOWDOWN - 1  # sim is faster: negative error on times
    for pol in ("verl", "ngram"):
        assert by[(pol, "rollout makespan (s)")]["error"] == pytest.approx(want_time)
        assert by[(pol, "tail time (s)")]["error"] == pytest.approx(want_time)
        assert by[(pol, "throughput (tok/s)")]["error"] == pytest.approx(LIVE_SLOWDOWN - 1)
        assert by[(pol, "decode time per iteration (ms)")]["error"] == pytest.approx(want_time)
        assert by[(pol, "rollout makespan (s)")]["cost_model"] == "roofline"
        assert by[(pol, "rollout makespan (s)")]["steps"] == 2


def test_page_and_figures(simlive_report):
    page = simlive_report.read_text()
    assert 'id="simlive-table"' in page
    figs = simlive_report.parent / "figures"
    assert (figs / "sim-vs-live.png").is_file() and (figs / "sim-vs-live-cdf.png").is_file()
    assert 'src="figures/sim-vs-live.png"' in page
    assert "verl [live]" in page and "verl [sim]" in page  # one policy from two sources
    meta = json.loads((simlive_report.parent / "report.json").read_text())
    assert meta["warnings"] == [] and meta["left_out"] == []  # same workload: no mismatch warning


def test_live_without_sim_counterpart(run_dir, tmp_path):
    live = make_live_copy(run_dir, tmp_path / "live")
    notes = Notes()
    ctx = Context(load_study([live], notes), step=0, baseline="verl", fig_dir=tmp_path / "f", notes=notes)
    figs, table = simlive(ctx)
    assert figs == [] and table is None
    assert (
        "simulated vs measured for verl",
        "no simulated run of the same workload and policy",
    ) in notes.left_out
