"""The live view's bulk reads (`policies.bulk_reads`) equal a read of each request's and
worker's view at every event of a live composite run over the scripted engine (the
simulator's are checked in tests/policies/test_draft_counters.py)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np

from simctl.live.executor import ExecutorConfig, LiveExecutor
from simctl.live.workload import from_trace
from simctl.policies.bulk_reads import draft_counters, request_rows, worker_loads, worker_specs
from simctl.policies.contract import Action, ClusterView, Event, ModelInfo, Policy
from simctl.policies.registry import make_policy
from simctl.testing import ScriptedEngine
from simctl.traces.io import write_trace
from simctl.traces.schema import KNOWN_METHODS, TraceMeta
from tests.factories import LinearCost, make_frame

INFO = ModelInfo(model="Qwen2.5-7B", gpu="H100-SXM-80GB", tp=1, group_size=4, temperature=1.0)


class _Record:
    """Forwards to a view's ClusterView members only: the helpers' record-by-record path."""

    def __init__(self, view: ClusterView) -> None:
        self._view = view

    def __getattr__(self, name: str) -> object:
        if name in ("draft_counters", "request_rows", "worker_loads", "worker_specs"):
            raise AttributeError(name)
        return getattr(self._view, name)


class _Checked(Policy):
    def __init__(self) -> None:
        self.inner = make_policy("composite")
        self.name = self.inner.name
        self.requires = self.inner.requires
        self.tick_iterations = self.inner.tick_iterations
        self.drafted = 0

    def on_event(self, event: Event, view: ClusterView) -> Sequence[Action]:
        every, workers = list(view.step_requests()), list(range(view.num_workers))
        slow = _Record(view)
        assert hasattr(view, "request_rows")
        assert request_rows(view, every) == request_rows(slow, every)  # type: ignore[arg-type]
        assert draft_counters(view, every) == draft_counters(slow, every)  # type: ignore[arg-type]
        assert worker_loads(view, workers) == worker_loads(slow, workers)  # type: ignore[arg-type]
        assert hasattr(view, "worker_specs")
        assert worker_specs(view, workers) == worker_specs(slow, workers)  # type: ignore[arg-type]
        self.drafted += sum(draft_counters(view, every)[0])
        return self.inner.on_event(event, view)


def test_live_bulk_reads_equal_the_record_reads(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    accept = {m: 0.6 for m in KNOWN_METHODS}
    frame = make_frame(
        rng.integers(5, 60, size=24), group_size=4, prompt_len=16, max_tokens=64, accept=accept
    )
    path = tmp_path / "t.parquet"
    write_trace(path, frame, TraceMeta(model="qwen2.5-7b", group_size=4, preset="test", seed=0))
    policy = _Checked()
    LiveExecutor(
        policy,
        [ScriptedEngine() for _ in range(3)],
        from_trace(path, vocab=256),
        INFO,
        config=ExecutorConfig(kv_capacity_tokens=10**9),
        cost_model=LinearCost(),
    ).run()
    assert policy.drafted > 0  # the reads saw requests that had drafted
