"""The controller's stand-in for an engine that runs its own loop elsewhere
(live/engine_loop.py): it looks like any `EngineWorker` to the executor's bookkeeping, but
`add`, `abort` and `set_spec` only queue commands (sent together by `flush` once the
controller has handled a report), and iterations arrive as reports instead of `step()`.

Each dispatch of a request gets a fresh handle. Reports name handles; one whose dispatch
was aborted meanwhile (a migration, a cancelled copy, a lost race with a chunk end) is
dropped here, so the executor only ever sees tokens of dispatches it still runs. Nothing
is lost by dropping: sampling is keyed by the request and absolute position, so the next
dispatch generates the same tokens again.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Sequence
from dataclasses import replace

from simctl.live.backend import Delta, StepTiming
from simctl.live.engine_loop import Command
from simctl.live.trace_acceptance import TraceAcceptance
from simctl.policies.contract import SpecConfig

_handles = itertools.count()


class LoopEngine:
    """One remote engine, seen from the controller."""

    def __init__(self, send: Callable[[list[Command]], None]) -> None:
        self._send = send
        self._pending: list[Command] = []
        self._handle: dict[int, int] = {}  # request -> handle of its current dispatch
        self._request: dict[int, int] = {}  # handle -> request
        self._timing = StepTiming()
        self.dead = False

    # ------------------------------------------------------------ EngineWorker
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
        handle = next(_handles)
        extra = {} if acceptance is None else {"acceptance": acceptance}
        self._handle[request] = handle
        self._request[handle] = request
        self._pending.append(("add", handle, key, list(prompt), max_tokens, spec, group, extra))
        return []  # the engine's approximation notes come back with its next report

    def set_spec(self, request: int, spec: SpecConfig) -> list[str]:
        handle = self._handle.get(request)
        if handle is not None:
            self._pending.append(("spec", handle, spec))
        return []

    def abort(self, request: int) -> None:
        handle = self._handle.pop(request, None)
        if handle is not None:
            del self._request[handle]
            self._pending.append(("abort", handle))

    def step(self) -> list[Delta]:
        raise RuntimeError("a looping engine reports its iterations; nothing steps it")

    @property
    def running(self) -> int:
        return len(self._handle)

    @property
    def last_timing(self) -> StepTiming:
        return self._timing

    # ------------------------------------------------------------- controller
    def flush(self) -> None:
        """Send the queued commands (one message), unless the engine is gone."""
        if self._pending and not self.dead:
            cmds, self._pending = self._pending, []
            self._send(cmds)
        elif self.dead:
            self._pending = []

    def receive(self, deltas: Sequence[Delta], timing: StepTiming, engine_s: float) -> list[Delta]:
        """A report's deltas for dispatches still current, under the executor's request ids;
        a dispatch the engine ended is forgotten."""
        self._timing = replace(timing, engine_s=engine_s)
        out = []
        for d in deltas:
            request = self._request.get(d.request)
            if request is None:
                continue
            if d.ended:
                del self._request[d.request]
                del self._handle[request]
            out.append(replace(d, request=request))
        return out

    def abandon(self) -> None:
        """The engine is gone: forget every dispatch and send nothing more."""
        self.dead = True
        self._handle.clear()
        self._request.clear()
        self._pending = []
