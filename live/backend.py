"""What the executor needs from one rollout worker's engine, and the torch-native backend.

The executor owns scheduling (admission order, batch cap, chunks, migration); an engine
only runs what it was given, one iteration per `step()`. Keeping the interface this small is
what lets the same executor drive the torch engine, vLLM, or a scripted fake in tests.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from simctl.live.drafters import DrafterSet
from simctl.live.torch_engine import TorchEngine
from simctl.policies.contract import SpecConfig


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
    ) -> list[str]:
        """Start generating; `key` fixes the request's sampling stream (the same key and
        prompt give the same tokens on any worker). Returns approximation notes."""
        ...

    def set_spec(self, request: int, spec: SpecConfig) -> list[str]: ...

    def abort(self, request: int) -> None: ...

    def step(self) -> list[Delta]: ...

    @property
    def running(self) -> int: ...

    @property
    def last_timing(self) -> StepTiming: ...


class TorchWorker:
    """A `TorchEngine` behind the `EngineWorker` interface.

    Engine request ids are the executor's sampling keys, so a request re-dispatched after a
    chunk or migrated to another worker continues the same position-seeded stream.
    """

    def __init__(
        self,
        engine: TorchEngine,
        drafters: DrafterSet,
        *,
        seed: int,
        temperature: float,
        top_p: float = 1.0,
        stop_token_ids: Sequence[int] | None = None,
    ) -> None:
        self.engine = engine
        self.drafters = drafters
        self.seed = seed
        self.temperature = temperature
        self.top_p = top_p
        self.stop_token_ids = stop_token_ids
        self._keys: dict[int, Hashable] = {}
        self._ids: dict[Hashable, int] = {}
        self._timing = StepTiming()

    def _drafter(self, spec: SpecConfig) -> tuple[Any, int, list[str]]:
        if not spec.enabled or spec.method is None:
            return None, 0, []
        drafter, note = self.drafters.get(spec.method)
        notes = [note] if note else []
        if spec.mode == "decoupled":
            notes.append("decoupled speculation -> coupled (drafter on the verifying worker)")
        if spec.topk > 1:
            notes.append("tree drafting (topk > 1) -> one chain of gamma tokens")
        return drafter, spec.gamma, notes

    def add(
        self,
        request: int,
        key: Hashable,
        prompt: Sequence[int],
        max_tokens: int,
        spec: SpecConfig,
        group: Hashable | None,
    ) -> list[str]:
        drafter, gamma, notes = self._drafter(spec)
        self.engine.add_request(
            key,
            prompt,
            max_tokens,
            self.seed,
            self.stop_token_ids,
            drafter,
            gamma,
            temperature=self.temperature,
            top_p=self.top_p,
            group_id=group,
        )
        self._keys[request] = key
        self._ids[key] = request
        return notes

    def set_spec(self, request: int, spec: SpecConfig) -> list[str]:
        drafter, gamma, notes = self._drafter(spec)
        self.engine.set_speculation(self._keys[request], drafter, gamma)
        return notes

    def abort(self, request: int) -> None:
        key = self._keys.pop(request, None)
        if key is not None:
            del self._ids[key]
            self.engine.abort(key)

    def step(self) -> list[Delta]:
        out = []
        for d in self.engine.step():
            rid = self._ids[d.request_id]
            if d.finished:
                del self._ids[d.request_id]
                del self._keys[rid]
            out.append(
                Delta(
                    rid, d.new_token_ids, d.finished, d.finish_reason == "stop", d.num_drafted, d.num_accepted
                )
            )
        s = self.engine.last_step
        self._timing = StepTiming(s.draft_s, s.forward_s, s.verify_s) if s else StepTiming()
        return out

    @property
    def running(self) -> int:
        return self.engine.num_unfinished

    @property
    def last_timing(self) -> StepTiming:
        return self._timing
