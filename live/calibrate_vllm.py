"""`simctl calibrate --backend vllm`: decode, prefill and verify costs of in-process
vLLM engines (the vLLM venv of live/vllm_cpu/install.sh), in the same `simctl-profile/1`
rows as the torch backend.

- decode: b requests with `ctx`-token prompts; the first step(s) prefill them (timed as a
  prefill row, minus one decode step, as for the torch backend), then decode steps are
  timed. vLLM's paged cache has no padding, so real prompts are used.
- verify, per draft length gamma (--gammas): an engine with vLLM's n-gram speculator
  (`num_speculative_tokens` = gamma, prompt lookup 2..4, as `simctl live --backend vllm`
  starts it). Drafts cannot be forced, so the prompts make the n-gram lookup succeed:
  k of the b requests get a periodic prompt (a short random pattern repeated, so every
  2-4-token suffix has an earlier match) and the others a random one, for k = 1 and b.
  What was really drafted in each timed step is read from vLLM's own counter
  (`vllm:spec_decode_num_draft_tokens`), so a row's new_tokens = b + drafted is measured,
  not assumed (a step that drafted nothing is no verify step and is left out; twice
  --repeats steps are run so that enough of them drafted).
- draft:ngram / draft:suffix rows of ~0 s: vLLM's proposer runs inside the step, so its
  cost is in the verify rows already (the simulator adds draft time on top).
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from simctl.live.profile_rows import Sweep, measurement_row

PERIOD = 7  # tokens in the repeated pattern of a prompt the n-gram lookup always matches
IN_STEP_DRAFTERS = ("ngram", "suffix")  # vLLM proposes inside its step: draft time is in verify


class VllmCalibrator:
    def __init__(
        self,
        model_dir: str,
        vocab: int,
        *,
        seed: int = 0,
        threads: int = 1,
        kv_gib: float = 2.0,
        temperature: float = 1.0,
        log: Callable[[str], None] | None = None,
    ) -> None:
        from simctl.live.vllm_backend import set_vllm_env

        set_vllm_env(threads, kv_gib)
        from simctl.live.vllm_cpu.plugin import register

        register()
        self.model_dir, self.vocab, self.seed = model_dir, vocab, seed
        self.temperature = temperature
        self.log = log or (lambda _m: None)
        self._engine_obj: Any = None

    def _new_engine(self, max_num_seqs: int, **extra: Any) -> Any:
        """An fp32 engine without CUDA graphs: the settings vLLM runs with on CPU."""
        from vllm import EngineArgs, LLMEngine

        args = EngineArgs(
            model=self.model_dir,
            dtype="float32",
            enforce_eager=True,
            seed=self.seed,
            max_num_seqs=max_num_seqs,
            **extra,
        )
        return LLMEngine.from_engine_args(args)

    def _engine(self, max_num_seqs: int) -> Any:
        if self._engine_obj is None:
            self._engine_obj = self._new_engine(max_num_seqs)
        return self._engine_obj

    def _prompt(self, i: int, n: int) -> list[int]:
        import torch

        g = torch.Generator().manual_seed(self.seed * 100003 + i)
        return torch.randint(3, self.vocab, (n,), generator=g).tolist()

    def _submit(self, engine: Any, tag: str, prompts: list[list[int]], max_tokens: int) -> list[str]:
        """Add requests that ignore EOS (their lengths are the sweep's), by fresh ids, sampled
        as `simctl live --backend vllm` samples them (position-keyed at the run's
        temperature): keyed sampling's own cost per iteration (a float64 inverse CDF per
        row) is part of what a live iteration costs, and a greedy calibration left it out
        (decode steps measured 37% under a live run's at batch 64 with SmolLM2)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        from simctl.live.torch_engine.sampling import request_key
        from simctl.live.vllm_keyed_sampling import STREAM_KEY

        ids = [f"{tag}-{time.perf_counter_ns()}-{i}" for i in range(len(prompts))]
        for rid, prompt in zip(ids, prompts, strict=True):
            params = SamplingParams(
                max_tokens=max_tokens,
                temperature=self.temperature,
                ignore_eos=True,
                output_kind=RequestOutputKind.DELTA,
                detokenize=False,
                extra_args={STREAM_KEY: request_key(self.seed, rid)} if self.temperature > 0 else None,
            )
            engine.add_request(rid, TokensPrompt(prompt_token_ids=prompt), params)
        return ids

    @staticmethod
    def _prefill(engine: Any, ids: list[str]) -> None:
        """Step until every request produced its first token (chunked prefill may take
        several steps)."""
        produced: set[str] = set()
        while len(produced) < len(ids):
            produced.update(o.request_id for o in engine.step() if o.outputs and o.outputs[0].token_ids)

    @staticmethod
    def _drain(engine: Any, ids: list[str]) -> None:
        engine.abort_request(ids)
        while engine.has_unfinished_requests():
            engine.step()

    def _measure(self, engine: Any, b: int, ctx: int, repeats: int) -> tuple[float, float]:
        """(first step seconds, median decode step seconds) for b fresh requests."""
        ids = self._submit(engine, "cal", [self._prompt(i, ctx) for i in range(b)], repeats + 4)
        t0 = time.perf_counter()
        self._prefill(engine, ids)
        first = time.perf_counter() - t0
        steps = []
        for _ in range(repeats):
            t = time.perf_counter()
            engine.step()
            steps.append(time.perf_counter() - t)
        self._drain(engine, ids)
        return first, statistics.median(steps)

    def _periodic(self, i: int, n: int, period: int = PERIOD) -> list[int]:
        """A random pattern of `period` tokens repeated to `n` tokens."""
        pattern = self._prompt(50_000 + i, period)
        return (pattern * (n // period + 1))[:n]

    def _spec_engine(self, gamma: int, max_num_seqs: int) -> Any:
        from simctl.live.vllm_backend import speculative_config
        from simctl.policies.contract import SpecConfig

        spec = speculative_config(SpecConfig(method="ngram", gamma=gamma))
        return self._new_engine(max_num_seqs, speculative_config=spec, disable_log_stats=False)

    def measure_verify(
        self,
        engine: Any,
        b: int,
        ctx: int,
        k: int,
        gamma: int,
        repeats: int,
        drafted_total: Callable[[], float] | None = None,
    ) -> tuple[float, float, int]:
        """(median step seconds, median tokens drafted per step, steps that drafted) for b
        requests of which k have periodic prompts, after their prefill and one warm-up step."""
        counter = drafted_total or draft_tokens_counter
        prompts = [self._periodic(i, ctx) if i < k else self._prompt(i, ctx) for i in range(b)]
        ids = self._submit(engine, "cal-v", prompts, (repeats + 2) * (gamma + 1) + 8)
        self._prefill(engine, ids)
        engine.step()
        steps, drafted = [], []
        for _ in range(repeats):
            d0 = counter()
            t = time.perf_counter()
            engine.step()
            dt = time.perf_counter() - t
            d = counter() - d0
            if d > 0:
                steps.append(dt)
                drafted.append(d)
        self._drain(engine, ids)
        if not steps:
            return 0.0, 0.0, 0
        return statistics.median(steps), statistics.median(drafted), len(steps)

    def verify_rows(self, sweep: Sweep) -> list[dict]:
        out = []
        for gamma in sweep.gammas:
            engine = self._spec_engine(gamma, max(sweep.batches))
            self.measure_verify(engine, 1, 16, 1, gamma, 2)  # warm-up
            for b in sweep.batches:
                for ctx in sweep.contexts:
                    for k in sorted({1, b}):
                        t, d, n_steps = self.measure_verify(engine, b, ctx, k, gamma, 2 * sweep.repeats)
                        if not n_steps:
                            self.log(
                                f"vllm verify b={b} ctx={ctx} gamma={gamma} k={k}: nothing drafted, no row"
                            )
                            continue
                        total = b * (ctx + 1 + sweep.repeats // 2)
                        out.append(measurement_row("verify", b, b + round(d), total, gamma, t))
                        self.log(
                            f"vllm verify b={b} ctx={ctx} gamma={gamma} periodic={k}: {t * 1e3:.1f} ms, "
                            f"{d:.0f} drafted"
                        )
            del engine
            gc.collect()
        return out

    def rows(self, sweep: Sweep) -> list[dict]:
        out = []
        plain = self._engine(max(sweep.batches))
        self._measure(plain, 1, 16, 2)  # warm-up
        for b in sweep.batches:
            for ctx in sweep.contexts:
                first, step = self._measure(plain, b, ctx, sweep.repeats)
                total = b * (ctx + 1 + sweep.repeats // 2)
                out.append(measurement_row("decode", b, b, total, 0, step))
                out.append(measurement_row("prefill", 1, b * ctx, b * ctx, 0, max(first - step, 1e-6)))
                self.log(f"vllm decode b={b} ctx={ctx}: {step * 1e3:.1f} ms, prefill {first * 1e3:.0f} ms")
        self._engine_obj = plain = None
        gc.collect()
        if sweep.gammas:
            out += self.verify_rows(sweep)
            g, ctx = max(sweep.gammas), min(sweep.contexts)
            out += [
                measurement_row(f"draft:{m}", b, b, b * ctx, g, 1e-7)
                for m in IN_STEP_DRAFTERS
                for b in sweep.batches
            ]
        return out


def draft_tokens_counter() -> float:
    """vLLM's running total of proposed draft tokens (all engines of this process)."""
    from vllm.v1.metrics.reader import Counter, get_metrics_snapshot

    return float(
        sum(
            m.value
            for m in get_metrics_snapshot()
            if isinstance(m, Counter) and m.name == "vllm:spec_decode_num_draft_tokens"
        )
    )


def vllm_profile(
    loaded: Any,
    sweep: Sweep,
    *,
    threads: int,
    kv_gib: float,
    log: Callable[[str], None] | None = None,
    seed: int = 0,
    temperature: float = 1.0,
) -> dict[str, Any]:
    from simctl.live.models import kv_capacity_tokens

    if loaded.path is None:
        raise ValueError("backend 'vllm' needs a model directory (smollm2 or a HF dir), not random:")
    t0 = time.perf_counter()
    cal = VllmCalibrator(
        loaded.path,
        loaded.vocab_size,
        seed=seed,
        threads=threads,
        kv_gib=kv_gib,
        temperature=temperature,
        log=log,
    )
    rows = cal.rows(sweep)
    return {
        "format": "simctl-profile/1",
        "backend": "vllm",
        "model": loaded.catalogue if loaded.catalogue != "unknown" else loaded.name,
        "device": "cpu",
        "tp": 1,
        "kv_capacity_tokens": kv_capacity_tokens(loaded, kv_gib),
        "weight_bytes_per_gpu": float(sum(p.numel() * p.element_size() for p in loaded.model.parameters())),
        "measurements": rows,
        "notes": {
            "kv_capacity_tokens": f"VLLM_CPU_KVCACHE_SPACE={kv_gib:g} GiB / the model's KV bytes per token",
            "threads": threads,
            "seconds": round(time.perf_counter() - t0, 1),
            "method": "in-process LLMEngine.step() medians (decode, prefill; verify with vLLM's n-gram "
            "speculator, drafted tokens from its counter); draft rows ~0 s (drafting is inside the step)",
        },
    }


def default_vllm_sweep(
    batches: Sequence[int] | None,
    contexts: Sequence[int] | None,
    repeats: int,
    gammas: Sequence[int] | None = None,
) -> Sweep:
    return Sweep(
        batches=tuple(batches or (1, 4, 16, 32)),
        contexts=tuple(contexts or (64, 256)),
        gammas=tuple(gammas or (4,)),
        drafters=(),
        repeats=repeats,
    )
