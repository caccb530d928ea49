"""`--chrome-trace`: the worker timeline in the Trace Event Format (ui.perfetto.dev): the
fields the format requires, microseconds, one process per policy and one track per worker,
a slice per busy segment of the timeline table, steps laid end to end, written atomically."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from simctl.cli import main
from simctl.traces.chrome_trace import chrome_trace

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = str(ROOT / "traces/samples/efficientrollout-qwen7b-8k-6steps.parquet")


def check_trace_events(doc: dict, policies: list[str], workers: int) -> dict[str, dict]:
    """Trace Event Format checks; returns per policy: its pid and its X events by track."""
    assert doc["displayTimeUnit"] in ("ms", "ns")
    events = doc["traceEvents"]
    for e in events:
        assert {"ph", "pid", "tid", "name"} <= set(e), e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "X":
            assert isinstance(e["ts"], int | float) and isinstance(e["dur"], int | float)
            assert e["ts"] >= 0 and e["dur"] >= 0
        if e["ph"] == "i":
            assert e["s"] == "t" and e["ts"] >= 0
    procs = {e["args"]["name"]: e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert list(procs) == policies
    out = {}
    for policy, pid in procs.items():
        names = {
            e["tid"]: e["args"]["name"]
            for e in events
            if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == pid
        }
        worker_tracks = {tid: n for tid, n in names.items() if n.startswith("worker ")}
        assert sorted(worker_tracks.values(), key=lambda n: int(n.split()[1])) == [
            f"worker {w}" for w in range(workers)
        ]
        busy = [e for e in events if e["ph"] == "X" and e["pid"] == pid and e["cat"] == "busy"]
        assert {e["tid"] for e in busy} <= set(worker_tracks)
        out[policy] = {"pid": pid, "busy": busy, "tracks": worker_tracks}
    return out


def test_replay_chrome_trace(tmp_path: Path) -> None:
    path, run = tmp_path / "t.json", tmp_path / "run"
    args = [
        "replay",
        SAMPLE,
        "--cluster",
        "a100x8:tp1",
        "--steps",
        "0:2",
        "--policy",
        "verl",
        "--policy",
        "ngram",
    ]
    res = CliRunner().invoke(main, [*args, "--chrome-trace", str(path), "--out", str(run)])
    assert res.exit_code == 0, res.output
    assert "ui.perfetto.dev" in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "t.json"]  # no temporaries left
    found = check_trace_events(json.loads(path.read_text()), ["verl", "ngram"], workers=8)
    timeline = pd.read_parquet(run / "timeline.parquet")
    for policy, got in found.items():
        tl = timeline[timeline["policy"] == policy]
        assert len(got["busy"]) == len(tl)  # one slice per busy segment
        assert sum(e["dur"] for e in got["busy"]) == pytest.approx(
            ((tl.t1_s - tl.t0_s) * 1e6).sum(), rel=1e-9
        )
        first = tl[tl["step"] == 0].sort_values(["t0_s", "worker"]).iloc[0]
        e0 = min(got["busy"], key=lambda e: (e["ts"], e["tid"]))
        assert e0["ts"] == pytest.approx(first.t0_s * 1e6) and e0["args"]["batch"] == first.batch
        assert e0["args"]["iterations"] == first.iterations and e0["name"] == f"batch {first.batch}"


def test_steps_are_laid_end_to_end() -> None:
    timeline = pd.DataFrame(
        {
            "policy": ["p", "p", "p"],
            "step": [0, 0, 1],
            "worker": [0, 1, 1],
            "t0_s": [0.0, 0.5, 0.25],
            "t1_s": [1.0, 2.0, 1.0],
            "iterations": [10, 20, 5],
            "batch": [4, 2, 1],
        }
    )
    doc = chrome_trace(timeline)
    busy = [e for e in doc["traceEvents"] if e.get("cat") == "busy"]
    assert [(e["tid"], e["ts"], e["dur"]) for e in busy] == [
        (1, 0.0, 1e6),
        (2, 5e5, 1.5e6),
        (2, 2.25e6, 7.5e5),
    ]
    steps = [e for e in doc["traceEvents"] if e.get("cat") == "step"]
    assert [(e["name"], e["ts"], e["dur"]) for e in steps] == [("step 0", 0.0, 2e6), ("step 1", 2e6, 1e6)]


def test_a_bad_chrome_trace_path_is_refused_before_running() -> None:
    res = CliRunner().invoke(main, ["replay", SAMPLE, "--chrome-trace", SAMPLE])
    assert res.exit_code == 1 and len(res.output.strip().splitlines()) == 1
    assert "the --chrome-trace file would overwrite it" in res.output


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(1e-7, 500.0, allow_nan=False), min_size=2, max_size=12), st.floats(0.0, 1e4))
def test_back_to_back_segments_abut_exactly(lengths: list[float], offset: float) -> None:
    """Property: segments of one worker that follow each other give slices that end where the
    next begins, in the rounded microseconds written (ts and dur rounded apart overlapped by
    a nanosecond, which Perfetto reads as badly nested)."""
    ends = [offset]
    for length in lengths:
        ends.append(ends[-1] + length)
    timeline = pd.DataFrame(
        {
            "policy": "p",
            "step": 0,
            "worker": 0,
            "t0_s": ends[:-1],
            "t1_s": ends[1:],
            "iterations": 1,
            "batch": 1,
        }
    )
    busy = sorted(
        (e for e in chrome_trace(timeline)["traceEvents"] if e.get("cat") == "busy"), key=lambda e: e["ts"]
    )
    for a, b in itertools.pairwise(busy):
        assert round(a["ts"] + a["dur"], 3) == b["ts"]
