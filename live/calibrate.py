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

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from simctl.live.profile_rows import (
    DEFAULT_BATCHES,
    DEFAULT_CONTEXTS,
    DEFAULT_DRAFTERS,
    DEFAULT_GAMMAS,
    Sweep,
)
from simctl.traces.cli_options import NumberRange, PathArg, seed_option
from simctl.traces.outputs import check_output_file

# The most a measurement may ask for (a larger value is a typo that would run for hours):
# sequences in a batch, tokens of context per sequence, draft length.
MAX_BATCH, MAX_CONTEXT, MAX_GAMMA = 1 << 16, 1 << 20, 64


def _ints(
    text: str | None, default: Sequence[int], most: int = MAX_BATCH, option: str = "--batches"
) -> tuple[int, ...]:
    if not text:
        return tuple(default)
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter(
            f"'{text[:60]}' is not a comma-separated list of integers", param_hint=option
        ) from None
    if not vals or min(vals) < 1 or max(vals) > most:
        raise click.BadParameter(
            f"'{text[:60]}': values must be integers from 1 to {most}", param_hint=option
        )
    return vals


def _drafters(text: str) -> tuple[str, ...]:
    """The drafter names of --drafters, checked before anything is measured."""
    names = tuple(d.strip() for d in text.split(",") if d.strip())
    for name in names:
        if name not in DEFAULT_DRAFTERS and not name.startswith("model:"):
            known = ", ".join(DEFAULT_DRAFTERS)
            raise click.BadParameter(
                f"unknown drafter {name!r} (known: {known}, model:<name>)", param_hint="--drafters"
            )
    return names


@click.command("calibrate")
@click.option("--backend", type=click.Choice(["torch", "vllm"]), default="torch", show_default=True)
@click.option("--model", default="smollm2", show_default=True, help="Same names as `simctl live --model`.")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option(
    "-o",
    "--output",
    type=PathArg(dir_okay=False, path_type=Path),
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
    "--kv-budget-gib", type=NumberRange(min=0.01, max=1e6), help="KV budget per worker (CPU default 4)."
)
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="torch CPU threads; use the live run's (see `simctl live --threads`).",
)
@seed_option()
def calibrate_cmd(
    backend, model, device, output, batches, contexts, gammas, drafters, repeats, kv_budget_gib, threads, seed
) -> None:
    """Measure decode/verify/prefill/drafter costs of BACKEND on MODEL; write a cost profile."""
    from simctl.live.backend_factory import missing_engine
    from simctl.live.models import ModelError, load_model

    missing = missing_engine(backend)
    if missing:
        raise click.ClickException(missing)
    check_output_file(output, what="profile", kind="json")
    sweep = Sweep(  # (every option checked before torch loads or anything is measured)
        batches=_ints(batches, DEFAULT_BATCHES),
        contexts=_ints(contexts, DEFAULT_CONTEXTS, MAX_CONTEXT, "--contexts"),
        gammas=_ints(gammas, DEFAULT_GAMMAS, MAX_GAMMA, "--gammas"),
        drafters=_drafters(drafters),
        repeats=repeats,
    )
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    if threads:
        torch.set_num_threads(threads)
    if device == "cuda" and not torch.cuda.is_available():
        raise click.ClickException("--device cuda: no CUDA device visible to torch")
    try:
        loaded = load_model(model, device=device, seed=seed)
    except ModelError as exc:
        raise click.ClickException(str(exc)) from None
    if backend == "vllm":
        doc = _vllm_doc(loaded, batches, contexts, gammas, repeats, kv_budget_gib, threads, seed, _log)
    else:
        from simctl.live.calibrate_torch import calibrate_profile

        with torch.inference_mode():
            doc = calibrate_profile(loaded, device=device, sweep=sweep, budget_gib=kv_budget_gib, log=_log)
    _write_profile(doc, output)


def _log(message: str) -> None:
    click.echo(message, err=True)


def _vllm_doc(
    loaded: Any,
    batches: str | None,
    contexts: str | None,
    gammas: str | None,
    repeats: int,
    kv_budget_gib: float | None,
    threads: int,
    seed: int,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """The vLLM profile (its own default sweep where an option was not given)."""
    from simctl.live.calibrate_vllm import default_vllm_sweep, vllm_profile
    from simctl.live.models import DEFAULT_KV_BUDGET_GIB

    vsweep = default_vllm_sweep(
        _ints(batches, DEFAULT_BATCHES) if batches else None,
        _ints(contexts, DEFAULT_CONTEXTS, MAX_CONTEXT, "--contexts") if contexts else None,
        repeats,
        _ints(gammas, DEFAULT_GAMMAS, MAX_GAMMA, "--gammas") if gammas else None,
    )
    try:
        return vllm_profile(
            loaded, vsweep, threads=threads, kv_gib=kv_budget_gib or DEFAULT_KV_BUDGET_GIB, log=log, seed=seed
        )
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None


def _write_profile(doc: dict[str, Any], output: Path) -> None:
    from simctl.sim.cost_model import ProfiledCostModel
    from simctl.traces.atomic import atomic_write

    ProfiledCostModel.from_dict(doc, source=str(output))  # never write a profile replay cannot load
    text = json.dumps(doc, indent=1)
    atomic_write(output, lambda tmp: Path(tmp).write_text(text))
    click.echo(f"wrote {output} ({len(doc['measurements'])} measurements, {doc['notes']['seconds']} s)")
