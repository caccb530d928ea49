"""The collector's thresholds during a step's event loop (sim/gc_thresholds.py, issue #17):
raised there, restored after it (an exception included), never lowered below a caller's;
and a replay's results do not depend on when the collector runs."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

import pandas as pd
import pytest

from simctl.sim import replay as replay_module
from simctl.sim.gc_thresholds import OLDER, YOUNG, fewer_collections
from simctl.sim.replay import run_policy
from tests.factories import make_frame, make_setup, make_trace, random_lengths


@pytest.fixture
def default_thresholds() -> Iterator[tuple[int, int, int]]:
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        yield (700, 10, 10)
    finally:
        gc.set_threshold(*before)


def test_raised_inside_and_restored_after(default_thresholds: tuple[int, int, int]) -> None:
    with fewer_collections():
        assert gc.get_threshold() == (YOUNG, OLDER, OLDER)
    assert gc.get_threshold() == default_thresholds


def test_restored_when_the_block_raises(default_thresholds: tuple[int, int, int]) -> None:
    with pytest.raises(RuntimeError, match="boom"), fewer_collections():
        raise RuntimeError("boom")
    assert gc.get_threshold() == default_thresholds


def test_never_lowers_a_callers_thresholds(default_thresholds: tuple[int, int, int]) -> None:
    gc.set_threshold(YOUNG * 4, 5, OLDER * 2)
    with fewer_collections():
        assert gc.get_threshold() == (YOUNG * 4, OLDER, OLDER * 2)
    assert gc.get_threshold() == (YOUNG * 4, 5, OLDER * 2)


def _trace():
    frames = [
        make_frame(
            random_lengths(s, 64, 50, 900), step=s, accept={"ngram": 0.6, "suffix": 0.7, "eagle": 0.75}
        )
        for s in range(2)
    ]
    return make_trace(frames)


def _frames(run) -> pd.DataFrame:
    return pd.concat(run.requests, ignore_index=True)


def test_every_step_loop_runs_with_fewer_collections(
    monkeypatch: pytest.MonkeyPatch, default_thresholds: tuple[int, int, int]
) -> None:
    seen: list[tuple[int, int, int]] = []
    inner = replay_module._FirstTimesSimulation.run

    def run(self):  # type: ignore[no-untyped-def]
        seen.append(gc.get_threshold())
        return inner(self)

    monkeypatch.setattr(replay_module._FirstTimesSimulation, "run", run)
    run_policy(make_setup(_trace(), cluster="h100x8:tp2"), "verl")
    assert seen == [(YOUNG, OLDER, OLDER)] * 2
    assert gc.get_threshold() == default_thresholds


@pytest.mark.parametrize("policy", ["composite", "tlt", "seer"])
def test_results_do_not_depend_on_when_the_collector_runs(
    monkeypatch: pytest.MonkeyPatch, default_thresholds: tuple[int, int, int], policy: str
) -> None:
    """The same replay with the thresholds raised, with the collector running far more
    often than CPython's default (every 50 allocations) and with it off: identical
    requests and step metrics."""
    setup = make_setup(_trace(), cluster="h100x8:tp2")
    spaced = run_policy(setup, policy)

    @contextlib.contextmanager
    def often() -> Iterator[None]:
        gc.set_threshold(50, 2, 2)
        try:
            yield
        finally:
            gc.set_threshold(*default_thresholds)

    @contextlib.contextmanager
    def off() -> Iterator[None]:
        gc.disable()
        try:
            yield
        finally:
            gc.enable()

    for mode in (often, off):
        monkeypatch.setattr(replay_module, "fewer_collections", mode)
        other = run_policy(setup, policy)
        pd.testing.assert_frame_equal(_frames(spaced), _frames(other))
        assert [s.rollout_makespan_s for s in spaced.steps] == [s.rollout_makespan_s for s in other.steps]
        assert spaced.counters == other.counters
