"""`simctl calibrate --backend torch`: the torch engine's iteration costs (see
live/calibrate.py for what is measured and why), as `simctl-profile/1` rows."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import click

from simctl.live.profile_rows import Sweep, measurement_row

# Trace draft methods whose cost-model name differs (sim/engine.py DRAFTERS); the torch
# backend runs draft_small as the W4 self-drafter unless a small model is given.
DRAFT_SMALL_KIND = "draft:model:qwen2.5-0.5b"


class _FixedDrafter:
    """Proposes k tokens (deterministic junk: a verify forward of full width) for requests
    whose first prompt token is in `active` (all when None), nothing for the others."""

    def __init__(self, vocab: int, active: set[int] | None = None) -> None:
        self.vocab = vocab
        self.active = active

    def propose(self, request_tokens: list[int], group_tokens: list[list[int]], k: int) -> list[int]:
        if self.active is not None and request_tokens[0] not in self.active:
            return []
        t = request_tokens[-1]
        return [(t * 7 + 13 * (i + 1)) % self.vocab for i in range(k)]


class Calibrator:
    """Times TorchEngine steps for one model (weights shared by every engine built)."""

    def __init__(
        self, model: Any, *, device: str = "cpu", seed: int = 0, log: Callable[[str], None] | None = None
    ) -> None:
        import torch

        self.torch = torch
        self.model = model
        self.device = device
        self.seed = seed
        self.log = log or (lambda _m: None)
        self.vocab = int(model.get_output_embeddings().weight.shape[0])
        cfg = model.config
        self.layers = cfg.num_hidden_layers
        self.kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.dtype = next(model.parameters()).dtype

    def _engine(self, b: int):
        from simctl.live.torch_engine import TorchEngine

        return TorchEngine(self.model, device=self.device, dtype=self.dtype, max_batch=max(b, 1))

    def _prompt(self, i: int, n: int) -> list[int]:
        """Random tokens; the first one differs between the requests of a batch, which is how
        `_FixedDrafter` tells them apart."""
        g = self.torch.Generator().manual_seed(self.seed * 100003 + i)
        out = self.torch.randint(3, self.vocab, (n,), generator=g).tolist()
        out[0] = 3 + i % (self.vocab - 3)
        return out

    def _with_context(self, b: int, ctx: int, drafter: Any = None, gamma: int = 0):
        """An engine whose b requests each already hold `ctx` cached tokens."""
        from simctl.live.torch_engine import KVBuffer

        eng = self._engine(b)
        for i in range(b):
            eng.add_request(i, self._prompt(i, ctx + 1), 1 << 20, self.seed, (), drafter, gamma)
        reqs = getattr(eng, "_requests", None)
        if reqs is None:  # pragma: no cover - engine internals changed: fall back to a real prefill
            eng.step()
            return eng
        g = self.torch.Generator().manual_seed(self.seed)
        for i in range(b):
            kv = KVBuffer()
            shape = (self.layers, 2, self.kv_heads, ctx, self.head_dim)
            kv.append(self.torch.randn(shape, generator=g, dtype=self.dtype).to(self.device) * 0.5)
            reqs[i].kv = kv
        return eng

    def _time_steps(self, eng: Any, repeats: int) -> tuple[float, float, float]:
        """Medians of (step seconds, draft seconds, step CPU seconds of this thread) over
        `repeats` steps after one warm-up."""
        eng.step()
        steps, drafts, cpus = [], [], []
        for _ in range(repeats):
            c0 = time.thread_time()
            t0 = time.perf_counter()
            eng.step()
            steps.append(time.perf_counter() - t0)
            cpus.append(time.thread_time() - c0)
            drafts.append(eng.last_step.draft_s)
        return statistics.median(steps), statistics.median(drafts), statistics.median(cpus)

    def decode(self, sweep: Sweep) -> list[dict]:
        rows = []
        for b in sweep.batches:
            for ctx in sweep.contexts:
                t, _, cpu = self._time_steps(self._with_context(b, ctx), sweep.repeats)
                # One warm-up + one timed step per repeat grew each context by 1 + repeats/2.
                rows.append(measurement_row("decode", b, b, b * (ctx + 1 + sweep.repeats // 2), 0, t, cpu))
                self.log(f"decode b={b} ctx={ctx}: {t * 1e3:.1f} ms")
        return rows

    def verify(self, sweep: Sweep) -> list[dict]:
        """Verify iterations with every request drafting gamma tokens and (b > 1) with only
        one drafting: real drafters often propose nothing (an n-gram lookup without a
        match), and `new_tokens` = b + drafted tokens is what the cost then depends on (the
        torch engine pads the forward to the widest request but samples only real rows)."""
        rows = []
        for b in sweep.batches:
            for ctx in sweep.contexts:
                firsts = [self._prompt(i, ctx + 1)[0] for i in range(b)]
                for g in sweep.gammas:
                    for k in sorted({1, b}):
                        drafter = _FixedDrafter(self.vocab, None if k == b else set(firsts[:k]))
                        eng = self._with_context(b, ctx, drafter, g)
                        t, d, cpu = self._time_steps(eng, sweep.repeats)
                        n = b + (eng.last_step.num_drafted if eng.last_step else k * g)
                        rows.append(
                            measurement_row(
                                "verify", b, n, b * (ctx + 1 + sweep.repeats // 2), g, t - d, cpu - d
                            )
                        )
                        self.log(f"verify b={b} ctx={ctx} gamma={g} drafting={k}: {(t - d) * 1e3:.1f} ms")
        return rows

    def prefill(self, sweep: Sweep) -> list[dict]:
        rows = []
        for b, n in sweep.prefill:
            firsts, decodes, cpu_firsts, cpu_decodes = [], [], [], []
            for r in range(max(1, sweep.repeats - 1)):
                eng = self._engine(b)
                for i in range(b):
                    eng.add_request(i, self._prompt(1000 * r + i, n), 1 << 20, self.seed, ())
                c0, t0 = time.thread_time(), time.perf_counter()
                eng.step()
                c1, t1 = time.thread_time(), time.perf_counter()
                eng.step()
                firsts.append(t1 - t0)
                decodes.append(time.perf_counter() - t1)
                cpu_firsts.append(c1 - c0)
                cpu_decodes.append(time.thread_time() - c1)
            t = statistics.median(firsts) - statistics.median(decodes)
            cpu = statistics.median(cpu_firsts) - statistics.median(cpu_decodes)
            rows.append(measurement_row("prefill", 1, b * n, b * n, 0, t, cpu))
            self.log(f"prefill {b}x{n}: {t * 1e3:.1f} ms")
        return rows

    def drafter(self, name: str, sweep: Sweep, small: Any = None) -> list[dict]:
        """Time the drafter's batched proposal call alone (what the engine's draft phase
        runs), after one call that lets model drafters build their prefix caches."""
        from simctl.live.drafters import model_free_drafter
        from simctl.live.torch_engine import ModelDrafter, propose_many, quantize_w4_rtn

        gamma = max(sweep.gammas)
        if name in ("ngram", "suffix"):
            drafter = model_free_drafter(name)
            batches, contexts = sweep.batches, sweep.contexts
        elif name == "w4-self" or (name.startswith("model:") and small is not None):
            drafter = ModelDrafter(quantize_w4_rtn(self.model) if name == "w4-self" else small)
            batches, contexts = sweep.batches[:2], sweep.contexts[:1]
        else:
            raise click.ClickException(f"calibrate: unknown drafter '{name}' (ngram, suffix, w4-self)")
        rows = []
        for b in batches:
            for ctx in contexts:
                seqs = [self._prompt(i, ctx) for i in range(b)]
                group = [seqs[:2] for _ in range(b)]
                times, cpus = [], []
                for r in range(sweep.repeats + 1):
                    items = [(s, [g for g in group[i] if g is not s], gamma) for i, s in enumerate(seqs)]
                    c0, t0 = time.thread_time(), time.perf_counter()
                    propose_many(drafter, items)
                    if r:
                        times.append(time.perf_counter() - t0)
                        cpus.append(time.thread_time() - c0)
                    for s in seqs:
                        s.append(s[-1])  # one more token per step, as decoding does
                d = statistics.median(times)
                rows.append(
                    measurement_row(
                        f"draft:{name}",
                        b,
                        b,
                        b * (ctx + 1 + sweep.repeats // 2),
                        gamma,
                        d,
                        statistics.median(cpus),
                    )
                )
                self.log(f"draft:{name} b={b} ctx={ctx}: {d * 1e3:.2f} ms")
        return rows


def kv_capacity(loaded: Any, device: str, budget_gib: float | None) -> tuple[int, str]:
    from simctl.live.models import DEFAULT_KV_BUDGET_GIB, kv_capacity_tokens

    if device == "cuda" and budget_gib is None:
        import torch

        free, _ = torch.cuda.mem_get_info()
        cap = max(1, int(free * 0.9) // loaded.kv_bytes_per_token())
        return cap, f"90% of free CUDA memory after weights ({free / 2**30:.1f} GiB)"
    budget = budget_gib or DEFAULT_KV_BUDGET_GIB
    return kv_capacity_tokens(loaded, budget), f"documented CPU budget of {budget:g} GiB per worker"


def calibrate_profile(
    loaded: Any,
    *,
    device: str,
    sweep: Sweep,
    budget_gib: float | None = None,
    small: Any = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    cal = Calibrator(loaded.model, device=device, log=log)
    t0 = time.perf_counter()
    rows = cal.decode(sweep) + cal.verify(sweep) + cal.prefill(sweep)
    notes = {}
    for d in sweep.drafters:
        drows = cal.drafter(d, sweep, small)
        rows += drows
        if d == "w4-self" and small is None:
            rows += [dict(r, kind=DRAFT_SMALL_KIND) for r in drows]
            notes[DRAFT_SMALL_KIND] = (
                "measured with the W4 self-drafter, which the torch backend runs for draft_small"
            )
    cap, cap_note = kv_capacity(loaded, device, budget_gib)
    import torch

    timed = [r for r in rows if "cpu_s" in r and r["kind"] in ("decode", "verify")]
    if timed:
        notes["cpu_share"] = round(sum(r["cpu_s"] for r in timed) / sum(r["time_s"] for r in timed), 3)

    return {
        "format": "simctl-profile/1",
        "backend": "torch",
        "model": loaded.catalogue if loaded.catalogue != "unknown" else loaded.name,
        "device": device,
        "tp": 1,
        "kv_capacity_tokens": cap,
        "weight_bytes_per_gpu": float(sum(p.numel() * p.element_size() for p in loaded.model.parameters())),
        "measurements": rows,
        "notes": {
            "kv_capacity_tokens": cap_note,
            "threads": torch.get_num_threads(),
            "seconds": round(time.perf_counter() - t0, 1),
            "method": "TorchEngine.step() medians; decode/verify over random KV contexts",
            "cpu_s": "per row, this thread's CPU time in the same steps; notes.cpu_share (decode and "
            "verify CPU over wall time) well below 1 means other processes took the core while measuring",
            **notes,
        },
    }
