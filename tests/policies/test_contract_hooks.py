"""Contract v2: the optional hooks declared on `Policy` (`draft_rules`, `observe`), how a
composed policy combines them, and the best-drafter part reading placements from the view
plus those made at the same instant."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given
from hypothesis import strategies as st

from simctl.policies.best_drafter import BestDrafter
from simctl.policies.compose import Composed
from simctl.policies.contract import (
    Action,
    Assign,
    ClusterView,
    Defer,
    Event,
    Migrate,
    Policy,
    RequestFinished,
    SetSpec,
    StepStarted,
    Tick,
)
from simctl.policies.draft_rule import DraftRule
from simctl.policies.registry import make_policy
from simctl.policies.seer_spec import GroupedSpeculation
from tests.policies.fakes import FakeView


class Quiet(Policy):
    def on_event(self, event: Event, view: ClusterView) -> list[Action]:
        return []


class PlaceAll(Policy):
    """Places every request of a step on one worker, at StepStarted."""

    def __init__(self, worker: int) -> None:
        self.worker = worker

    def on_event(self, event: Event, view: ClusterView) -> list[Action]:
        if isinstance(event, StepStarted):
            return [Assign(request=r, worker=self.worker) for r in event.requests]
        return []


class Watcher(Quiet):
    def __init__(self) -> None:
        self.seen: list[Sequence[Action]] = []

    def observe(self, actions: Sequence[Action]) -> None:
        self.seen.append(actions)


def test_policy_hooks_have_defaults() -> None:
    policy = Quiet()
    assert dict(policy.draft_rules) == {}
    assert policy.observe([Assign(request=0, worker=0)]) is None
    assert policy.params() == {}  # built directly: no declaration


def test_composed_unions_rules_and_feeds_answers_to_observers_only() -> None:
    watcher, placer = Watcher(), PlaceAll(worker=1)
    sd = GroupedSpeculation(group_context=False)
    policy = Composed("c", [placer, watcher, sd])
    assert dict(policy.draft_rules) == {"suffix": DraftRule(source="own")}
    out = policy.on_event(StepStarted(0.0, 0, 0, (0, 1)), FakeView.make(2))
    assert watcher.seen == [out[:2]]  # the placer's answer, as it was given
    assert policy.on_event(Tick(1.0, worker=0, iteration=1), FakeView.make(2)) == []
    assert len(watcher.seen) == 1  # empty answers are not observed
    assert make_policy("seer").draft_rules["suffix"] == DraftRule(source="group")


def test_best_drafter_configures_placements_made_at_the_same_instant() -> None:
    """At StepStarted the view shows no placement yet (the executor applies the scheduler
    part's Assigns after the composed policy answered): the drafter part configures the
    worker from what it observed; at the next event it reads the view."""
    view = FakeView.make(2)
    for rid in range(2):
        view.add_request(rid, None, state="unassigned")
    view.set_worker(1, running=2, kv_used_tokens=200)
    policy = Composed("c", [PlaceAll(worker=1), BestDrafter(("suffix",), multi_path=False)])
    out = policy.on_event(StepStarted(0.0, 0, 0, (0, 1)), view)
    specs = [a for a in out if isinstance(a, SetSpec)]
    assert [a.worker for a in specs] == [1] and specs[0].spec.method == "suffix"
    drafter = policy.parts[1]
    assert isinstance(drafter, BestDrafter)
    assert drafter.placed(1, view) == []  # nothing pending once it answered
    for rid in range(2):  # applied by the executor
        view.add_request(rid, 1)
    assert drafter.placed(1, view) == [0, 1]
    drafter.observe([Migrate(request=0, worker=0)])  # a move another part makes now
    assert drafter.placed(1, view) == [1] and drafter.placed(0, view) == [0]
    view.add_request(0, 1, state="finished")
    drafter.on_event(RequestFinished(2.0, request=0, worker=1, length=5), view)
    assert drafter.placed(1, view) == [1] and drafter.placed(0, view) == []


# one observed answer: (request, worker, a Migrate rather than an Assign); worker None: a Defer
_MOVES = st.lists(
    st.tuples(st.integers(0, 11), st.one_of(st.none(), st.integers(0, 3)), st.booleans()), max_size=8
)


@given(
    homes=st.lists(st.one_of(st.none(), st.integers(0, 3)), min_size=12, max_size=12),
    answers=st.lists(_MOVES, max_size=4),
)
def test_placed_is_the_view_with_every_placement_observed_since_the_last_event(
    homes: list[int | None], answers: list[list[tuple[int, int | None, bool]]]
) -> None:
    """Whatever the observed Assigns, Migrates and Defers (several answers at one instant,
    a request placed twice), each worker's requests are the view's less those placed
    anew, plus those placed on it, ascending; after an event, the view's alone. (`placed`
    groups the placements by worker once per change: this would catch a stale grouping.)"""
    view = FakeView.make(4)
    for rid, w in enumerate(homes):
        view.add_request(rid, w, state="running" if w is not None else "unassigned")
    drafter = BestDrafter(("suffix",), multi_path=False)
    pending: dict[int, int | None] = {}
    for moves in answers:
        actions: list[Action] = []
        for rid, w, migrate in moves:
            if w is None:
                actions.append(Defer(request=rid))
            else:
                actions.append(Migrate(request=rid, worker=w) if migrate else Assign(request=rid, worker=w))
            pending[rid] = w
        drafter.observe(actions)
        for w in range(4):
            want = [r for r in view.worker_requests(w) if r not in pending]
            want += [r for r, at in pending.items() if at == w]
            assert drafter.placed(w, view) == sorted(want)
    drafter.on_event(Tick(1.0, worker=0, iteration=1), view)
    assert all(drafter.placed(w, view) == list(view.worker_requests(w)) for w in range(4))
