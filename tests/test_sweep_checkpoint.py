"""A sweep point resumed from a checkpoint between its steps equals the uninterrupted run:
for every registered policy (through a real checkpoint file), and for a sweep killed
midway and rerun. Checkpoints of another point, of other code, or torn are discarded."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from simctl.policies.registry import REGISTRY
from simctl.sim.cluster import parse_cluster
from simctl.sim.cost_model import load_cost_model
from simctl.sim.models import get_model
from simctl.sim.replay import PolicyRun, ReplaySetup, ReplayState, run_policy
from simctl.sweep_checkpoint import STATE, PointCheckpoint, checkpoint_dir
from simctl.sweep_runner import (
    POINTS,
    checkpoint_key,
    is_complete,
    make_task,
    pending_tasks,
    point_costs,
    point_dir,
    run_sweep,
)
from simctl.sweep_spec import load_spec, spec_from_data
from simctl.sweep_table import TIME_COLUMNS, sweep_tables
from simctl.traces.run_format import RUN_JSON
from simctl.traces.validate import load_valid_trace

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "traces" / "samples"
# (trace, cluster): sampled acceptance on the first; the second carries token ids, so the
# model-free drafters replay exactly and the grouped ones read their siblings' tokens
TRACES = [
    ("efficientrollout-qwen7b-8k-6steps.parquet", "a100x8:tp1"),
    ("rhymerl-math-14b-16k-tokens.parquet", "h100x8:tp2"),
]


class _Killed(Exception):
    pass


def _setup(trace: str, cluster: str, steps: list[int]) -> ReplaySetup:
    tr = load_valid_trace(SAMPLES / trace)
    spec = parse_cluster(cluster)
    model = get_model(tr.meta.model)
    return ReplaySetup(trace=tr, cluster=spec, model=model, cost=load_cost_model(model, spec), steps=steps)


def _outputs(run: PolicyRun) -> tuple[list[float], pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    def cat(frames: list[pd.DataFrame]) -> pd.DataFrame:
        return pd.concat(frames).reset_index(drop=True)

    return [m.rollout_makespan_s for m in run.steps], cat(run.requests), cat(run.timeline), cat(run.roles)


@pytest.mark.parametrize(("trace", "cluster"), TRACES)
def test_every_policy_resumes_to_the_same_run(trace: str, cluster: str, tmp_path: Path) -> None:
    """Each policy, killed after its first step's checkpoint and resumed from the file in a
    fresh checkpoint object: same makespans and same requests, timeline and role tables as
    replaying both steps at once."""
    setup = _setup(trace, cluster, [0, 1])
    for name in sorted(REGISTRY):
        straight = run_policy(setup, name)
        folder = tmp_path / name
        point = {"policy": name, "trace": trace}
        first = PointCheckpoint(folder, point, every_s=0.0)

        def kill_after_checkpoint(state: ReplayState, first: PointCheckpoint = first) -> None:
            first.save(state)
            raise _Killed

        with pytest.raises(_Killed):
            run_policy(setup, name, after_step=kill_after_checkpoint)
        resume = PointCheckpoint(folder, point).load()
        assert resume is not None and resume.done == 1, name
        assert len(resume.run.requests) == 1 and len(resume.run.steps) == 1, name
        resumed = run_policy(setup, name, resume=resume)
        a, b = _outputs(straight), _outputs(resumed)
        assert a[0] == b[0], name
        for x, y in zip(a[1:], b[1:], strict=True):
            pd.testing.assert_frame_equal(x, y, obj=name)
        assert resumed.step_cpu_s[0] == resume.run.step_cpu_s[0]  # the first step's cost is kept


def test_checkpoints_every_interval_and_never_for_short_points(tmp_path: Path) -> None:
    setup = _setup(*TRACES[0], [0, 1, 2])
    point = {"policy": "verl"}
    often = PointCheckpoint(tmp_path / "often", point, every_s=0.0)
    run_policy(setup, "verl", after_step=often.save)
    folder = checkpoint_dir(tmp_path / "often")
    assert sorted(p.name for p in folder.iterdir()) == [
        STATE,
        "step-00000.pkl",
        "step-00001.pkl",
        "step-00002.pkl",
    ]
    assert PointCheckpoint(tmp_path / "often", point).load().done == 3  # type: ignore[union-attr]
    rare = PointCheckpoint(tmp_path / "rare", point, every_s=3600.0)
    run_policy(setup, "verl", after_step=rare.save)
    assert not checkpoint_dir(tmp_path / "rare").exists()


@pytest.mark.parametrize("spoil", ["other point", "other code", "torn state", "missing step", "no state"])
def test_unusable_checkpoints_are_discarded(spoil: str, tmp_path: Path) -> None:
    """A checkpoint of another point or other code, or a damaged one, is removed and the
    point starts over (load gives None)."""
    setup = _setup(*TRACES[0], [0, 1])
    point = {"policy": "ngram", "seed": 0}
    run_policy(setup, "ngram", after_step=PointCheckpoint(tmp_path / "p", point, every_s=0.0).save)
    folder = checkpoint_dir(tmp_path / "p")
    reader = PointCheckpoint(tmp_path / "p", point)
    if spoil == "other point":
        reader = PointCheckpoint(tmp_path / "p", {**point, "seed": 1})
    elif spoil == "other code":
        reader.header = {**reader.header, "code": "0" * 64}
    elif spoil == "torn state":
        data = (folder / STATE).read_bytes()
        (folder / STATE).write_bytes(data[: len(data) // 2])
    elif spoil == "missing step":
        (folder / "step-00001.pkl").unlink()
    else:
        (folder / STATE).unlink()
    assert reader.load() is None
    assert not folder.exists()


def test_a_checkpoint_that_cannot_be_written_does_not_stop_the_point(tmp_path: Path) -> None:
    """Something else where the checkpoint goes (a file, a link): the point runs to the same
    result without checkpoints, and a later load discards what sits there."""
    setup = _setup(*TRACES[0], [0, 1, 2])
    folder = checkpoint_dir(tmp_path / "p")
    folder.write_text("not a checkpoint")
    blocked = PointCheckpoint(tmp_path / "p", {"policy": "ngram"}, every_s=0.0)
    run = run_policy(setup, "ngram", after_step=blocked.save)
    assert blocked.every_s == float("inf")  # no more tries for this point
    assert _outputs(run)[0] == _outputs(run_policy(setup, "ngram"))[0]
    elsewhere = tmp_path / "elsewhere"
    PointCheckpoint(elsewhere, {"policy": "ngram"}, every_s=0.0).write(
        ReplayState(None, PolicyRun("ngram", {}))  # type: ignore[arg-type]
    )
    folder.unlink(missing_ok=True)
    folder.symlink_to(checkpoint_dir(elsewhere), target_is_directory=True)
    assert PointCheckpoint(tmp_path / "p", {"policy": "ngram"}).load() is None  # not read through
    assert not folder.exists() and not folder.is_symlink()
    assert (checkpoint_dir(elsewhere) / STATE).is_file()  # the link's target is left alone


SPEC = """
[sweep]
traces = ["{trace}"]
steps = "0:6"
clusters = ["a100x8:tp1"]
seeds = [0]
[policies]
seer = {{}}
"""


def _run_json(out: Path) -> dict:
    (point,) = (out / POINTS).iterdir()
    return json.loads((point / RUN_JSON).read_text())


def test_killed_sweep_goes_on_from_the_point_checkpoint(tmp_path: Path) -> None:
    """A sweep killed (SIGKILL) while its one point of six steps runs goes on from that
    point's checkpoint when rerun; its table equals an uninterrupted sweep's."""
    path = tmp_path / "sweep.toml"
    path.write_text(SPEC.format(trace=SAMPLES / TRACES[0][0]))
    reference = tmp_path / "reference"
    run_sweep(load_spec(path), reference, 1, False, checkpoint_s=None)
    assert "resumed_after_steps" not in _run_json(reference)["sweep_cpu"]
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "simctl", "sweep", str(path), "--out", str(out)]
    proc = subprocess.Popen(
        [*cmd, "--no-ray", "--workers", "1", "--checkpoint-every", "0"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    state = checkpoint_dir(point_dir(out, load_spec(path).points[0])) / STATE
    deadline = time.monotonic() + 120
    while not state.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert state.exists(), f"no checkpoint before the sweep ended; its stderr: {err.decode()[-800:]}"
    result = run_sweep(load_spec(path), out, 1, False, checkpoint_s=0.0)
    assert result.ran == 1
    resumed = _run_json(out)["sweep_cpu"]["resumed_after_steps"]
    assert 1 <= resumed < 6
    spec = load_spec(path)
    table = sweep_tables(spec, out)[0].drop(columns=list(TIME_COLUMNS))
    expected = sweep_tables(spec, reference)[0].drop(columns=list(TIME_COLUMNS))
    pd.testing.assert_frame_equal(table, expected)
    assert not checkpoint_dir(point_dir(out, spec.points[0])).exists()  # removed once complete
    # the resumed run is the same run: the same id in run.json and in every table
    assert _run_json(out)["run_id"] == _run_json(reference)["run_id"]
    (resumed_dir,) = (out / POINTS).iterdir()
    for table_file in sorted(resumed_dir.glob("*.parquet")):
        stamp = pq.read_schema(table_file).metadata[b"simctl.run_id"].decode()
        assert stamp == _run_json(reference)["run_id"], table_file.name


def test_a_rewritten_trace_starts_the_point_over(tmp_path: Path) -> None:
    """The checkpoint is keyed by the trace's contents (the point's input fingerprint): a
    trace touched keeps it, one rewritten with other bytes starts the point over."""
    trace = tmp_path / "t.parquet"
    trace.write_bytes((SAMPLES / TRACES[0][0]).read_bytes())
    path = tmp_path / "sweep.toml"
    path.write_text(SPEC.format(trace=trace))

    def key() -> dict:
        return checkpoint_key(make_task(tmp_path / "out", load_spec(path).points[0], "simctl sweep", 0.0))

    first = key()
    assert first == key() and first["policy"] == "seer"
    os.utime(trace, ns=(0, trace.stat().st_mtime_ns + 10**9))
    assert key() == first
    pq.write_table(pq.read_table(trace), trace, compression="gzip")  # (the same rows, other bytes)
    assert key() != first


def test_complete_points_lose_a_leftover_checkpoint_and_plugins_keep_none(tmp_path: Path) -> None:
    path = tmp_path / "sweep.toml"
    path.write_text(SPEC.format(trace=SAMPLES / TRACES[0][0]).replace('"0:6"', '"0:1"'))
    spec = load_spec(path)
    run_sweep(spec, tmp_path / "out", 1, False)
    run_dir = point_dir(tmp_path / "out", spec.points[0])
    assert is_complete(run_dir, spec.points[0])
    checkpoint_dir(run_dir).mkdir()  # killed between writing the run directory and the removal
    assert pending_tasks(spec, tmp_path / "out", "simctl sweep", point_costs(spec)) == []
    assert not checkpoint_dir(run_dir).exists()
    example = f"{ROOT / 'docs/examples/shortest_first.py'}:ShortestFirst"
    raw = {"sweep": {"traces": [str(SAMPLES / TRACES[0][0])], "clusters": ["a100x8:tp1"]}}
    plugin = spec_from_data(
        {**raw, "policies": {"shortest-first": {}}}, tmp_path / "s.toml", plugins=[example]
    )
    assert make_task(tmp_path, plugin.points[0], "simctl sweep", 60.0)["checkpoint_s"] is None
    assert make_task(tmp_path, spec.points[0], "simctl sweep", 60.0)["checkpoint_s"] == 60.0
