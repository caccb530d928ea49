"""Fixed speculation: the vanilla coupled draft-then-verify baselines."""

from __future__ import annotations

from simctl.policies.contract import (
    Action,
    Capability,
    ClusterView,
    Event,
    Policy,
    SetSpec,
    SpecConfig,
    StepStarted,
)


class FixedSpeculation(Policy):
    """Same method and draft length for every worker, for the whole run."""

    requires = frozenset({Capability.SPEC_PER_WORKER})

    def __init__(self, method: str, gamma: int = 4) -> None:
        self.spec = SpecConfig(method=method, gamma=gamma)
        self.name = f"fixed-{method}"

    def on_event(self, event: Event, view: ClusterView) -> list[Action]:
        if not isinstance(event, StepStarted):
            return []
        return [SetSpec(spec=self.spec, worker=w) for w in range(view.num_workers)]
