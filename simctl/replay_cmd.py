"""`simctl replay`: run policies over a trace on a simulated cluster and compare them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from click.core import ParameterSource

from simctl.policies.action_checks import names_problem
from simctl.policies.registry import UnknownPolicyError
from simctl.sim.cluster import parse_cluster
from simctl.sim.cost_model import load_cost_model
from simctl.sim.engine import EngineConfig, SimError
from simctl.sim.models import model_of_trace
from simctl.sim.replay import PolicyRun, ReplaySetup, replay, run_tables
from simctl.sim.worker_faults import WorkerFaultError, fault_problem
from simctl.sweep_order import costliest_first
from simctl.traces.chrome_trace import write_run_chrome_trace
from simctl.traces.cli_options import (
    PathArg,
    WorkerFault,
    chrome_trace_option,
    fail_worker_option,
    json_option,
    max_num_seqs_option,
    out_option,
    parse_steps,
    policy_option,
    seed_option,
)
from simctl.traces.io import TraceError
from simctl.traces.layouts import DEFAULT_CLUSTER, recorded_layout
from simctl.traces.outputs import check_distinct, check_output_dir, check_output_file
from simctl.traces.plugins import make_policy
from simctl.traces.run_format import (
    FORMAT_VERSION,
    RunDoc,
    check_replaceable,
    command_provenance,
    write_json,
    write_run_dir,
)
from simctl.traces.terminal import rich_text
from simctl.traces.validate import load_valid_trace


def trace_cluster(meta_cluster: object, given: str | None) -> tuple[str, str | None]:
    """(cluster spec to use, line saying where it came from): --cluster, else the layout the
    trace's metadata records (traces/layouts.py), else the default."""
    if given is not None:
        return given, None
    recorded = recorded_layout(meta_cluster)
    if recorded is not None:
        return recorded, f"cluster {recorded}: the layout recorded in the trace (--cluster overrides)"
    return DEFAULT_CLUSTER, None


def build_setup(
    trace_path: Path,
    cluster: str | None,
    profile: Path | None,
    model: str | None,
    steps: str | None,
    seed: int,
    per_iteration: bool,
    max_num_seqs: int,
) -> ReplaySetup:
    try:
        trace = load_valid_trace(trace_path)
    except TraceError as exc:
        raise click.ClickException(exc.one_line()) from None
    try:
        model_spec = model_of_trace(trace.meta, f"trace {trace_path}", model)
    except ValueError as exc:
        hint = ""
        if not model and trace.meta.model_config is None:
            hint = f" (trace {trace_path} names model '{trace.meta.model}'; pass --model NAME or DIR)"
        raise click.ClickException(str(exc).splitlines()[0] + hint) from None
    cluster, said = trace_cluster(trace.meta.cluster, cluster)
    if said:
        click.echo(said)
    try:
        spec = parse_cluster(cluster)
    except (ValueError, OSError) as exc:
        where = f" (the layout trace {trace_path} records; pass --cluster)" if said else ""
        raise click.ClickException(str(exc).splitlines()[0] + where) from None
    try:
        cost = load_cost_model(model_spec, spec, profile)
    except (ValueError, OSError) as exc:
        raise click.ClickException(str(exc).splitlines()[0]) from None
    return ReplaySetup(
        trace=trace,
        cluster=spec,
        model=model_spec,
        cost=cost,
        steps=parse_steps(steps, trace.steps),
        seed=seed,
        engine=EngineConfig(max_num_seqs=max_num_seqs, per_iteration=per_iteration),
        cost_source=str(profile) if profile else "roofline",
    )


def with_faults(setup: ReplaySetup, faults: tuple[WorkerFault, ...]) -> ReplaySetup:
    """The setup with `--fail-worker` faults, each checked against the cluster and the
    replayed steps first (one line naming the bad value)."""
    for f in faults:
        problem = fault_problem(f, setup.cluster.num_workers, setup.steps)
        if problem:
            given = f"{f.worker}@{f.time_s:g}" + ("" if f.step is None else f":{f.step}")
            raise click.BadParameter(f"'{given}': {problem}", param_hint="--fail-worker")
    setup.faults = faults
    return setup


def policy_names(policies: tuple[str, ...]) -> list[str]:
    """Each --policy's name, refusing two of one name: results are kept by name (a plug-in
    named verl replaced the baseline's numbers)."""
    names = []
    for p in policies:
        try:
            names.append(make_policy(p).name)
        except UnknownPolicyError as exc:
            raise click.ClickException(str(exc)) from None
    problem = names_problem([(f"'{p}'", name) for p, name in zip(policies, names, strict=True)])
    if problem:
        raise click.BadParameter(problem, param_hint="--policy")
    return names


def check_outputs(
    trace: Path,
    json_path: Path | None,
    out: Path | None,
    report_dir: Path | None,
    chrome_trace: Path | None = None,
) -> None:
    """Every output path checked before the simulation: one line and exit 1 if any is bad
    (two outputs at one path, or one inside a directory written whole, included)."""
    from simctl.reports.build import check_report_dir

    check_distinct(
        {
            "--json file": json_path,
            "--chrome-trace file": chrome_trace,
            "--out run directory": out,
            "--report directory": report_dir,
        }
    )
    if json_path:
        check_output_file(json_path, inputs=[trace], what="--json file", kind="json")
    if chrome_trace:
        check_output_file(chrome_trace, inputs=[trace], what="--chrome-trace file", kind="json")
    run_dir = out or (report_dir / "run" if report_dir else None)
    if run_dir:
        check_output_dir(run_dir, inputs=[trace], what="--out run directory")
        check_replaceable(run_dir)
    if report_dir:
        check_output_dir(report_dir, inputs=[trace], what="--report directory")
        check_report_dir(report_dir, [run_dir] if run_dir else [])


def run_document(setup: ReplaySetup, runs: dict[str, PolicyRun], trace_path: Path) -> RunDoc:
    """run.json, also the --json document (fields: traces/run_format.py RunDoc)."""
    meta = setup.trace.meta
    return {
        "format_version": FORMAT_VERSION,
        "trace": str(trace_path),
        "cluster": setup.cluster.label,
        "seed": setup.seed,
        "policies": {name: run.summary() for name, run in runs.items()},
        "provenance": {
            **command_provenance(),
            "mode": "per-iteration" if setup.engine.per_iteration else "fast-forward",
            "source": "sim",
            "model": setup.model.name,
            "cost_model": setup.cost_source,
            "cluster": setup.cluster.to_dict(),
            "engine": {"max_num_seqs": setup.engine.max_num_seqs, "kv_watermark": setup.engine.kv_watermark},
            "trace_meta": json.loads(meta.to_json()),
            "steps": setup.steps,
        },
    }


def print_table(runs: dict[str, PolicyRun], baseline: str | None) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="rollout replay (means over steps)")
    for col in (
        "policy",
        "makespan s",
        "step s",
        "speedup",
        "tail s",
        "GPU idle",
        "accept len",
        "sim wall s",
    ):
        table.add_column(col, justify="right")
    base = runs[baseline].summary()["mean_rollout_makespan_s"] if baseline in runs else None
    for name, run in runs.items():
        s = run.summary()
        steps = run.steps
        mk = s["mean_rollout_makespan_s"]
        acc = [x.mean_accept_len for x in steps if x.mean_accept_len is not None]
        table.add_row(
            rich_text(name),  # (a plug-in's name is text: "[/]x" is no markup)
            f"{mk:.1f}",
            f"{s['mean_step_time_s']:.1f}",
            f"{base / mk:.2f}x" if base and mk else "-",
            f"{sum(x.tail_time_s for x in steps) / len(steps):.1f}",
            f"{sum(x.gpu_idle_fraction for x in steps) / len(steps):.1%}",
            f"{sum(acc) / len(acc):.2f}" if acc else "-",
            f"{s['sim_wall_s']:.2f}",
        )
    Console(width=None if sys.stdout.isatty() else 200).print(table)


@click.command("replay")
@click.argument("trace", type=PathArg(path_type=Path))
@policy_option(
    "Policy NAME[:key=value,...], or a class: module.path:Class or file.py:Class[:key=value,...]; "
    "repeat to compare. See `simctl policies`."
)
@click.option(
    "--cluster",
    default=None,
    help="NAMExCOUNT[:tpN] (e.g. h100x512, h100x1024 for 'veRL 2x') or a .toml file "
    f"[default: the layout recorded in the trace, else {DEFAULT_CLUSTER}].",
)
@click.option(
    "--profile",
    type=PathArg(exists=True, dir_okay=False, path_type=Path),
    help="Measured cost profile from `simctl calibrate` (overrides the roofline).",
)
@click.option(
    "--model", help="Override the trace's model: a catalogue name, or a HF model directory or config.json."
)
@click.option("--steps", help="Steps to replay: N or A:B (B exclusive).")
@seed_option()
@click.option("--per-iteration", is_flag=True, help="Reference mode: one event per decode iteration (slow).")
@max_num_seqs_option("Engine batch limit per worker.")
@click.option("--baseline", default="verl", show_default=True, help="Policy the speedup column divides by.")
@json_option("Write metrics JSON.")
@out_option("Run directory: run.json + per-request and per-worker timelines (Parquet).")
@click.option(
    "--report",
    "report_dir",
    type=PathArg(file_okay=False, path_type=Path),
    help="Also render a comparison report of this run into DIR.",
)
@chrome_trace_option()
@fail_worker_option()
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Replay up to N policies at once, one process each, the costliest first (same results).",
)
def replay_cmd(
    trace,
    policies,
    cluster,
    profile,
    model,
    steps,
    seed,
    per_iteration,
    max_num_seqs,
    baseline,
    json_path,
    out,
    report_dir,
    chrome_trace,
    fail_workers,
    jobs,
) -> None:
    """Replay TRACE under each --policy on a simulated cluster and compare."""
    check_outputs(trace, json_path, out, report_dir, chrome_trace)
    policies = tuple(dict.fromkeys(policies))  # (the same spec twice: one run, the same results)
    names = policy_names(policies)
    given = click.get_current_context().get_parameter_source("baseline") is not ParameterSource.DEFAULT
    if given and baseline not in names:
        raise click.BadParameter(
            f"'{baseline}' is not one of the --policy runs ({', '.join(names)})", param_hint="--baseline"
        )
    setup = build_setup(trace, cluster, profile, model, steps, seed, per_iteration, max_num_seqs)
    setup = with_faults(setup, fail_workers)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        transient=True,
        disable=not sys.stderr.isatty(),
    ) as bar:
        task = bar.add_task("simulating", total=len(policies) * len(setup.steps))

        def tick(name: str, step: int) -> None:
            bar.update(task, advance=1, description=f"{rich_text(name)} step {step}")  # (a name is text)

        try:
            runs = replay(setup, policies, tick, jobs=jobs, order=costliest_first(policies))
        except (SimError, WorkerFaultError) as exc:
            raise click.ClickException(str(exc)) from None
    print_table(runs, baseline)
    doc = run_document(setup, runs, trace)
    if json_path:
        write_json(json_path, doc)
        click.echo(f"wrote {json_path}")
    if report_dir and not out:
        out = report_dir / "run"
    if out:
        write_run_dir(out, doc, run_tables(runs))
        click.echo(f"wrote run directory {out}")
    if chrome_trace:
        write_run_chrome_trace(chrome_trace, run_tables(runs), doc)
        click.echo(f"wrote {chrome_trace} (open in ui.perfetto.dev)")
    if report_dir:
        from simctl.reports.build import build_report

        index = build_report([out], report_dir, baseline=baseline)
        click.echo(f"report: {index}")
