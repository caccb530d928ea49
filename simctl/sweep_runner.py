"""Running a sweep: one task per point, on Ray or a local process pool, resumable.

A task receives plain data only (`PointTask`: trace path, policy spec string, cluster spec
string, steps, seed, output path) and runs `run_point` from this installed module, so no
code from the spec ever travels. Each point writes its own run directory
`DIR/points/<point-id>/` through `write_run_dir` (all or nothing); its run.json records
the point (`Point.record()`), and a rerun skips every point whose directory already holds
that record, whole, its tables stamped with its run.json's run id (`is_complete`). The
record holds the SHA-256 of the contents of every file the point reads (its trace, a
cluster TOML, a `--plugin` source file; computed once per file per sweep), so a point
whose input changed since it ran is incomplete and runs again rather than being tabled
beside points computed from the new input. A point still running keeps a checkpoint between its steps (simctl.
sweep_checkpoint), from which a rerun goes on rather than from its first step. The table
and the report are then built from the run directories alone, so a resumed sweep gives the
same table as an uninterrupted one.

Ray: a local instance (`local_ray`) listens on 127.0.0.1 only, has no dashboard, uses
`workers` CPUs and is shut down at the end; `--ray-address` joins an existing cluster
instead, whose nodes need not share the driver's files: the traces travel through Ray's
object store too, and a point whose node does not see the sweep directory sends its run
directory back to the driver (simctl.sweep_transfer). Without Ray, with `--no-ray` or with
one worker, a `ProcessPoolExecutor` runs the same function.

Progress moves step by step: each task appends the steps it replayed to a file beside its
run directory, which the driver reads while it waits (simctl.sweep_progress).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict, cast

from simctl.sim.parallel_replay import usable_cores
from simctl.sweep_checkpoint import CHECKPOINT_S, checkpoint_dir, code_fingerprint
from simctl.sweep_order import longest_first, point_step_requests, point_work
from simctl.sweep_progress import SweepTally, step_file
from simctl.sweep_spec import Point, SweepSpec
from simctl.sweep_transfer import (
    RunFiles,
    local_policy_spec,
    local_trace,
    read_run_files,
    scratch_dir,
    sees_sweep_dir,
    write_run_files,
)
from simctl.traces.atomic import remove_stale_temporaries
from simctl.traces.outputs import OutputPathError, check_output_dir
from simctl.traces.plugins import plugin_file
from simctl.traces.run_format import RUN_ID_KEY, RUN_JSON, RUN_TABLES, TABLES, RunDoc

if TYPE_CHECKING:
    from simctl.sim.replay import ReplaySetup

POINTS = "points"
MANIFEST = "sweep.json"
PARQUET_MAGIC = b"PAR1"  # (the first and last 4 bytes of every Parquet file)
TABLE = "sweep.parquet"
STEPS_TABLE = "sweep_steps.parquet"
REPORT = "report"
#: Entries of a sweep directory; anything else means DIR is not ours to write into.
SWEEP_ENTRIES = frozenset({POINTS, MANIFEST, TABLE, STEPS_TABLE, REPORT})
#: The run.json key holding the point a run directory belongs to.
POINT_KEY = "sweep_point"
#: Loopback-only Ray: with Ray's cluster mode off, its node address is 127.0.0.1 and every
#: server (GCS, raylet, workers, object manager) binds there. Ray 2.x's `_node_ip_address=
#: "127.0.0.1"` is not enough: Ray swaps a loopback node address for the routable one.
RAY_LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


class SweepError(RuntimeError):
    """A sweep that could not finish (a point failed, Ray is not there); one line."""


class PointTask(TypedDict):
    """What a task receives: plain data."""

    point_id: str
    point: dict[str, Any]
    trace_path: str
    policy_spec: str
    cluster: str
    steps: str | None
    seed: int
    # the target, where not the trace's own: catalogue name, config fields (None: catalogue)
    model_name: str
    model_config: dict[str, Any] | None
    max_num_seqs: int  # the engine's batch limit per worker
    # the measured cost profile: its name as the spec wrote it and its parsed JSON (None:
    # the roofline), sent as data so that a node need not see the file
    profile_name: str
    profile_doc: Any
    out: str
    command: str
    checkpoint_s: float | None  # seconds between the point's checkpoints (None: none)
    # on a joined Ray cluster (simctl.sweep_transfer; None elsewhere): the trace file's
    # SHA-256 and its bytes in the object store, and the token of this run's sweep.json
    trace_digest: str | None
    trace_ref: Any
    # and a plug-in policy file's (`--plugin file.py:Class`), likewise
    plugin_digest: str | None
    plugin_ref: Any
    run_token: str | None
    code: str | None  # the driver's simctl (code_fingerprint): a node must run the same


class PointResult(TypedDict):
    point_id: str
    error: str | None
    wall_s: float
    run_files: NotRequired[RunFiles]  # the run directory, from a node that does not see DIR


# ------------------------------------------------------------------------- the task

#: How often the driver reads the running points' progress while it waits for them.
POLL_S = 0.5

_TRACES: dict[tuple[str, float], Any] = {}  # per worker process: trace path -> loaded trace


def _trace(path: str) -> Any:
    from simctl.traces.validate import load_valid_trace

    key = (path, os.stat(path).st_mtime)
    if key not in _TRACES:
        _TRACES.clear()  # one trace at a time (points of a trace mostly follow each other)
        _TRACES[key] = load_valid_trace(path)
    return _TRACES[key]


def run_point(task: PointTask) -> PointResult:
    """Replay one point and write its run directory (runs in a worker process), or return
    its files where this node does not see the sweep directory (simctl.sweep_transfer)."""
    t0 = time.perf_counter()
    try:
        with scratch_dir() as scratch:
            files = _run_point(task, Path(scratch))
    except Exception as exc:  # reported by the driver, with the point's id
        return {"point_id": task["point_id"], "error": _first_line(exc), "wall_s": time.perf_counter() - t0}
    result: PointResult = {"point_id": task["point_id"], "error": None, "wall_s": time.perf_counter() - t0}
    if files is not None:
        result["run_files"] = files
    return result


def _first_line(exc: BaseException) -> str:
    """An exception's message as one line (its type's name where it has none)."""
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def _fetch(ref: Any) -> Callable[[], bytes] | None:
    """How to get the bytes the driver put in Ray's object store as `ref` (None: it did not)."""
    if ref is None:
        return None

    def fetch() -> bytes:
        import ray

        return cast(bytes, ray.get(ref))

    return fetch


def _setup(task: PointTask, trace_path: Path) -> ReplaySetup:
    """The point's ReplaySetup, its trace read from `trace_path` (on this node)."""
    from simctl.sim.cluster import parse_cluster
    from simctl.sim.cost_model import CostModel, load_cost_model, profile_cost_model
    from simctl.sim.engine_config import EngineConfig
    from simctl.sim.models import model_from_record, model_of_trace
    from simctl.sim.replay import ReplaySetup
    from simctl.traces.cli_options import parse_steps

    trace = _trace(str(trace_path))
    if task.get("model_name"):
        model = model_from_record(task["model_name"], task.get("model_config"), f"model {task['model_name']}")
    else:
        model = model_of_trace(trace.meta, f"trace {trace_path}")
    cluster = parse_cluster(task["cluster"])
    profile = task.get("profile_doc")
    cost: CostModel
    if profile is not None:
        cost = profile_cost_model(profile, Path(task["profile_name"]).name, model, cluster)
    else:
        cost = load_cost_model(model, cluster, None)
    return ReplaySetup(
        trace=trace,
        cluster=cluster,
        model=model,
        cost=cost,
        cost_source=task["profile_name"] if profile is not None else "roofline",
        steps=parse_steps(task["steps"], trace.steps),
        seed=task["seed"],
        engine=EngineConfig(max_num_seqs=task.get("max_num_seqs", EngineConfig().max_num_seqs)),
    )


def point_setup(point: Point, steps: str | None) -> ReplaySetup:
    """The ReplaySetup a point's task builds, over `steps` (N or A:B; None: every step)
    instead of the point's own (the dry run measures one step)."""
    task = make_task(Path(point.trace_path).parent, point, "")
    task["steps"] = steps
    return _setup(task, Path(point.trace_path))


def _run_point(task: PointTask, scratch: Path) -> RunFiles | None:
    """Replay the point into its run directory, or into `scratch` where this node does not
    see the sweep directory, and then return the files written there."""
    from simctl.replay_cmd import run_document
    from simctl.sim.replay import ReplayState, run_policy, run_tables
    from simctl.sweep_checkpoint import PointCheckpoint
    from simctl.sweep_progress import StepLog
    from simctl.traces.run_format import write_run_dir

    code = task.get("code")
    if code is not None and code != code_fingerprint():
        raise RuntimeError(
            f"this node's simctl (code {code_fingerprint()[:12]}) is not the driver's ({code[:12]}): "
            "install the same simctl on every node"
        )
    trace_path = local_trace(task["trace_path"], task.get("trace_digest"), _fetch(task.get("trace_ref")))
    plugin = task.get("plugin_digest"), _fetch(task.get("plugin_ref"))
    policy_spec = local_policy_spec(task["policy_spec"], *plugin)
    setup = _setup(task, trace_path)
    shared = sees_sweep_dir(Path(task["out"]), MANIFEST, task.get("run_token"))
    out = Path(task["out"]) if shared else scratch / "run"
    every = task.get("checkpoint_s") if shared else None  # (a rerun may run on another node)
    checkpoint = PointCheckpoint(out, checkpoint_key(task), every) if every is not None else None
    resume = checkpoint.load() if checkpoint else None
    restored = resume.done if resume else 0  # (the run goes on in `resume`, counting up)
    steps = sorted(setup.steps)
    log = StepLog(out)
    try:
        for step in steps[:restored]:  # (the progress of the steps restored)
            log.step(step)

        def after_step(state: ReplayState) -> None:
            if checkpoint and state.done < len(steps):  # (the last step's end is the run directory)
                checkpoint.save(state)

        run = run_policy(
            setup,
            policy_spec,
            on_step=lambda _name, step: log.step(step),
            resume=resume,
            after_step=after_step,
        )
    finally:
        log.close()
    doc = run_document(setup, {run.name: run}, Path(task["trace_path"]))
    doc["provenance"]["command"] = task["command"]
    cpu: dict[str, float | int] = {"sim_cpu_s": run.sim_cpu_s}
    if restored:
        cpu["resumed_after_steps"] = restored
    full = cast(RunDoc, {**doc, POINT_KEY: task["point"], "sweep_cpu": cpu})
    write_run_dir(out, full, run_tables({run.name: run}))
    if checkpoint:
        checkpoint.discard()
    return None if shared else read_run_files(out)


def checkpoint_key(task: PointTask) -> dict[str, Any]:
    """What a point's checkpoint must have been taken for: the point as its run.json
    records it, which holds the SHA-256 of its input files' contents (`Point.inputs`): a
    trace, cluster TOML or model config rewritten between the kill and the rerun starts the
    point over, as it makes a complete point incomplete."""
    return dict(task["point"])


def point_dir(out: Path, point: Point) -> Path:
    return out / POINTS / point.point_id


def is_complete(path: Path, point: Point) -> bool:
    """The point's run directory is there, whole, and records this very point."""
    return complete_doc(path, point) is not None


def complete_doc(path: Path, point: Point) -> dict[str, Any] | None:
    """The run.json of the point's directory where it is complete (`is_complete`), else None."""
    try:
        doc = json.loads((path / RUN_JSON).read_text())
    except (OSError, ValueError, RecursionError):
        return None
    if not (isinstance(doc, dict) and doc.get(POINT_KEY) == json.loads(json.dumps(point.record()))):
        return None
    return doc if _tables_whole(path, doc.get("run_id")) else None


def _tables_whole(path: Path, run_id: object) -> bool:
    """The run's tables are there, each has Parquet's magic bytes at both ends and carries
    the run id of the run.json beside it: a run directory is written whole and renamed into
    place, so a table cut short, missing or copied from another run was changed since, and
    the point is run again rather than counted complete (or refused by `simctl report`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for name in RUN_TABLES:
        try:
            with (path / TABLES[name].file).open("rb") as f:
                head = f.read(4)
                f.seek(-4, os.SEEK_END)
                if head != PARQUET_MAGIC or f.read(4) != PARQUET_MAGIC:
                    return False
            metadata = pq.read_schema(path / TABLES[name].file).metadata or {}
        except (OSError, pa.ArrowException):  # (missing, shorter than 4 bytes, unreadable)
            return False
        if not isinstance(run_id, str) or metadata.get(RUN_ID_KEY, b"").decode(errors="replace") != run_id:
            return False
    return True


def make_task(out: Path, point: Point, command: str, checkpoint_s: float | None = None) -> PointTask:
    """A point's task; a plug-in's point keeps no checkpoint (its code is the user's, and
    may change between a kill and the rerun: simctl.sweep_checkpoint)."""
    return {
        "point_id": point.point_id,
        "point": json.loads(json.dumps(point.record())),
        "trace_path": point.trace_path,
        "policy_spec": point.task_spec or point.policy_spec,
        "cluster": point.cluster_arg,
        "steps": None if point.steps == "all" else point.steps,
        "seed": point.seed,
        "model_name": point.model_name,
        "model_config": point.model_config,
        "max_num_seqs": point.max_num_seqs,
        "profile_name": point.profile,
        "profile_doc": point.profile_doc,
        "out": str(point_dir(out, point).resolve()),
        "command": command,
        "checkpoint_s": None if point.task_spec else checkpoint_s,
        "trace_digest": None,
        "trace_ref": None,
        "plugin_digest": None,
        "plugin_ref": None,
        "run_token": None,
        "code": None,
    }


def send_inputs(tasks: Sequence[PointTask], token: str) -> list[PointTask]:
    """The tasks for a joined Ray cluster (simctl.sweep_transfer): each trace file and each
    plug-in policy file put in Ray's object store once, with its SHA-256, this run's token
    of the sweep directory, and the fingerprint of this simctl (a node that runs another
    version refuses the point, rather than mixing its results into the table)."""
    import ray

    sent: dict[str, tuple[str, Any]] = {}

    def send(path: str) -> tuple[str, Any]:
        if path not in sent:
            data = Path(path).read_bytes()  # (read once: hashed and sent)
            sent[path] = (hashlib.sha256(data).hexdigest(), ray.put(data))
        return sent[path]

    joined = {"run_token": token, "code": code_fingerprint()}
    tasks_sent: list[PointTask] = []
    for task in tasks:
        digest, ref = send(task["trace_path"])
        extra: dict[str, Any] = {"trace_digest": digest, "trace_ref": ref, **joined}
        plugin = plugin_file(task["policy_spec"])
        if plugin is not None:
            extra["plugin_digest"], extra["plugin_ref"] = send(plugin)
        tasks_sent.append(cast(PointTask, {**task, **extra}))
    return tasks_sent


def receiving(out: Path, done: Done) -> Done:
    """`done`, once a result's run directory sent back by its node (`run_files`) is written
    into the sweep directory; a point whose files cannot be written failed."""

    def receive(result: PointResult) -> None:
        files = result.pop("run_files", None)
        if files is not None:
            try:
                write_run_files(out / POINTS / result["point_id"], files)
            except (OSError, ValueError) as exc:
                result = {**result, "error": f"writing the run directory sent: {_first_line(exc)}"}
        done(result)

    return receive


# ------------------------------------------------------------------------- executors

Done = Callable[[PointResult], None]
Progress = Callable[[int, int, float, float], None]


def _die_with_parent() -> None:
    """Pool workers end with the sweep (even a SIGKILLed one), never finish alone."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle


def run_pool(tasks: Sequence[PointTask], workers: int, done: Done) -> None:
    """Every task on a local process pool of `workers` processes. Whatever ends it early (a
    Ctrl-C, a SIGTERM, a point's result that cannot be handled) stops the pool's processes
    at once (`_stop_pool`) rather than letting them run the queued points; a worker that
    dies (a kill, the out-of-memory killer) is a SweepError naming the points it may have
    been running."""
    pool = ProcessPoolExecutor(
        max_workers=max(1, min(workers, len(tasks))),
        mp_context=get_context("spawn"),
        initializer=_die_with_parent,
    )
    ended: set[str] = set()
    try:
        pending: set[Future[PointResult]] = {pool.submit(run_point, t) for t in tasks}
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in finished:
                result = fut.result()
                ended.add(result["point_id"])
                done(result)
    except BrokenProcessPool:
        _stop_pool(pool)
        # (the points that had started: their progress files are there, and not yet removed)
        started = [
            t["point_id"] for t in tasks if t["point_id"] not in ended and step_file(Path(t["out"])).exists()
        ]
        named = f"point {started[0]}" if len(started) == 1 else f"points {', '.join(started)}"
        running = f"while running {named}" if started else "before running a point"
        raise SweepError(
            f"a worker process of the pool died (killed, e.g. out of memory) {running}; "
            "the complete points are kept: rerun to resume"
        ) from None
    except BaseException:
        _stop_pool(pool)
        raise
    pool.shutdown(wait=True)


def _stop_pool(pool: ProcessPoolExecutor, grace_s: float = 5.0) -> None:
    """End a pool now: its queued points cancelled and its worker processes terminated
    (SIGTERM, then SIGKILL after `grace_s`): a point's checkpoint lets a rerun go on. Left
    to `shutdown`, the pool would run every point already handed to it, and then block the
    interpreter's exit until they end."""
    processes = list(pool._processes.values()) if pool._processes else []
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in processes:
        with suppress(Exception):
            proc.terminate()
    for proc in processes:
        with suppress(Exception):
            proc.join(grace_s)
            if proc.is_alive():
                proc.kill()
                proc.join(grace_s)
    with suppress(Exception):
        pool.shutdown(wait=True)  # (its manager thread, which notices the workers gone)


def run_ray(tasks: Sequence[PointTask], workers: int | None, done: Done, cancel: bool = True) -> None:
    """Every task on the Ray cluster this process is connected to, `workers` at a time
    (None: as many as the cluster has CPUs). Interrupted, it cancels the running tasks when
    `cancel` (a joined cluster goes on otherwise); on the local instance simctl started,
    whose shutdown stops every worker anyway, it does not: a forced cancel whose task's
    reply is already on its way can make Ray's core worker abort the driver (a Ray check
    failure, "Tried to complete task that was not pending"), seen in CI on a Ctrl-C."""
    import ray

    if workers is None:
        workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
    remote = ray.remote(num_cpus=1, max_retries=0)(run_point)
    queue = list(reversed(tasks))
    running: dict[Any, str] = {}
    try:
        while queue or running:
            while queue and len(running) < workers:
                task = queue.pop()
                running[remote.remote(task)] = task["point_id"]
            ready, _ = ray.wait(list(running), num_returns=1)
            for ref in ready:
                pid = running.pop(ref)
                try:
                    result = ray.get(ref)
                except Exception as exc:  # the worker died, or Ray lost the task
                    result = {"point_id": pid, "error": f"ray: {str(exc).splitlines()[0]}", "wall_s": 0.0}
                done(result)
    except BaseException:
        if cancel:
            for ref in running:
                ray.cancel(ref, force=True)
        raise


@contextmanager
def local_ray(num_cpus: int | None, address: str | None = None) -> Iterator[bool]:
    """Connect to Ray: join `address`, reuse a connection this process already has, or
    start a local instance on 127.0.0.1 without dashboard, shut down on leaving. Yields
    whether it joined a cluster (its nodes may not see this machine's files) rather than
    started one here."""
    import ray

    if address:
        check_reachable(address)
    if ray.is_initialized():
        yield True
        return
    if address:
        try:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
        except ConnectionError as exc:
            raise SweepError(
                f"--ray-address {address}: {_first_line(exc)} (`ray start` turns token authentication on by "
                "default from Ray 2.59: then set RAY_AUTH_MODE=token here too, with the "
                "cluster's token in RAY_AUTH_TOKEN or where `ray get-auth-token` finds it)"
            ) from None
        except ValueError as exc:  # an address Ray cannot use (ray:// without ray[client], ...)
            raise SweepError(f"--ray-address {address}: {_first_line(exc)}") from None
        try:
            yield True
        finally:
            ray.shutdown()
        return
    guard = _start_guard()  # (before `before`: it is not one of Ray's)
    before = {proc.pid for proc in _descendants()}
    # The local instance's processes, listed while it starts and runs (the raylet starts its
    # agents after ray.init returns, and a SIGTERM can orphan them before `finally` runs),
    # and told to the guard, which stops them if this process dies before it can.
    started: dict[int, Any] = {}
    stop = threading.Event()

    def note_started() -> None:
        with suppress(Exception):  # a process gone mid-listing must not end the watch
            for proc in _descendants():
                if proc.pid not in before and proc.pid not in started:
                    started[proc.pid] = proc
                    _tell_guard(guard, proc)

    def watch() -> None:
        while True:
            note_started()
            if stop.wait(0.25):
                return

    watcher = threading.Thread(target=watch, name="simctl-ray-processes", daemon=True)
    watcher.start()
    try:
        # inside the `try`: a SIGTERM during a slow start (a loaded machine) still stops
        # whatever Ray had started by then
        start_local_ray(num_cpus)
        yield False
    finally:
        stop.set()
        watcher.join()
        # once more, while the raylet still parents them: an agent it started within the
        # watcher's last quarter second would otherwise be orphaned unlisted by the shutdown
        note_started()
        try:
            # a SIGTERM's SystemExit unwinding through Ray's client calls can leave the
            # shutdown to fail; what the instance started is stopped whatever it raises
            ray.shutdown()
        finally:
            note_started()  # anything the raylet started during the shutdown
            _reap(list(started.values()))
            _end_guard(guard)


# Addresses Ray resolves itself. Not "local": Ray would start an instance with its own
# defaults; simctl starts its local one (loopback only, no dashboard) without the option.
RAY_KEYWORDS = ("auto",)


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """SweepError, one line, where `--ray-address` is neither one of Ray's keywords nor
    [ray://]HOST:PORT (Ray logs a traceback for some malformed ones before raising), or
    where nothing answers at its HOST:PORT (Ray itself retries for minutes)."""
    if address in RAY_KEYWORDS:
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdecimal() or not 0 < int(port) < 65536:
        raise SweepError(
            f"--ray-address {address!r}: expected {', '.join(RAY_KEYWORDS)}, HOST:PORT or ray://HOST:PORT"
            " (without it, the sweep starts a local instance)"
        )
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        why = exc.strerror or str(exc) or type(exc).__name__
        raise SweepError(f"--ray-address {address}: nothing answers at {host}:{port} ({why})") from None


def _start_guard() -> subprocess.Popen[str] | None:
    """simctl.ray_guard, reading the Ray processes to stop should this process die first
    (None without psutil, which it needs)."""
    try:
        import psutil  # noqa: F401
    except ImportError:
        return None
    with suppress(OSError):
        return subprocess.Popen([sys.executable, "-m", "simctl.ray_guard"], stdin=subprocess.PIPE, text=True)
    return None


def _tell_guard(guard: subprocess.Popen[str] | None, proc: Any) -> None:
    if guard is not None and guard.stdin is not None:
        with suppress(Exception):
            guard.stdin.write(f"{proc.pid} {proc.create_time()!r}\n")
            guard.stdin.flush()


def _end_guard(guard: subprocess.Popen[str] | None) -> None:
    """The sweep cleaned up itself: the guard's pass finds nothing left, and it exits."""
    if guard is None:
        return
    with suppress(Exception):
        if guard.stdin is not None:
            guard.stdin.close()
        guard.wait(timeout=15)


def _descendants() -> list[Any]:
    """This process's descendants (empty without psutil, an optional dependency)."""
    try:
        import psutil
    except ImportError:
        return []
    return list(psutil.Process().children(recursive=True))


def _reap(procs: list[Any], grace_s: float = 5.0) -> None:
    """Stop what `ray.shutdown()` leaves of a local instance simctl started. Ray's node
    agents (dashboard agent, runtime-env agent) are the raylet's children and exit only once
    they notice it is gone, which took over 20 s on a loaded 2-core machine when a sweep was
    killed moments after Ray started: a killed sweep must not leave processes behind."""
    if not procs:
        return
    import psutil

    from simctl.ray_guard import stop

    _, alive = psutil.wait_procs(procs, timeout=grace_s)  # (most end with the raylet)
    stop(alive, grace_s)


def start_local_ray(num_cpus: int | None) -> None:
    """A local Ray reachable on loopback only, dashboard off (RAY_LOOPBACK_ENV). Ray from
    2.59 turns token authentication on for it and says so on stderr at every start, which
    made every sweep's output (and each of its errors) a line longer: that notice alone is
    left out (the authentication stays on)."""
    os.environ.update(RAY_LOOPBACK_ENV)  # the processes Ray starts read it
    import ray
    from ray._private import ray_constants

    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)

    was = ray_constants.ENABLE_RAY_CLUSTER  # read when ray was imported, maybe before
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        ray.init(
            address="local",
            num_cpus=num_cpus,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = was


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


# ------------------------------------------------------------------------- the sweep


def default_workers() -> int:
    """This machine's cores (those this process may run on)."""
    return usable_cores()


@dataclass
class SweepResult:
    total: int
    ran: int
    skipped: int
    backend: str
    wall_s: float


def check_sweep_dir(out: Path, spec_path: Path) -> None:
    """DIR is new, empty, or a sweep directory (it has sweep.json); one line otherwise."""
    # (not written whole: a spec kept inside its sweep directory is left alone)
    check_output_dir(out, what="--out sweep directory")
    for name in (POINTS, MANIFEST):  # (what the sweep writes there, of the kind it writes)
        part = out / name
        if part.exists() and part.is_dir() != (name == POINTS):
            kind = "a directory" if name == POINTS else "a file"
            raise OutputPathError(f"{part}: exists and is not {kind}; not a sweep directory")
    if out.is_dir() and not (out / MANIFEST).is_file():
        foreign = [p.name for p in out.iterdir() if not p.name.startswith(".")]
        if foreign:
            shown = ", ".join(sorted(foreign)[:3])
            raise OutputPathError(
                f"{out}: exists and is not a sweep directory (holds {shown}); not writing in it"
            )


def point_costs(spec: SweepSpec) -> dict[str, float]:
    """Each point's estimated cost by id (simctl.sweep_order.point_work)."""
    return dict(zip((p.point_id for p in spec.points), point_work(spec.points, spec.traces), strict=True))


def pending_tasks(
    spec: SweepSpec,
    out: Path,
    command: str,
    costs: dict[str, float],
    checkpoint_s: float | None = CHECKPOINT_S,
) -> list[PointTask]:
    """Tasks of the points not yet complete, the costliest first by `costs` (`point_costs`:
    a point runs on one worker, so a long one handed out last would hold the sweep alone);
    stale temporaries of killed writers removed, and the checkpoints of complete points
    (a kill between writing the run directory and removing its checkpoint)."""
    pending = []
    for point in spec.points:
        path = point_dir(out, point)
        remove_stale_temporaries(path)
        if not is_complete(path, point):
            pending.append(point)
        elif checkpoint_dir(path).exists():
            shutil.rmtree(checkpoint_dir(path), ignore_errors=True)
        step_file(path).unlink(missing_ok=True)  # (a killed run's: its task starts a new one)
    order = longest_first([costs[p.point_id] for p in pending])
    return [make_task(out, pending[i], command, checkpoint_s) for i in order]


def run_sweep(
    spec: SweepSpec,
    out: Path,
    workers: int | None,
    use_ray: bool,
    ray_address: str | None = None,
    progress: Progress | None = None,
    command: str = "simctl sweep",
    checkpoint_s: float | None = CHECKPOINT_S,
) -> SweepResult:
    """Run every point not yet complete; SweepError naming the first failed point.
    `progress(points done, points, work done, work)` after each point and each step a
    running point replayed (and once before), work being the points' estimated cost
    (simctl.sweep_order.point_work), of which a running point has done its replayed steps'
    share by requests. A running point checkpoints every `checkpoint_s` seconds (None:
    never), and a rerun goes on from its checkpoint.

    A Ctrl-C (KeyboardInterrupt) or SIGTERM stops the running points at once and is raised
    again once they are stopped and their progress files removed; a second one meanwhile
    is ignored (`_one_signal`), so the stop is neither cut short nor shown as a traceback.
    A sweep that fails before any point left anything in a sweep directory it created
    removes that directory: the user finds the folder as it was."""
    out = Path(out)
    check_sweep_dir(out, spec.path)
    created = _first_missing(out)
    with _one_signal():
        try:
            return _run_sweep(spec, out, workers, use_ray, ray_address, progress, command, checkpoint_s)
        except BaseException:
            if created is not None and _holds_nothing(out / POINTS):
                shutil.rmtree(created, ignore_errors=True)
            raise


def _run_sweep(
    spec: SweepSpec,
    out: Path,
    workers: int | None,
    use_ray: bool,
    ray_address: str | None,
    progress: Progress | None,
    command: str,
    checkpoint_s: float | None,
) -> SweepResult:
    """`run_sweep` in a sweep directory `out` that is checked."""
    from simctl.traces.run_format import write_json

    (out / POINTS).mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex  # (a node sees DIR if its sweep.json holds it: simctl.sweep_transfer)
    manifest: dict[str, Any] = {"format": "simctl-sweep/1", "spec": str(spec.path)}
    manifest["points"] = len(spec.points)
    # While the run goes on, the manifest keeps describing the sweep whose table and report
    # DIR holds (a run of another spec that fails must not leave them mislabelled); it
    # names this spec once every point is complete.
    previous = _manifest(out)
    running = dict(manifest)
    running.update((k, previous[k]) for k in ("spec", "points") if k in previous)
    write_json(out / MANIFEST, {**running, "run_token": token})
    work = point_costs(spec)
    tasks = pending_tasks(spec, out, command, work, checkpoint_s)
    tally = SweepTally(
        work,
        dict(zip(work, point_step_requests(spec.points, spec.traces), strict=True)),
        {t["point_id"]: Path(t["out"]) for t in tasks},
        progress,
    )
    t0 = time.perf_counter()
    backend = "ray" if use_ray else "process pool"
    try:
        with tally.watching(POLL_S if tasks and progress else None):
            if tasks and use_ray:
                with local_ray(workers, ray_address) as joined:
                    run_ray(
                        send_inputs(tasks, token) if joined else tasks,
                        workers,
                        receiving(out, tally.done),
                        cancel=joined,
                    )
            elif tasks:
                run_pool(tasks, workers or default_workers(), tally.done)
    except BaseException:
        _remove_progress(tasks)
        raise
    failed = [cast(PointResult, r) for r in tally.failed]
    if failed:
        order = {p.point_id: i for i, p in enumerate(spec.points)}
        first = min(failed, key=lambda r: order[r["point_id"]])  # the spec's order, not the run's
        raise SweepError(
            f"{len(failed)} of {len(tasks)} points failed; first {first['point_id']}: {first['error']} "
            "(the others are kept: rerun to resume)"
        )
    if running != manifest:
        write_json(out / MANIFEST, {**manifest, "run_token": token})
    skipped = len(spec.points) - len(tasks)
    return SweepResult(len(spec.points), len(tasks), skipped, backend, time.perf_counter() - t0)


def _remove_progress(tasks: Sequence[PointTask]) -> None:
    """After a sweep stopped early, its workers gone: the points' progress files, and the
    temporaries of the run directories that were being written (their writers killed)."""
    for task in tasks:
        run_dir = Path(task["out"])
        if step_file(run_dir).exists():  # (a point that had started)
            step_file(run_dir).unlink(missing_ok=True)
            with suppress(OSError):
                remove_stale_temporaries(run_dir)


def _holds_nothing(folder: Path) -> bool:
    """`folder` is empty or missing (no point, checkpoint or temporary in it)."""
    try:
        return not any(folder.iterdir())
    except FileNotFoundError:
        return True
    except OSError:
        return False


def _first_missing(out: Path) -> Path | None:
    """The outermost folder of `out` (itself included) that does not exist yet: what a
    sweep creates there, and removes again where it fails before any point."""
    missing = None
    for folder in (out.absolute(), *out.absolute().parents):
        if os.path.lexists(folder):
            break
        missing = folder
    return missing


@contextmanager
def _one_signal() -> Iterator[None]:
    """While inside, the first SIGINT or SIGTERM acts as before (KeyboardInterrupt; the
    command's SystemExit(143), or that exit where nothing handled SIGTERM) and any further
    one is ignored: a second Ctrl-C used to interrupt the pool's shutdown with a traceback
    and leave the sweep hanging. Signals this process ignores stay ignored; a thread other
    than the main one changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signals = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.getsignal(sig) for sig in signals}

    def first(signum: int, frame: Any) -> None:
        for sig in signals:
            if previous[sig] != signal.SIG_IGN:
                signal.signal(sig, signal.SIG_IGN)
        handler = previous.get(signal.Signals(signum))
        if callable(handler):
            handler(signum, frame)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)

    for sig in signals:
        if previous[sig] != signal.SIG_IGN:
            signal.signal(sig, first)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def other_points(spec: SweepSpec, out: Path) -> int:
    """Point directories in DIR that are no point of `spec` (an earlier sweep of another
    spec into DIR): kept, but out of this spec's table, which a user should be told."""
    ours = {p.point_id for p in spec.points}
    try:
        entries = list((out / POINTS).iterdir())
    except OSError:
        return 0
    # (a point's directory is named by its id alone; checkpoints and temporaries have dots)
    return sum(1 for e in entries if e.is_dir() and "." not in e.name and e.name not in ours)


def _manifest(out: Path) -> dict[str, Any]:
    """DIR's sweep.json as it is ({} where there is none or it cannot be read)."""
    try:
        doc = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError, RecursionError):
        return {}
    return doc if isinstance(doc, dict) else {}
