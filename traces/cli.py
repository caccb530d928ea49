"""`simctl trace ...`: generate, validate and inspect rollout traces."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import click

from simctl.traces.cli_options import NumberRange, PathArg
from simctl.traces.importers.cli import import_cmd
from simctl.traces.io import TraceError
from simctl.traces.outputs import check_output_file

# How a recorded cluster layout is parsed lives in sim/, which this layer may not import:
# the composition root (simctl.cli) hands the check in; without one any layout passes.
_cluster_check: Callable[[str], str | None] | None = None


def set_cluster_check(check: Callable[[str], str | None]) -> None:
    """Install the check `trace validate` applies to the metadata's cluster (the problem,
    or None where it parses)."""
    global _cluster_check
    _cluster_check = check


@click.group("trace")
def trace_group() -> None:
    """Generate, validate and inspect rollout traces (schema: traces/SCHEMA.md)."""


@trace_group.command("gen")
@click.option("--preset", required=True, help="Generator preset (see `simctl trace presets`).")
@click.option(
    "--steps", type=click.IntRange(min=1), default=1, show_default=True, help="RL steps to generate."
)
@click.option(
    "--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of every random choice."
)
@click.option(
    "--scale",
    type=NumberRange(min=0.0, min_open=True, max=1.0),
    default=1.0,
    show_default=True,
    help="Fraction of the preset's prompts per step, for quick runs.",
)
@click.option("--tokens", is_flag=True, help="Also generate prompt/response token ids (small traces only).")
@click.option(
    "--buckets/--no-buckets",
    default=None,
    help="Write acceptance by response position (accept_<method>_buckets), which replay draws from "
    "[default: only for --scale <= 0.05 or --tokens].",
)
@click.option(
    "--steps-per-epoch",
    type=click.IntRange(min=1),
    default=None,
    help="Steps per pass over the prompt set [default: the preset's]. A short trace needs a small "
    "value to reach the epochs where prompts come back (RhymeRL's history drafting acts only there).",
)
@click.option("-o", "--output", type=PathArg(dir_okay=False, path_type=Path), required=True)
def gen_cmd(
    preset: str,
    steps: int,
    seed: int,
    scale: float,
    tokens: bool,
    buckets: bool | None,
    steps_per_epoch: int | None,
    output: Path,
) -> None:
    """Write a synthetic trace calibrated to one of the papers' workloads."""
    from simctl.traces.generate import write_generated

    check_output_file(output, what="trace", kind="parquet")
    try:
        path = write_generated(
            output,
            preset=preset,
            steps=steps,
            seed=seed,
            scale=scale,
            tokens=tokens,
            buckets=buckets,
            steps_per_epoch=steps_per_epoch,
        )
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"wrote {path} (preset {preset}, {steps} steps, seed {seed}, scale {scale})")
    from simctl.traces.layouts import layout_for

    layout = layout_for(preset, scale)
    if layout:
        click.echo(f"layout {layout} recorded: `simctl replay` uses it unless --cluster is given")


@trace_group.command("presets")
def presets_cmd() -> None:
    """List generator presets with their workload shape."""
    from simctl.traces.presets import PRESETS

    for name, p in PRESETS.items():
        click.echo(f"{name:28s} {p.describe()}")


@trace_group.command("validate")
@click.argument("trace", type=PathArg(path_type=Path))
def validate_cmd(trace: Path) -> None:
    """Check a trace against the schema; one line per problem, exit 1 if any."""
    from simctl.traces.validate import check_file

    problems, loaded = check_file(trace)
    cluster = loaded.meta.cluster if loaded is not None else None
    if not problems and _cluster_check is not None and isinstance(cluster, str) and cluster:
        # (replay reads this layout unless --cluster overrides it)
        problem = _cluster_check(cluster)
        if problem:
            problems.append(f"{trace}: metadata 'cluster' does not parse: {problem}")
    for p in problems:
        click.echo(p, err=True)
    if problems:
        sys.exit(1)
    click.echo(f"{trace}: valid")


@trace_group.command("inspect")
@click.argument("trace", type=PathArg(path_type=Path))
@click.option(
    "--plot", type=PathArg(dir_okay=False, path_type=Path), help="Write a length-distribution figure."
)
def inspect_cmd(trace: Path, plot: Path | None) -> None:
    """Per-step lengths, clip fraction, tail share and acceptance of a trace."""
    from rich.console import Console
    from rich.table import Table

    from simctl.traces.inspect import plot_lengths, position_summary, step_summary
    from simctl.traces.layouts import DEFAULT_CLUSTER, recorded_layout
    from simctl.traces.terminal import rich_text
    from simctl.traces.validate import load_valid_trace

    if plot:
        from matplotlib.backend_bases import FigureCanvasBase

        kinds = {f".{k}" for k in FigureCanvasBase.get_supported_filetypes()}
        check_output_file(plot, inputs=[trace], suffixes=kinds, what="--plot figure")
    try:
        tr = load_valid_trace(trace)
    except TraceError as exc:
        raise click.ClickException(exc.one_line()) from None
    m = tr.meta
    console = Console(width=None if sys.stdout.isatty() else 200)
    # (a model outside the catalogue says which family its carried config is)
    model = m.model if m.model_config is None else f"{m.model} ({m.model_config.get('model_type')} config)"
    layout = recorded_layout(m.cluster) or f"none (replay: {DEFAULT_CLUSTER})"
    # (the path and the metadata are the user's text, not markup: "[/]" in one is no error)
    console.print(
        f"[bold]{rich_text(trace)}[/]  "
        + rich_text(
            f"preset={m.preset} seed={m.seed} model={model} hardware={m.hardware} T={m.temperature} "
            f"group_size={m.group_size} source={m.source} tokens={'yes' if tr.has_tokens() else 'no'} "
            f"layout={layout}"
        )
    )
    summary = step_summary(tr)
    table = Table(show_lines=False)
    for col in summary.columns:
        table.add_column(col, justify="right")
    for row in summary.to_dict("records"):
        table.add_row(*[_fmt(v) for v in row.values()])
    console.print(table)
    by_position = position_summary(tr)
    if by_position is not None:
        console.print(
            f"acceptance by response position (token-weighted bucket values, buckets of "
            f"{m.accept_bucket_tokens} tokens; replay draws each verify iteration at its position's bucket):"
        )
        positions = Table(show_lines=False)
        for col in by_position.columns:
            positions.add_column(col, justify="right")
        for row in by_position.to_dict("records"):
            positions.add_row(*["-" if isinstance(v, float) and v != v else _fmt(v) for v in row.values()])
        console.print(positions)
    if plot:
        plot_lengths(tr, plot)
        console.print(f"wrote {rich_text(plot)}")


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 10 else f"{v:.0f}"
    return str(v)


trace_group.add_command(import_cmd)  # `simctl trace import` (traces/importers/)
