"""Command-line pieces shared by the commands of several layers (replay, live, sweep):
the options they all take, spelled and checked once, and `--steps` selection."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


class NumberRange(click.FloatRange):
    """`click.FloatRange` that also refuses nan (which compares false with both bounds, so
    FloatRange lets it through): `--trace-scale nan` would scale every length to nothing."""

    name = "number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if number != number:  # nan
            self.fail(f"{value!r} is not a number", param, ctx)
        return number


class PathArg(click.Path):
    """`click.Path` that refuses an empty argument: click reads `-o ""` as the current
    directory, and the refusal then named "." instead of the empty path given."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value:
            self.fail("an empty path", param, ctx)
        return super().convert(value, param, ctx)


def policy_option(help_text: str) -> Callable[[F], F]:
    """`--policy NAME[:key=value,...]`, repeatable, default verl."""
    return click.option(
        "--policy", "policies", multiple=True, default=("verl",), show_default=True, help=help_text
    )


#: A seed fits 63 bits (what the run format and a sweep record), and a batch limit above
#: a million sequences per worker is a typo: no engine holds that many.
MAX_SEED = 2**63 - 1
MAX_NUM_SEQS_LIMIT = 1 << 20


def seed_option(help_text: str = "Seed of every random choice.") -> Callable[[F], F]:
    return click.option(
        "--seed", type=click.IntRange(min=0, max=MAX_SEED), default=0, show_default=True, help=help_text
    )


def max_num_seqs_option(help_text: str) -> Callable[[F], F]:
    return click.option(
        "--max-num-seqs",
        type=click.IntRange(min=1, max=MAX_NUM_SEQS_LIMIT),
        default=256,
        show_default=True,
        help=help_text,
    )


def json_option(help_text: str) -> Callable[[F], F]:
    return click.option("--json", "json_path", type=PathArg(dir_okay=False, path_type=Path), help=help_text)


def out_option(help_text: str) -> Callable[[F], F]:
    return click.option("--out", type=PathArg(file_okay=False, path_type=Path), help=help_text)


def chrome_trace_option() -> Callable[[F], F]:
    """`--chrome-trace FILE`: the run's worker timeline for ui.perfetto.dev."""
    return click.option(
        "--chrome-trace",
        type=PathArg(dir_okay=False, path_type=Path),
        help="Write the worker timeline as a Chrome/Perfetto trace (JSON) to open in ui.perfetto.dev.",
    )


@dataclass(frozen=True)
class WorkerFault:
    """`--fail-worker W@T[:S]`: worker W is lost T seconds into step S (default: the run's
    first step) and stays lost for the rest of the run."""

    worker: int
    time_s: float
    step: int | None = None


def parse_fail_worker(text: str) -> WorkerFault:
    """`W@T` or `W@T:S` (worker id, seconds into the step, step number).

    >>> parse_fail_worker("3@12.5")
    WorkerFault(worker=3, time_s=12.5, step=None)
    >>> parse_fail_worker("0@2:7")
    WorkerFault(worker=0, time_s=2.0, step=7)
    """
    head, sep, when = text.partition("@")
    at, _, step = when.partition(":")
    try:
        fault = WorkerFault(int(head), float(at), int(step) if step else None)
    except ValueError:
        fault = None
    if not sep or fault is None or fault.worker < 0 or not (0.0 <= fault.time_s < float("inf")):
        raise click.BadParameter(
            f"'{text}' is not W@T or W@T:S (worker id >= 0, seconds >= 0, optional step)",
            param_hint="--fail-worker",
        )
    return fault


def fail_worker_option() -> Callable[[F], F]:
    """`--fail-worker W@T[:S]`, repeatable: lose worker W at T seconds into step S."""
    return click.option(
        "--fail-worker",
        "fail_workers",
        multiple=True,
        default=(),
        callback=lambda _ctx, _param, values: tuple(parse_fail_worker(v) for v in values),
        help="Lose worker W T seconds into step S (default: the first step), e.g. 3@20 or "
        "3@20:5; repeatable. The policy gets a WorkerLost event.",
    )


def parse_steps(text: str | None, available: list[int]) -> list[int]:
    """`A:B` (inclusive A, exclusive B, either side optional) or `N` over the trace's steps."""
    if not text:
        return available
    try:
        if ":" in text:
            a, b = text.split(":", 1)
            lo = int(a) if a else min(available)
            hi = int(b) if b else max(available) + 1
            chosen = [s for s in available if lo <= s < hi]
        else:
            chosen = [s for s in available if s == int(text)]
    except ValueError:
        raise click.BadParameter(f"'{text}' is not N or A:B", param_hint="--steps") from None
    if not chosen:
        raise click.BadParameter(
            f"'{text}' selects no step; trace has steps {available[0]}..{available[-1]}", param_hint="--steps"
        )
    return chosen
