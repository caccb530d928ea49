"""`simctl reproduce PAPER|all`: run the papers' headline experiments (sim/experiments.py)
on their layouts and compare simctl's numbers with the papers'."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

import click

from simctl.sim.calibration_points import TOLERANCE, CalibrationRow, evaluate
from simctl.sim.experiments import PAPERS, experiments_of
from simctl.sim.reproduce_stats import Result
from simctl.traces.cli_options import PathArg
from simctl.traces.outputs import check_distinct, check_output_dir, check_output_file
from simctl.traces.run_format import command_provenance, write_json

PAGE_ENTRIES = {"index.html", "figures"}  # what the reproduction page writes into --report


def check_paper(paper: str) -> str:
    name = paper.strip().lower()
    if name != "all" and name not in PAPERS:
        # a bad argument is a usage error (exit 2), as click's own choices are
        known = ", ".join(PAPERS)
        raise click.BadParameter(f"unknown paper {paper!r}; known: {known}, all", param_hint="PAPER")
    return name


def check_report(path: Path) -> None:
    """A --report directory is new, empty, or an earlier reproduction page (replaced whole)."""
    check_output_dir(path, what="--report directory")
    if path.is_dir():
        foreign = sorted(e.name for e in path.iterdir() if e.name not in PAGE_ENTRIES)
        if foreign:
            raise click.ClickException(
                f"{path}: holds files the reproduction page did not write ({', '.join(foreign[:5])}); "
                "refusing to replace it"
            )


def _cells(r: Result) -> list[str]:
    v, s = r.experiment.value, r.summary
    paper = f"{v.lo:.4g}" if v.lo == v.hi else f"{v.lo:.4g}-{v.hi:.4g}"
    sim = "-" if s is None else f"{s.mean:.3f} [{s.lo:.3f}, {s.hi:.3f}] n={s.n}"
    return [r.experiment.id, r.experiment.metric, f"{paper} ({v.source})", sim, r.verdict, _reach(r)]


def _reach(r: Result) -> str:
    """Where a miss's sensitivity curve reaches the paper: 'input = X (cal. Y)'."""
    c = r.sensitivity
    if c is None:
        return ""
    if not c.values:
        return f"{c.input}: not read"
    at = "not on grid" if c.reaches_paper_at is None else f"{c.reaches_paper_at:.3g}"
    return f"{c.input} = {at} (cal. {c.calibrated:.3g})"


def print_table(results: Sequence[Result]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="simctl reproduce (mean [95% interval] over seeds and steps)")
    for col in ("experiment", "metric", "paper", "simctl", "verdict", "reaches paper at"):
        table.add_column(col)
    for r in results:
        table.add_row(*_cells(r))
    Console(width=None if sys.stdout.isatty() else 200).print(table)


def print_calibration(rows: Sequence[CalibrationRow]) -> None:
    """One line per micro figure the cost model is calibrated to; '!' marks one beyond TOLERANCE."""
    n_in = sum(r.within_tolerance for r in rows)
    click.echo(f"cost-model calibration: {n_in} of {len(rows)} micro figures within {TOLERANCE:.0%}")
    for r in rows:
        mark = " " if r.within_tolerance else "!"
        click.echo(
            f" {mark} {r.id:32s} paper {'<=' if r.at_most else '  '}{r.paper_value:6.4g} {r.unit:6s} "
            f"simctl {r.simctl:8.4g} {r.error:+7.1%}"
        )


def document(results: Sequence[Result], meta: dict, calibration: Sequence[CalibrationRow] = ()) -> dict:
    """The --json document: {"experiments": [...], "calibration": [...], "run": {...}}."""
    return {
        "experiments": [r.to_json() for r in results],
        "calibration": [c.to_json() for c in calibration],
        "run": meta,
    }


@click.command("reproduce")
@click.argument("paper")
@click.option(
    "--quick", is_flag=True, help="Fewer seeds and steps, on the papers' layouts (about 5 minutes)."
)
@click.option(
    "--seeds", type=click.IntRange(1, 1000), help="Seeds per experiment (default: the experiment's)."
)
@click.option(
    "--report",
    "report_dir",
    type=PathArg(file_okay=False, path_type=Path),
    help="Write the reproduction page (index.html + figures) into DIR.",
)
@click.option("--json", "json_path", type=PathArg(dir_okay=False, path_type=Path), help="Write results JSON.")
@click.option(
    "--sensitivity/--no-sensitivity",
    default=True,
    show_default=True,
    help="Sweep each missed experiment over an unpublished input it reads (sim/sensitivity.py).",
)
@click.option(
    "--jobs",
    type=click.IntRange(1, 256),
    help="Presets replayed side by side, one process each, same results [default: the cores].",
)
def reproduce_cmd(
    paper: str,
    quick: bool,
    seeds: int | None,
    report_dir: Path | None,
    json_path: Path | None,
    sensitivity: bool,
    jobs: int | None,
) -> None:
    """Run PAPER's headline experiments (or all: speactor, seer, tlt, rhymerl,
    efficientrollout) and compare with the paper's values. Without --quick this is a
    benchmark (the papers' full layouts, tens of minutes)."""
    from simctl.reproduce_runner import run_experiments
    from simctl.sweep_runner import default_workers

    jobs = jobs if jobs is not None else default_workers()

    name = check_paper(paper)
    check_distinct({"--json file": json_path, "--report directory": report_dir})
    if json_path:
        check_output_file(json_path, what="--json file", kind="json")
    if report_dir:
        check_report(report_dir)
    t0 = time.perf_counter()
    results = run_experiments(
        experiments_of(name),
        quick=quick,
        seeds=seeds,
        verbose=sys.stderr.isatty(),
        sensitivity=sensitivity,
        jobs=jobs,
    )
    meta = {
        **command_provenance(),
        "paper": name,
        "mode": "quick" if quick else "full",
        "seeds": seeds if seeds is not None else "per experiment",
        "sensitivity": sensitivity,
        "jobs": jobs,
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    print_table(results)
    calibration = evaluate()
    print_calibration(calibration)
    click.echo(f"{len(results)} experiments in {meta['wall_s']:.0f} s")
    if json_path:
        write_json(json_path, document(results, meta, calibration))
        click.echo(f"wrote {json_path}")
    if report_dir:
        from simctl.reports.reproduce_page import build_reproduce_page

        index = build_reproduce_page(results, report_dir, meta)
        click.echo(f"report: {index}")
