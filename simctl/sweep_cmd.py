"""`simctl sweep SPEC.toml --out DIR`: a design-space sweep, one replay per point.

The spec (simctl/sweep_spec.py) is checked whole before anything runs; the points run on
Ray or a local process pool (simctl/sweep_runner.py), each into `DIR/points/<id>/`, and a
rerun resumes; then `DIR/sweep.parquet` (simctl/sweep_table.py) and `DIR/report/`
(reports/sweep_page.py) are written.
"""

from __future__ import annotations

import shlex
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import click

from simctl.api import MAX_WORKERS
from simctl.sweep_checkpoint import CHECKPOINT_S
from simctl.sweep_runner import (
    POINTS,
    TABLE,
    SweepResult,
    check_sweep_dir,
    default_workers,
    other_points,
    ray_available,
    run_sweep,
)
from simctl.sweep_spec import load_spec
from simctl.sweep_table import write_outputs
from simctl.traces.cli_options import NumberRange, PathArg


@contextmanager
def _progress(total_hint: int) -> Iterator[Callable[[int, int, float, float], None]]:
    """A bar with ETA, on stderr when it is a terminal. It advances by the points' estimated
    cost, not their count (the costliest go first, so a count would make the ETA run slow
    early and fast at the end), at every step a running point replays."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn("sweep"),
        BarColumn(),
        TextColumn("{task.fields[points]} points"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
        disable=not sys.stderr.isatty(),
    ) as bar:
        task = bar.add_task("points", total=None, points=f"0/{total_hint}")

        def update(done: int, total: int, work_done: float, work: float) -> None:
            bar.update(task, completed=work_done, total=work, points=f"{done}/{total}")

        yield update


def choose_backend(no_ray: bool, workers: int | None, ray_address: str | None) -> bool:
    """True: Ray. The local pool when Ray is not installed, refused, or one worker."""
    if ray_address and no_ray:
        raise click.UsageError("--ray-address and --no-ray exclude each other")
    if no_ray or (workers == 1 and not ray_address):
        return False
    if not ray_available():
        if ray_address:
            raise click.ClickException("--ray-address: ray is not installed (pip install 'simctl[sweep]')")
        click.echo(
            "ray is not installed: running on a local process pool (pip install 'simctl[sweep]')", err=True
        )
        return False
    return True


@click.command("sweep")
@click.argument("spec_path", metavar="SPEC.toml", type=PathArg(dir_okay=False, path_type=Path))
@click.option(
    "--out",
    type=PathArg(file_okay=False, path_type=Path),
    help="Sweep directory (required unless --dry-run; with it, its complete points are counted).",
)
@click.option("--ray-address", help="Join this Ray cluster (e.g. auto, or HOST:PORT) instead of a local one.")
@click.option(
    "--workers",
    type=click.IntRange(min=1, max=MAX_WORKERS),
    help="Points run at once [default: this machine's cores; with --ray-address, the cluster's CPUs].",
)
@click.option("--no-ray", is_flag=True, help="Run on a local process pool instead of Ray.")
@click.option(
    "--checkpoint-every",
    "checkpoint_s",
    type=NumberRange(min=0),
    default=CHECKPOINT_S,
    show_default=True,
    help="Seconds between checkpoints of a running point, which a rerun goes on from (0: after every step).",
)
@click.option(
    "--plugin",
    "plugins",
    multiple=True,
    help="A policy class from a module or file (module.path:Class, file.py:Class) that [policies] "
    "may then list by its name; repeatable. The spec file itself never names code.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Check the spec, count its points and estimate the sweep's time on --workers from one "
    "measured veRL step per trace; run nothing, write nothing.",
)
def sweep_cmd(
    spec_path: Path,
    out: Path | None,
    ray_address: str | None,
    workers: int | None,
    no_ray: bool,
    checkpoint_s: float,
    plugins: tuple[str, ...],
    dry_run: bool,
) -> None:
    """Replay every point of the design space in SPEC.toml; resumable (rerun to go on)."""
    if dry_run:
        _dry_run(spec_path, out, workers, plugins)
        return
    if out is None:
        raise click.UsageError("Missing option '--out'.")
    use_ray = choose_backend(no_ray, workers, ray_address)
    spec = load_spec(spec_path, plugins)
    check_sweep_dir(out, spec_path)
    if workers is None and not ray_address:
        workers = default_workers()
    command = shlex.join(["simctl", *sys.argv[1:]])
    try:
        with _progress(len(spec.points)) as progress:
            result: SweepResult = run_sweep(
                spec, out, workers, use_ray, ray_address, progress, command, checkpoint_s
            )
    except KeyboardInterrupt:
        _interrupted(out, signal.SIGINT)
    except SystemExit as exc:
        if exc.code != 128 + signal.SIGTERM:
            raise
        _interrupted(out, signal.SIGTERM)
    click.echo(
        f"{result.total} points: {result.ran} run ({result.backend}), {result.skipped} already complete"
    )
    _table, _steps, index = write_outputs(spec, out, result.backend)
    click.echo(f"wrote {out / TABLE}")
    click.echo(f"report: {index}")
    others = other_points(spec, out)
    if others:
        click.echo(
            f"note: {out / POINTS} keeps {others} point(s) of another spec, left out of this table "
            "and report (a rerun of that spec tables them again)"
        )


def _interrupted(out: Path, sig: signal.Signals) -> NoReturn:
    """A sweep stopped by Ctrl-C or SIGTERM (run_sweep stopped its points): one line on how
    to go on, and the shell's status for that signal (130, 143). Further signals are
    ignored from here: the command is ending, and a second Ctrl-C must not show a traceback."""
    for other in (signal.SIGINT, signal.SIGTERM):
        signal.signal(other, signal.SIG_IGN)
    where = f"{out} keeps the complete points" if out.is_dir() else "nothing was kept"
    click.echo(f"Error: sweep interrupted ({sig.name}): {where}; rerun the same command to resume", err=True)
    raise click.exceptions.Exit(128 + sig)


def _dry_run(spec_path: Path, out: Path | None, workers: int | None, plugins: tuple[str, ...]) -> None:
    """`--dry-run`: the spec checked, its points counted and the sweep's time estimated
    (simctl/sweep_estimate.py); the sweep directory, if named, is only read."""
    from simctl.sweep_estimate import estimate_in

    spec = load_spec(spec_path, plugins)
    if out is not None:
        check_sweep_dir(out, spec_path)
    for line in estimate_in(spec, out, workers).lines(spec_path):
        click.echo(line)
