"""Running policies live, one after the other over the same workload, on fresh engines.

Fresh engines per policy (the backend shares the loaded weights) so that no drafter cache
or queue carries over from one policy's run into the next one's timings. Backends are
built by live/backend_factory.py; nothing here imports an engine.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from simctl.live.backend import Backend
from simctl.live.concurrent import ConcurrentExecutor
from simctl.live.errors import LiveError, first_line
from simctl.live.executor import ExecutorConfig, LiveExecutor
from simctl.live.recorder import LiveRun
from simctl.live.runtimes import Runtime
from simctl.live.view import CostModelMissing
from simctl.live.workload import Workload, offline_profile
from simctl.policies.contract import ModelInfo, Policy, give_offline_profile
from simctl.traces.cli_options import WorkerFault
from simctl.traces.plugins import make_policy

if TYPE_CHECKING:
    from simctl.sim.cost_model import CostModel

ProgressCallback = Callable[[str, LiveExecutor], None]
RuntimeFactory = Callable[[int, Policy], Runtime]


def _named(on_progress: ProgressCallback | None, name: str) -> Callable[[LiveExecutor], None] | None:
    """The executor's progress callback for the policy called `name`."""
    if on_progress is None:
        return None
    return lambda ex: on_progress(name, ex)


def run_policies(
    policy_specs: Sequence[str],
    backend: Backend,
    workload: Workload,
    info: ModelInfo,
    *,
    workers: int,
    config: ExecutorConfig,
    cost_model: CostModel | None = None,
    on_progress: ProgressCallback | None = None,
    runtime: RuntimeFactory | None = None,
    faults: Sequence[WorkerFault] = (),
) -> tuple[list[LiveRun], str | None]:
    """(runs, error): each policy over the whole workload. A failure stops everything and
    is returned as one line; the failed run keeps its completed steps (and the failed
    step's partial record), so callers can still write what was done.

    With `runtime` (workers, policy -> a started `Runtime`) the engines loop side by side
    (live/concurrent.py); without it `backend`'s engines run in lockstep in this thread
    (live/executor.py). `backend` says what the engines can do in both cases."""
    runs: list[LiveRun] = []
    for spec in policy_specs:
        policy = make_policy(spec)
        give_offline_profile(policy, offline_profile(workload))
        run = LiveRun(name=policy.name, params=policy.params())
        runs.append(run)
        kw: dict[str, Any] = {
            "config": config,
            "capabilities": backend.capabilities,
            "draft_methods": backend.draft_methods,
            "cost_model": cost_model,
            "on_progress": _named(on_progress, policy.name),
            "faults": faults,
        }
        started: Runtime | None = None
        try:
            if runtime is None:
                ex = LiveExecutor(policy, backend.engines(workers, policy), workload, info, **kw)
            else:
                started = runtime(workers, policy)
                ex = ConcurrentExecutor(policy, started, workload, info, **kw)
        except LiveError as exc:
            run.error = str(exc)
            return runs, run.error
        except Exception as exc:
            run.error = f"engine start failed: {type(exc).__name__}: {first_line(exc)}"
            return runs, run.error
        error = _execute(ex, run, started)
        if error:
            return runs, error
    return runs, None


def _execute(ex: LiveExecutor, run: LiveRun, runtime: Runtime | None) -> str | None:
    """Run `ex` to the end (or its first error, returned as one line), filling `run`."""
    t0 = time.perf_counter()
    error = None
    try:
        ex.run()
    except (LiveError, CostModelMissing) as exc:
        error = str(exc)
    finally:
        run.wall_s = time.perf_counter() - t0  # the run itself, not the engines' shutdown
        if runtime is not None:
            runtime.close()
        run.records = list(ex.records) + ([ex.partial] if ex.partial is not None else [])
        run.approximated = ex.approximated
        run.overhead = ex.overhead
        run.worker_losses = list(ex.losses.entries)
        if isinstance(ex, ConcurrentExecutor):
            run.reaction_s = list(ex.reaction_s)
    run.error = error
    return error
