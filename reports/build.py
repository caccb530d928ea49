"""`build_report`: run directories in, a report directory out, replaced atomically.

Layout of the output::

    DIR/index.html            the page (figures referenced beside it)
    DIR/figures/*.png         every figure
    DIR/tables/*.{md,csv,json}
    DIR/report.json           what was built, what was left out and why

The report is built in a temporary directory next to DIR and swapped in by rename, so
a reader never sees half a report and a failed build leaves the old one intact.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import matplotlib.pyplot as plt

from simctl.reports.breakdown import breakdown_table
from simctl.reports.context import Context, FigureOut
from simctl.reports.errors import Notes, ReportError
from simctl.reports.fig_breakdown import (
    breakdown_figure,
    busy_figure,
    request_times_figure,
    step_breakdown_figure,
)
from simctl.reports.fig_dynamics import acceptance_figure, completion_figure, load_figure, speculation_figure
from simctl.reports.fig_simlive import simlive
from simctl.reports.fig_steps import steps_figure
from simctl.reports.fig_timeline import gantt_figures, gantt_inputs
from simctl.reports.fig_trace import trace_figure
from simctl.reports.fork_family import ForkedFamily
from simctl.reports.load import Study, load_study
from simctl.reports.page import PageInput, render
from simctl.reports.style import RC
from simctl.reports.tables import Table, headline_table, per_step_table
from simctl.traces.atomic import exchange, remove_stale_temporaries, temp_sibling
from simctl.traces.outputs import is_run_dir

# Entries of DIR that a report owns; anything else in DIR must be an input run.
REPORT_ENTRIES = frozenset({"index.html", "figures", "tables", "report.json"})

FAMILIES: tuple[tuple[str, Callable[[Context], list[FigureOut]]], ...] = (
    ("figure: across steps", steps_figure),
    ("figure: response lengths", trace_figure),
    ("figure: running requests and KV use", load_figure),
    ("figure: completion CDF", completion_figure),
    ("figure: acceptance length", acceptance_figure),
    ("figure: speculation", speculation_figure),
    ("figure: makespan breakdown", breakdown_figure),
    ("figure: step breakdown", step_breakdown_figure),
    ("figure: GPU busy fraction", busy_figure),
    ("figure: request start and first token", request_times_figure),
    ("figure: worker timelines", gantt_figures),
)


def choose_step(study: Study, baseline: str, step: int | None) -> tuple[int, str]:
    """The step the within-step figures show, and why that one.

    Default: the baseline's median-makespan step among the steps all series share, a
    typical step rather than the first (warm-up) or the worst one.
    """
    available = study.all_steps
    if step is not None:
        if step not in available:
            raise ReportError(f"--step {step}: not in the runs (they have steps {_ranges(available)})")
        return step, "chosen with --step"
    common = study.common_steps() or available
    ref = next((s for s in study.series if s.policy == baseline), study.series[0])
    mk = ref.steps["rollout_makespan_s"].reindex(common).dropna()
    if mk.empty:
        return common[0], "first step"
    order = mk.sort_values(kind="stable")
    return int(order.index[(len(order) - 1) // 2]), f"median makespan of {ref.label}"


def _ranges(steps: list[int]) -> str:
    if not steps:
        return "none"
    return f"{steps[0]}..{steps[-1]}" if steps == list(range(steps[0], steps[-1] + 1)) else str(steps)[:80]


def check_report_dir(out_dir: Path, run_dirs: list[Path]) -> None:
    """Refuse to replace a directory that holds anything a report did not write.

    The exception is an input run living inside DIR (`simctl replay --report DIR` writes
    its run to DIR/run); it is carried over into the new report directory.
    """
    runs = {p.resolve() for p in run_dirs}
    _check_not_in_run(out_dir, runs)
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise ReportError(f"{out_dir}: exists and is not a directory")
    foreign = [e.name for e in out_dir.iterdir() if e.name not in REPORT_ENTRIES and e.resolve() not in runs]
    if foreign:
        shown = ", ".join(sorted(foreign)[:5])
        raise ReportError(
            f"{out_dir}: exists and holds files a report did not write ({shown}); refusing to replace it"
        )


def _check_not_in_run(out_dir: Path, runs: set[Path]) -> None:
    """Refuse DIR at or inside an input run directory, or inside any run directory
    (`is_run_dir`: run.json beside its tables): `simctl replay --out RUN` replaces RUN
    whole, so a report written into it would be lost with the old run, and the report
    would hide inside its input."""
    target = out_dir.resolve()
    for run in sorted(runs):
        if target == run:
            raise ReportError(f"{out_dir}: is an input run directory; choose another output directory")
        if run in target.parents:
            raise ReportError(
                f"{out_dir}: is inside the input run directory {run}; choose another output directory"
            )
    for above in target.parents:
        if is_run_dir(above):
            raise ReportError(
                f"{out_dir}: is inside the run directory {above}; choose another output directory"
            )


def _swap_in(tmp: Path, out_dir: Path) -> None:
    """Put `tmp` at `out_dir` in one step (traces/atomic.py `exchange`), carrying over the
    run directories inside the old one as hard-linked copies, so that a crash or a signal
    at any moment leaves the old report with its runs intact, or the new one."""
    if not out_dir.exists():
        tmp.rename(out_dir)
        return
    for entry in out_dir.iterdir():
        if entry.name not in REPORT_ENTRIES:
            _link_copy(entry, tmp / entry.name)
    if exchange(tmp, out_dir):
        shutil.rmtree(tmp, ignore_errors=True)  # now the old report
        return
    aside = temp_sibling(out_dir)
    out_dir.rename(aside)
    tmp.rename(out_dir)
    shutil.rmtree(aside, ignore_errors=True)


def _link_copy(src: Path, dst: Path) -> None:
    """A copy that shares the files' data (hard links), falling back to a real copy."""

    def link(a: str, b: str) -> None:
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    if src.is_dir():
        shutil.copytree(src, dst, copy_function=link)
    else:
        link(str(src), str(dst))


def _report_meta(workers: int | None, step_reason: str) -> dict:
    try:
        ver = version("simctl")
    except PackageNotFoundError:
        ver = "unknown"
    return {
        "simctl_version": ver,
        "command": shlex.join(["simctl", *sys.argv[1:]]) if sys.argv else "",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "workers": workers,
        "step_reason": step_reason,
    }


# The worker timelines render in a forked child beside the other families where two
# cores are free (reports/fork_family.py); False draws every family in this process.
FORK_TIMELINES = True


def _render_all(ctx: Context) -> tuple[list[FigureOut], Table | None]:
    """Every figure family; one that fails is listed as left out, the rest still render."""
    figures: list[FigureOut] = []
    with plt.rc_context(RC):
        forked = ForkedFamily.start(gantt_figures, ctx, gantt_inputs, enabled=FORK_TIMELINES)
        try:
            for name, family in FAMILIES:
                try:
                    if family is gantt_figures and forked is not None:
                        figures += forked.collect()
                        forked = None
                    else:
                        figures += family(ctx)
                except Exception as exc:  # a plotting bug must not cost the whole report
                    why = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                    ctx.notes.leave_out(name, why)
        finally:
            if forked is not None:  # (interrupted before its turn)
                forked.abandon()
        try:
            sl_figs, sl_table = simlive(ctx)
            figures += sl_figs
        except Exception as exc:
            ctx.notes.leave_out("simulated vs measured", f"failed: {type(exc).__name__}: {exc}")
            sl_table = None
    return figures, sl_table


def build_report(
    run_dirs: list[Path],
    out_dir: Path,
    baseline: str = "verl",
    step: int | None = None,
    workers: int | None = None,
) -> Path:
    """Render the comparison report of `run_dirs` into `out_dir`; returns index.html.

    Raises ReportError (one line) when no run is usable or the arguments cannot be
    honoured; every lesser problem is shown on the page and echoed on stderr.
    """
    notes = Notes()
    run_dirs = [Path(p) for p in run_dirs]
    out_dir = Path(out_dir).resolve()  # "-o ." must name a directory with a parent to swap in
    study = load_study(run_dirs, notes)
    chosen, reason = choose_step(study, baseline, step)
    if workers is not None and workers < 1:
        raise ReportError(f"--workers {workers}: must be at least 1")
    check_report_dir(out_dir, run_dirs)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(out_dir)
    tmp = temp_sibling(out_dir)
    tmp.mkdir()  # the user's umask applies
    try:
        ctx = Context(
            study=study, step=chosen, baseline=baseline, fig_dir=tmp / "figures", notes=notes, workers=workers
        )
        headline = headline_table(study, baseline, notes)
        per_step = per_step_table(study, baseline)
        figures, sl_table = _render_all(ctx)
        breakdown = breakdown_table(ctx.breakdown, chosen) if ctx.breakdown else None
        tables = [headline, per_step] + [t for t in (sl_table, breakdown) if t is not None]
        table_files = {
            t.name: [p.relative_to(tmp).as_posix() for p in t.write(tmp / "tables")] for t in tables
        }
        meta = _report_meta(workers, reason)
        page = render(
            PageInput(
                study, chosen, baseline, headline, sl_table, figures, table_files, notes, meta, breakdown
            ),
            tmp,
        )
        (tmp / "index.html").write_text(page, encoding="utf-8")
        summary = {
            **meta,
            "runs": [str(r.path) for r in study.runs],
            "baseline": baseline,
            "step": chosen,
            "figures": [f.path.relative_to(tmp).as_posix() for f in figures],
            "tables": table_files,
            "warnings": notes.warnings,
            "left_out": [{"what": w, "why": y} for w, y in notes.left_out],
        }
        (tmp / "report.json").write_text(json.dumps(summary, indent=1))
        _swap_in(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    notes.echo()
    return out_dir / "index.html"
