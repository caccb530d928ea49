"""Running policies live, one after the other over the same workload, on fresh engines.

Fresh engines per policy (sharing the loaded weights) so that no drafter cache or queue
carries over from one policy's run into the next one's timings.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from simctl.live.backend import EngineWorker, TorchWorker
from simctl.live.drafters import KNOWN as KNOWN_METHODS
from simctl.live.drafters import DrafterSet
from simctl.live.executor import TORCH_CAPABILITIES, ExecutorConfig, LiveError, LiveExecutor
from simctl.live.models import LoadedModel
from simctl.live.recorder import PolicyRun
from simctl.live.view import CostModelMissing
from simctl.live.workload import Workload
from simctl.policies.contract import Capability, ModelInfo, Policy
from simctl.policies.registry import make_policy


@dataclass
class TorchBackend:
    """Builds one TorchEngine per worker over shared weights."""

    model: LoadedModel
    seed: int
    temperature: float
    stop_on_eos: bool
    max_num_seqs: int
    device: str = "cpu"
    small: Any | None = None
    shared: dict[str, Any] = field(default_factory=dict)
    capabilities: frozenset[Capability] = TORCH_CAPABILITIES
    # every trace method runs (some approximated: history -> suffix, eagle -> W4 self-draft)
    draft_methods: frozenset[str] = frozenset(KNOWN_METHODS)

    def engines(self, n: int, policy: Policy | None = None) -> list[EngineWorker]:
        from simctl.live.torch_engine import TorchEngine

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


@dataclass(frozen=True)
class BackendSpec:
    """Everything needed to build a backend from scratch, picklable: `simctl live --ray`
    sends it to each worker's actor, which loads the model on its own device."""

    backend: str  # "torch" or "vllm"
    model: str
    seed: int
    temperature: float
    stop_on_eos: bool
    max_num_seqs: int
    device: str = "cpu"
    draft_model: str | None = None
    threads: int = 1
    kv_gib: float = 2.0

    @property
    def capabilities(self) -> frozenset[Capability]:
        if self.backend == "vllm":
            from simctl.live.vllm_backend import VLLM_CAPABILITIES

            return VLLM_CAPABILITIES
        return TORCH_CAPABILITIES

    @property
    def draft_methods(self) -> frozenset[str]:
        if self.backend == "vllm":
            from simctl.live.vllm_backend import VLLM_DRAFT_METHODS

            return VLLM_DRAFT_METHODS
        return frozenset(KNOWN_METHODS)

    def __call__(self) -> Backend:
        if self.backend == "vllm":
            from simctl.live.models import load_model
            from simctl.live.vllm_backend import VllmBackend

            path = load_model(self.model, device="cpu", seed=self.seed).path
            if path is None:
                raise LiveError("backend 'vllm' needs a model directory (smollm2 or a HF dir)")
            return VllmBackend(
                path,
                self.seed,
                self.temperature,
                self.stop_on_eos,
                self.max_num_seqs,
                threads=self.threads,
                kv_gib=self.kv_gib,
            )
        import torch

        from simctl.live.models import load_model

        torch.set_num_threads(self.threads)
        loaded = load_model(self.model, device=self.device, seed=self.seed)
        small = (
            load_model(self.draft_model, device=self.device, seed=self.seed + 1).model
            if self.draft_model
            else None
        )
        return TorchBackend(
            loaded, self.seed, self.temperature, self.stop_on_eos, self.max_num_seqs, self.device, small
        )


class Backend(Protocol):
    capabilities: frozenset[Capability]
    draft_methods: frozenset[str]

    def engines(self, n: int, policy: Policy | None = None) -> list[EngineWorker]: ...


def run_policies(
    policy_specs: Sequence[str],
    backend: Backend,
    workload: Workload,
    info: ModelInfo,
    *,
    workers: int,
    config: ExecutorConfig,
    cost_model: object | None = None,
    on_progress: Callable[[str, LiveExecutor], None] | None = None,
) -> tuple[list[PolicyRun], str | None]:
    """(runs, error): each policy over the whole workload. A failure stops everything and
    is returned as one line; the failed run keeps its completed steps (and the failed
    step's partial record), so callers can still write what was done."""
    runs: list[PolicyRun] = []
    for spec in policy_specs:
        policy = make_policy(spec)
        run = PolicyRun(name=policy.name, params=policy.params())
        runs.append(run)
        try:
            engines = backend.engines(workers, policy)
        except Exception as exc:
            run.error = (
                f"engine start failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            )
            return runs, run.error
        ex = LiveExecutor(
            policy,
            engines,
            workload,
            info,
            config=config,
            capabilities=backend.capabilities,
            draft_methods=backend.draft_methods,
            cost_model=cost_model,
            on_progress=(lambda e, name=policy.name: on_progress(name, e)) if on_progress else None,
        )
        t0 = time.perf_counter()
        error = None
        try:
            ex.run()
        except (LiveError, CostModelMissing) as exc:
            error = str(exc)
        finally:
            run.wall_s = time.perf_counter() - t0
            run.records = list(ex.records) + ([ex.partial] if ex.partial is not None else [])
            run.approximated = ex.approximated
            run.overhead = ex.overhead
        if error:
            run.error = error
            return runs, error
    return runs, None
