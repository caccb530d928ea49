"""A policy that never places some requests: the step stops with nothing left to happen.
The simulator says so in one line (which requests, which policy, which step) instead of
SimPy's "No scheduled events left" traceback."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

import simctl.sim.replay as replay_module
from simctl.policies.contract import Action, Assign, Cancel, ClusterView, Event, Policy, StepStarted
from simctl.sim.engine import SimError
from tests.factories import make_frame, make_setup, make_trace


class PlacesThree(Policy):
    """Places the first three requests of each step and forgets the rest (a policy bug)."""

    name = "places-three"

    def on_event(self, event: Event, view: ClusterView) -> Sequence[Action]:
        if isinstance(event, StepStarted):
            return [Assign(r, 0) for r in list(view.step_requests())[:3]]
        return []


def test_unplaced_requests_are_named_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay_module, "make_policy", lambda spec: PlacesThree())
    setup = make_setup(make_trace([make_frame([10, 20, 30, 40, 50, 60, 70, 80], step=2)]))
    with pytest.raises(SimError) as info:
        replay_module.run_policy(setup, "places-three")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("policy 'places-three' left 5 of 8 requests of step 2 unfinished")
    assert "(5 unassigned; requests 3, 4, 5, 6, 7)" in message
    assert message.endswith("the policy never placed the unassigned ones")


class CancelsItsOnlyCopy(PlacesThree):
    """Places every request and then cancels request 0's only copy: the blame is the
    cancel, not a placement the policy did make."""

    name = "cancels"

    def on_event(self, event: Event, view: ClusterView) -> Sequence[Action]:
        if isinstance(event, StepStarted):
            return [*(Assign(r, 0) for r in view.step_requests()), Cancel(0, 0)]
        return []


def test_a_cancelled_only_copy_is_named_as_the_cause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay_module, "make_policy", lambda spec: CancelsItsOnlyCopy())
    setup = make_setup(make_trace([make_frame([10, 20, 30, 40], step=0)]))
    with pytest.raises(SimError) as info:
        replay_module.run_policy(setup, "cancels")
    assert "(1 cancelled; requests 0)" in str(info.value)
    assert str(info.value).endswith("the policy cancelled the only copy of the cancelled ones")
