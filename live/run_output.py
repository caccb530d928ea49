"""What `simctl live` writes once its policies ran (or failed part way): the recorded
trace, run.json and the run directory, each atomically, and the summary table.

Whatever happened, what completed is written; the caller then reports the error line.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from simctl.live.executor import ExecutorConfig
from simctl.live.live_options import LiveOptions
from simctl.live.models import LoadedModel
from simctl.live.recorder import (
    LiveRun,
    requests_frame,
    run_document,
    timeline_frame,
    write_json,
    write_recording,
    write_run_dir,
)
from simctl.live.workload import Workload
from simctl.sim.model_config import model_from_config
from simctl.sim.models import get_model, model_record
from simctl.traces.chrome_trace import write_run_chrome_trace
from simctl.traces.run_format import RunDoc
from simctl.traces.terminal import rich_text


def model_name(loaded: LoadedModel, model_arg: str) -> str:
    """The simulator's catalogue name when there is one, else the --model argument."""
    return loaded.catalogue if loaded.catalogue != "unknown" else model_arg


def model_fields(loaded: LoadedModel, model_arg: str) -> dict[str, Any]:
    """The trace's `model` and, for a HF directory whose architecture the simulator's
    catalogue lacks, its `model_config` (the config.json fields that price it), so that
    `simctl replay` prices the recording's model wherever the trace goes. A directory of a
    catalogue model records the catalogue name; a config the simulator cannot read
    (another family) leaves the name only, with a warning."""
    if loaded.path is None:
        return {"model": model_name(loaded, model_arg)}
    try:
        name, config = model_record(loaded.path)
    except ValueError as exc:
        why = str(exc).splitlines()[0]
        click.echo(f"warning: the trace names model '{model_name(loaded, model_arg)}' only ({why})", err=True)
        return {"model": model_name(loaded, model_arg)}
    if config is None:
        return {"model": name}
    # a catalogue model under another directory name (smollm2's converted checkout)
    if loaded.catalogue != "unknown" and get_model(loaded.catalogue).same_architecture(
        model_from_config(config, name)
    ):
        return {"model": loaded.catalogue}
    return {"model": name, "model_config": config}


def record_trace(
    opts: LiveOptions, runs: list[LiveRun], workload: Workload, loaded: LoadedModel
) -> Path | None:
    """The first policy's trace (default: OUT/trace.parquet, else ./live-<time>.parquet);
    None, with a warning, when no group of requests completed."""
    e = opts.engine
    path = opts.output.record_path
    if path is None:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        path = opts.output.out / "trace.parquet" if opts.output.out else Path(f"live-{stamp}.parquet")
    meta_fields = {
        **model_fields(loaded, e.model),
        "hardware": e.device,
        "temperature": e.temperature,
        "seed": e.seed,
        "backend": e.backend,
        "model_arg": e.model,
        "model_path": loaded.path,
        "workers": opts.workers,
    }
    if not (runs and runs[0].records):
        return None
    try:
        recorded = write_recording(path, runs, workload, meta_fields)
    except ValueError as exc:  # e.g. nothing finished yet
        click.echo(f"warning: no trace recorded ({str(exc).splitlines()[0]})", err=True)
        return None
    click.echo(f"recorded trace {recorded}")
    return recorded


def provenance(
    opts: LiveOptions,
    workload: Workload,
    loaded: LoadedModel,
    config: ExecutorConfig,
    threads: int,
    error: str | None,
) -> dict[str, Any]:
    """run.json's live provenance fields."""
    e = opts.engine
    return {
        "mode": "live",
        "backend": e.backend,
        "model": model_name(loaded, e.model),
        "model_path": loaded.path,
        "device": e.device,
        "workers": opts.workers,
        "clock": (
            "lockstep: per-worker measured iteration time, engines stepped one at a time"
            if e.lockstep
            else "wall clock: engines looping side by side" + (" in Ray actors" if e.use_ray else "")
        ),
        "cost_model": str(opts.profile) if opts.profile else "none",
        "engine": {
            "max_num_seqs": e.max_num_seqs,
            "kv_capacity_tokens": config.kv_capacity_tokens,
            "kv_watermark": config.kv_watermark,
            "temperature": e.temperature,
            "threads": threads,
        },
        "workload": workload.source,
        **({"error": error} if error else {}),
    }


def write_outputs(
    opts: LiveOptions,
    runs: list[LiveRun],
    workload: Workload,
    loaded: LoadedModel,
    config: ExecutorConfig,
    *,
    threads: int,
    error: str | None,
) -> None:
    """Trace, table, metrics JSON, run directory, then the approximations on stderr."""
    recorded = record_trace(opts, runs, workload, loaded)
    trace_meta = None
    if recorded is not None:
        from simctl.traces.io import open_parquet, read_meta

        trace_meta = json.loads(read_meta(open_parquet(recorded), recorded).to_json())
    e = opts.engine
    doc = run_document(
        runs,
        workload,
        trace_path=recorded,
        trace_meta=trace_meta,
        n_workers=opts.workers,
        seed=e.seed,
        cluster_label=f"{opts.workers}x {e.device} ({e.backend})",
        provenance=provenance(opts, workload, loaded, config, threads, error),
    )
    print_table(doc)
    if opts.output.json_path:
        write_json(opts.output.json_path, doc)
        click.echo(f"wrote {opts.output.json_path}")
    if opts.output.out:
        write_run_dir(opts.output.out, doc, runs)
        click.echo(f"wrote run directory {opts.output.out}")
    if opts.output.chrome_trace:
        tables = {
            "timeline": [timeline_frame(r) for r in runs],
            "requests": [requests_frame(r) for r in runs],
        }
        write_run_chrome_trace(opts.output.chrome_trace, tables, doc)
        click.echo(f"wrote {opts.output.chrome_trace} (open in ui.perfetto.dev)")
    for what, n in doc["approximated"].items():
        click.echo(f"approximated x{n}: {what}", err=True)


def print_table(doc: RunDoc) -> None:
    """Means over steps of each policy's headline metrics."""
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
            rich_text(name),  # (a plug-in's name is text, not markup)
            f"{s['mean_rollout_makespan_s']:.2f}",
            f"{sum(x['throughput_tok_s'] for x in steps) / n:.1f}",
            f"{sum(x['tail_time_s'] for x in steps) / n:.2f}",
            f"{sum(x['gpu_idle_fraction'] for x in steps) / n:.1%}",
            f"{sum(acc) / len(acc):.2f}" if acc else "-",
            f"{s['overhead']['fraction_of_engine']:.2%}",
            f"{s['wall_s']:.1f}",
        )
    Console(width=None if sys.stdout.isatty() else 200).print(table)
