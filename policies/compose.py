"""Composition: a policy made of small parts (placement, speculation, idle-resource manager).

Every part sees every event in the order given; their actions are concatenated, so a later
part can refine what an earlier one decided (e.g. a speculation part setting gamma on a
request a scheduler part just placed). Parts that override `Policy.observe` also see every
non-empty answer of any part as soon as it is given, so a later part can act on
placements an earlier one made at the same instant (the view shows them only once the
executor applied them). The composed policy drafts with the union of its parts'
`draft_rules`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from simctl.policies.contract import (
    Action,
    Capability,
    ClusterView,
    Event,
    Policy,
    WorkerId,
    give_offline_profile,
)
from simctl.policies.draft_rule import DraftRule


class Composed(Policy):
    def __init__(self, name: str, parts: Sequence[Policy]) -> None:
        assert parts, "a composed policy needs at least one part"
        self.name = name
        self.parts = tuple(parts)
        self.requires = frozenset().union(*(p.requires for p in parts))
        ticks = [p.tick_iterations for p in parts if p.tick_iterations]
        self.tick_iterations = min(ticks) if ticks else None
        self._observers = tuple(p for p in self.parts if type(p).observe is not Policy.observe)
        rules: dict[str, DraftRule] = {}
        for part in self.parts:
            rules.update(part.draft_rules)
        self._rules = rules
        self._methods = frozenset().union(*(p.draft_methods_used for p in self.parts))

    @property
    def draft_rules(self) -> Mapping[str, DraftRule]:
        return self._rules

    @property
    def draft_methods_used(self) -> frozenset[str]:
        return self._methods

    def wants_ticks(self, worker: WorkerId, view: ClusterView) -> bool:
        """A Tick matters when it matters to any part that asked for Ticks."""
        return any(p.tick_iterations and p.wants_ticks(worker, view) for p in self.parts)

    def offline_profile(self, acceptance: Mapping[str, float]) -> None:
        for part in self.parts:
            give_offline_profile(part, acceptance)

    def observe(self, actions: Sequence[Action]) -> None:
        for part in self._observers:
            part.observe(actions)

    def on_event(self, event: Event, view: ClusterView) -> list[Action]:
        out: list[Action] = []
        observers = self._observers
        for part in self.parts:
            actions = part.on_event(event, view)
            if actions:
                out.extend(actions)
                for observer in observers:
                    observer.observe(actions)
        return out


def requirement_gaps(policy: Policy, capabilities: frozenset[Capability]) -> list[str]:
    """Capabilities the policy needs that an executor lacks (sorted, for messages)."""
    return sorted(c.value for c in policy.requires - capabilities)


def drafting_gap(policy: Policy, available: frozenset[str]) -> str | None:
    """Why `policy` cannot draft with the executor's methods (None: it can, or needs none).

    >>> from simctl.policies.rhymerl_spec import HistoSpec
    >>> drafting_gap(Composed("histospec-only", [HistoSpec()]), frozenset({"history"})) is None
    True
    >>> drafting_gap(Composed("histospec-only", [HistoSpec()]), frozenset())[:48]
    "policy 'histospec-only' drafts only with history"
    """
    used = policy.draft_methods_used
    if not used or used & available:
        return None
    wanted = ", ".join(sorted(used))
    offered = ", ".join(sorted(available)) or "none"
    return (
        f"policy '{policy.name}' drafts only with {wanted}, and this run offers {offered}: "
        "it would run as plain decoding"
    )
