"""The `simctl` command: one click program, subcommands registered from each layer.

This is the composition root: the only module that sees every layer. It also owns the one
top-level error handler, so that whatever a subcommand raises reaches the user as at most
three lines and exit status 1, and a usage error (an unknown option, a value out of range)
as one line with click's exit status 2; `--debug` shows the traceback instead.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import click

from simctl.traces.atomic import exit_on_sigterm
from simctl.traces.cli import trace_group

#: Lines of an error message shown; a longer message (e.g. a trace with many problems)
#: ends with a count of the lines left out.
MAX_ERROR_LINES = 3


def one_message(exc: BaseException) -> str:
    """The error as the user sees it: the message's first lines, never a traceback."""
    if isinstance(exc, MemoryError):
        return "out of memory (the input is too large for this machine)"
    if isinstance(exc, RecursionError):
        return "input nested too deeply"
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, OSError) and exc.filename is not None:
        text = f"{exc.filename}: {exc.strerror or text}"
    lines = text.splitlines()
    if len(lines) > MAX_ERROR_LINES:
        left = len(lines) - (MAX_ERROR_LINES - 1)
        lines = [*lines[: MAX_ERROR_LINES - 1], f"(and {left} more lines)"]
    return "\n".join(lines)


def is_user_error(exc: BaseException) -> bool:
    """simctl's own error types (each layer's: TraceError, SimError, PolicySpecError, ...)
    the operating system's (a path that cannot be read or written) and nesting too deep to
    parse describe the input;
    any other exception escaping a command is a bug in simctl, and says so."""
    return isinstance(exc, OSError | MemoryError | RecursionError) or type(exc).__module__.startswith(
        "simctl."
    )


class OneLineUsageError(click.UsageError):
    """A usage error shown as one line (click's own adds the usage and a help hint on lines
    of their own): the problem, then where the help is."""

    def show(self, file: Any = None) -> None:
        hint = f" (see '{self.ctx.command_path} --help')" if self.ctx is not None else ""
        click.echo(f"Error: {self.message}{hint}", err=True, file=file)


#: A group called without a command shows its help (click raises it as a usage error).
_HELP_ERRORS: tuple[type[Exception], ...] = tuple(
    e for e in (getattr(click.exceptions, "NoArgsIsHelpError", None),) if e is not None
)


def _one_line(exc: click.UsageError) -> click.UsageError:
    if isinstance(exc, _HELP_ERRORS):
        return exc
    return OneLineUsageError(exc.format_message(), exc.ctx)  # (exit status 2, as click's)


class SimctlGroup(click.Group):
    """A click group whose subcommands' unexpected exceptions become one-line errors."""

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except click.UsageError as exc:  # (the group's own options: `simctl --bogus`)
            raise _one_line(exc) from None

    def invoke(self, ctx: click.Context) -> Any:
        debug = bool(ctx.params.get("debug"))  # (parsed; the callback stores it in ctx.obj later)
        try:
            with exit_on_sigterm(), warnings.catch_warnings():  # SIGTERM unwinds: no half outputs
                if not debug:
                    # A library's warnings (a font without a glyph, numpy on an inf in a
                    # damaged table) are several lines of its source on stderr; simctl says
                    # what the user must know in its own one-line `warning:`s. --debug
                    # shows them. (Pool and Ray workers started from here read the variable.)
                    warnings.simplefilter("ignore")
                    os.environ.setdefault("PYTHONWARNINGS", "ignore")
                return super().invoke(ctx)
        except click.UsageError as exc:
            raise _one_line(exc) from None
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except KeyboardInterrupt:
            raise click.Abort() from None
        except (Exception, MemoryError, RecursionError) as exc:
            if (ctx.obj or {}).get("debug"):
                raise
            if is_user_error(exc):
                raise click.ClickException(one_message(exc)) from None
            raise click.ClickException(
                f"internal error ({type(exc).__name__}): {one_message(exc)}\n"
                "this is a bug in simctl: rerun with --debug and report the traceback"
            ) from None


@click.group(
    cls=SimctlGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110}
)
@click.version_option(package_name="simctl")
@click.option("--debug", is_flag=True, help="Show the Python traceback of an error instead of one line.")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """Simulate RL rollout designs on a GPU cluster, run them live, and compare."""
    ctx.obj = {"debug": debug}


main.add_command(trace_group)


def _cluster_problem(spec: str) -> str | None:
    """Why a trace's recorded cluster layout does not parse (None: it does)."""
    from simctl.sim.cluster import parse_cluster

    try:
        parse_cluster(spec)
    except ValueError as exc:
        return str(exc)
    return None


def _register() -> None:
    from simctl.annotate_cmd import annotate_cmd
    from simctl.live.calibrate import calibrate_cmd
    from simctl.live.cli import live_cmd
    from simctl.models_cmd import models_cmd
    from simctl.policies_cmd import policies_cmd
    from simctl.replay_cmd import replay_cmd
    from simctl.reports.cli import report_cmd
    from simctl.reproduce_cmd import reproduce_cmd
    from simctl.sim.models import model_record
    from simctl.sweep_cmd import sweep_cmd
    from simctl.traces.cli import set_cluster_check
    from simctl.traces.importers.cli import set_model_check

    set_model_check(model_record)  # `trace import --model`: the catalogue, or a config.json
    set_cluster_check(_cluster_problem)  # `trace validate`: the layout replay would read
    main.add_command(replay_cmd)
    main.add_command(policies_cmd)
    main.add_command(models_cmd)
    main.add_command(report_cmd)
    main.add_command(live_cmd)
    main.add_command(calibrate_cmd)
    main.add_command(sweep_cmd)
    main.add_command(reproduce_cmd)
    trace_group.add_command(annotate_cmd)  # `trace annotate` needs live/, which traces/ cannot import


_register()
