"""`simctl sweep`: the spec's points, Ray and the local pool agree, resuming after a kill,
one-line spec errors, the report, and a local Ray on loopback that leaves nothing behind.

Ray starts once for the module (a few seconds); the points are tiny (two steps of the
efficientrollout sample on 8 A100s), so the module stays well under a minute on 2 cores.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simctl.cli import main
from simctl.replay_cmd import build_setup
from simctl.reports.sweep_figures import pareto_front
from simctl.sim.replay import run_policy
from simctl.sweep_cmd import choose_backend
from simctl.sweep_order import longest_first, point_requests, point_work, relative_cost
from simctl.sweep_runner import (
    POINTS,
    SweepError,
    is_complete,
    pending_tasks,
    point_costs,
    point_dir,
    run_sweep,
    start_local_ray,
)
from simctl.sweep_spec import SweepSpecError, load_spec, spec_from_data
from simctl.sweep_table import TIME_COLUMNS, sweep_tables, write_tables
from tests.sim.test_model_config import CATALOGUE_CONFIGS

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = "traces/samples/efficientrollout-qwen7b-8k-6steps.parquet"
SPEC = f"""
[sweep]
traces = ["{SAMPLE}"]
steps = "0:2"
clusters = ["a100x8:tp1"]
seeds = [0, 1]
[policies]
verl = {{}}
ngram = {{ gamma = [2, 4, 6] }}
"""
ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def spec_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The spec in a folder of its own whose `traces/` is the repository's: the relative
    trace path resolves against the spec's folder."""
    folder = tmp_path_factory.mktemp("spec")
    (folder / "traces").symlink_to(ROOT / "traces", target_is_directory=True)
    path = folder / "sweep.toml"
    path.write_text(SPEC)
    return path


def _ray_children() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if _is_ray(p)]


def _is_ray(p: psutil.Process) -> bool:
    try:
        text = " ".join(p.cmdline()) + p.name()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    return "ray" in text or "gcs_server" in text


def _gone(procs: list[psutil.Process], timeout: float = 20.0) -> list[psutil.Process]:
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    return [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


@pytest.fixture(scope="module")
def ray_cluster():
    """One local Ray for the module, started as simctl starts it (loopback, no dashboard)."""
    assert not ray.is_initialized()
    start_local_ray(2)
    procs = _ray_children()
    yield procs
    ray.shutdown()
    assert not _gone(procs), "ray processes left behind"


def _table(spec_path: Path, out: Path) -> pd.DataFrame:
    table, steps = sweep_tables(load_spec(spec_path), out)
    write_tables(table, steps, out)
    return table


@pytest.fixture(scope="module")
def pool_sweep(spec_path: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    out = tmp_path_factory.mktemp("pool") / "sweep"
    result = run_sweep(load_spec(spec_path), out, workers=2, use_ray=False)
    assert (result.ran, result.skipped, result.backend) == (8, 0, "process pool")
    return out, _table(spec_path, out)


def _without_times(df: pd.DataFrame) -> pd.DataFrame:
    return df.drop(columns=list(TIME_COLUMNS))


def test_spec_gives_eight_points(spec_path: Path) -> None:
    spec = load_spec(spec_path)
    assert len(spec.points) == 8
    assert sorted(p.policy_spec for p in spec.points) == sorted(
        ["verl", "ngram:gamma=2", "ngram:gamma=4", "ngram:gamma=6"] * 2
    )
    assert {p.seed for p in spec.points} == {0, 1}
    assert len({p.point_id for p in spec.points}) == 8
    assert all(Path(p.trace_path) == (spec_path.parent / SAMPLE).resolve() for p in spec.points)
    assert [p.point_id for p in load_spec(spec_path).points] == [p.point_id for p in spec.points]


def test_zipped_axes_advance_together(tmp_path: Path) -> None:
    path = tmp_path / "zip.toml"
    path.write_text(
        f'[sweep]\ntraces = ["{ROOT / SAMPLE}"]\nsteps = ["0:1", "1:2"]\nseeds = [3, 4]\n'
        'clusters = ["a100x8:tp1", "a100x16:tp2"]\nzip = [["steps", "seeds"]]\n'
        "[policies]\nspec-coupled = { method = ['ngram', 'suffix'], gamma = [2, 4], "
        "zip = [['method', 'gamma']] }\n"
    )
    points = load_spec(path).points
    assert len(points) == 2 * 2 * 2  # (steps, seed) pairs x clusters x (method, gamma) pairs
    assert {(p.steps, p.seed) for p in points} == {("0:1", 3), ("1:2", 4)}
    assert {p.policy_spec for p in points} == {
        "spec-coupled:method=ngram,gamma=2",
        "spec-coupled:method=suffix,gamma=4",
    }


def test_points_are_handed_out_longest_first(tmp_path: Path) -> None:
    """A point runs on one worker, so the sweep hands the costliest out first (its requests
    times its policy's simulator cost relative to verl's): n-gram before verl on the same
    steps, more steps before fewer, equal estimates in the spec's order. A pending point
    keeps its place when others are complete."""
    path = tmp_path / "order.toml"
    path.write_text(
        f'[sweep]\ntraces = ["{ROOT / SAMPLE}"]\nsteps = ["0:1", "0:3"]\nseeds = [0, 1]\n'
        'clusters = ["a100x8:tp1"]\n[policies]\nverl = {}\nngram = { gamma = [4] }\n'
    )
    spec = load_spec(path)
    tasks = pending_tasks(spec, tmp_path / "out", "simctl sweep", point_costs(spec))
    order = [(t["point"]["policy"], t["point"]["steps"], t["point"]["seed"]) for t in tasks]
    assert order == [
        ("ngram", "0:3", 0),
        ("ngram", "0:3", 1),
        ("verl", "0:3", 0),  # 3 steps of verl (1) outweigh 1 of n-gram (2.5)
        ("verl", "0:3", 1),
        ("ngram", "0:1", 0),
        ("ngram", "0:1", 1),
        ("verl", "0:1", 0),
        ("verl", "0:1", 1),
    ]
    requests = point_requests(spec.points, spec.traces)
    assert sorted(set(requests)) == [1024, 3072]  # 128 prompts x 8 samples per step
    assert longest_first([]) == []


def test_progress_counts_points_and_estimated_work(tmp_path: Path) -> None:
    """Progress reports points and their estimated cost, step by step: a point's replayed
    steps add their share of its estimate (by requests) before the point counts as done,
    it starts from the complete points (a resumed sweep), and the last call is the whole."""
    path = tmp_path / "progress.toml"
    path.write_text(
        f'[sweep]\ntraces = ["{ROOT / SAMPLE}"]\nsteps = ["0:1", "0:2"]\n'
        'clusters = ["a100x8:tp1"]\n[policies]\nverl = {}\nngram = { gamma = [4] }\n'
    )
    spec = load_spec(path)
    work = point_work(spec.points, spec.traces)
    ratio = relative_cost("ngram")
    assert ratio > 1.0  # (so that the order below is the costliest first)
    assert sorted(work) == pytest.approx([1024, 2048, 1024 * ratio, 2048 * ratio])  # requests x relative cost
    calls: list[tuple[int, int, float, float]] = []
    run_sweep(spec, tmp_path / "out", 1, False, progress=lambda *a: calls.append(a))
    total = sum(work)
    assert all(c[1] == 4 and c[3] == pytest.approx(total) for c in calls)
    # one worker, costliest first: n-gram 0:2, n-gram 0:1, verl 0:2, verl 0:1; each step of
    # 1,024 requests is worth 1,024 x the policy's relative cost, and a point's end adds
    # nothing its steps did not
    ngram, verl = 1024 * ratio, 1024.0
    expected = [(0, 0.0)]
    for cost, steps in ((ngram, 2), (ngram, 1), (verl, 2), (verl, 1)):
        points, done = expected[-1]
        expected += [(points, done + cost * (i + 1)) for i in range(steps)]
        expected.append((points + 1, expected[-1][1]))
    assert [c[0] for c in calls] == [e[0] for e in expected]
    np.testing.assert_allclose([c[2] for c in calls], [e[1] for e in expected])
    assert calls[-1][2] == pytest.approx(total)
    first = sorted(os.listdir(tmp_path / "out" / POINTS))[0]
    resumed = next(p for p in spec.points if p.point_id == first)
    shutil.rmtree(tmp_path / "out" / POINTS / first)
    calls.clear()
    run_sweep(load_spec(path), tmp_path / "out", 1, False, progress=lambda *a: calls.append(a))
    steps = 2 if resumed.steps == "0:2" else 1
    assert calls[0][0] == 3 and len(calls) == 1 + steps + 1
    assert [c[0] for c in calls] == [3] * (1 + steps) + [4]
    assert calls[-1][2] == pytest.approx(total)
    assert calls[0][2] == pytest.approx(total - work[spec.points.index(resumed)])


def test_ray_and_pool_give_identical_tables(
    ray_cluster, spec_path: Path, pool_sweep, tmp_path_factory: pytest.TempPathFactory
) -> None:
    out = tmp_path_factory.mktemp("ray") / "sweep"
    calls: list[tuple[int, int, float, float]] = []
    spec = load_spec(spec_path)
    result = run_sweep(spec, out, workers=2, use_ray=True, progress=lambda *a: calls.append(a))
    assert (result.ran, result.backend) == (8, "ray")
    # Ray tasks report their steps too (simctl.sweep_progress): before each of the 8 points
    # ends, its 2 steps, each worth half its estimate; the work done never falls
    assert len(calls) == 1 + 8 * 2 + 8
    # (the first point to end reported both its steps first; the other running point may
    # have reported some of its own by then)
    assert 1 + 2 <= [c[0] for c in calls].count(0) <= 1 + 2 + 2
    done = [c[2] for c in calls]
    assert done == sorted(done) and done[-1] == pytest.approx(calls[-1][3])
    assert ray.is_initialized()  # a Ray simctl did not start is left running
    table = _table(spec_path, out)
    pd.testing.assert_frame_equal(_without_times(table), _without_times(pool_sweep[1]))
    assert len(table) == 8
    assert {"trace", "steps", "cluster", "policy", "param_gamma", "seed", "makespan_s", "step_time_s"} <= set(
        table.columns
    )
    assert {
        "throughput_tok_s",
        "tail_s",
        "gpu_idle_fraction",
        "accept_len",
        "gpu_seconds",
        "sim_cpu_s",
    } <= set(table.columns)
    np.testing.assert_allclose(table["gpu_seconds"], table["makespan_s"] * 8)
    assert table["accept_len"].isna().tolist() == (table["policy"] == "verl").tolist()


def test_local_ray_listens_on_loopback_only(ray_cluster) -> None:
    assert ray.util.get_node_ip_address() == "127.0.0.1"
    assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")
    listening = []
    for proc in [psutil.Process(), *ray_cluster]:
        try:
            conns = proc.net_connections(kind="inet")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        listening += [c.laddr.ip for c in conns if c.status == psutil.CONN_LISTEN]
    assert listening
    assert all(ip in ("127.0.0.1", "::1", "::ffff:127.0.0.1") for ip in listening), listening


def test_rerun_skips_complete_points(spec_path: Path, pool_sweep) -> None:
    out, table = pool_sweep
    result = run_sweep(load_spec(spec_path), out, workers=2, use_ray=False)
    assert (result.ran, result.skipped) == (0, 8)
    pd.testing.assert_frame_equal(_table(spec_path, out), table)


def _complete(spec_path: Path, out: Path) -> int:
    return sum(is_complete(point_dir(out, p), p) for p in load_spec(spec_path).points)


def _children(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


@pytest.mark.parametrize("how", ["sigkill-pool", "sigterm-ray", "sigkill-ray"])
def test_killed_sweep_resumes(how: str, spec_path: Path, pool_sweep, tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    args = ["--no-ray", "--workers", "1"] if how.endswith("pool") else ["--workers", "2"]
    cmd = [sys.executable, "-m", "simctl", "sweep", str(spec_path), "--out", str(out), *args]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    children: list[psutil.Process] = []
    deadline = time.monotonic() + 60
    while _complete(spec_path, out) < 1 and proc.poll() is None and time.monotonic() < deadline:
        children = _children(proc.pid) or children
        time.sleep(0.02)
    children = _children(proc.pid) or children
    # (a SIGKILLed driver cleans nothing up: its Ray's processes are stopped by
    # simctl.ray_guard, which also covers a driver that Ray aborts after a SIGTERM)
    proc.send_signal(signal.SIGKILL if how.startswith("sigkill") else signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert not _gone(children), f"workers outlived the killed sweep; its stderr ends: {err.decode()[-1500:]}"
    done_before = _complete(spec_path, out)
    assert 1 <= done_before < 8, f"killed after {done_before} points"
    result = run_sweep(load_spec(spec_path), out, workers=2, use_ray=False)
    assert (result.ran, result.skipped) == (8 - done_before, done_before)
    entries = sorted(os.listdir(out / POINTS))
    assert len(entries) == 8 and not [e for e in entries if e.startswith(".") or "." in e], entries
    assert _complete(spec_path, out) == 8
    pd.testing.assert_frame_equal(_without_times(_table(spec_path, out)), _without_times(pool_sweep[1]))


@pytest.mark.parametrize("how", ["sigint-pool", "sigterm-pool", "sigint-ray"])
def test_interrupted_sweep_stops_at_once_and_resumes(
    how: str, spec_path: Path, pool_sweep, tmp_path: Path
) -> None:
    """Ctrl-C (on the process pool: SIGINT to the whole process group, twice, as a terminal
    sends it; on Ray: to the driver) or SIGTERM once a point is complete: the sweep stops
    its running points instead of running the rest, says in one line how to resume, exits
    130 or 143 without a traceback, and leaves no progress file; a rerun completes it to the
    same table."""
    out = tmp_path / "sweep"
    args = ["--no-ray", "--workers", "1"] if how.endswith("pool") else ["--workers", "2"]
    cmd = [sys.executable, "-m", "simctl", "sweep", str(spec_path), "--out", str(out), *args]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    deadline = time.monotonic() + 120  # (only to detect a hang)
    while _complete(spec_path, out) < 1 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    children = _children(proc.pid)
    if how == "sigint-pool":
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.2)  # (a second Ctrl-C while it stops)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
    elif how == "sigint-ray":
        # to the driver alone (`kill -INT`); the local instance's shutdown stops its workers
        # (no forced cancel, which can make Ray's core worker abort: see `run_ray`)
        proc.send_signal(signal.SIGINT)
    else:
        proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == (130 if how.startswith("sigint") else 143), err[-2000:]
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err[-2000:]
    assert "sweep interrupted" in err and "rerun the same command to resume" in err, err
    assert not _gone(children), "workers outlived the interrupted sweep"
    done_before = _complete(spec_path, out)
    assert 1 <= done_before < 8, f"interrupted after {done_before} points"
    assert not list((out / POINTS).glob("*.steps"))
    result = run_sweep(load_spec(spec_path), out, workers=2, use_ray=False)
    assert (result.ran, result.skipped) == (8 - done_before, done_before)
    pd.testing.assert_frame_equal(_without_times(_table(spec_path, out)), _without_times(pool_sweep[1]))


def test_a_sweep_on_a_local_ray_says_nothing_on_stderr(tmp_path: Path) -> None:
    """The local Ray simctl starts prints nothing of its own on stderr (Ray 2.59+ announced
    its token authentication there at every start, a line before every sweep's error)."""
    spec = tmp_path / "s.toml"
    spec.write_text(f"[sweep]\ntraces = ['{ROOT / SAMPLE}']\nsteps = '0:1'\nclusters = ['a100x8:tp1']\n")
    spec.write_text(spec.read_text() + "[policies]\nverl = {}\n")
    cmd = [sys.executable, "-m", "simctl", "sweep", str(spec), "--out", str(tmp_path / "o"), "--workers", "2"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-2000:]
    assert "(ray)" in proc.stdout, proc.stdout


def test_report_renders(pool_sweep) -> None:
    out, table = pool_sweep
    from simctl.reports.sweep_page import build_sweep_report

    steps = pd.read_parquet(out / "sweep_steps.parquet")
    index = build_sweep_report(table, steps, out / "report")
    page = index.read_text()
    for policy in ("verl", "ngram:gamma=2", "ngram:gamma=4", "ngram:gamma=6"):
        assert policy in page
    figures = sorted(p.name for p in (out / "report" / "figures").iterdir())
    assert figures == ["best.png", "param-ngram-gamma.png"]
    for name in figures:
        assert f'src="figures/{name}"' in page
        assert (out / "report" / "figures" / name).read_bytes()[:4] == b"\x89PNG"
    assert "cluster does not vary" in page  # the Pareto front needs two clusters


def test_pareto_front() -> None:
    xs = np.array([4.0, 1.0, 2.0, 3.0, 2.0])
    ys = np.array([1.0, 4.0, 2.0, 3.0, 2.5])
    assert pareto_front(xs, ys).tolist() == [True, True, True, False, False]


def test_cli_sweep_and_resume(spec_path: Path, pool_sweep, tmp_path: Path) -> None:
    """The command end to end on the pool, reusing the finished points of another sweep."""
    out = tmp_path / "sweep"
    shutil.copytree(pool_sweep[0], out, symlinks=True)
    (out / "sweep.parquet").unlink()
    res = CliRunner().invoke(main, ["sweep", str(spec_path), "--out", str(out), "--no-ray"])
    assert res.exit_code == 0, res.output
    assert "8 points: 0 run (process pool), 8 already complete" in res.output
    assert (out / "report" / "index.html").is_file()
    pd.testing.assert_frame_equal(pd.read_parquet(out / "sweep.parquet"), pool_sweep[1])


def test_a_point_whose_tables_were_damaged_runs_again(spec_path: Path, pool_sweep, tmp_path: Path) -> None:
    """A point directory is written whole; a table cut short or gone since (a disk, a user)
    makes the point incomplete, so a rerun runs it again instead of counting it done and
    failing, or reading garbage, when the table is built."""
    out = tmp_path / "sweep"
    shutil.copytree(pool_sweep[0], out)
    cut, gone = sorted((out / POINTS).iterdir())[:2]
    requests = cut / "requests.parquet"
    requests.write_bytes(requests.read_bytes()[:100])
    (gone / "timeline.parquet").unlink()
    res = CliRunner().invoke(main, ["sweep", str(spec_path), "--out", str(out), "--no-ray", "--workers", "1"])
    assert res.exit_code == 0, res.output
    assert "8 points: 2 run (process pool), 6 already complete" in res.output
    pd.testing.assert_frame_equal(
        _without_times(pd.read_parquet(out / "sweep.parquet")), _without_times(pool_sweep[1])
    )


def test_backend_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    assert choose_backend(no_ray=False, workers=2, ray_address=None) is True
    assert choose_backend(no_ray=True, workers=2, ray_address=None) is False
    assert choose_backend(no_ray=False, workers=1, ray_address=None) is False
    monkeypatch.setattr("simctl.sweep_cmd.ray_available", lambda: False)
    assert choose_backend(no_ray=False, workers=None, ray_address=None) is False


BAD = {
    "unknown top key": ("[sweep]\ntraces=['{t}']\n[policies]\nverl={{}}\n[extra]\n", "extra"),
    "unknown sweep key": ("[sweep]\ntraces=['{t}']\nseed=[1]\n[policies]\nverl={{}}\n", "sweep.seed"),
    "unknown policy": ("[sweep]\ntraces=['{t}']\n[policies]\nnope={{}}\n", "policies.nope"),
    "unknown parameter": ("[sweep]\ntraces=['{t}']\n[policies]\nngram={{gama=[2]}}\n", "policies.ngram.gama"),
    "value out of range": ("[sweep]\ntraces=['{t}']\n[policies]\nngram={{gamma=[2, 999]}}\n", "gamma = 999"),
    "value of wrong type": ("[sweep]\ntraces=['{t}']\n[policies]\nngram={{gamma='x'}}\n", 'gamma = "x"'),
    "missing trace": ("[sweep]\ntraces=['nowhere.parquet']\n[policies]\nverl={{}}\n", "nowhere.parquet"),
    "not a trace": ("[sweep]\ntraces=['{spec}']\n[policies]\nverl={{}}\n", "sweep.traces"),
    "bad cluster": ("[sweep]\ntraces=['{t}']\nclusters=['zz9x3']\n[policies]\nverl={{}}\n", "zz9x3"),
    "no such steps": ("[sweep]\ntraces=['{t}']\nsteps='40:50'\n[policies]\nverl={{}}\n", "40:50"),
    "unknown model": ("[sweep]\ntraces=['{t}']\nmodels=['nope-7b']\n[policies]\nverl={{}}\n", "sweep.models"),
    "model too big for the cluster": (
        "[sweep]\ntraces=['{t}']\nclusters=['a100x8:tp1']\nmodels=['Kimi-K2']\n[policies]\nverl={{}}\n",
        "sweep.clusters = 'a100x8:tp1': model Kimi-K2",
    ),
    "bad model config": (
        "[sweep]\ntraces=['{t}']\nmodels=['{spec}']\n[policies]\nverl={{}}\n",
        "sweep.models",
    ),
    "batch limit 0": (
        "[sweep]\ntraces=['{t}']\nmax_num_seqs=[0]\n[policies]\nverl={{}}\n",
        "sweep.max_num_seqs = 0",
    ),
    "batch limit not an integer": (
        "[sweep]\ntraces=['{t}']\nmax_num_seqs=[16, true]\n[policies]\nverl={{}}\n",
        "sweep.max_num_seqs = true",
    ),
    "missing profile": (
        "[sweep]\ntraces=['{t}']\nprofile='nowhere.json'\n[policies]\nverl={{}}\n",
        "sweep.profile = 'nowhere.json': profile nowhere.json: cannot read",
    ),
    "not a profile": ("[sweep]\ntraces=['{t}']\nprofile='{spec}'\n[policies]\nverl={{}}\n", "sweep.profile"),
    "no profiles": ("[sweep]\ntraces=['{t}']\nprofile=[]\n[policies]\nverl={{}}\n", "sweep.profile = []"),
    "profile listed twice": (
        "[sweep]\ntraces=['{t}']\nprofile=['a.json', 'a.json']\n[policies]\nverl={{}}\n",
        "a profile is listed twice",
    ),
    "bad seed": ("[sweep]\ntraces=['{t}']\nseeds=[-1]\n[policies]\nverl={{}}\n", "sweep.seeds = -1"),
    "zip lengths": (
        "[sweep]\ntraces=['{t}']\nseeds=[1,2]\nsteps=['0:1']\nzip=[['seeds','steps']]\n[policies]\nverl={{}}\n",
        "sweep.zip",
    ),
    "zip of a list": (
        "[sweep]\ntraces=['{t}']\nzip=[[['traces']]]\n[policies]\nverl={{}}\n",
        "is not one of",
    ),
    "policy zip of a table": (
        "[sweep]\ntraces=['{t}']\n[policies]\nngram={{gamma=[2, 4], zip=[[{{a=1}}]]}}\n",
        "policies.ngram.zip",
    ),
    "zipped twice in a group": (
        "[sweep]\ntraces=['{t}']\nzip=[['steps', 'steps']]\n[policies]\nverl={{}}\n",
        "twice in a zip group",
    ),
    "NUL in a trace path": (
        "[sweep]\ntraces=['{t}', \"a\\u0000b.parquet\"]\n[policies]\nverl={{}}\n",
        "without NUL bytes",
    ),
    "no such user": (
        "[sweep]\ntraces=['~no-such-user-here/x.parquet']\n[policies]\nverl={{}}\n",
        "no such file",
    ),
    "steps past 63 bits": (
        "[sweep]\ntraces=['{t}']\nsteps='" + "9" * 5000 + "'\n[policies]\nverl={{}}\n",
        "A:B",
    ),
    "steps in other digits": (
        "[sweep]\ntraces=['{t}']\nsteps='\uff10:\uff12'\n[policies]\nverl={{}}\n",
        "A:B",
    ),
    "steps written two ways": (
        "[sweep]\ntraces=['{t}']\nsteps=['0', '0:1']\n[policies]\nverl={{}}\n",
        "written another way",
    ),
    "cluster written two ways": (
        "[sweep]\ntraces=['{t}']\nclusters=['a100x8:tp1', 'A100x8:tp1']\n[policies]\nverl={{}}\n",
        "written another way",
    ),
    "model written two ways": (
        "[sweep]\ntraces=['{t}']\nmodels=['Qwen3-8B', 'qwen3-8b']\n[policies]\nverl={{}}\n",
        "written another way",
    ),
    "repeated value": ("[sweep]\ntraces=['{t}']\n[policies]\nngram={{gamma=[2, 2]}}\n", "twice"),
    "not toml": ("[sweep\n", "not valid TOML"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_spec_errors_are_one_line(case: str, tmp_path: Path) -> None:
    text, expected = BAD[case]
    path = tmp_path / "bad.toml"
    path.write_text(text.format(t=ROOT / SAMPLE, spec=path))
    with pytest.raises(SweepSpecError) as info:
        load_spec(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: ") and expected in message, message


def test_cli_spec_error_exit_1(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(f"[sweep]\ntraces=['{ROOT / SAMPLE}']\n[policies]\nngram={{gamma=[0]}}\n")
    res = CliRunner().invoke(main, ["sweep", str(path), "--out", str(tmp_path / "out")])
    assert res.exit_code == 1
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "policies.ngram.gamma = 0" in lines[0], res.output
    assert not (tmp_path / "out").exists()


def test_out_must_be_a_sweep_directory(spec_path: Path, tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "thesis.tex").write_text("keep me")
    res = CliRunner().invoke(main, ["sweep", str(spec_path), "--out", str(tmp_path / "out"), "--no-ray"])
    assert res.exit_code == 1 and "not a sweep directory" in res.output
    assert json.dumps(sorted(os.listdir(tmp_path / "out"))) == '["thesis.tex"]'
    for damaged, make in (("points", Path.write_text), ("sweep.json", Path.mkdir)):
        other = tmp_path / f"out-{damaged}"
        other.mkdir()
        make(other / damaged, *(["x"] if make is Path.write_text else []))
        res = CliRunner().invoke(main, ["sweep", str(spec_path), "--out", str(other), "--no-ray"])
        (line,) = res.output.strip().splitlines()
        assert res.exit_code == 1 and f"{other / damaged}: exists and is not a" in line, line
        assert "not a sweep directory" in line and os.listdir(other) == [damaged]


def test_clusters_default_to_each_traces_recorded_layout(tmp_path: Path) -> None:
    """As `simctl replay` without --cluster: `clusters` left out (or "trace") runs each
    trace on the layout its metadata records, else h100x512, and the points name the
    layout; the recorded layout named again is the same simulation, refused in one line."""
    dapo = str(ROOT / "traces/samples/dapo-32b-20k-2steps.parquet")
    path = tmp_path / "sweep.toml"
    sweep = {"traces": [str(ROOT / SAMPLE), dapo], "steps": "0:1"}

    def layouts(**extra: object) -> list[tuple[str, str]]:
        points = spec_from_data({"sweep": {**sweep, **extra}, "policies": {"verl": {}}}, path).points
        return [(Path(p.trace_path).name, p.cluster) for p in points]

    ours, theirs = Path(SAMPLE).name, Path(dapo).name
    assert layouts() == [(ours, "a100x8:tp1"), (theirs, "h100x512")]
    assert layouts(clusters=["trace", "h100x8:tp1"]) == [
        (ours, "a100x8:tp1"),
        (ours, "h100x8:tp1"),
        (theirs, "h100x512"),
        (theirs, "h100x8:tp1"),
    ]
    with pytest.raises(SweepSpecError, match=r"cluster=a100x8:tp1 .* appears twice"):
        layouts(traces=[str(ROOT / SAMPLE)], clusters=["trace", "a100x8:tp1"])


def test_relative_trace_falls_back_to_the_current_directory(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    path = tmp_path / "sweep.toml"
    path.write_text(SPEC)
    assert {p.trace_path for p in load_spec(path).points} == {str(ROOT / SAMPLE)}


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 70),
    st.floats(allow_nan=True),
    st.text(max_size=6),
    st.sampled_from(["0:2", "a100x8:tp1", "ngram", "gamma", "seeds", "gpt-oss-20b", str(ROOT / SAMPLE)]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["gamma", "method", "zip", "steps", "x"]), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sweep=st.dictionaries(
        st.sampled_from(
            ["traces", "steps", "clusters", "models", "max_num_seqs", "seeds", "zip", "profile", "oops"]
        ),
        VALUES,
    ),
    policies=st.dictionaries(st.sampled_from(["verl", "ngram", "spec-coupled", "nope"]), VALUES, max_size=3),
)
def test_hostile_specs_fail_in_one_line(sweep: dict, policies: dict) -> None:
    """Whatever the data, a spec is accepted or refused with one SweepSpecError line."""
    path = Path("/nonexistent/sweep.toml")
    try:
        spec = spec_from_data({"sweep": sweep, "policies": policies}, path)
    except SweepSpecError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(f"{path}: ")
    else:
        assert spec.points


def test_failed_points_are_one_line_and_the_rest_kept(tmp_path: Path) -> None:
    """A point that fails while running (its trace removed after the checks) is named in
    one line; the sweep can be rerun once the cause is gone."""
    trace = tmp_path / "t.parquet"
    shutil.copy(ROOT / SAMPLE, trace)
    path = tmp_path / "sweep.toml"
    path.write_text(SPEC.replace(SAMPLE, "t.parquet").replace("seeds = [0, 1]", "seeds = [0]"))
    spec = load_spec(path)
    trace.unlink()
    with pytest.raises(SweepError) as info:
        run_sweep(spec, tmp_path / "out", workers=1, use_ray=False)
    message = str(info.value)
    assert "\n" not in message and message.startswith("4 of 4 points failed; first verl-"), message
    shutil.copy(ROOT / SAMPLE, trace)
    assert run_sweep(load_spec(path), tmp_path / "out", workers=1, use_ray=False).ran == 4


def test_a_failed_sweep_leaves_the_directory_describing_its_last_complete_sweep(tmp_path: Path) -> None:
    """A run of another spec into a sweep directory that fails keeps sweep.json naming the
    sweep its table and report are of; once that run completes, it names the new spec."""
    trace = tmp_path / "t.parquet"
    shutil.copy(ROOT / SAMPLE, trace)
    head = "[sweep]\ntraces = ['t.parquet']\nsteps = '0:1'\nclusters = ['a100x8:tp1']\n"
    first, second = tmp_path / "first.toml", tmp_path / "second.toml"
    first.write_text(head + "[policies]\nverl = {}\n")
    second.write_text(head + "seeds = [1, 2]\n[policies]\nverl = {}\n")
    out = tmp_path / "out"
    assert run_sweep(load_spec(first), out, workers=1, use_ray=False).ran == 1
    done = json.loads((out / "sweep.json").read_text())
    spec = load_spec(second)
    trace.unlink()  # (the second sweep's points fail)
    with pytest.raises(SweepError):
        run_sweep(spec, out, workers=1, use_ray=False)
    after = json.loads((out / "sweep.json").read_text())
    assert (after["spec"], after["points"]) == (done["spec"], done["points"]) == (str(first), 1)
    shutil.copy(ROOT / SAMPLE, trace)
    res = CliRunner().invoke(main, ["sweep", str(second), "--out", str(out), "--no-ray", "--workers", "1"])
    assert res.exit_code == 0 and "2 points: 2 run" in res.output, res.output
    after = json.loads((out / "sweep.json").read_text())
    assert (after["spec"], after["points"]) == (str(second), 2)
    # the first spec's point is kept but not in this table: said so
    assert f"note: {out / 'points'} keeps 1 point(s) of another spec" in res.output


def test_joined_cluster_without_shared_files(
    ray_cluster, pool_sweep, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A joined cluster whose nodes see neither the trace nor the sweep directory
    (simctl.sweep_transfer): the Ray workers read the trace from the object store and send
    their run directories back, which the driver writes; the table is the pool's."""
    import simctl.sweep_runner as runner
    from simctl.sweep_transfer import file_digest, trace_cache_dir

    folder = tmp_path / "spec"
    (folder / SAMPLE).parent.mkdir(parents=True)
    shutil.copy(ROOT / SAMPLE, folder / SAMPLE)
    (folder / "sweep.toml").write_text(SPEC)
    spec = load_spec(folder / "sweep.toml")
    away, elsewhere = tmp_path / "away.parquet", tmp_path / "node"
    sent: list[runner.PointTask] = []
    send = runner.send_inputs

    def send_then_hide(tasks, token):
        got = send(tasks, token)
        os.rename(folder / SAMPLE, away)  # the nodes do not have the trace...
        for task in got:  # ...nor the sweep directory: their view of it is another folder
            task["out"] = str(elsewhere / POINTS / task["point_id"])
        sent.extend(got)
        return got

    monkeypatch.setattr(runner, "send_inputs", send_then_hide)
    out = tmp_path / "sweep"
    calls: list[tuple[int, int, float, float]] = []
    try:
        result = run_sweep(spec, out, workers=2, use_ray=True, progress=lambda *a: calls.append(a))
    finally:
        os.rename(away, folder / SAMPLE)
        (trace_cache_dir() / f"{file_digest(folder / SAMPLE)}.parquet").unlink(missing_ok=True)
    assert (result.ran, result.backend) == (8, "ray")
    assert len(sent) == 8 and {t["trace_digest"] for t in sent} == {file_digest(folder / SAMPLE)}
    assert not elsewhere.exists()  # nothing written where the driver's paths pointed
    # no step progress from such nodes: the bar moves once per point
    assert [c[0] for c in calls] == list(range(9))
    assert sorted(os.listdir(out / POINTS)) == sorted(p.point_id for p in spec.points)
    assert _complete(folder / "sweep.toml", out) == 8
    table = _table(folder / "sweep.toml", out)
    pd.testing.assert_frame_equal(_without_times(table), _without_times(pool_sweep[1]))


def test_joined_cluster_runs_a_plugin_file_the_nodes_lack(
    ray_cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--plugin file.py:Class` on a joined cluster whose nodes do not have that file: its
    source goes through the object store like the trace, and the points give the table a
    local pool gives with the file in place."""
    import simctl.sweep_runner as runner
    from simctl.sweep_transfer import file_digest, trace_cache_dir

    plugin = tmp_path / "mine" / "shortest_first.py"
    plugin.parent.mkdir()
    shutil.copy(ROOT / "docs/examples/shortest_first.py", plugin)
    spec_path = tmp_path / "sweep.toml"
    spec_path.write_text(
        f'''[sweep]
traces = ["{ROOT / SAMPLE}"]
steps = "0:1"
clusters = ["a100x8:tp1"]
[policies]
shortest-first = {{ default_len = [128, 512] }}
'''
    )
    plugins = [f"{plugin}:ShortestFirst"]
    pool = tmp_path / "pool"
    assert run_sweep(load_spec(spec_path, plugins), pool, workers=1, use_ray=False).ran == 2
    away, digest = tmp_path / "away.py", file_digest(plugin)
    sent: list[runner.PointTask] = []
    send = runner.send_inputs

    def send_then_hide(tasks, token):
        got = send(tasks, token)
        os.rename(plugin, away)  # the nodes do not have the plug-in's file
        sent.extend(got)
        return got

    monkeypatch.setattr(runner, "send_inputs", send_then_hide)
    out = tmp_path / "sweep"
    try:
        result = run_sweep(load_spec(spec_path, plugins), out, workers=2, use_ray=True)
    finally:
        os.rename(away, plugin)
        (trace_cache_dir() / f"{digest}.py").unlink(missing_ok=True)
    assert (result.ran, result.backend) == (2, "ray")
    assert {t["plugin_digest"] for t in sent} == {digest}
    tables = []
    for folder in (pool, out):
        tables.append(_without_times(sweep_tables(load_spec(spec_path, plugins), folder)[0]))
    assert sorted(zip(tables[1]["policy"], tables[1]["param_default_len"], strict=True)) == [
        ("shortest-first", 128),
        ("shortest-first", 512),
    ]
    pd.testing.assert_frame_equal(tables[0], tables[1])


def test_model_axis_replays_each_target(tmp_path: Path) -> None:
    """`models` replays the trace with other targets, as `simctl replay --model` does: a
    catalogue name, or a HF config beside the spec (read once and sent as data). Points
    on the trace's own model record none, so a spec without `models` keeps its ids."""
    config = tmp_path / "my-7b"
    config.mkdir()
    (config / "config.json").write_text(json.dumps(CATALOGUE_CONFIGS["Qwen2.5-7B"]))
    path = tmp_path / "sweep.toml"
    path.write_text(
        f"[sweep]\ntraces = ['{ROOT / SAMPLE}']\nsteps = '0:1'\nclusters = ['h100x8:tp1']\n"
        "models = ['gpt-oss-20b', 'my-7b']\n[policies]\nverl = {}\n"
    )
    spec = load_spec(path)
    assert [(p.model, p.model_name, p.model_config is None) for p in spec.points] == [
        ("gpt-oss-20b", "gpt-oss-20b", True),
        ("my-7b", "my-7b", False),  # named after its directory, as replay --model names it
    ]
    assert [p.record()["model"] for p in spec.points] == ["gpt-oss-20b", "my-7b"]
    plain = spec_from_data({"sweep": {"traces": [str(ROOT / SAMPLE)]}, "policies": {"verl": {}}}, path)
    assert "model" not in plain.points[0].record()
    out = tmp_path / "out"
    assert run_sweep(spec, out, workers=1, use_ray=False).ran == 2
    table = _table(path, out)
    assert list(table["model"]) == ["gpt-oss-20b", "my-7b"]
    for model, makespan in zip(["gpt-oss-20b", str(config)], table["makespan_s"], strict=True):
        setup = build_setup(ROOT / SAMPLE, "h100x8:tp1", None, model, "0:1", 0, False, 256)
        assert makespan == run_policy(setup, "verl").steps[0].rollout_makespan_s
    assert table["makespan_s"].iloc[0] != table["makespan_s"].iloc[1]


def test_model_axis_sends_a_configs_fields_not_its_path(tmp_path: Path) -> None:
    """A target that is no catalogue model travels as its config's fields: the point runs
    where the file is gone (a node of a joined cluster)."""
    config = tmp_path / "custom.json"
    config.write_text(json.dumps({**CATALOGUE_CONFIGS["Qwen2.5-7B"], "num_hidden_layers": 14}))
    path = tmp_path / "sweep.toml"
    path.write_text(
        f"[sweep]\ntraces = ['{ROOT / SAMPLE}']\nsteps = '0:1'\nclusters = ['h100x8:tp1']\n"
        "models = ['custom.json']\n[policies]\nverl = {}\n"
    )
    spec = load_spec(path)
    (point,) = spec.points
    assert point.model_name == "custom" and point.model_config is not None
    config.unlink()
    out = tmp_path / "out"
    assert run_sweep(spec, out, workers=1, use_ray=False).ran == 1
    table, _ = sweep_tables(spec, out)
    assert list(table["model"]) == ["custom"] and table["makespan_s"].iloc[0] > 0


def test_batch_limit_axis_replays_each_limit(tmp_path: Path) -> None:
    """`max_num_seqs` replays each point with that engine batch limit, as `simctl replay
    --max-num-seqs` does; the report plots the metrics against it like a parameter. A point
    at the default limit records none, so a spec without the axis keeps its ids."""
    path = tmp_path / "sweep.toml"
    path.write_text(
        f"[sweep]\ntraces = ['{ROOT / SAMPLE}']\nsteps = '0:1'\nclusters = ['a100x8:tp1']\n"
        "max_num_seqs = [4, 256]\n[policies]\nverl = {}\nngram = { gamma = [4] }\n"
    )
    spec = load_spec(path)
    assert [(p.policy_spec, p.max_num_seqs) for p in spec.points] == [
        ("verl", 4),
        ("ngram:gamma=4", 4),
        ("verl", 256),
        ("ngram:gamma=4", 256),
    ]
    assert [p.record().get("max_num_seqs") for p in spec.points] == [4, 4, None, None]
    out = tmp_path / "out"
    assert run_sweep(spec, out, workers=1, use_ray=False).ran == 4
    table = _table(path, out)
    assert list(table["max_num_seqs"]) == [4, 4, 256, 256]
    for (_, row), point in zip(table.iterrows(), spec.points, strict=True):
        setup = build_setup(ROOT / SAMPLE, "a100x8:tp1", None, None, "0:1", 0, False, point.max_num_seqs)
        assert row["makespan_s"] == run_policy(setup, point.policy_spec).steps[0].rollout_makespan_s
    # four requests per worker at a time take longer than the engine's default batch
    by = table.set_index(["policy_spec", "max_num_seqs"])["makespan_s"]
    assert by["verl", 4] > 1.5 * by["verl", 256] and by["ngram:gamma=4", 4] > by["ngram:gamma=4", 256]
    from simctl.reports.sweep_figures import swept_params
    from simctl.reports.sweep_page import build_sweep_report

    assert swept_params(table, "verl") == ["max_num_seqs"]
    steps = pd.read_parquet(out / "sweep_steps.parquet")
    page = build_sweep_report(table, steps, out / "report").read_text()
    figures = sorted(p.name for p in (out / "report" / "figures").iterdir())
    assert figures == ["best.png", "param-ngram-max_num_seqs.png", "param-verl-max_num_seqs.png"]
    assert "<th>max seqs</th>" in page
    # the best point's speedup pairs it with veRL at its own batch limit (one veRL per limit)
    from simctl.reports.sweep_figures import best_points

    (best,) = best_points(table).itertuples()
    assert (best.policy_spec, best.max_num_seqs) == ("ngram:gamma=4", 256)
    assert best.speedup_vs_verl == by["verl", 256] / by["ngram:gamma=4", 256]
    (old,) = best_points(table.drop(columns=["speedup_vs_verl"])).itertuples()  # (older tables)
    assert old.speedup_vs_verl == best.speedup_vs_verl
    assert "dtype" not in page and f"<td>{best.speedup_vs_verl:.3g}</td>" in page


def test_report_reads_tables_from_before_the_model_and_batch_axes(pool_sweep, tmp_path: Path) -> None:
    """A sweep.parquet written before the model and batch-limit axes renders: every point
    replayed the trace's own model at the engine's default limit."""
    out, table = pool_sweep
    from simctl.reports.sweep_page import build_sweep_report

    steps = pd.read_parquet(out / "sweep_steps.parquet")
    old = [df.drop(columns=["model", "max_num_seqs"]) for df in (table, steps)]
    page = build_sweep_report(*old, tmp_path / "report").read_text()
    assert "ngram:gamma=6" in page and "<td>256</td>" in page


def test_estimate_prices_each_pending_point() -> None:
    """The dry run's bill: each point still to run costs its setup plus its requests at
    its policy's rate relative to veRL's; complete points cost nothing; the wall time is
    the points packed onto the workers longest first."""
    from simctl.sweep_estimate import estimate
    from simctl.sweep_order import relative_cost

    path = ROOT / "sweep.toml"
    spec = spec_from_data(
        {
            "sweep": {"traces": [SAMPLE], "steps": "0:2", "seeds": [0, 1]},
            "policies": {"verl": {}, "composite": {}},
        },
        path,
    )
    requests = point_requests(spec.points, spec.traces)[0]
    measured = ({SAMPLE: 1e-4}, {SAMPLE: 0.5})
    est = estimate(spec, set(), 2, measured)
    verl, composite = 0.5 + requests * 1e-4, 0.5 + requests * 1e-4 * relative_cost("composite")
    assert est.points == 4 and est.by_policy == {"verl": 2, "composite": 2} and est.complete == 0
    assert est.cpu_s == pytest.approx(2 * (verl + composite))
    assert est.longest_s == pytest.approx(composite)
    assert est.wall_s == pytest.approx(composite + verl)  # one composite and one verl per worker
    assert list(est.cpu_by_policy) == ["composite", "verl"]
    assert est.cpu_by_policy["composite"] == pytest.approx(2 * composite)
    done = {p.point_id for p in spec.points if p.policy == "composite"}
    rest = estimate(spec, done, 2, measured)
    assert rest.complete == 2 and rest.cpu_s == pytest.approx(2 * verl) and rest.wall_s == pytest.approx(verl)


def test_cli_dry_run_measures_and_writes_nothing(spec_path: Path, pool_sweep, tmp_path: Path) -> None:
    """`--dry-run` counts the points, measures veRL once per trace, prints the estimate and
    writes nothing; given a finished sweep directory, it counts its complete points."""
    out = tmp_path / "new"
    res = CliRunner().invoke(
        main, ["sweep", str(spec_path), "--dry-run", "--out", str(out), "--workers", "2"]
    )
    assert res.exit_code == 0, res.output
    lines = res.output.strip().splitlines()
    assert lines[0] == f"{spec_path}: 8 points (verl 2, ngram 6); 0 already complete", lines
    assert "efficientrollout-qwen7b-8k-6steps.parquet" in lines[1] and " us" in lines[1]
    assert lines[3].startswith("on 2 workers: about ")
    assert lines[4].startswith("by policy: ngram ") and ", verl " in lines[4]
    assert not out.exists()
    done = CliRunner().invoke(main, ["sweep", str(spec_path), "--dry-run", "--out", str(pool_sweep[0])])
    assert done.exit_code == 0 and "; 8 already complete" in done.output, done.output
    assert "of the 0 points to run: 0.0 s" in done.output
    missing = CliRunner().invoke(main, ["sweep", str(spec_path)])
    assert missing.exit_code == 2 and "--out" in missing.output


def _profile_doc(tp: int = 1) -> dict:
    """A measured profile of Qwen2.5-7B (decode and prefill laws, as `simctl calibrate`
    writes them) on `tp` GPUs per worker."""
    from tests.test_fuzz_inputs import good_profile

    return {**good_profile(), "tp": tp}


def test_profile_prices_every_point_and_travels_as_data(tmp_path: Path) -> None:
    """`profile` prices the sweep's points with measured costs, as `replay --profile` does;
    the document goes to the tasks, which run where the file is gone. A profile measured on
    another TP than a cluster's is refused in one line before anything runs."""
    profile = tmp_path / "p.json"
    profile.write_text(json.dumps(_profile_doc()))
    path = tmp_path / "sweep.toml"
    head = f"[sweep]\ntraces = ['{ROOT / SAMPLE}']\nsteps = '0:1'\nprofile = 'p.json'\n"
    path.write_text(head + "clusters = ['a100x8:tp1']\n[policies]\nverl = {}\n")
    spec = load_spec(path)
    (point,) = spec.points
    assert point.record()["profile"] == "p.json" and point.profile_doc == _profile_doc()
    expected = run_policy(
        build_setup(ROOT / SAMPLE, "a100x8:tp1", profile, None, "0:1", 0, False, 256), "verl"
    )
    roofline = run_policy(build_setup(ROOT / SAMPLE, "a100x8:tp1", None, None, "0:1", 0, False, 256), "verl")
    profile.unlink()
    out = tmp_path / "out"
    assert run_sweep(spec, out, workers=1, use_ray=False).ran == 1
    table, _ = sweep_tables(spec, out)
    assert list(table["cost_model"]) == ["p.json"]
    assert table["makespan_s"].iloc[0] == expected.steps[0].rollout_makespan_s
    assert table["makespan_s"].iloc[0] != roofline.steps[0].rollout_makespan_s
    profile.write_text(json.dumps(_profile_doc(tp=1)))
    path.write_text(head + "clusters = ['a100x8:tp1', 'h100x8:tp2']\n[policies]\nverl = {}\n")
    with pytest.raises(SweepSpecError) as info:
        load_spec(path)
    assert str(info.value) == (
        f"{path}: sweep.clusters = 'h100x8:tp2': profile p.json: field 'tp'=1 but the cluster runs tp=2"
    )


def test_profiles_listed_per_tp_price_each_cluster_with_its_own(tmp_path: Path) -> None:
    """A list of profiles gives each cluster the one measured on its TP (as `simctl
    calibrate` measures one per TP): each point equals a replay with that profile. A
    cluster that no listed profile fits, or two fit, is refused in one line."""
    docs = {"tp1.json": _profile_doc(tp=1), "tp2.json": _profile_doc(tp=2), "tp4.json": _profile_doc(tp=4)}
    docs["tp2.json"]["measurements"] = [  # (other costs, so that a mix-up shows)
        {**row, "time_s": row["time_s"] * 3} for row in docs["tp2.json"]["measurements"]
    ]
    docs["tp1b.json"] = docs["tp1.json"]
    for name, doc in docs.items():
        (tmp_path / name).write_text(json.dumps(doc))
    path = tmp_path / "sweep.toml"
    head = f"[sweep]\ntraces = ['{ROOT / SAMPLE}']\nsteps = '0:1'\nclusters = ['a100x8:tp1', 'h100x8:tp2']\n"
    path.write_text(head + "profile = ['tp2.json', 'tp1.json']\n[policies]\nverl = {}\n")
    spec = load_spec(path)
    pairs = [("a100x8:tp1", "tp1.json"), ("h100x8:tp2", "tp2.json")]
    assert [(p.cluster, p.profile) for p in spec.points] == pairs
    out = tmp_path / "out"
    assert run_sweep(spec, out, workers=1, use_ray=False).ran == 2
    table, _ = sweep_tables(spec, out)
    assert list(table["cost_model"]) == ["tp1.json", "tp2.json"]
    for row, (cluster, name) in zip(table.itertuples(), pairs, strict=True):
        setup = build_setup(ROOT / SAMPLE, cluster, tmp_path / name, None, "0:1", 0, False, 256)
        assert row.makespan_s == run_policy(setup, "verl").steps[0].rollout_makespan_s
    assert table["makespan_s"].iloc[0] != table["makespan_s"].iloc[1]
    refused = {  # (a list of one is the single profile, message included)
        "['tp1.json']": (
            "sweep.clusters = 'h100x8:tp2': profile tp1.json: field 'tp'=1 but the cluster runs tp=2"
        ),
        "['tp1.json', 'tp4.json']": (
            "sweep.clusters = 'h100x8:tp2': no profile of sweep.profile prices Qwen2.5-7B at tp=2: "
            "profile tp1.json: field 'tp'=1 but the cluster runs tp=2; "
            "profile tp4.json: field 'tp'=4 but the cluster runs tp=2"
        ),
        "['tp1.json', 'tp2.json', 'tp1b.json']": (
            "sweep.clusters = 'a100x8:tp1': profiles 'tp1.json' and 'tp1b.json' both price "
            "Qwen2.5-7B at tp=1; list one"
        ),
    }
    for listed, message in refused.items():
        path.write_text(head + f"profile = {listed}\n[policies]\nverl = {{}}\n")
        with pytest.raises(SweepSpecError) as info:
            load_spec(path)
        assert str(info.value) == f"{path}: {message}"


def test_profile_without_a_policys_drafter_is_refused_before_running(tmp_path: Path) -> None:
    """A profile with no measurements of a drafter a policy declares it drafts with is
    refused when the spec is checked (not when the point first drafts, minutes in)."""
    trace = ROOT / "traces/samples/rhymerl-math-14b-16k-tokens.parquet"
    doc = {**_profile_doc(), "model": "Qwen3-14B"}  # the sample's model
    (tmp_path / "p.json").write_text(json.dumps(doc))
    path = tmp_path / "sweep.toml"
    path.write_text(
        f"[sweep]\ntraces = ['{trace}']\nclusters = ['h100x8:tp1']\nprofile = 'p.json'\n"
        "[policies]\nverl = {}\nrhymerl = {}\n"
    )
    with pytest.raises(SweepSpecError) as info:
        load_spec(path)
    assert str(info.value) == (
        f"{path}: sweep.profile = 'p.json': profile p.json: no 'draft:history' measurements (has: none); "
        "calibrate the drafter the policy uses or drop --profile (policies.rhymerl)"
    )


def test_speedup_pairs_each_point_with_verl_on_the_same_seed(pool_sweep) -> None:
    """`speedup_vs_verl` divides the veRL point's makespan by the point's, on the same
    trace, steps, cluster and seed (per step in the steps table); veRL's own is 1."""
    out, table = pool_sweep
    steps = pd.read_parquet(out / "sweep_steps.parquet")
    verl = table[table["policy_spec"] == "verl"].set_index("seed")["makespan_s"]
    for _, row in table.iterrows():
        assert row["speedup_vs_verl"] == pytest.approx(verl[row["seed"]] / row["makespan_s"], rel=1e-12)
    assert (table.loc[table["policy_spec"] == "verl", "speedup_vs_verl"] == 1.0).all()
    assert (table.loc[table["policy"] == "ngram", "speedup_vs_verl"] != 1.0).all()
    by_step = steps[steps["policy_spec"] == "verl"].set_index(["seed", "step"])["makespan_s"]
    for _, row in steps.iterrows():
        expected = by_step[row["seed"], row["step"]] / row["makespan_s"]
        assert row["speedup_vs_verl"] == pytest.approx(expected, rel=1e-12)
    alone = table[table["policy"] == "ngram"].copy()
    from simctl.sweep_table import PAIRED_ON, add_speedup

    add_speedup(alone, PAIRED_ON)  # no veRL point to pair with
    assert alone["speedup_vs_verl"].isna().all()


def test_model_axis_names_the_traces_own_model_beside_others(tmp_path: Path) -> None:
    """`"trace"` in `models` is each trace's own model: its points are those of a sweep
    without the axis (same ids, same results), beside the other targets' points."""
    path = tmp_path / "sweep.toml"
    head = f"[sweep]\ntraces = ['{ROOT / SAMPLE}']\nsteps = '0:1'\nclusters = ['h100x8:tp1']\n"
    path.write_text(head + "models = ['trace', 'gpt-oss-20b']\n[policies]\nverl = {}\n")
    spec = load_spec(path)
    assert [p.model for p in spec.points] == ["", "gpt-oss-20b"]
    plain = spec_from_data(
        {
            "sweep": {"traces": [str(ROOT / SAMPLE)], "steps": "0:1", "clusters": ["h100x8:tp1"]},
            "policies": {"verl": {}},
        },
        path,
    )
    assert spec.points[0].point_id == plain.points[0].point_id
    out = tmp_path / "out"
    assert run_sweep(spec, out, workers=1, use_ray=False).ran == 2
    table, _ = sweep_tables(spec, out)
    assert list(table["model"]) == ["Qwen2.5-7B", "gpt-oss-20b"]
    own = run_policy(build_setup(ROOT / SAMPLE, "h100x8:tp1", None, None, "0:1", 0, False, 256), "verl")
    assert table["makespan_s"].iloc[0] == own.steps[0].rollout_makespan_s
    path.write_text(head + "models = ['trace', 'trace']\n[policies]\nverl = {}\n")
    with pytest.raises(SweepSpecError, match=r'sweep\.models: lists "trace" twice'):
        load_spec(path)


def test_estimate_prices_pending_points_from_complete_ones(tmp_path: Path) -> None:
    """A sweep grown by new values: its pending points of a policy already run on the
    trace are priced at the median CPU per request its complete points measured; the
    others by the relative costs. The dry run says how many were priced each way."""
    from simctl.sweep_estimate import estimate, sweep_progress
    from simctl.sweep_order import relative_cost

    def spec(gammas: list[int], seeds: list[int]):
        sweep = {"traces": [str(ROOT / SAMPLE)], "steps": "0:1", "clusters": ["a100x8:tp1"], "seeds": seeds}
        return spec_from_data(
            {"sweep": sweep, "policies": {"verl": {}, "ngram": {"gamma": gammas}}}, tmp_path / "s"
        )

    out = tmp_path / "out"
    assert run_sweep(spec([2], [0]), out, workers=1, use_ray=False).ran == 2
    grown = spec([2, 4], [0, 1])
    done, observed = sweep_progress(grown, out)
    assert len(done) == 2 and set(observed) == done and all(v > 0 for v in observed.values())
    requests = point_requests(grown.points, grown.traces)[0]
    by_policy = {p.policy: observed[p.point_id] / requests for p in grown.points if p.point_id in done}
    measured = ({str(ROOT / SAMPLE): 1e-3}, {str(ROOT / SAMPLE): 0.25})
    est = estimate(grown, done, 1, measured, observed)
    pending = [p for p in grown.points if p.point_id not in done]
    assert est.from_sweep == len(pending) == 4  # verl seed 1, ngram gamma 2 seed 1, gamma 4 seeds 0, 1
    assert est.cpu_s == pytest.approx(sum(0.25 + requests * by_policy[p.policy] for p in pending))
    guessed = estimate(grown, done, 1, measured)  # nothing observed: the relative costs
    assert guessed.from_sweep == 0
    assert guessed.cpu_s == pytest.approx(
        sum(0.25 + requests * 1e-3 * relative_cost(p.policy) for p in pending)
    )
    assert "4 at what this sweep's complete points" in est.lines(tmp_path / "s")[2]
