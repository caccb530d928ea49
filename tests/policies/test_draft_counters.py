"""`policies.bulk_reads`: the simulator view's bulk reads equal a read of each request's
view at every event of a composite replay, and the policies that use them (best drafter,
Fastest-of-N, TLT's bandit) decide the same through a view without them (the record-by-record
fallback), so the fast paths change no result (issue #17)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import pytest

from simctl.policies import registry
from simctl.policies.bulk_reads import (
    RequestColumns,
    draft_counters,
    request_columns,
    request_rows,
    worker_loads,
    worker_specs,
)
from simctl.policies.contract import Action, ClusterView, Event, Policy, RequestView
from simctl.policies.registry import make_policy
from simctl.sim.replay import PolicyRun, replay
from simctl.traces.generate import generate_trace
from simctl.traces.io import Trace
from tests.factories import make_setup


class _NoBulk:
    """A view that only forwards the ClusterView protocol (none of the bulk reads)."""

    def __init__(self, view: ClusterView) -> None:
        self._view = view

    def __getattr__(self, name: str) -> object:
        if name in ("draft_counters", "request_rows", "worker_loads", "worker_specs", "request_columns"):
            raise AttributeError(name)
        return getattr(self._view, name)


class _Wrapped(Policy):
    """Runs a registered policy through `_NoBulk` (`hide`), or checks the bulk read of every
    worker's requests against their request views before each event."""

    def __init__(self, spec: str, hide: bool) -> None:
        self.inner = make_policy(spec)
        self.name = self.inner.name
        self.tick_iterations = self.inner.tick_iterations
        self.requires = self.inner.requires
        self.hide = hide
        self.checked = 0

    @property
    def draft_rules(self) -> object:
        return self.inner.draft_rules

    @property
    def draft_methods_used(self) -> frozenset[str]:
        return self.inner.draft_methods_used

    def on_event(self, event: Event, view: ClusterView) -> Sequence[Action]:
        if self.hide:
            return self.inner.on_event(event, _NoBulk(view))  # type: ignore[arg-type]
        for w in range(view.num_workers):
            rids = list(view.worker_requests(w))
            views: list[RequestView] = [view.request(r) for r in rids]
            want = (
                [v.drafted_tokens for v in views],
                [v.accepted_tokens for v in views],
                [v.spec for v in views],
            )
            assert view.draft_counters(rids) == want  # type: ignore[attr-defined]
            assert draft_counters(_NoBulk(view), rids) == want  # type: ignore[arg-type]
            self.checked += sum(1 for v in views if v.drafted_tokens)
        every, workers = list(view.step_requests()), list(range(view.num_workers))
        assert hasattr(view, "request_rows") and hasattr(view, "worker_loads")
        assert request_rows(view, every) == request_rows(_NoBulk(view), every)  # type: ignore[arg-type]
        assert worker_loads(view, workers) == worker_loads(_NoBulk(view), workers)  # type: ignore[arg-type]
        assert hasattr(view, "worker_specs")
        assert worker_specs(view, workers) == worker_specs(_NoBulk(view), workers)  # type: ignore[arg-type]
        assert hasattr(view, "request_columns")
        fast, slow = request_columns(view, every), request_columns(_NoBulk(view), every)  # type: ignore[arg-type]
        assert _plain(fast) == _plain(slow)
        return self.inner.on_event(event, view)


def _plain(cols: RequestColumns) -> tuple[list[object], ...]:
    """The columns as lists, each request's own method by name (the method codes index
    each view's own list of names)."""
    own = [cols.methods[c] if c >= 0 else None for c in cols.method.tolist()]
    return cols.in_flight.tolist(), cols.worker.tolist(), cols.drafted.tolist(), cols.accepted.tolist(), own


def _trace() -> Trace:
    df, meta, lists = generate_trace("dapo-32b-20k", steps=1, seed=0, scale=0.01)
    return Trace(df=df, meta=meta, lists=lists)


def _run(policy: _Wrapped, trace: Trace) -> PolicyRun:
    registry.register("wrapped", lambda: policy, "test")
    try:
        return replay(make_setup(trace, cluster="h100x32"), ["wrapped"])[policy.name]
    finally:
        registry.REGISTRY.pop("wrapped")


def test_bulk_counters_equal_the_request_views_at_every_event() -> None:
    policy = _Wrapped("composite", hide=False)
    _run(policy, _trace())
    assert policy.checked > 100  # requests had drafted when read


@pytest.mark.parametrize(
    ("spec", "used"), [("composite", "replicas"), ("speactor", "replicas"), ("tlt-static-drafter", "")]
)
def test_policies_decide_the_same_without_the_bulk_reads(spec: str, used: str) -> None:
    trace = _trace()
    fast_policy = _Wrapped(spec, hide=False)
    fast = _run(fast_policy, trace)
    slow = _run(_Wrapped(spec, hide=True), trace)
    if used:
        assert fast.counters[used] > 0  # Fastest-of-N scanned and launched
    else:  # TLT's bandit retuned workers (it reads their requests' counters in bulk)
        tlt = next(p for p in fast_policy.inner.parts if hasattr(p, "mab"))  # type: ignore[attr-defined]
        assert sum(1 for entry in tlt.log if entry[3] is not None) > 10
    assert fast.steps[0].rollout_makespan_s == slow.steps[0].rollout_makespan_s
    assert fast.counters == slow.counters
    pd.testing.assert_frame_equal(pd.concat(fast.requests), pd.concat(slow.requests))
    pd.testing.assert_frame_equal(pd.concat(fast.timeline), pd.concat(slow.timeline))
