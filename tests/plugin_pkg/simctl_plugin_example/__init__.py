"""A policy distributed as its own package (tests/plugin_pkg): requests dealt to workers in
turn, starting at a declared offset."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

from simctl.policies.contract import Action, Assign, ClusterView, Event, Policy, StepStarted
from simctl.policies.params import Int, Param, PolicyParams


@dataclass(frozen=True)
class RoundRobinParams(PolicyParams):
    offset: Annotated[int, Param(Int(0, 1_000_000), "worker of the first request")] = 0


class RoundRobin(Policy):
    """Round-robin placement of single requests (an entry-point example)."""

    name = "round-robin"
    params_type = RoundRobinParams

    def __init__(self, params: RoundRobinParams = RoundRobinParams()) -> None:
        self.offset = params.offset

    def on_event(self, event: Event, view: ClusterView) -> Sequence[Action]:
        if not isinstance(event, StepStarted):
            return []
        n = view.num_workers
        return [Assign(request=r, worker=(i + self.offset) % n) for i, r in enumerate(event.requests)]
