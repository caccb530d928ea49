"""simctl.sweep_transfer: which trace file a node reads, whether it sees the sweep
directory, and a run directory sent back (the Ray end-to-end case is in test_sweep.py)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import stat
import tempfile
from pathlib import Path

import pytest

from simctl.sweep_runner import SweepError, check_reachable, local_ray
from simctl.sweep_transfer import (
    file_digest,
    local_policy_spec,
    local_trace,
    read_run_files,
    sees_sweep_dir,
    trace_cache_dir,
    write_run_files,
)
from simctl.traces.plugins import plugin_file


@pytest.fixture(autouse=True)
def own_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The node's temporary directory (and so its trace cache) is the test's."""
    node = tmp_path / "node-tmp"
    node.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(node))
    return node


def _fetcher(data: bytes, calls: list[int]):
    def fetch() -> bytes:
        calls.append(1)
        return data

    return fetch


def test_digest_is_sha256_of_the_bytes(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    path.write_bytes(b"abc" * 1_000_000)
    assert file_digest(path) == hashlib.sha256(b"abc" * 1_000_000).hexdigest()
    path.write_bytes(b"other")  # (a new size: the memo does not answer for the old file)
    assert file_digest(path) == hashlib.sha256(b"other").hexdigest()


def test_the_drivers_file_is_read_where_the_node_has_it(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    path.write_bytes(b"trace")
    calls: list[int] = []
    assert local_trace(str(path), None, None) == path  # a local sweep: no digest
    assert local_trace(str(path), file_digest(path), _fetcher(b"trace", calls)) == path
    assert calls == []  # the object store is not read


@pytest.mark.parametrize("node_has", ["nothing", "another file"])
def test_the_sent_bytes_are_read_otherwise_and_cached(tmp_path: Path, node_has: str) -> None:
    data = b"the driver's trace"
    digest = hashlib.sha256(data).hexdigest()
    path = tmp_path / "t.parquet"
    if node_has == "another file":
        path.write_bytes(b"a stale copy under the same name")
    calls: list[int] = []
    got = local_trace(str(path), digest, _fetcher(data, calls))
    assert got == trace_cache_dir() / f"{digest}.parquet" and got.read_bytes() == data
    assert local_trace(str(path), digest, _fetcher(data, calls)) == got
    assert calls == [1]  # the second point of the trace on this node reads the cache
    assert stat.S_IMODE(trace_cache_dir().stat().st_mode) == 0o700
    if node_has == "another file":
        assert path.read_bytes() == b"a stale copy under the same name"  # left alone


@pytest.mark.parametrize(
    ("spec", "file"),
    [
        ("/home/u/my_policy.py:Mine", "/home/u/my_policy.py"),
        ("/home/u/my_policy.py:Mine:gamma=4,seed=1", "/home/u/my_policy.py"),
        ("/srv/plugins/policy:Mine", "/srv/plugins/policy"),
        ("pkg.module:Mine", None),  # installed on every node, never sent
        ("ngram:gamma=4", None),
        ("verl", None),
    ],
)
def test_which_policy_specs_name_a_file(spec: str, file: str | None) -> None:
    assert plugin_file(spec) == file


def test_a_plugin_file_the_node_lacks_is_loaded_from_the_bytes_sent(tmp_path: Path) -> None:
    source = b"class Mine: ...\n"
    path = tmp_path / "my_policy.py"
    digest = hashlib.sha256(source).hexdigest()
    calls: list[int] = []
    spec = f"{path}:Mine:gamma=4"
    got = local_policy_spec(spec, digest, _fetcher(source, calls))
    cached = trace_cache_dir() / f"{digest}.py"
    assert got == f"{cached}:Mine:gamma=4" and cached.read_bytes() == source and calls == [1]
    path.write_bytes(source)  # a node that has the driver's file (a shared file system)
    assert local_policy_spec(spec, digest, _fetcher(source, calls)) == spec and calls == [1]
    assert local_policy_spec("ngram:gamma=4", None, None) == "ngram:gamma=4"


def test_neither_file_nor_bytes_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"t\.parquet: not on this node") as err:
        local_trace(str(tmp_path / "t.parquet"), "0" * 64, None)
    assert "\n" not in str(err.value)


def test_bytes_that_are_not_the_drivers_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not the driver's"):
        local_trace(str(tmp_path / "t.parquet"), hashlib.sha256(b"a").hexdigest(), lambda: b"b")
    assert list(trace_cache_dir().iterdir()) == []


def test_a_cache_folder_that_is_a_link_is_refused(own_tmp: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (own_tmp / f"simctl-sweep-traces-{os.getuid()}").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(PermissionError, match="not this user's own folder"):
        trace_cache_dir()


def test_a_node_sees_the_sweep_directory_by_its_token(tmp_path: Path) -> None:
    run_dir = tmp_path / "sweep" / "points" / "p1"
    assert sees_sweep_dir(run_dir, "sweep.json", None)  # a local sweep
    assert not sees_sweep_dir(run_dir, "sweep.json", "t1")  # no such directory here
    run_dir.parent.mkdir(parents=True)
    (tmp_path / "sweep" / "sweep.json").write_text(json.dumps({"run_token": "t1"}))
    assert sees_sweep_dir(run_dir, "sweep.json", "t1")
    assert not sees_sweep_dir(run_dir, "sweep.json", "t2")  # another run's, or another sweep's
    (tmp_path / "sweep" / "sweep.json").write_text("{torn")
    assert not sees_sweep_dir(run_dir, "sweep.json", "t1")


def test_run_files_round_trip_follow_the_umask(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "run.json").write_text("{}")
    (src / "requests.parquet").write_bytes(b"PAR1...")
    files = read_run_files(src)
    assert files == {"requests.parquet": b"PAR1...", "run.json": b"{}"}
    dest = tmp_path / "sweep" / "points" / "p1"
    dest.mkdir(parents=True)
    (dest / "old.parquet").write_bytes(b"a killed run's")
    old = os.umask(0o027)
    try:
        write_run_files(dest, files)
    finally:
        os.umask(old)
    assert read_run_files(dest) == files  # replaced whole: the old file is gone
    assert {stat.S_IMODE((dest / n).stat().st_mode) for n in files} == {0o640}
    assert [p.name for p in dest.parent.iterdir()] == ["p1"]  # no temporaries left


@pytest.mark.parametrize("name", ["", ".", "..", "../escape", "a/b", "a\\b", "a\0b"])
def test_run_files_with_a_path_for_a_name_are_refused(tmp_path: Path, name: str) -> None:
    dest = tmp_path / "points" / "p1"
    with pytest.raises(ValueError, match="not a plain file name"):
        write_run_files(dest, {"run.json": b"{}", name: b"x"})
    assert not dest.exists() and not (tmp_path / "escape").exists()


def test_an_address_where_nothing_answers_is_one_line_at_once() -> None:
    """(Ray itself retries such an address for minutes.)"""
    with socket.socket() as s:  # a port nothing listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with pytest.raises(SweepError, match=rf"127\.0\.0\.1:{port}: nothing answers .*refused"):
            check_reachable(f"127.0.0.1:{port}", timeout_s=2)
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        check_reachable(f"127.0.0.1:{port}")
        check_reachable(f"ray://127.0.0.1:{port}")
    check_reachable("auto")  # (Ray's to resolve)


@pytest.mark.parametrize(
    # ("host:\u00b2": a digit that is not decimal, which int() refuses; "local": Ray would
    # start an instance with its own defaults)
    "address",
    [
        "garbage",
        ":",
        "host:notaport",
        "host:0",
        "host:70000",
        ":6379",
        "ray://",
        "[]:1",
        "host:\u00b2",
        "local",
    ],
)
def test_a_malformed_address_is_one_line_before_ray_sees_it(address: str) -> None:
    """(Ray logs a traceback for some of these, e.g. ':', before its ValueError.)"""
    with pytest.raises(
        SweepError,
        match=r"expected auto, HOST:PORT or ray://HOST:PORT \(without it, the sweep starts a local "
        r"instance\)$",
    ) as err:
        check_reachable(address)
    assert "\n" not in str(err.value) and str(err.value).startswith(f"--ray-address {address!r}: ")


def test_the_cli_refuses_a_malformed_address_in_one_line(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from simctl.cli import main

    spec = tmp_path / "s.toml"
    sample = Path(__file__).resolve().parents[1] / "traces/samples/efficientrollout-qwen7b-8k-6steps.parquet"
    spec.write_text(f"[sweep]\ntraces = ['{sample}']\nsteps = '0:1'\n[policies]\nverl = {{}}\n")
    res = CliRunner().invoke(main, ["sweep", str(spec), "--out", str(tmp_path / "out"), "--ray-address", ":"])
    assert res.exit_code == 1, res.output
    assert res.output.strip().splitlines() == [
        "Error: --ray-address ':': expected auto, HOST:PORT or ray://HOST:PORT"
        " (without it, the sweep starts a local instance)"
    ]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("raised", "scheme", "expected"),
    [
        # refused: the line names token authentication (on by default from Ray 2.59)
        (
            ConnectionError("Failed to connect to Ray cluster at 127.0.0.1:6390"),
            "",
            r": Failed .*RAY_AUTH_MODE=token",
        ),
        # an address Ray cannot use as given (ray:// without the `ray[client]` package)
        (
            ValueError("Ray Client requires pip package `ray[client]`.\nreinstall"),
            "ray://",
            r": Ray Client .*`\.$",
        ),
    ],
)
def test_an_address_ray_refuses_is_one_line(
    monkeypatch: pytest.MonkeyPatch, raised: Exception, scheme: str, expected: str
) -> None:
    ray = pytest.importorskip("ray")

    def refuse(**_: object) -> None:
        raise raised

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", refuse)
    with socket.create_server(("127.0.0.1", 0)) as server:
        address = f"{scheme}127.0.0.1:{server.getsockname()[1]}"
        with pytest.raises(SweepError) as err, local_ray(None, address):
            pass
    assert "\n" not in str(err.value) and str(err.value).startswith(f"--ray-address {address}: ")
    assert re.search(expected, str(err.value)), str(err.value)


def test_a_node_running_another_simctl_refuses_the_point(tmp_path: Path) -> None:
    from simctl.sweep_checkpoint import code_fingerprint
    from simctl.sweep_runner import make_task, run_point
    from simctl.sweep_spec import spec_from_data

    trace = Path(__file__).resolve().parents[1] / "traces/samples/efficientrollout-qwen7b-8k-6steps.parquet"
    data = {
        "sweep": {"traces": [str(trace)], "steps": "0:1", "clusters": ["a100x8:tp1"]},
        "policies": {"verl": {}},
    }
    point = spec_from_data(data, tmp_path / "sweep.toml").points[0]
    task = make_task(tmp_path / "sweep", point, "simctl sweep")
    result = run_point({**task, "code": "f" * 64})
    assert result["error"] == (
        f"this node's simctl (code {code_fingerprint()[:12]}) is not the driver's (ffffffffffff): "
        "install the same simctl on every node"
    )
    assert not (tmp_path / "sweep").exists()  # refused before anything was written
    assert run_point({**task, "code": code_fingerprint()})["error"] is None  # the same code runs
    assert (tmp_path / "sweep" / "points" / point.point_id / "run.json").is_file()


def test_the_driver_writes_what_a_node_sent_or_fails_that_point(tmp_path: Path) -> None:
    from simctl.sweep_runner import POINTS, PointResult, receiving

    got: list[PointResult] = []
    receive = receiving(tmp_path, got.append)
    receive({"point_id": "p1", "error": None, "wall_s": 1.0, "run_files": {"run.json": b"{}"}})
    receive({"point_id": "p2", "error": None, "wall_s": 1.0, "run_files": {"../p1/run.json": b"x"}})
    receive({"point_id": "p3", "error": None, "wall_s": 1.0})  # (written by its node itself)
    assert (tmp_path / POINTS / "p1" / "run.json").read_bytes() == b"{}"
    assert not (tmp_path / POINTS / "p2").exists()
    assert [r.get("error") for r in got] == [
        None,
        "writing the run directory sent: run directory sent with file name '../p1/run.json': "
        "not a plain file name",
        None,
    ]
    assert not any("run_files" in r for r in got)  # (the bytes are not kept)
