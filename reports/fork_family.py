"""Render one figure family in a forked child while the parent renders the others.

The worker timelines are about half of a report's render time (one figure per policy, one
rectangle per worker segment: 4 s of 8 on the README's 7-policy 512-GPU run, 2 cores), and
they read the loaded study without changing it. A child forked after the study is loaded
shares it copy-on-write, draws the timelines into the same figure folder, and sends back
what the page needs: the figures' records and the notes it made. The figures are the same
files the parent would have drawn (same code, same data).

Only where it can pay and is safe: a POSIX fork start method and at least two cores this
process may run on. The family's inputs are read before the fork (`prepare`), so the
child reads no file: it only computes and draws. Anything that goes wrong in the child (it
died, it raised, it has not answered in `CHILD_TIMEOUT_S`) is not an error: the parent
kills it and draws the family itself, as it would have without a child.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from simctl.reports.context import Context, FigureOut
from simctl.reports.errors import Notes
from simctl.sim.parallel_replay import usable_cores

Family = Callable[[Context], list[FigureOut]]

# A child that has not answered by then is stuck (the timelines of a 4,096-GPU run draw in
# well under a minute); the parent then draws the family itself.
CHILD_TIMEOUT_S = 300.0

# (family, context) of the render in flight: the forked child reads them from its copy of
# this module, so neither is pickled
_JOB: tuple[Family, Context] | None = None


def _child(conn: Connection) -> None:
    """Draw the family with fresh notes (matplotlib's settings are the parent's at the
    fork); send ("ok", figures, warnings, left out) or ("error", message)."""
    try:
        assert _JOB is not None
        family, ctx = _JOB
        ctx.notes = Notes()
        figures = family(ctx)
        conn.send(("ok", figures, ctx.notes.warnings, ctx.notes.left_out))
    except BaseException as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


@dataclass
class ForkedFamily:
    """A family rendering in a child; `collect` gives its figures (drawn here if the child
    could not), its notes added to the context's."""

    family: Family
    ctx: Context
    proc: BaseProcess
    conn: Connection

    @classmethod
    def start(
        cls,
        family: Family,
        ctx: Context,
        prepare: Callable[[Context], None] | None = None,
        enabled: bool = True,
    ) -> ForkedFamily | None:
        """The family started in a forked child after `prepare(ctx)` read its inputs; None
        where forking cannot pay or is not available (the caller draws it in turn)."""
        global _JOB
        if not enabled or usable_cores() < 2 or "fork" not in multiprocessing.get_all_start_methods():
            return None
        if prepare is not None:
            prepare(ctx)
        fork = multiprocessing.get_context("fork")
        receive, send = fork.Pipe(duplex=False)
        _JOB = (family, ctx)
        try:
            proc = fork.Process(target=_child, args=(send,), daemon=True)
            proc.start()
        except OSError:  # (no process could be started)
            receive.close()
            return None
        finally:
            send.close()  # (the child holds its own end)
            _JOB = None
        return cls(family, ctx, proc, receive)

    def abandon(self) -> None:
        """Stop the child without using what it drew (the report failed meanwhile)."""
        self.conn.close()
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join()

    def collect(self) -> list[FigureOut]:
        message: tuple[Any, ...] = ("error", "no answer")
        try:
            if self.conn.poll(CHILD_TIMEOUT_S):
                message = self.conn.recv()
        except (EOFError, OSError):  # the child died before answering
            pass
        finally:
            self.abandon()
        if message[0] != "ok":  # draw it here
            return self.family(self.ctx)
        _, figures, warnings, left_out = message
        for text in warnings:
            self.ctx.notes.warn(text)
        for what, why in left_out:
            self.ctx.notes.leave_out(what, why)
        return list(figures)
