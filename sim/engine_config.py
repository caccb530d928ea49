"""What the simulated inference engine is configured with and what it supports.

A leaf module: the engine, its workers and the policies' view all read these, and none of
them may import the engine to get them (sim modules import each other without cycles).
"""

from __future__ import annotations

from dataclasses import dataclass

from simctl.policies.contract import Capability

SIM_CAPABILITIES = frozenset(
    {
        Capability.PLACE,
        Capability.CHUNK,
        Capability.PRIORITY,
        Capability.MIGRATE,
        Capability.SPEC_PER_WORKER,
        Capability.SPEC_PER_REQUEST,
        Capability.ROLES,
        Capability.DEFER,
        Capability.DECOUPLED,
        Capability.REPLICAS,
    }
)


@dataclass
class EngineConfig:
    """Per-worker inference-engine settings (vLLM defaults unless noted)."""

    max_num_seqs: int = 256  # vLLM scheduler default
    kv_watermark: float = 0.01  # vLLM keeps 1% of KV blocks free at admission
    # A request whose chunk ended keeps its KV in a cluster-wide pool (Seer's global KV
    # cache, §4.1), so its next dispatch re-prefills nothing. False: recompute.
    kv_pool: bool = True
    per_iteration: bool = False  # reference mode: one event per decode iteration
