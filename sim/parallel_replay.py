"""Replaying several policies side by side, one process each (`simctl replay --jobs N`).

Each policy's replay is independent of the others' (its own policy object, simulation and
seeded draws), so running them in separate processes gives exactly the results of running
them one after another, in the wall time of the slowest share. Processes are started with
`spawn` (a forked child would inherit pyarrow's and numpy's thread pools mid-state); each
receives the pickled setup (trace frames included) and the policy's spec string and
rebuilds the policy itself, so a plug-in policy (`file.py:Class`) is loaded in the child
the way the parent loaded it. Policy *objects* cannot be sent: they run in this process.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from functools import partial
from multiprocessing import get_context
from typing import Any, TypeVar

Run = TypeVar("Run")


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def single_threaded() -> None:
    """Pool processes keep numeric libraries to one thread: the processes use the cores."""
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = "1"


def _report(on_policy: Callable[[str], None], spec: str, _done: object) -> None:
    on_policy(spec)


def replay_parallel(
    run_policy: Callable[[Any, Any], Run],
    setup: Any,
    specs: Sequence[Any],
    jobs: int,
    on_policy: Callable[[str], None] | None = None,
    order: Sequence[int] | None = None,
) -> list[Run]:
    """`run_policy(setup, spec)` for each spec, results in their order, up to `jobs` at a
    time in spawned processes (`run_policy` must be a module-level function: it is sent by
    reference); `on_policy(spec)` after each finishes (in finishing order). A policy's
    error is raised here as it would be in a serial replay. Spec strings go to the pool;
    anything else (a policy object) runs in this process. `order`: the indices of `specs`
    in the order the pool starts them (the costliest first finishes soonest: a long run
    started last would run alone at the end); default, as given."""
    strings = [s for s in specs if isinstance(s, str)]
    if jobs <= 1 or len(strings) <= 1:
        runs = []
        for spec in specs:
            runs.append(run_policy(setup, spec))
            if on_policy is not None and isinstance(spec, str):
                on_policy(spec)
        return runs
    futures: dict[int, Future[Run]] = {}
    with ProcessPoolExecutor(
        max_workers=min(jobs, len(strings)), mp_context=get_context("spawn"), initializer=single_threaded
    ) as pool:
        for i in order if order is not None else range(len(specs)):
            spec = specs[i]
            if isinstance(spec, str):
                fut = pool.submit(run_policy, setup, spec)
                if on_policy is not None:
                    fut.add_done_callback(partial(_report, on_policy, spec))
                futures[i] = fut
        local = {i: run_policy(setup, s) for i, s in enumerate(specs) if not isinstance(s, str)}
        return [futures[i].result() if i in futures else local[i] for i in range(len(specs))]
