"""The one top-level error handler: whatever a subcommand raises becomes at most three lines
and exit status 1, never a traceback; `--debug` lets the traceback through."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import simctl.traces.presets as presets
from simctl.cli import MAX_ERROR_LINES, main, one_message
from simctl.traces.io import TraceError


class Exploding(dict):
    def __init__(self, exc: Exception) -> None:
        super().__init__()
        self.exc = exc

    def items(self):  # type: ignore[override]
        raise self.exc


MANY = "boom: " + "\n".join(f"problem {i}" for i in range(10))


def test_user_error_is_short_and_exits_1(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(presets, "PRESETS", Exploding(TraceError(MANY)))
    result = CliRunner().invoke(main, ["trace", "presets"])
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert lines[0] == "Error: boom: problem 0"
    assert len(lines) == MAX_ERROR_LINES
    assert lines[-1] == "(and 8 more lines)"


def test_a_bug_says_it_is_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(presets, "PRESETS", Exploding(KeyError("step")))
    result = CliRunner().invoke(main, ["trace", "presets"])
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert result.output.splitlines() == [
        "Error: internal error (KeyError): 'step'",
        "this is a bug in simctl: rerun with --debug and report the traceback",
    ]


def test_debug_lets_the_traceback_through(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(presets, "PRESETS", Exploding(RuntimeError("boom")))
    result = CliRunner().invoke(main, ["--debug", "trace", "presets"])
    assert isinstance(result.exception, RuntimeError)


def test_usage_errors_keep_click_exit_2() -> None:
    result = CliRunner().invoke(main, ["replay", "--no-such-option"])
    assert result.exit_code == 2


def test_one_message_forms() -> None:
    assert one_message(FileNotFoundError(2, "No such file or directory", "/x/y")) == (
        "/x/y: No such file or directory"
    )
    assert one_message(MemoryError()).startswith("out of memory")
    assert one_message(RecursionError()) == "input nested too deeply"
    assert one_message(ValueError("")) == "ValueError"
    assert one_message(ValueError("a\nb\nc")) == "a\nb\nc"


@pytest.mark.parametrize(
    "args",
    [
        ["sweep", "spec.toml", "--out", "o", "--checkpoint-every", "nan"],
        ["live", "--temperature", "nan"],
        ["live", "--trace-scale", "NaN"],
        ["trace", "import", "verl", "dump", "--output", "t.parquet", "--temperature", "nan"],
        ["trace", "gen", "--preset", "dapo-32b-20k", "--scale", "nan"],
    ],
)
def test_nan_is_refused_where_a_number_is_asked(args: list[str]) -> None:
    """A real-valued option refuses nan before anything runs (click's FloatRange lets it
    through: nan compares false with both bounds)."""
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert "is not a number" in result.output and "nan" in result.output.lower()
