"""Render one figure family in a forked child while the parent renders the others.

The worker timelines are about half of a report's render time (one figure per policy, one
rectangle per worker segment: 4 s of 8 on the README's 7-policy 512-GPU run, 2 cores), and
they read the loaded study without changing it. A child forked after the study is loaded
shares it copy-on-write, draws the timelines into the same figure folder, and sends back
what the page needs: the figures' records and the notes it made. The figures are the same
files the parent would have drawn (same code, same data).

Only where it can pay and is safe: a POSIX fork start method and at least two cores this
process may run on. Anything that goes wrong in the child (it died, it raised) is not an
error: the parent draws the family itself, as it would have without a child.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass

from simctl.reports.context import Context, FigureOut
from simctl.reports.errors import Notes

Family = Callable[[Context], list[FigureOut]]

# (family, context) of the render in flight: the forked child reads them from its copy of
# this module, so neither is pickled
_JOB: tuple[Family, Context] | None = None


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # (no affinity on this platform)
        return os.cpu_count() or 1


def _in_child(rc: dict) -> tuple[list[FigureOut], list[str], list[tuple[str, str]]]:
    """The family drawn in the child with fresh notes: (figures, warnings, left out)."""
    import matplotlib.pyplot as plt

    assert _JOB is not None
    family, ctx = _JOB
    ctx.notes = Notes()
    with plt.rc_context(rc):
        figures = family(ctx)
    return figures, ctx.notes.warnings, ctx.notes.left_out


@dataclass
class ForkedFamily:
    """A family rendering in a child; `collect` gives its figures (drawn here if the child
    could not), its notes added to the context's."""

    family: Family
    ctx: Context
    pool: ProcessPoolExecutor
    future: Future

    @classmethod
    def start(cls, family: Family, ctx: Context, rc: dict, enabled: bool = True) -> ForkedFamily | None:
        """The family started in a forked child; None where forking cannot pay or is not
        available (the caller draws it in turn)."""
        global _JOB
        if not enabled or _usable_cores() < 2 or "fork" not in multiprocessing.get_all_start_methods():
            return None
        _JOB = (family, ctx)
        pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("fork"))
        try:
            future = pool.submit(_in_child, rc)
        except Exception:  # (no process could be started)
            pool.shutdown(wait=False, cancel_futures=True)
            _JOB = None
            return None
        return cls(family, ctx, pool, future)

    def collect(self) -> list[FigureOut]:
        global _JOB
        try:
            figures, warnings, left_out = self.future.result()
        except Exception:  # the child died or raised: draw it here
            return self.family(self.ctx)
        finally:
            self.pool.shutdown(wait=True)
            _JOB = None
        for text in warnings:
            self.ctx.notes.warn(text)
        for what, why in left_out:
            self.ctx.notes.leave_out(what, why)
        return figures
