"""Every `simctl` command answers --help, and the commands that need no input run."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from simctl.cli import main
from simctl.traces.presets import PRESETS


def command_paths(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = [prefix]
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            out += command_paths(command, (*prefix, name))
        else:
            out.append((*prefix, name))
    return out


def test_every_command_is_found() -> None:
    paths = {" ".join(p) for p in command_paths(main)}
    assert {"replay", "live", "report", "calibrate", "policies", "trace", "trace presets"} <= paths


@pytest.mark.parametrize("path", command_paths(main), ids=lambda p: " ".join(p) or "simctl")
def test_help(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(main, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def test_trace_presets_lists_every_preset() -> None:
    result = CliRunner().invoke(main, ["trace", "presets"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert [line.split()[0] for line in lines] == list(PRESETS)
    assert all(PRESETS[line.split()[0]].model in line for line in lines)


def test_python_dash_m_runs_the_same_program() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "simctl", "--help"], capture_output=True, text=True, check=True
    )
    assert "replay" in out.stdout and "live" in out.stdout
