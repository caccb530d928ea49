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


class Warning_(dict):
    """Presets whose listing makes a library warn (as matplotlib does for a missing glyph)."""

    def items(self):  # type: ignore[override]
        import warnings

        warnings.warn("Glyph 65296 missing from font(s) DejaVu Sans.", UserWarning, stacklevel=1)
        return iter(())


def test_library_warnings_stay_off_stderr_unless_debug(monkeypatch: pytest.MonkeyPatch) -> None:
    """A library's warning is its source lines on stderr; simctl says what matters in its
    own one-line warnings, and --debug shows the library's too."""
    import warnings

    monkeypatch.setattr(presets, "PRESETS", Warning_())
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        quiet = CliRunner().invoke(main, ["trace", "presets"])
    assert quiet.exit_code == 0 and "Glyph" not in quiet.output and not seen, quiet.output
    with pytest.warns(UserWarning, match="Glyph 65296"):
        loud = CliRunner().invoke(main, ["--debug", "trace", "presets"])
    assert loud.exit_code == 0


def test_debug_lets_the_traceback_through(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(presets, "PRESETS", Exploding(RuntimeError("boom")))
    result = CliRunner().invoke(main, ["--debug", "trace", "presets"])
    assert isinstance(result.exception, RuntimeError)


@pytest.mark.parametrize(
    ("args", "words", "where"),
    [
        (["replay", "--no-such-option"], "--no-such-option", "main replay"),
        (["--bogus"], "--bogus", "main"),
        (["nope"], "'nope'", "main"),
        (["replay", "x.parquet", "--seed", "-1"], "'--seed': -1 is not in the range", "main replay"),
        (["replay"], "Missing argument 'TRACE'", "main replay"),
        # click reads an empty path as ".": the refusal named "." (is a directory)
        (["replay", "t.parquet", "--json", ""], "'--json': an empty path", "main replay"),
        (["trace", "validate", ""], "'TRACE': an empty path", "main trace validate"),
        (["sweep", "s.toml", "--out", ""], "'--out': an empty path", "main sweep"),
        (["report", "--out", "", "r"], "'--out': an empty path", "main report"),
        (["reproduce", "nosuch"], "PAPER: unknown paper 'nosuch'", "main reproduce"),
    ],
)
def test_usage_errors_are_one_line_with_click_exit_2(args: list[str], words: str, where: str) -> None:
    """A usage error keeps click's exit status 2 but is one line: the problem and where
    the help is (click's own form adds the usage and a hint on three lines more)."""
    result = CliRunner().invoke(main, args)
    (line,) = result.output.strip().splitlines()
    assert result.exit_code == 2 and line.startswith("Error: ") and words in line, result.output
    assert line.endswith(f"(see '{where} --help')"), line


@pytest.mark.parametrize("args", [[], ["trace"]])
def test_a_group_without_a_command_still_shows_its_help(args: list[str]) -> None:
    """(click raises "no command" as a usage error; it shows the help, not one line)"""
    result = CliRunner().invoke(main, args)
    assert result.output.startswith("Usage: ") and "Commands:" in result.output, result.output


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


SAMPLE = "traces/samples/efficientrollout-qwen7b-8k-6steps.parquet"


@pytest.mark.parametrize(
    ("outputs", "words"),
    [
        (["--out", "{d}/same", "--report", "{d}/same"], "given as the --out run directory and the --report"),
        (["--json", "{d}/same.json", "--chrome-trace", "{d}/same.json"], "given as the --json file and the"),
        (["--json", "{d}/r/x.json", "--report", "{d}/r"], "the --json file is inside the --report directory"),
        (["--out", "{d}/r/run", "--report", "{d}/r"], "the --out run directory is inside the --report"),
        (["--out", "{d}/run", "--report", "{d}/run/report"], "the --report directory is inside the --out"),
    ],
)
def test_outputs_that_would_overwrite_each_other_are_refused_first(
    tmp_path, outputs: list[str], words: str
) -> None:
    """Two outputs at one path, or one inside a directory written whole, lose one of them
    (before: the run was written, then the report refused, leaving it): refused before the
    simulation, in one line, with nothing written."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    args = ["replay", str(root / SAMPLE), "--steps", "0", "--cluster", "a100x8:tp1"]
    res = CliRunner().invoke(main, [*args, *(o.format(d=tmp_path) for o in outputs)])
    lines = res.output.strip().splitlines()
    assert res.exit_code == 1 and len(lines) == 1 and words in lines[0], res.output
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_place_is_refused_before_the_run(tmp_path) -> None:
    """A folder whose permission bits allow writing but where no file can be created
    (/proc) is found before the simulation, by creating a file there."""
    from pathlib import Path

    if not Path("/proc/self").is_dir():
        pytest.skip("no /proc")
    root = Path(__file__).resolve().parents[1]
    args = ["replay", str(root / SAMPLE), "--steps", "0", "--cluster", "a100x8:tp1", "--json", "/proc/x.json"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 1 and res.output.strip().startswith("Error: /proc/x.json: cannot write in /proc")
    assert "rollout replay" not in res.output  # (no table: nothing was simulated)


def test_policy_parameters_given_to_policies_are_checked() -> None:
    """`simctl policies NAME:params` checks the parameters as a run would (it ignored them)."""
    bad = CliRunner().invoke(main, ["policies", "ngram:gamma=abc"])
    assert bad.exit_code == 1 and bad.output.strip() == (
        "Error: policy 'ngram': gamma='abc' is not an integer (allowed: integer 1..64)"
    )
    assert CliRunner().invoke(main, ["policies", "ngram:gamma=3"]).exit_code == 0


def test_reproduce_refuses_its_json_inside_its_report(tmp_path) -> None:
    res = CliRunner().invoke(
        main,
        [
            "reproduce",
            "seer",
            "--quick",
            "--json",
            str(tmp_path / "r" / "x.json"),
            "--report",
            str(tmp_path / "r"),
        ],
    )
    assert res.exit_code == 1 and "the --json file is inside the --report directory" in res.output, res.output
    assert list(tmp_path.iterdir()) == []
