"""What the executor needs from one rollout worker's engine, and from a backend that builds
one engine per worker.

The executor owns scheduling (admission order, batch cap, chunks, migration); an engine
only runs what it was given, one iteration per `step()`. Keeping the interface this small is
what lets the same executor drive the torch engine (live/torch_backend.py), vLLM
(live/vllm_backend.py), or a scripted fake in tests. This module imports no engine: the
executor and the run drivers import without torch or vLLM installed.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Protocol

from simctl.live.trace_acceptance import TraceAcceptance
from simctl.policies.contract import Capability, Policy, SpecConfig


@dataclass(frozen=True)
class Delta:
    """One engine iteration's effect on one request. `ended` is the engine's view (a stop
    token, or this dispatch's max_tokens); whether the request is done is the executor's."""

    request: int
    tokens: list[int]
    ended: bool
    stopped: bool
    drafted: int
    accepted: int


@dataclass(frozen=True)
class StepTiming:
    """Where one iteration's time went, when the engine can tell (else zeros)."""

    draft_s: float = 0.0
    forward_s: float = 0.0
    sample_s: float = 0.0
    # the whole step as timed in the engine's own process (remote workers); None: the
    # executor's clock around step() is the engine time
    engine_s: float | None = None


class EngineWorker(Protocol):
    """One engine instance serving one rollout worker."""

    def add(
        self,
        request: int,
        key: Hashable,
        prompt: Sequence[int],
        max_tokens: int,
        spec: SpecConfig,
        group: Hashable | None,
        acceptance: TraceAcceptance | None = None,
    ) -> list[str]:
        """Start generating; `key` fixes the request's sampling stream (the same key and
        prompt give the same tokens on any worker). `acceptance`: a replayed trace's rates,
        which drafts are verified at instead of the engine's own verification (what the
        engine cannot honour exactly comes back as notes). Returns approximation notes."""
        ...

    def set_spec(self, request: int, spec: SpecConfig) -> list[str]: ...

    def abort(self, request: int) -> None: ...

    def step(self) -> list[Delta]: ...

    @property
    def running(self) -> int: ...

    @property
    def last_timing(self) -> StepTiming: ...


class Backend(Protocol):
    """Builds the engines of one run's workers (fresh ones per policy)."""

    capabilities: frozenset[Capability]
    draft_methods: frozenset[str]

    def engines(self, n: int, policy: Policy | None = None) -> list[EngineWorker]: ...
