"""SimView.worker_requests (ClusterView) against a brute-force scan of every request's view,
at every event of replays that migrate and defer (rhymerl), re-dispatch chunks (seer) and
race Fastest-of-N replicas (speactor, composite)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from simctl.policies import registry
from simctl.policies.contract import (
    SPEC_OFF,
    Action,
    Assign,
    ClusterView,
    Event,
    LaunchReplica,
    Migrate,
    Policy,
    StepStarted,
    Tick,
)
from simctl.policies.registry import make_policy
from simctl.sim.replay import PolicyRun, replay
from simctl.traces.generate import generate_trace
from simctl.traces.io import Trace
from tests.factories import make_frame, make_setup, make_trace

ACCEPT = {
    "ngram": 0.5,
    "suffix": 0.6,
    "history": 0.5,
    "draft_small": 0.6,
    "draft_medium": 0.65,
    "w4_self": 0.7,
    "eagle": 0.7,
}


class CheckedPlacement(Policy):
    """Runs a registered policy; before each event it sees, checks worker_requests of every
    worker against a scan of view.request(r).worker / .state over the step's requests."""

    def __init__(self, spec: str) -> None:
        self.inner = make_policy(spec)
        self.name = self.inner.name
        self.checks = 0
        self.listed = 0

    @property
    def tick_iterations(self) -> int | None:
        return self.inner.tick_iterations

    @property
    def draft_rules(self) -> object:
        return getattr(self.inner, "draft_rules", None)

    @property
    def draft_methods_used(self) -> frozenset[str]:
        return getattr(self.inner, "draft_methods_used", frozenset())

    def params(self) -> dict[str, object]:
        return self.inner.params()

    def on_event(self, event: Event, view: ClusterView) -> Sequence[Action]:
        self._check(view)
        return self.inner.on_event(event, view)

    def _check(self, view: ClusterView) -> None:
        want: dict[int, list[int]] = {w: [] for w in range(view.num_workers)}
        for r in view.step_requests():
            rv = view.request(r)
            if rv.state in ("waiting", "running"):
                assert rv.worker is not None
                want[rv.worker].append(r)
        for w, rids in want.items():
            assert list(view.worker_requests(w)) == rids, (w, view.now_s)
            self.listed += len(rids)
        self.checks += 1


def _run(spec: str, trace: Trace, cluster: str) -> tuple[CheckedPlacement, PolicyRun]:
    policy = CheckedPlacement(spec)
    registry.register("checked-placement", lambda: policy, "test")
    try:
        run = replay(make_setup(trace, cluster=cluster), ["checked-placement"])[policy.name]
    finally:
        registry.REGISTRY.pop("checked-placement")
    return policy, run


def _outlier_trace(seed: int = 0) -> Trace:
    """Two steps of the same prompts; in the second a few responses run far past their
    prompt's history (rhymerl migrates such outliers, or defers them to the next step)."""
    rng = np.random.default_rng(seed)
    l0 = rng.integers(300, 600, 128)
    l1 = rng.integers(300, 600, 128)
    l1[rng.choice(128, 8, replace=False)] = 3000
    frames = [
        make_frame(lengths, step=s, max_tokens=4000, accept=ACCEPT) for s, lengths in enumerate((l0, l1))
    ]
    return make_trace(frames)


def _long_tail_trace() -> Trace:
    """A small dapo-32b-20k step (160 requests): long-tailed lengths, acceptance per method."""
    df, meta, lists = generate_trace("dapo-32b-20k", steps=1, seed=0, scale=0.01)
    return Trace(df=df, meta=meta, lists=lists)


@pytest.mark.parametrize(
    ("spec", "trace", "cluster", "counter"),
    [
        ("rhymerl", _outlier_trace, "h100x8", "migrations"),
        ("rhymerl-pipe", _outlier_trace, "h100x8", "migrations"),
        ("seer", _long_tail_trace, "h100x16", "chunks"),
        ("speactor", _long_tail_trace, "h100x16", "replicas"),
        ("composite", _long_tail_trace, "h100x32", "replicas"),
    ],
)
def test_worker_requests_equals_a_scan_of_the_request_views(spec, trace, cluster, counter) -> None:
    policy, run = _run(spec, trace(), cluster)
    assert run.counters[counter] > 0  # the replay moved requests between workers
    assert policy.checks == run.events
    assert policy.listed > 0


class MoveAndRace(Policy):
    """Everything on worker 0 (4 run, the rest wait); at its first tick, migrate a running
    and a waiting request to worker 1 and race a replica of another running one there."""

    name = "move-and-race"
    tick_iterations = 8

    def __init__(self) -> None:
        self.moved: tuple[int, int, int] | None = None
        self.after: tuple[tuple[int, ...], tuple[int, ...]] | None = None

    def on_event(self, event: Event, view: ClusterView) -> Sequence[Action]:
        if isinstance(event, StepStarted):
            return [Assign(request=r, worker=0) for r in event.requests]
        if self.moved is not None and self.after is None:
            self.after = (tuple(view.worker_requests(0)), tuple(view.worker_requests(1)))
        if isinstance(event, Tick) and self.moved is None:
            on0 = view.worker_requests(0)
            running = [r for r in on0 if view.request(r).state == "running"]
            waiting = [r for r in on0 if view.request(r).state == "waiting"]
            self.moved = (running[0], waiting[0], running[1])
            return [
                Migrate(request=running[0], worker=1),
                Migrate(request=waiting[0], worker=1),
                LaunchReplica(request=running[1], worker=1, spec=SPEC_OFF),
            ]
        return []


def test_a_migrated_request_is_listed_on_its_new_worker_only_and_a_replica_not_at_all() -> None:
    policy = MoveAndRace()
    registry.register("move-and-race", lambda: policy, "test")
    try:
        trace = make_trace(make_frame(np.full(16, 400), accept=ACCEPT))
        run = replay(make_setup(trace, cluster="h100x2:tp1", max_num_seqs=4), ["move-and-race"])[policy.name]
    finally:
        registry.REGISTRY.pop("move-and-race")
    assert policy.moved is not None and policy.after is not None
    run_moved, wait_moved, raced = policy.moved
    on0, on1 = policy.after
    assert run_moved not in on0 and wait_moved not in on0 and raced in on0
    assert on1 == tuple(sorted((run_moved, wait_moved)))  # the replica is not a request
    assert run.counters["migrations"] == 2 and run.counters["replicas"] == 1
