"""Where the engine loops of a concurrent live run live: one thread per engine
(`ThreadRuntime`, for engines already built in this process: tests, notebooks) or one
process per engine (`ProcessRuntime`, what `simctl live` uses on one host: engines share
nothing but the host's cores, and a dying engine takes only its own process). Ray actors
(one per GPU, across nodes) are the third kind, in live/ray_workers.py.

Every runtime answers the same five calls, which is all the controller
(live/concurrent.py) uses: `send` commands to a worker's loop, `receive` the next report
from any loop in arrival order, `kill` a worker (fault injection), ask whether a worker is
`dead` (and why), and `close`.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import threading
from collections import deque
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any, Protocol

from simctl.live.backend import EngineWorker
from simctl.live.engine_loop import Command, Message, drain, run_loop
from simctl.live.errors import LiveError, first_line
from simctl.policies.contract import Policy

# Environment variable a worker's process carries: its worker index (backends use it to
# give each engine its own cores, see live/vllm_backend.py).
WORKER_ENV = "SIMCTL_WORKER"


class Runtime(Protocol):
    n: int

    def send(self, worker: int, cmds: list[Command]) -> None: ...

    def receive(self, timeout: float) -> Message | None: ...

    def kill(self, worker: int) -> None: ...

    def dead(self, worker: int) -> str | None: ...

    def close(self) -> None: ...


class ThreadRuntime:
    """Engines built in this process, each looping in its own thread (torch releases the
    GIL inside its kernels, so engines overlap; a vLLM engine must not share a process)."""

    def __init__(self, engines: Sequence[EngineWorker]) -> None:
        self.n = len(engines)
        self._out: queue.Queue[Message] = queue.Queue()
        self._inbox: list[queue.Queue[list[Command]]] = [queue.Queue() for _ in engines]
        self._killed = [False] * self.n
        self._threads = []
        for w, engine in enumerate(engines):
            t = threading.Thread(
                target=run_loop,
                args=(engine, w, self._recv(w), self._out.put, self._alive(w)),
                name=f"simctl-engine-{w}",
                daemon=True,
            )
            t.start()
            self._threads.append(t)

    def _recv(self, w: int) -> Callable[[bool], list[Command]]:
        return lambda block: drain(self._inbox[w], block)

    def _alive(self, w: int) -> Callable[[], bool]:
        return lambda: not self._killed[w]

    def send(self, worker: int, cmds: list[Command]) -> None:
        self._inbox[worker].put(cmds)

    def receive(self, timeout: float) -> Message | None:
        try:
            return self._out.get(timeout=timeout)
        except queue.Empty:
            return None

    def kill(self, worker: int) -> None:
        """The thread stops at its next check, saying nothing (as a killed process would)."""
        self._killed[worker] = True
        self._inbox[worker].put([])

    def dead(self, worker: int) -> str | None:
        return "killed" if self._killed[worker] else None

    def close(self) -> None:
        for w in range(self.n):
            self._inbox[w].put([("stop",)])
        for t in self._threads:
            t.join(timeout=30)


def _process_main(
    factory: Callable[[], Any],
    policy: Policy | None,
    worker: int,
    inbox: Any,
    report: Connection,
    env: dict[str, str],
) -> None:
    """A worker process: build the engine, say so, loop."""
    os.environ.update(env)
    os.environ[WORKER_ENV] = str(worker)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the controller's to handle
    try:
        engine = factory().engines(1, policy)[0]
    except Exception as exc:
        report.send(("crash", worker, f"engine start failed: {type(exc).__name__}: {first_line(exc)}"))
        return
    report.send(("ready", worker))
    run_loop(engine, worker, lambda block: drain(inbox, block), report.send)


class ProcessRuntime:
    """One process per engine on this host, each building its engine from `factory` (a
    picklable zero-argument callable returning a `Backend`, e.g. `BackendSpec`): weights
    load in every process, nothing is shared but the cores. `worker_env(w)` is extra
    environment for worker w's process (e.g. its own CUDA_VISIBLE_DEVICES).

    Each worker reports through a pipe of its own, never a queue shared by all: a process
    killed while writing would hold a shared queue's lock forever and silence the others.
    A dead worker's pipe reads as closed (the controller keeps no copy of its write end),
    which is how a death is noticed even before its exit code is."""

    def __init__(
        self,
        factory: Callable[[], Any],
        n: int,
        policy: Policy | None,
        start_timeout_s: float = 900.0,
        worker_env: Callable[[int], dict[str, str]] = lambda _w: {},
    ) -> None:
        ctx = mp.get_context("spawn")
        self.n = n
        self._inbox = [ctx.Queue() for _ in range(n)]
        pipes = [ctx.Pipe(duplex=False) for _ in range(n)]
        self._reports: list[Connection] = [r for r, _ in pipes]
        self._closed: set[int] = set()
        self._ready: deque[Message] = deque()
        self._procs = [
            ctx.Process(
                target=_process_main,
                args=(factory, _picklable(policy), w, self._inbox[w], pipes[w][1], worker_env(w)),
                name=f"simctl-engine-{w}",
                daemon=True,
            )
            for w in range(n)
        ]
        for p in self._procs:
            p.start()
        for _, writer in pipes:
            writer.close()
        try:
            self._await_ready(start_timeout_s)
        except BaseException:
            self.close()
            raise

    def _await_ready(self, timeout_s: float) -> None:
        ready: set[int] = set()
        while len(ready) < self.n:
            msg = self.receive(timeout_s)
            dead = [w for w in range(self.n) if w not in ready and self.dead(w)]
            if msg is None and dead:
                raise LiveError(f"worker {dead[0]}: {self.dead(dead[0])} while starting its engine")
            if msg is None:
                raise LiveError(f"engine processes: {self.n - len(ready)} not ready after {timeout_s:g} s")
            if msg[0] == "crash":
                raise LiveError(f"worker {msg[1]}: {msg[2]}")
            ready.add(msg[1])

    def send(self, worker: int, cmds: list[Command]) -> None:
        self._inbox[worker].put(cmds)

    def receive(self, timeout: float) -> Message | None:
        """The next report: one from each worker whose pipe has one, oldest first."""
        if not self._ready:
            live = [self._reports[w] for w in range(self.n) if w not in self._closed]
            for conn in wait(live, timeout) if live else []:
                assert isinstance(conn, Connection)
                w = self._reports.index(conn)
                try:
                    self._ready.append(conn.recv())
                except (EOFError, OSError):
                    self._closed.add(w)  # the process is gone (dead() says how)
        return self._ready.popleft() if self._ready else None

    def kill(self, worker: int) -> None:
        self._procs[worker].kill()

    def dead(self, worker: int) -> str | None:
        p = self._procs[worker]
        if worker in self._closed and p.exitcode is None:
            p.join(timeout=5)
        code = p.exitcode
        if code is None:
            return None
        if code < 0:
            return f"engine process killed by {signal.Signals(-code).name}"
        return f"engine process exited with code {code}"

    def close(self) -> None:
        for w, p in enumerate(self._procs):
            if p.is_alive():
                self._inbox[w].put([("stop",)])
        for p in self._procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
        for q in self._inbox:
            q.cancel_join_thread()
            q.close()
        for conn in self._reports:
            conn.close()


def _picklable(policy: Policy | None) -> Policy | None:
    """The policy, for backends that read its fixed speculation (vLLM), when a spawned
    process can rebuild it: it pickles and its class's top-level package is importable
    from sys.path (which the process inherits). A plug-in loaded from a file is not, so
    its engines start without a policy-fixed draft setting."""
    import pickle
    import sys

    if policy is None:
        return None
    top = type(policy).__module__.split(".")[0]
    finders = (getattr(f, "find_spec", None) for f in sys.meta_path)  # not sys.modules
    if not any(find is not None and find(top, None) is not None for find in finders):
        return None
    try:
        pickle.dumps(policy)
    except Exception:
        return None
    return policy


def one_gpu_each(worker: int) -> dict[str, str]:
    """Worker w's process sees one GPU: the w-th of those this process sees (round robin
    when there are more workers than GPUs)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        ids = [d for d in visible.split(",") if d.strip()]
    else:
        import torch

        ids = [str(i) for i in range(max(1, torch.cuda.device_count()))]
    return {"CUDA_VISIBLE_DEVICES": ids[worker % len(ids)]}
