"""`simctl report RUN [RUN ...] -o DIR`: the comparison report as a command."""

from __future__ import annotations

from pathlib import Path

import click

from simctl.reports.errors import ReportError, terminal_text
from simctl.traces.cli_options import PathArg


@click.command("report")
@click.argument("runs", nargs=-1, required=True, type=PathArg(path_type=Path))
@click.option(
    "-o",
    "--out",
    "out_dir",
    required=True,
    type=PathArg(file_okay=False, path_type=Path),
    help="Report directory (index.html, figures/, tables/); replaced atomically.",
)
@click.option("--baseline", default="verl", show_default=True, help="Policy the speedup columns divide by.")
@click.option(
    "--step", type=int, help="Step shown by the timeline and within-step figures [default: a typical step]."
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    help="Draw only the first N workers in the per-worker timelines [default: all].",
)
def report_cmd(
    runs: tuple[Path, ...], out_dir: Path, baseline: str, step: int | None, workers: int | None
) -> None:
    """Compare the run directories RUNS (from `simctl replay --out` or `simctl live`).

    Writes DIR/index.html, a static page that needs no network, with every figure as
    PNG and the tables as Markdown, CSV and JSON. What could not be shown is listed on
    the page and on stderr.
    """
    from simctl.reports.build import build_report  # matplotlib import only when the command runs

    try:
        index = build_report(list(runs), out_dir, baseline=baseline, step=step, workers=workers)
    except ReportError as exc:
        raise click.ClickException(terminal_text(str(exc))) from None
    click.echo(f"report: {index}")
