"""One worker's engine running its own iteration loop, wherever it lives (a thread, a
process, a Ray actor), and the messages it exchanges with the controller.

Why a loop per engine: in a real deployment every engine iterates on its own; it does not
wait for other engines, only for work. The loop applies the controller's commands between
two iterations (add a request, abort one, change its speculation), runs one iteration
whenever it holds requests, and reports each one at once with its own wall-clock
timestamps. When it holds nothing it blocks for commands. The controller
(live/concurrent.py) hears the reports of all engines in arrival order.

Messages (plain tuples: they cross process and Ray boundaries by pickling):
- ("ready", worker): the engine is built;
- ("iter", worker, deltas, timing, t_start, t_end, cpu_s, notes): one iteration, with
  `time.time()` at its start and end (comparable across processes of one host, and across
  hosts as far as their clocks agree) and the approximation notes of the commands applied
  before it;
- ("crash", worker, line): the engine raised (building or stepping); the loop ends.
Commands: ("add", handle, key, prompt, max_tokens, spec, group, extra), ("abort", handle),
("spec", handle, spec), ("stop",). A handle is the controller's number for one dispatch of
one request (live/loop_engine.py), so a report about a dispatch the controller has since
aborted can be recognised and dropped.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from typing import Any

from simctl.live.backend import EngineWorker
from simctl.live.errors import first_line

Command = tuple[Any, ...]
Message = tuple[Any, ...]


def drain(inbox: Any, block: bool) -> list[Command]:
    """Every command waiting in `inbox` (a queue.Queue or multiprocessing queue); when
    `block`, wait for at least one first."""
    out: list[Command] = []
    if block:
        out.extend(inbox.get())
    while True:
        try:
            out.extend(inbox.get_nowait())
        except queue.Empty:
            return out


def _apply(engine: EngineWorker, cmd: Command, notes: list[str], held: set[int]) -> bool:
    """Carry out one command; False for "stop". Aborts and speculation changes for a
    dispatch the engine already ended (the controller had not heard yet) are moot."""
    op = cmd[0]
    if op == "add":
        _, handle, key, prompt, max_tokens, spec, group, extra = cmd
        notes.extend(engine.add(handle, key, prompt, max_tokens, spec, group, **extra))
        held.add(handle)
    elif op == "abort" and cmd[1] in held:
        held.discard(cmd[1])
        engine.abort(cmd[1])
    elif op == "spec" and cmd[1] in held:
        notes.extend(engine.set_spec(cmd[1], cmd[2]))
    elif op == "stop":
        return False
    return True


def run_loop(
    engine: EngineWorker,
    worker: int,
    recv: Callable[[bool], list[Command]],
    send: Callable[[Message], None],
    alive: Callable[[], bool] = lambda: True,
) -> None:
    """The loop: commands, then one iteration if anything runs, until "stop" (or until
    `alive()` turns False: a thread host's way of dying without a word, as a killed
    process does)."""
    notes: list[str] = []
    held: set[int] = set()  # handles of the dispatches the engine runs
    while alive():
        for cmd in recv(engine.running == 0):
            try:
                if not _apply(engine, cmd, notes, held):
                    return
            except Exception as exc:
                send(("crash", worker, f"{cmd[0]} failed: {type(exc).__name__}: {first_line(exc)}"))
                return
        if engine.running == 0 or not alive():
            continue
        t0, c0 = time.time(), time.thread_time()
        try:
            deltas = engine.step()
        except Exception as exc:
            send(("crash", worker, f"{type(exc).__name__}: {first_line(exc)}"))
            return
        t1 = time.time()
        held.difference_update(d.request for d in deltas if d.ended)
        send(("iter", worker, deltas, engine.last_timing, t0, t1, time.thread_time() - c0, notes))
        notes = []
