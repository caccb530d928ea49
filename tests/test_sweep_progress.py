"""simctl.sweep_progress: whatever order the points' steps are written, read and ended in,
the work reported never falls, never passes the total, and ends at the total."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simctl.sweep_progress import StepLog, SweepTally, step_file


@st.composite
def _sweeps(draw: st.DrawFn) -> tuple[dict[str, float], dict[str, dict[int, int]], list[tuple[str, str]]]:
    """Points with a cost and requests per step, and an interleaving of their events:
    ("step", point) writes its next step, ("read", point) reads new lines, ("end", point)
    ends it (after its steps, or cut short: a failed point)."""
    n = draw(st.integers(1, 4))
    work, steps = {}, {}
    for i in range(n):
        pid = f"p{i}"
        work[pid] = draw(st.floats(0.5, 100.0))
        steps[pid] = {s: draw(st.integers(0, 50)) for s in range(draw(st.integers(1, 4)))}
    events = []
    for pid, counts in steps.items():
        written = draw(st.integers(0, len(counts)))
        events += [("step", pid)] * written + [("end", pid)]
    order = draw(st.permutations(events))
    # a point's steps come before its end
    seen_end: set[str] = set()
    fixed = []
    for kind, pid in order:
        if kind == "step" and pid in seen_end:
            continue
        seen_end |= {pid} if kind == "end" else set()
        fixed.append((kind, pid))
        if draw(st.booleans()):
            fixed.append(("read", pid))
    return work, steps, fixed


@given(_sweeps())
@settings(max_examples=60, deadline=None)
def test_progress_is_monotone_and_ends_at_the_total(sweep) -> None:
    work, steps, events = sweep
    with tempfile.TemporaryDirectory() as tmp:
        dirs = {pid: Path(tmp) / pid for pid in work}
        calls: list[tuple[int, int, float, float]] = []
        tally = SweepTally(work, steps, dirs, lambda *a: calls.append(a))
        logs = {pid: StepLog(d) for pid, d in dirs.items()}
        next_step = dict.fromkeys(work, 0)
        for kind, pid in events:
            if kind == "step":
                logs[pid].step(sorted(steps[pid])[next_step[pid]])
                next_step[pid] += 1
            elif kind == "read":
                tally._read_steps()
            else:
                logs[pid].close()
                tally.done({"point_id": pid, "error": None})
        total = sum(work.values())
        done = [c[2] for c in calls]
        assert all(a <= b + 1e-9 for a, b in itertools.pairwise(done))
        assert max(done) <= total + 1e-9 and done[-1] == pytest.approx(total)
        assert [c[0] for c in calls][-1] == len(work)
        assert not any(step_file(d).exists() for d in dirs.values())  # removed once ended
