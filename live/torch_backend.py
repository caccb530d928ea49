"""The torch-native backend: `TorchEngine`s behind the executor's `EngineWorker` interface.

Imports torch (through the engine): only the backend factory (live/backend_factory.py)
imports this module, when a run asks for the torch backend.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from simctl.live.backend import Delta, EngineWorker, StepTiming
from simctl.live.capabilities import TORCH_CAPABILITIES, TORCH_DRAFT_METHODS
from simctl.live.drafters import DrafterSet
from simctl.live.errors import LiveError
from simctl.live.models import LoadedModel
from simctl.live.torch_engine import TorchEngine
from simctl.live.trace_acceptance import MethodAcceptance, MissingAcceptance, TraceAcceptance
from simctl.policies.contract import Capability, Policy, SpecConfig


class TorchWorker:
    """A `TorchEngine` behind the `EngineWorker` interface.

    Engine request ids are the executor's sampling keys, so a request re-dispatched after a
    chunk or migrated to another worker continues the same position-seeded stream.

    A request added with a replayed trace's `acceptance` is verified synthetically at the
    trace's rates for the method it speculates with (live/torch_engine/engine.py), per
    request and per response-position bucket: nothing is approximated. A method the trace
    has no `accept_<method>` for stops the run (one line), as in the simulator.
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
        self._acceptance: dict[int, TraceAcceptance] = {}
        self._timing = StepTiming()

    def _synthetic(self, request: int, spec: SpecConfig) -> MethodAcceptance | None:
        acc = self._acceptance.get(request)
        if acc is None or not spec.enabled or spec.method is None or spec.gamma <= 0:
            return None
        try:
            return acc.for_method(spec.method)
        except MissingAcceptance as exc:
            raise LiveError(str(exc)) from None

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
        acceptance: TraceAcceptance | None = None,
    ) -> list[str]:
        drafter, gamma, notes = self._drafter(spec)
        if acceptance is not None:
            self._acceptance[request] = acceptance
        synthetic = self._synthetic(request, spec)
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
            acceptance=synthetic,
        )
        self._keys[request] = key
        self._ids[key] = request
        return notes

    def set_spec(self, request: int, spec: SpecConfig) -> list[str]:
        drafter, gamma, notes = self._drafter(spec)
        synthetic = self._synthetic(request, spec)
        self.engine.set_speculation(self._keys[request], drafter, gamma, synthetic)
        return notes

    def abort(self, request: int) -> None:
        key = self._keys.pop(request, None)
        if key is not None:
            del self._ids[key]
            self.engine.abort(key)
        self._acceptance.pop(request, None)

    def step(self) -> list[Delta]:
        out = []
        for d in self.engine.step():
            rid = self._ids[d.request_id]
            if d.finished:
                del self._ids[d.request_id]
                del self._keys[rid]
                self._acceptance.pop(rid, None)
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


@dataclass
class TorchBackend:
    """Builds one TorchEngine per worker over shared weights.

    Fresh engines per policy (sharing the loaded weights) so that no drafter cache or queue
    carries over from one policy's run into the next one's timings."""

    model: LoadedModel
    seed: int
    temperature: float
    stop_on_eos: bool
    max_num_seqs: int
    device: str = "cpu"
    small: Any | None = None
    shared: dict[str, Any] = field(default_factory=dict)
    capabilities: frozenset[Capability] = TORCH_CAPABILITIES
    draft_methods: frozenset[str] = TORCH_DRAFT_METHODS

    def engines(self, n: int, policy: Policy | None = None) -> list[EngineWorker]:
        out: list[EngineWorker] = []
        for _ in range(n):
            engine = TorchEngine(self.model.model, device=self.device, max_batch=self.max_num_seqs)
            out.append(
                TorchWorker(
                    engine,
                    DrafterSet(self.model.model, self.small, self.shared),
                    seed=self.seed,
                    temperature=self.temperature,
                    stop_token_ids=None if self.stop_on_eos else (),
                )
            )
        return out
