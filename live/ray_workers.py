"""Rollout workers as Ray actors, for runs whose engines do not fit one host: one engine
per GPU (or per node) in its own actor.

Two ways to drive them. Concurrent (`RayRuntime`, `simctl live --ray`'s default): each
actor runs its engine's own loop in a background thread (live/engine_loop.py) and reports
every iteration to one Ray queue; the controller (live/concurrent.py) answers each report
by a `command` call, which the actor applies between iterations. Lockstep (`RayBackend`,
with `--lockstep`): the executor steps one worker at a time in virtual-clock order through
synchronous calls (`RayWorker`), so decisions and recorded traces are those of in-process
engines. Either way each actor builds its engine itself from a picklable zero-argument
`factory` (the model loads on the actor's own device: weights never travel through the
driver), and an iteration's time is measured inside the actor, so the remote-call round
trip is not charged to the engine.

`ray` is an optional dependency (the `live` extra); importing this module without it is
fine, using it raises a one-line error.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from simctl.live.backend import Delta, EngineWorker, StepTiming
from simctl.live.capabilities import TORCH_DRAFT_METHODS
from simctl.live.errors import first_line
from simctl.live.trace_acceptance import TraceAcceptance
from simctl.policies.contract import Capability, Policy, SpecConfig


class RayUnavailable(RuntimeError):
    pass


def require_ray() -> Any:
    """The ray module, or `RayUnavailable` in one line."""
    try:
        import ray
    except ImportError:
        raise RayUnavailable(
            "--ray needs the 'ray' package: pip install -e '.[live]' (or pip install ray)"
        ) from None
    return ray


def check_resources(ray: Any, resources: dict[str, float], n: int) -> None:
    """`RayUnavailable` (one line) when the cluster cannot hold `n` actors of `resources`."""
    available = ray.cluster_resources()
    for res, amount in resources.items():
        key = {"num_cpus": "CPU", "num_gpus": "GPU"}.get(res, res)
        if available.get(key, 0.0) < amount * n:
            raise RayUnavailable(
                f"ray cluster has {available.get(key, 0.0):g} {key}, {n} workers need {amount * n:g}"
            )


class EngineHost:
    """The actor body: one engine, built in the actor's process by the backend that
    `factory` returns there (for the policy, which may fix the engine's speculation)."""

    def __init__(self, factory: Callable[[], Any], policy: Policy | None) -> None:
        self.worker: EngineWorker = factory().engines(1, policy)[0]

    def add(
        self,
        request: int,
        key: Hashable,
        prompt: Sequence[int],
        max_tokens: int,
        spec: SpecConfig,
        group: Hashable | None,
        acceptance: TraceAcceptance | None = None,
    ) -> tuple[list[str], int]:
        notes = self.worker.add(request, key, prompt, max_tokens, spec, group, acceptance)
        return notes, self.worker.running

    def set_spec(self, request: int, spec: SpecConfig) -> list[str]:
        return self.worker.set_spec(request, spec)

    def abort(self, request: int) -> int:
        self.worker.abort(request)
        return self.worker.running

    def step(self) -> tuple[list[Delta], int, StepTiming]:
        t0 = time.perf_counter()
        deltas = self.worker.step()
        engine_s = time.perf_counter() - t0
        return deltas, self.worker.running, replace(self.worker.last_timing, engine_s=engine_s)


class RayWorker:
    """`EngineWorker` proxy for an `EngineHost` actor (synchronous calls)."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle
        self._running = 0
        self._timing = StepTiming()

    @staticmethod
    def _get(ref: Any) -> Any:
        """The call's result; an engine's own exception is re-raised as itself (the
        executor turns it into its one-line worker-crash error), a lost actor as one line."""
        ray = require_ray()
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, Exception):
                raise cause from None
            raise RuntimeError(str(exc).strip().splitlines()[-1]) from None
        except ray.exceptions.RayActorError as exc:
            raise RuntimeError(f"engine actor lost ({type(exc).__name__})") from None

    def add(
        self,
        request: int,
        key: Hashable,
        prompt: Sequence[int],
        max_tokens: int,
        spec: SpecConfig,
        group: Hashable | None,
        acceptance: TraceAcceptance | None = None,
    ) -> list[str]:
        notes, self._running = self._get(
            self._handle.add.remote(request, key, list(prompt), max_tokens, spec, group, acceptance)
        )
        return notes

    def set_spec(self, request: int, spec: SpecConfig) -> list[str]:
        return self._get(self._handle.set_spec.remote(request, spec))

    def abort(self, request: int) -> None:
        self._running = self._get(self._handle.abort.remote(request))

    def step(self) -> list[Delta]:
        deltas, self._running, self._timing = self._get(self._handle.step.remote())
        return deltas

    @property
    def running(self) -> int:
        return self._running

    @property
    def last_timing(self) -> StepTiming:
        return self._timing


@dataclass
class RayBackend:
    """Builds each worker's engine in its own actor. `factory` (picklable, no arguments)
    runs inside the actor and returns an in-process backend (`live.backend.Backend`), whose
    `engines(1, policy)` gives the actor its engine; `resources` is what one actor reserves
    (e.g. {"num_gpus": 1}); `address` joins a running cluster ("auto") or, when None,
    starts a local one sized to the machine."""

    factory: Callable[[], Any]
    capabilities: frozenset[Capability]
    draft_methods: frozenset[str] = TORCH_DRAFT_METHODS
    resources: dict[str, float] = field(default_factory=lambda: {"num_cpus": 1})
    address: str | None = None
    init_kwargs: dict[str, Any] = field(default_factory=dict)
    _actors: list[Any] = field(default_factory=list)

    def engines(self, n: int, policy: Policy | None = None) -> list[EngineWorker]:
        ray = require_ray()
        if not ray.is_initialized():
            ray.init(
                address=self.address,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
                **self.init_kwargs,
            )
        check_resources(ray, self.resources, n)
        self.shutdown_actors()
        host = ray.remote(**self.resources)(EngineHost)
        self._actors = [host.remote(self.factory, policy) for _ in range(n)]
        return [RayWorker(a) for a in self._actors]

    def shutdown_actors(self) -> None:
        ray = require_ray()
        for a in self._actors:
            ray.kill(a)
        self._actors = []


# ------------------------------------------------------------ concurrent: engine loops


class LoopHost:
    """The actor body of a concurrent run: builds its engine, then runs the engine's own
    loop (live/engine_loop.py) in a background thread, so that the actor's methods
    (`command`, `alive`) stay answerable while the engine iterates. Reports go to the
    run's shared Ray queue, in the order they happen."""

    def __init__(self, factory: Callable[[], Any], policy: Policy | None, worker: int, outbox: Any) -> None:
        import queue
        import threading

        from simctl.live.engine_loop import drain, run_loop

        self._inbox: queue.Queue[list[Any]] = queue.Queue()
        try:
            engine = factory().engines(1, policy)[0]
        except Exception as exc:
            outbox.put(("crash", worker, f"engine start failed: {type(exc).__name__}: {first_line(exc)}"))
            raise
        outbox.put(("ready", worker))
        self._thread = threading.Thread(
            target=run_loop,
            args=(engine, worker, lambda block: drain(self._inbox, block), outbox.put),
            daemon=True,
        )
        self._thread.start()

    def command(self, cmds: list[Any]) -> None:
        self._inbox.put(cmds)

    def alive(self) -> bool:
        return self._thread.is_alive()


PING_EVERY_S = 0.25  # how often the controller asks each actor whether it is alive


class RayRuntime:
    """One Ray actor per engine (one GPU each on CUDA nodes), each looping on its own;
    the controller hears them through one Ray queue. A dead actor is noticed through a
    ping that fails (`dead`), at most one ping in flight per actor."""

    def __init__(
        self,
        factory: Callable[[], Any],
        n: int,
        policy: Policy | None,
        *,
        resources: dict[str, float] | None = None,
        address: str | None = None,
        start_timeout_s: float = 900.0,
    ) -> None:
        ray = require_ray()
        from ray.util.queue import Queue

        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
        check_resources(ray, resources or {"num_cpus": 1}, n)
        self.n = n
        self._ray = ray
        self._out = Queue()
        host = ray.remote(**(resources or {"num_cpus": 1}))(LoopHost)
        self._actors = [host.remote(factory, policy, w, self._out) for w in range(n)]
        self._pings: dict[int, Any] = {}
        self._ping_s: dict[int, float] = {}
        self._dead: dict[int, str] = {}
        ready: set[int] = set()
        while len(ready) < n:
            msg = self.receive(start_timeout_s)
            if msg is None or msg[0] == "crash":
                self.close()
                if msg is not None:
                    raise RayUnavailable(f"worker {msg[1]}: {msg[2]}")
                raise RayUnavailable(
                    f"ray: {n - len(ready)} engine actor(s) not ready after {start_timeout_s:g} s"
                )
            ready.add(msg[1])

    def send(self, worker: int, cmds: list[Any]) -> None:
        self._actors[worker].command.remote(cmds)

    def receive(self, timeout: float) -> Any:
        from ray.util.queue import Empty

        try:
            return self._out.get(block=True, timeout=timeout)
        except Empty:
            return None

    def kill(self, worker: int) -> None:
        self._ray.kill(self._actors[worker])
        self._dead[worker] = "killed"

    def dead(self, worker: int) -> str | None:
        if worker in self._dead:
            return self._dead[worker]
        ray, ref = self._ray, self._pings.get(worker)
        if ref is not None:
            done, _ = ray.wait([ref], timeout=0)
            if not done:
                return None
            try:
                if not ray.get(ref):
                    self._dead[worker] = "engine loop ended"
            except ray.exceptions.RayActorError as exc:
                self._dead[worker] = f"engine actor lost ({type(exc).__name__})"
            if worker in self._dead:
                return self._dead[worker]
        now = time.monotonic()
        if now - self._ping_s.get(worker, 0.0) >= PING_EVERY_S:
            self._ping_s[worker] = now
            self._pings[worker] = self._actors[worker].alive.remote()
        return None

    def close(self) -> None:
        for a in self._actors:
            self._ray.kill(a)
        self._actors = []
        self._ray.kill(self._out.actor)
