"""The user's text reaches the terminal as text. The tables and headers are printed with
rich, whose markup reads "[...]" as styles: a plug-in policy named "[/]odd" made `simctl
replay` fail with an internal MarkupError after the whole replay, before the run
directory was written, and one named "[big]odd" was shown as "odd"; a trace whose
metadata or path held such text broke `simctl trace inspect` the same way."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from click.testing import CliRunner

from simctl.cli import main
from simctl.live.run_output import print_table as print_live_table
from simctl.traces.io import read_trace, write_trace
from simctl.traces.terminal import rich_text

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "traces/samples/tlt-qwen32b-32k-2steps.parquet"
NAMES = ("[/]odd", "[big]odd", "[bold red]x[/bold red]")

PLUGIN = """
from simctl.policies.placement import StaticGroupPlacement


class Odd(StaticGroupPlacement):
    name = {name!r}
"""


@pytest.mark.parametrize("name", NAMES)
def test_replay_prints_a_plugins_name_as_written_and_writes_its_run(name: str, tmp_path: Path) -> None:
    plugin = tmp_path / "odd.py"
    plugin.write_text(PLUGIN.format(name=name))
    out = tmp_path / "run"
    args = ["replay", str(SAMPLE), "--steps", "0", "--policy", "verl", "--policy", f"{plugin}:Odd"]
    res = CliRunner().invoke(main, [*args, "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert any(line.startswith(f"│ {name} │") for line in res.output.splitlines()), res.output
    assert (out / "run.json").is_file()


@pytest.mark.parametrize("name", NAMES)
def test_live_table_prints_a_name_as_written(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    step = {"throughput_tok_s": 1.0, "tail_time_s": 0.5, "gpu_idle_fraction": 0.1, "mean_accept_len": None}
    entry = {"steps": [step], "mean_rollout_makespan_s": 2.0, "overhead": {"fraction_of_engine": 0.01}}
    print_live_table({"policies": {name: {**entry, "wall_s": 3.0}}})  # type: ignore[arg-type]
    assert f"│ {name} │" in capsys.readouterr().out


def test_inspect_prints_metadata_and_path_as_written(tmp_path: Path) -> None:
    trace = read_trace(SAMPLE)
    folder = tmp_path / "[b]runs"
    folder.mkdir()
    path = folder / "t[/b].parquet"
    write_trace(
        path, trace.df, dataclasses.replace(trace.meta, preset="[/]mine", cluster="[b]h100x8"), trace.lists
    )
    res = CliRunner().invoke(main, ["trace", "inspect", str(path)])
    assert res.exit_code == 0, res.output
    text = res.output.replace("\n", " ")  # (a long path wraps the header)
    assert text.startswith(f"{path}  preset=[/]mine seed=0 ") and " layout=[b]h100x8 " in text


def test_inspect_says_which_layout_replay_uses() -> None:
    res = CliRunner().invoke(main, ["trace", "inspect", str(SAMPLE)])
    assert res.output.splitlines()[0].endswith(" layout=h100x64:tp4")
    dapo = ROOT / "traces/samples/dapo-32b-20k-2steps.parquet"
    res = CliRunner().invoke(main, ["trace", "inspect", str(dapo)])
    assert res.output.splitlines()[0].endswith(" layout=none (replay: h100x512)")


def test_inspect_writes_control_characters_in_metadata_as_escapes(tmp_path: Path) -> None:
    """An ANSI escape or a tab in a trace's metadata is shown as its Python escape, never
    sent to the terminal (as the report's notes already did: traces.terminal)."""
    trace = read_trace(SAMPLE)
    path = tmp_path / "t.parquet"
    write_trace(path, trace.df, dataclasses.replace(trace.meta, preset="a\x1b[31mred\tx"), trace.lists)
    res = CliRunner().invoke(main, ["trace", "inspect", str(path)])
    assert res.exit_code == 0, res.output
    assert "\x1b" not in res.output and "\t" not in res.output
    assert "preset=a\\x1b[31mred\\tx seed=0" in res.output


def test_rich_text() -> None:
    assert rich_text("plain") == "plain"
    assert rich_text("[/]a\x1b") == "\\[/]a\\x1b"
    assert rich_text(Path("/x/[b]y")) == "/x/\\[b]y"
