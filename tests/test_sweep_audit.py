"""`simctl sweep` against what an audit found: points whose input files changed are rerun,
spec values are tabled typed, spellings and integers that cannot be tabled are refused up
front, a dead pool worker and a failed first run are one line and leave nothing behind,
a table copied from another run makes its point incomplete.

Each sweep here is one or two one-step points on a local process pool."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from simctl.cli import main
from simctl.sweep_runner import POINTS, SweepError, is_complete, point_dir, run_sweep
from simctl.sweep_spec import SweepSpecError, load_spec, spec_from_data
from simctl.sweep_table import _param_column, sweep_tables

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "traces" / "samples" / "efficientrollout-qwen7b-8k-6steps.parquet"
EXAMPLE = ROOT / "docs" / "examples" / "shortest_first.py"
CLUSTER = 'nodes = 1\ngpus_per_node = 8\ngpu = "A100"\ntp = 1\ngpu_mem_util = 0.9\n'


def _spec(tmp_path: Path, policies: str, cluster: str = "a100x8:tp1", steps: str = "0") -> Path:
    path = tmp_path / "sweep.toml"
    head = f"[sweep]\ntraces = ['t.parquet']\nsteps = '{steps}'\nclusters = ['{cluster}']\n"
    path.write_text(f"{head}[policies]\n{policies}")
    return path


def _ran(path: Path, out: Path, plugins: tuple[str, ...] = ()) -> int:
    return run_sweep(load_spec(path, plugins), out, workers=1, use_ray=False).ran


def test_points_whose_input_files_changed_run_again(tmp_path: Path) -> None:
    """The trace, a cluster TOML and a --plugin file are fingerprinted by content: a rerun
    after any of them changed runs the point again (into the same directory) instead of
    tabling the old numbers beside new ones; an unchanged rerun runs nothing."""
    shutil.copy(SAMPLE, tmp_path / "t.parquet")
    (tmp_path / "c.toml").write_text(CLUSTER)
    shutil.copy(EXAMPLE, tmp_path / "mine.py")
    plugin = (f"{tmp_path / 'mine.py'}:ShortestFirst",)
    path = _spec(tmp_path, "shortest-first = {}\n", cluster="c.toml")
    out = tmp_path / "out"
    assert _ran(path, out, plugin) == 1
    assert _ran(path, out, plugin) == 0
    (point,) = load_spec(path, plugin).points
    first = point.record()["inputs"]
    assert set(first) == {"trace", "cluster", "plugin"}
    changes = {
        # the same rows, other bytes (another compression): a trace rewritten
        "trace": lambda: pq.write_table(
            pq.read_table(tmp_path / "t.parquet"), tmp_path / "t.parquet", compression="gzip"
        ),
        "cluster": lambda: (tmp_path / "c.toml").write_text(CLUSTER.replace("8", "4")),
        "plugin": lambda: (tmp_path / "mine.py").write_text(
            (tmp_path / "mine.py").read_text() + "\n# edited\n"
        ),
    }
    for name, change in changes.items():
        change()
        (again,) = load_spec(path, plugin).points
        assert again.point_id == point.point_id and again.record()["inputs"][name] != first[name]
        assert not is_complete(point_dir(out, again), again), name
        assert _ran(path, out, plugin) == 1, name
        assert _ran(path, out, plugin) == 0, name
    assert [p.name for p in (out / POINTS).iterdir()] == [point.point_id]
    assert sweep_tables(load_spec(path, plugin), out)[0]["gpus"].tolist() == [4]  # the new cluster's


def test_a_parameter_spelled_two_ways_is_refused(tmp_path: Path) -> None:
    raw = {"sweep": {"traces": [str(SAMPLE)], "steps": "0"}}
    raw["policies"] = {"seer": {"chunk-tokens": [4096, 16384], "chunk_tokens": [8192]}}
    with pytest.raises(SweepSpecError) as info:
        spec_from_data(raw, tmp_path / "s.toml")
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{tmp_path / 's.toml'}: policies.seer.")
    assert "chunk_tokens given twice" in message, message


BIG_INT_PLUGIN = """
from dataclasses import dataclass
from typing import Annotated
from simctl.policies.contract import Policy
from simctl.policies.params import Int, Param, PolicyParams


@dataclass(frozen=True)
class Unbounded(Int):
    def parse(self, text):
        return int(text)


@dataclass(frozen=True)
class BigParams(PolicyParams):
    n: Annotated[int, Param(Unbounded(), "any integer")] = 1


class Big(Policy):
    name = "big"
    params_type = BigParams

    def __init__(self, p=BigParams()):
        self.p = p

    def on_event(self, event, view):
        return []
"""


def test_an_integer_beyond_64_bits_is_refused_up_front(tmp_path: Path) -> None:
    """Whatever a parameter's kind allows (here a plug-in's unbounded integer), a swept
    integer must fit the table's int64 column: refused before any point runs, and a table
    given one anyway writes it as text rather than failing after the work."""
    (tmp_path / "big.py").write_text(BIG_INT_PLUGIN)
    raw = {"sweep": {"traces": [str(SAMPLE)], "steps": "0"}, "policies": {"big": {"n": [1, 2**63]}}}
    with pytest.raises(SweepSpecError) as info:
        spec_from_data(raw, tmp_path / "s.toml", [f"{tmp_path / 'big.py'}:Big"])
    message = str(info.value)
    assert "\n" not in message and f"policies.big.n = {2**63}" in message and "must fit 64 bits" in message
    raw["policies"] = {"big": {"n": [1, 2**63 - 1]}}
    assert len(spec_from_data(raw, tmp_path / "s.toml", [f"{tmp_path / 'big.py'}:Big"]).points) == 2
    assert list(_param_column([1, None, 10**20])) == ["1", pd.NA, str(10**20)]
    assert list(_param_column([1.5, 10**400])) == ["1.5", str(10**400)]
    assert str(_param_column([1, None, 2]).dtype) == "Int64"


def test_parameters_are_tabled_and_identified_typed(tmp_path: Path) -> None:
    """`gamma = "4"` is the simulation of `gamma = 4`: one point id, an integer column;
    a flag written "yes" is tabled true."""
    shutil.copy(SAMPLE, tmp_path / "t.parquet")
    path = _spec(tmp_path, "ngram = { gamma = ['4', 2] }\ntlt-base = { pretrained = ['yes', false] }\n")
    spec = load_spec(path)
    assert [p.params for p in spec.points] == [
        (("gamma", 4),),
        (("gamma", 2),),
        (("pretrained", True),),
        (("pretrained", False),),
    ]
    (int_four,) = load_spec(_spec(tmp_path, "ngram = { gamma = 4 }\n")).points
    assert spec.points[0].point_id == int_four.point_id
    with pytest.raises(SweepSpecError, match="appears twice"):
        load_spec(_spec(tmp_path, "ngram = { gamma = ['4', 4] }\n"))
    run_sweep(spec, tmp_path / "out", workers=2, use_ray=False)
    table = sweep_tables(spec, tmp_path / "out")[0]
    assert str(table["param_gamma"].dtype) == "Int64" and table["param_gamma"].tolist()[:2] == [4, 2]
    assert str(table["param_pretrained"].dtype) == "boolean"
    assert table["param_pretrained"].tolist()[2:] == [True, False]


def test_workers_have_an_upper_bound(tmp_path: Path) -> None:
    shutil.copy(SAMPLE, tmp_path / "t.parquet")
    path = _spec(tmp_path, "verl = {}\n")
    res = CliRunner().invoke(main, ["sweep", str(path), "--out", str(tmp_path / "o"), "--workers", "9" * 20])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
    assert "--workers" in res.output and not (tmp_path / "o").exists()


def test_a_sweep_failing_before_any_point_leaves_no_new_directory(tmp_path: Path) -> None:
    shutil.copy(SAMPLE, tmp_path / "t.parquet")
    spec = load_spec(_spec(tmp_path, "verl = {}\n"))
    with pytest.raises(SweepError, match="nothing answers"):
        run_sweep(spec, tmp_path / "new" / "sweep", 1, True, ray_address="127.0.0.1:1")
    assert not (tmp_path / "new").exists()
    (tmp_path / "kept").mkdir()  # (a folder that was there stays)
    with pytest.raises(SweepError, match="nothing answers"):
        run_sweep(spec, tmp_path / "kept" / "sweep", 1, True, ray_address="127.0.0.1:1")
    assert (tmp_path / "kept").is_dir() and not (tmp_path / "kept" / "sweep").exists()


def test_a_table_from_another_run_makes_its_point_incomplete(tmp_path: Path) -> None:
    shutil.copy(SAMPLE, tmp_path / "t.parquet")
    path = _spec(tmp_path, "verl = {}\nngram = {}\n")
    out = tmp_path / "out"
    assert _ran(path, out) == 2
    verl, ngram = load_spec(path).points
    shutil.copy(point_dir(out, ngram) / "timeline.parquet", point_dir(out, verl) / "timeline.parquet")
    assert not is_complete(point_dir(out, verl), verl) and is_complete(point_dir(out, ngram), ngram)
    assert _ran(path, out) == 1


def test_a_plugin_named_with_a_colon_can_be_swept(tmp_path: Path) -> None:
    (tmp_path / "colon.py").write_text(EXAMPLE.read_text().replace('"shortest-first"', '"a:b"'))
    assert '"a:b"' in (tmp_path / "colon.py").read_text()
    raw = {"sweep": {"traces": [str(SAMPLE)], "steps": "0"}, "policies": {"a:b": {}}}
    (point,) = spec_from_data(raw, tmp_path / "s.toml", [f"{tmp_path / 'colon.py'}:ShortestFirst"]).points
    assert point.policy_spec == "a:b" and point.task_spec.endswith("colon.py:ShortestFirst")
    with pytest.raises(SweepSpecError, match="names policies, never code"):
        spec_from_data(raw, tmp_path / "s.toml")


def test_a_killed_pool_worker_is_one_line_and_the_sweep_resumes(tmp_path: Path) -> None:
    """A worker killed (SIGKILL, as the out-of-memory killer does) mid-point: the sweep
    says so in one line naming the point, and a rerun completes it."""
    shutil.copy(SAMPLE, tmp_path / "t.parquet")
    path = _spec(tmp_path, "seer = {}\n", steps="0:6")
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "simctl",
        "sweep",
        str(path),
        "--out",
        str(out),
        "--no-ray",
        "--workers",
        "1",
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    (point,) = load_spec(path).points
    steps = out / POINTS / f"{point.point_id}.steps"
    deadline = time.monotonic() + 120  # (only to detect a hang)
    while not steps.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    workers = [
        p for p in psutil.Process(proc.pid).children(recursive=True) if "spawn_main" in " ".join(p.cmdline())
    ]
    assert workers, "no pool worker found"
    for worker in workers:
        worker.kill()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    (line,) = err.strip().splitlines()
    assert "worker process of the pool died" in line and point.point_id in line and "rerun" in line, line
    assert "internal error" not in line and not steps.exists()
    assert _ran(path, out) == 1 and is_complete(point_dir(out, point), point)
