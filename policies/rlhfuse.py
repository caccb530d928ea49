"""RLHFuse-style stage fusion: a worker whose rollout batch is done starts the prepare and
learn phases of that batch while slower workers are still generating (SpecActor §2.2,
Fig. 3a). Rollout itself is not faster; end-to-end step time is, because the executor
counts trainer-role GPU-seconds during rollout as non-rollout work already done.
"""

from __future__ import annotations

from simctl.policies.contract import Action, Capability, ClusterView, Event, Policy, Role, SetRole, WorkerIdle


class IdleWorkersTrain(Policy):
    """Hand every worker that runs dry to the trainer for the rest of the step."""

    name = "idle-train"
    requires = frozenset({Capability.ROLES})

    def on_event(self, event: Event, view: ClusterView) -> list[Action]:
        if isinstance(event, WorkerIdle) and view.unfinished_count() > 0:
            return [SetRole(worker=event.worker, role=Role.TRAINER)]
        return []
