"""The concurrent live executor (live/concurrent.py): engines looping side by side in
threads and in processes, events at real times, and worker loss (a fault injected with
`--fail-worker`, a process killed mid-step, a process that dies on its own).

Decisions in a concurrent run depend on timing, so these tests check what must hold
whatever the timing: every request finishes exactly once with its budget's tokens, the
event stream is consistent, a lost worker does no more work, the recording validates.
"""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import pytest

from simctl.live.concurrent import ConcurrentExecutor
from simctl.live.errors import LiveError
from simctl.live.executor import ExecutorConfig, LiveExecutor
from simctl.live.recorder import LiveRun, policy_summary, write_recording
from simctl.live.runtimes import ProcessRuntime, ThreadRuntime
from simctl.live.workload import Workload, from_trace
from simctl.policies.contract import (
    ClusterView,
    Event,
    RequestFinished,
    StepFinished,
    StepStarted,
    WorkerIdle,
    WorkerLost,
)
from simctl.policies.registry import make_policy
from simctl.testing import Spy
from simctl.traces.cli_options import WorkerFault
from simctl.traces.io import write_trace
from simctl.traces.schema import TraceMeta
from simctl.traces.validate import validate_file
from tests.factories import LinearCost
from tests.live.loop_fakes import SlowBackend, SlowEngine
from tests.live.test_executor import INFO, KV, _frame


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> Workload:
    path = tmp_path_factory.mktemp("conc") / "t.parquet"
    write_trace(path, _frame(steps=2), TraceMeta(model="qwen2.5-7b", group_size=4, preset="test", seed=0))
    return from_trace(path, vocab=256)


def _run(policy, runtime, workload: Workload, **kw) -> ConcurrentExecutor:
    ex = ConcurrentExecutor(
        policy,
        runtime,
        workload,
        INFO,
        config=ExecutorConfig(kv_capacity_tokens=KV),
        cost_model=LinearCost(),
        **kw,
    )
    try:
        ex.run()
    finally:
        runtime.close()
    return ex


def _check_complete(ex: LiveExecutor, spy: Spy, workload: Workload) -> None:
    """Every request finished once, with its budget's tokens, and the events agree."""
    for rec, step in zip(ex.records, workload.steps, strict=True):
        reqs = rec.requests[: rec.n_requests]
        assert [r.generated for r in reqs] == [q.budget for q in step.requests]
        assert all(r.state == "finished" for r in reqs)
        assert rec.makespan_s == pytest.approx(max(r.finish_s for r in reqs))
    finished = Counter((step, e.request) for step, e in _with_step(spy.log) if isinstance(e, RequestFinished))
    assert len(finished) == workload.num_requests and set(finished.values()) == {1}


def _with_step(log: list[tuple[Event, object]]) -> list[tuple[int, Event]]:
    step, out = -1, []
    for e, _ in log:
        if isinstance(e, StepStarted):
            step = e.step
        out.append((step, e))
    return out


@pytest.mark.parametrize("name", ["verl", "ngram", "seer", "tlt", "speactor", "rhymerl", "composite"])
def test_policies_run_concurrently_in_threads(name: str, workload: Workload) -> None:
    spy = Spy(make_policy(name))
    ex = _run(spy, ThreadRuntime([SlowEngine() for _ in range(3)]), workload)
    _check_complete(ex, spy, workload)
    times = [e.time_s for e, _ in spy.log]
    steps = _with_step(spy.log)
    for (step, a), (_, b) in itertools.pairwise(steps):
        if not isinstance(b, StepStarted):
            assert b.time_s >= a.time_s, (step, a, b)  # arrival order is time order
    assert max(times) > 0
    assert len(ex.reaction_s) == sum(len(r.iterations) for r in ex.records) + ex.stray_reports
    for rec in ex.records:
        for row in rec.iterations:  # (worker, start, engine_s, ...) at real times
            assert row[1] >= 0.0 and row[1] + row[2] <= rec.makespan_s + 0.5


def test_injected_loss_in_threads(workload: Workload) -> None:
    spy = Spy(make_policy("verl"))
    ex = _run(spy, ThreadRuntime([SlowEngine() for _ in range(3)]), workload, faults=[WorkerFault(1, 0.01)])
    _check_complete(ex, spy, workload)
    lost = [(step, e) for step, e in _with_step(spy.log) if isinstance(e, WorkerLost)]
    assert len(lost) == 1
    step, event = lost[0]
    assert step == 0 and event.worker == 1 and event.requests  # verl had placed requests there
    # what was on worker 1 finished elsewhere; nothing ran there after the loss
    rec = ex.records[0]
    for rid in event.requests:
        assert rec.requests[rid].worker != 1
    assert all(row[1] <= event.time_s for row in rec.iterations if row[0] == 1)
    assert all(row[0] != 1 for row in ex.records[1].iterations)  # lost for the rest of the run
    assert not any(isinstance(e, WorkerIdle) and e.worker == 1 for e, _ in spy.log if e.time_s > event.time_s)
    [entry] = ex.losses.entries
    assert entry["worker"] == 1 and entry["requests"] == len(event.requests)
    assert entry["placed_by_executor"] == len(event.requests)  # verl ignores the event
    assert entry["cause"] == "injected"


def test_lockstep_fault_is_deterministic(workload: Workload) -> None:
    """--lockstep --fail-worker: the loss happens at a virtual time, so two runs decide and
    record the same."""

    def once() -> list[tuple]:
        ex = LiveExecutor(
            make_policy("seer"),
            [SlowEngine(0.0) for _ in range(3)],
            workload,
            INFO,
            config=ExecutorConfig(kv_capacity_tokens=KV),
            cost_model=LinearCost(),
            faults=[WorkerFault(2, 0.0, step=1)],
        )
        ex.run()
        assert [e["step"] for e in ex.losses.entries] == [1]
        return [(r.worker, r.generated, r.finish_reason) for rec in ex.records for r in rec.requests]

    assert once() == once()


class Replacer(Spy):
    """Places the lost worker's requests itself, all on worker 0."""

    def on_event(self, event: Event, view: ClusterView):
        actions = list(super().on_event(event, view))
        if isinstance(event, WorkerLost):
            from simctl.policies.contract import Assign

            actions += [Assign(request=r, worker=0) for r in event.requests]
        return actions


def test_policy_placement_after_loss_is_kept(workload: Workload) -> None:
    spy = Replacer(make_policy("verl"))
    ex = _run(spy, ThreadRuntime([SlowEngine() for _ in range(2)]), workload, faults=[WorkerFault(1, 0.005)])
    _check_complete(ex, spy, workload)
    [entry] = ex.losses.entries
    assert entry["placed_by_executor"] == 0
    [event] = [e for e, _ in spy.log if isinstance(e, WorkerLost)]
    assert all(ex.records[0].requests[r].worker == 0 for r in event.requests)


def test_every_worker_lost_is_one_line(workload: Workload) -> None:
    faults = [WorkerFault(0, 0.005), WorkerFault(1, 0.005)]
    with pytest.raises(LiveError, match=r"^every worker lost at step 0 \(worker \d: injected\)$"):
        _run(make_policy("verl"), ThreadRuntime([SlowEngine() for _ in range(2)]), workload, faults=faults)


@pytest.mark.parametrize("how", ["killed", "exits"])
def test_worker_process_lost_mid_step(how: str, workload: Workload, tmp_path: Path) -> None:
    """A real worker process dies mid-step (SIGKILL from --fail-worker, or its own exit):
    every request of the step finishes exactly once on the survivors, run.json records the
    loss and the recorded trace validates."""
    if how == "killed":
        backend, faults = SlowBackend(step_s=0.01), [WorkerFault(1, 0.05)]
    else:
        backend, faults = SlowBackend(step_s=0.01, exit_after=3, exit_worker=1), []
    spy = Spy(make_policy("verl"))
    ex = _run(spy, ProcessRuntime(backend, 2, None), workload, faults=faults)
    _check_complete(ex, spy, workload)
    [entry] = ex.losses.entries
    assert entry["worker"] == 1 and entry["step"] == 0 and entry["requests"] > 0
    cause = "injected" if how == "killed" else "engine process exited with code 3"
    assert entry["cause"] == cause
    run = LiveRun(name="verl", params={}, records=ex.records, worker_losses=ex.losses.entries)
    summary = policy_summary(run, 2, workload)
    assert summary["worker_losses"] == [entry]
    assert summary["counters"]["worker_lost_placed_by_executor"] == entry["placed_by_executor"]
    path = tmp_path / "rec.parquet"
    meta = {"model": "Qwen2.5-7B", "hardware": "cpu", "temperature": 1.0, "seed": 0}
    assert validate_file(write_recording(path, [run], workload, meta)) == []


def test_stepfinished_once_per_step(workload: Workload) -> None:
    spy = Spy(make_policy("ngram"))
    _run(spy, ThreadRuntime([SlowEngine(0.0) for _ in range(2)]), workload)
    assert [e.step for e, _ in spy.log if isinstance(e, StepFinished)] == [0, 1]
