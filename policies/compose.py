"""Composition: a policy made of small parts (placement, speculation, idle-resource manager).

Every part sees every event in the order given; their actions are concatenated, so a later
part can refine what an earlier one decided (e.g. a speculation part setting gamma on a
request a scheduler part just placed).
"""

from __future__ import annotations

from collections.abc import Sequence

from simctl.policies.contract import Action, Capability, ClusterView, Event, Policy


class Composed(Policy):
    def __init__(self, name: str, parts: Sequence[Policy]) -> None:
        assert parts, "a composed policy needs at least one part"
        self.name = name
        self.parts = tuple(parts)
        self.requires = frozenset().union(*(p.requires for p in parts))
        ticks = [p.tick_iterations for p in parts if p.tick_iterations]
        self.tick_iterations = min(ticks) if ticks else None

    def on_event(self, event: Event, view: ClusterView) -> list[Action]:
        out: list[Action] = []
        for part in self.parts:
            out.extend(part.on_event(event, view))
        return out

    def params(self) -> dict[str, object]:
        return {type(p).__name__: p.params() for p in self.parts}


def requirement_gaps(policy: Policy, capabilities: frozenset[Capability]) -> list[str]:
    """Capabilities the policy needs that an executor lacks (sorted, for messages)."""
    return sorted(c.value for c in policy.requires - capabilities)
