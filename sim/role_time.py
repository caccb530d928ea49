"""Seconds each worker spends in given roles, from its role changes (the roles table's rows).

GPU-idle accounting (a lent worker is not idle) and step time (GPU-seconds training
alongside rollout) need it, in the simulator and in the live recorder alike: one
definition, so both measure the same thing.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

import numpy as np

from simctl.policies.contract import Role

# Roles in which a worker's GPUs are lent away from rollout: not idle, though not decoding
LENT_ROLES: frozenset[str] = frozenset({Role.DRAFTER, Role.VERIFIER, Role.SPOT_TRAINER, Role.TRAINER})


def role_seconds(
    roles: Iterable[tuple[int, float, str]], n_workers: int, makespan: float, wanted: Collection[str]
) -> np.ndarray:
    """Per worker: seconds spent in one of `wanted` before the makespan. `roles`: role
    changes (worker, time_s, role) in time order; a worker's last role lasts to the makespan."""
    out = np.zeros(n_workers)
    current: dict[int, tuple[float, str]] = {}
    for w, t, role in roles:
        if w in current and current[w][1] in wanted:
            out[w] += max(0.0, min(t, makespan) - current[w][0])
        current[w] = (t, role)
    for w, (t, role) in current.items():
        if role in wanted:
            out[w] += max(0.0, makespan - t)
    return out
