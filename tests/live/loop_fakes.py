"""Scripted engines for the concurrent executor's tests, importable by a spawned worker
process (a backend travels there by pickling, so it must be a module-level class)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from simctl.live.backend import Delta
from simctl.live.runtimes import WORKER_ENV
from simctl.testing import ScriptedEngine


class SlowEngine(ScriptedEngine):
    """The scripted engine, taking `step_s` per iteration (a busy engine, not a sleeping
    one, is not needed here: tests check events and tokens, never timings)."""

    def __init__(self, step_s: float = 0.002, exit_after: int | None = None) -> None:
        super().__init__()
        self.step_s = step_s
        self.exit_after = exit_after  # iterations before the process dies on its own
        self.iterations = 0

    def step(self) -> list[Delta]:
        time.sleep(self.step_s)
        self.iterations += 1
        if self.exit_after is not None and self.iterations > self.exit_after:
            os._exit(3)  # a worker process that dies without a word (OOM-killed, segfault)
        return super().step()


@dataclass(frozen=True)
class SlowBackend:
    """A picklable backend factory: `SlowBackend(...)()` is the backend, as for BackendSpec."""

    step_s: float = 0.002
    exit_after: int | None = None
    exit_worker: int = 1  # which worker's process dies (SIMCTL_WORKER, set by the runtime)

    def __call__(self) -> SlowBackend:
        return self

    def engines(self, n: int, policy: Any = None) -> list[SlowEngine]:
        dies = os.environ.get(WORKER_ENV) == str(self.exit_worker)
        return [SlowEngine(self.step_s, self.exit_after if dies else None) for _ in range(n)]
