"""The worker timelines drawn in a forked child (reports/fork_family.py) are the figures the
parent would draw, with the same notes; a child that fails costs nothing."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import simctl.reports.build as build
from simctl.reports.context import Context, FigureOut
from simctl.reports.errors import Notes
from simctl.reports.fork_family import ForkedFamily, usable_cores

FORKS = usable_cores() >= 2 and hasattr(os, "fork")


def _report(run_dir: Path, out: Path, fork: bool, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(build, "FORK_TIMELINES", fork)
    return build.build_report([run_dir], out).parent


def test_forked_timelines_equal_the_parents(
    run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    serial = _report(run_dir, tmp_path / "serial", False, monkeypatch)
    forked = _report(run_dir, tmp_path / "forked", True, monkeypatch)
    docs = [json.loads((d / "report.json").read_text()) for d in (serial, forked)]
    assert docs[0]["figures"] == docs[1]["figures"] and any("gantt" in f for f in docs[0]["figures"])
    assert docs[0]["left_out"] == docs[1]["left_out"] and docs[0]["warnings"] == docs[1]["warnings"]
    for name in docs[0]["figures"]:
        assert (serial / name).read_bytes() == (forked / name).read_bytes(), name


def _ctx(tmp_path: Path) -> Context:
    study = SimpleNamespace(series=[])  # (no series: the families here draw none)
    return Context(study=study, step=0, baseline="verl", fig_dir=tmp_path, notes=Notes())  # type: ignore[arg-type]


def _figure(tmp_path: Path, where: str) -> FigureOut:
    return FigureOut("timelines", where, where, "", tmp_path / f"{where}.png")


@pytest.mark.skipif(not FORKS, reason="needs fork and two cores")
def test_child_notes_reach_the_page_and_a_failing_child_costs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = os.getpid()

    def noted(ctx: Context) -> list[FigureOut]:
        ctx.notes.leave_out(
            "worker timeline of x", "drawn in " + ("parent" if os.getpid() == parent else "child")
        )
        return [_figure(tmp_path, "child" if os.getpid() != parent else "parent")]

    ctx = _ctx(tmp_path)
    forked = ForkedFamily.start(noted, ctx)
    assert forked is not None
    assert forked.collect() == [_figure(tmp_path, "child")]
    assert ctx.notes.left_out == [("worker timeline of x", "drawn in child")]

    def fails_in_child(ctx: Context) -> list[FigureOut]:
        if os.getpid() != parent:
            raise RuntimeError("boom")
        return [_figure(tmp_path, "parent")]

    ctx = _ctx(tmp_path)
    forked = ForkedFamily.start(fails_in_child, ctx)
    assert forked is not None and forked.collect() == [_figure(tmp_path, "parent")]
    assert ctx.notes.left_out == []

    def dies(ctx: Context) -> list[FigureOut]:
        if os.getpid() != parent:
            os._exit(3)
        return [_figure(tmp_path, "parent")]

    forked = ForkedFamily.start(dies, _ctx(tmp_path))
    assert forked is not None and forked.collect() == [_figure(tmp_path, "parent")]

    def hangs(ctx: Context) -> list[FigureOut]:
        if os.getpid() != parent:
            time.sleep(60)
        return [_figure(tmp_path, "parent")]

    monkeypatch.setattr("simctl.reports.fork_family.CHILD_TIMEOUT_S", 0.5)
    forked = ForkedFamily.start(hangs, _ctx(tmp_path))
    assert forked is not None and forked.collect() == [_figure(tmp_path, "parent")]
    assert not forked.proc.is_alive()  # killed, not left behind
    forked = ForkedFamily.start(hangs, _ctx(tmp_path))
    assert forked is not None
    forked.abandon()  # the report failed before the timelines' turn
    assert not forked.proc.is_alive()


def test_no_child_where_it_cannot_pay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert ForkedFamily.start(lambda ctx: [], _ctx(tmp_path), enabled=False) is None
    monkeypatch.setattr("simctl.reports.fork_family.usable_cores", lambda: 1)
    assert ForkedFamily.start(lambda ctx: [], _ctx(tmp_path)) is None
