"""Choosing a live backend by name: the factory table.

Each entry says what the backend can carry out (capabilities, draft methods: known without
importing its engine), which modules its engine needs and how to install them, and builds
the backend, importing its engine only then. This is what keeps `simctl live`, `simctl
calibrate` and the executor importable without torch or vLLM: a missing engine is one line
naming the extra to install (`missing_engine`), not an import traceback.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from simctl.live.backend import Backend
from simctl.live.capabilities import (
    TORCH_CAPABILITIES,
    TORCH_DRAFT_METHODS,
    VLLM_CAPABILITIES,
    VLLM_DRAFT_METHODS,
)
from simctl.live.errors import LiveError
from simctl.live.models import LoadedModel, load_model, model_dir
from simctl.policies.contract import Capability

# (the rollout model, the small draft model or None), loaded by the caller
LoadedModels = tuple[LoadedModel, Any]


@dataclass(frozen=True)
class BackendSpec:
    """Everything needed to build a backend from scratch, picklable: `simctl live --ray`
    sends it to each worker's actor, which loads the model on its own device."""

    backend: str  # a key of BACKENDS
    model: str
    seed: int
    temperature: float
    stop_on_eos: bool
    max_num_seqs: int
    device: str = "cpu"
    draft_model: str | None = None
    threads: int = 1
    kv_gib: float = 2.0
    # a replayed trace's per-token acceptance by method (Workload.trace_rates), for engines
    # that inject one rate per engine (vLLM); the torch engine takes each request's own
    trace_rates: tuple[tuple[str, float], ...] = ()

    @property
    def capabilities(self) -> frozenset[Capability]:
        return BACKENDS[self.backend].capabilities

    @property
    def draft_methods(self) -> frozenset[str]:
        return BACKENDS[self.backend].draft_methods

    def build(self, models: LoadedModels | None = None) -> Backend:
        """The backend, over `models` when the caller loaded them already."""
        return BACKENDS[self.backend].build(self, models)

    def __call__(self) -> Backend:
        return self.build()


@dataclass(frozen=True)
class BackendKind:
    """One entry of the factory table."""

    capabilities: frozenset[Capability]
    draft_methods: frozenset[str]
    needs: tuple[str, ...]  # top-level modules the engine imports
    install: str  # one line: what to install when one of them is missing
    build: Callable[[BackendSpec, LoadedModels | None], Backend]


def _torch_backend(spec: BackendSpec, models: LoadedModels | None) -> Backend:
    from simctl.live.torch_backend import TorchBackend

    if models is None:
        import torch

        torch.set_num_threads(spec.threads)
        loaded = load_model(spec.model, device=spec.device, seed=spec.seed)
        small = (
            load_model(spec.draft_model, device=spec.device, seed=spec.seed + 1).model
            if spec.draft_model
            else None
        )
    else:
        loaded, small = models
    return TorchBackend(
        loaded, spec.seed, spec.temperature, spec.stop_on_eos, spec.max_num_seqs, spec.device, small
    )


def _vllm_backend(spec: BackendSpec, models: LoadedModels | None) -> Backend:
    from simctl.live.vllm_backend import VllmBackend

    if spec.model.startswith("random:"):
        raise LiveError("backend 'vllm' needs a model directory (smollm2 or a HF dir), not random:")
    # vLLM loads the weights itself: only the directory is needed here
    if models is None:  # a worker's own process: its torch threads, as `simctl live` sets its own
        import torch

        torch.set_num_threads(spec.threads)
    path = str(model_dir(spec.model)[0]) if models is None else models[0].path
    assert path is not None
    return VllmBackend(
        path,
        spec.seed,
        spec.temperature,
        spec.stop_on_eos,
        spec.max_num_seqs,
        threads=spec.threads,
        kv_gib=spec.kv_gib,
        trace_rates=dict(spec.trace_rates),
    )


TORCH_INSTALL = "pip install 'simctl[torch]'"
BACKENDS: dict[str, BackendKind] = {
    "torch": BackendKind(
        TORCH_CAPABILITIES,
        TORCH_DRAFT_METHODS,
        ("torch", "transformers"),
        f"backend 'torch' needs torch and transformers: {TORCH_INSTALL}",
        _torch_backend,
    ),
    "vllm": BackendKind(
        VLLM_CAPABILITIES,
        VLLM_DRAFT_METHODS,
        ("vllm",),
        "backend 'vllm' needs vllm: pip install 'simctl[live]' (CPU: run live/vllm_cpu/install.sh, "
        "then use .venv-vllm/bin/simctl)",
        _vllm_backend,
    ),
}


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing_engine(backend: str) -> str | None:
    """One line saying what to install when `backend`'s engine cannot be imported (models
    load through torch and transformers whichever backend runs them); None when all is there."""
    for kind in (BACKENDS[backend], BACKENDS["torch"]):
        if not all(_importable(m) for m in kind.needs):
            return kind.install
    return None


def ray_backend(spec: BackendSpec, address: str | None) -> Backend:
    """Each worker's engine in its own Ray actor, built there from `spec` (one GPU each on
    CUDA, else one CPU); raises `RayUnavailable` (one line) without ray."""
    from simctl.live.ray_workers import RayBackend, require_ray

    require_ray()
    return RayBackend(
        spec,
        spec.capabilities,
        spec.draft_methods,
        resources={"num_gpus": 1.0} if spec.device == "cuda" else {"num_cpus": 1.0},
        address=address,
    )
