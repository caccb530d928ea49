"""The concurrent live executor: every worker's engine runs its own iteration loop
(threads, processes or Ray actors: live/runtimes.py, live/ray_workers.py), and the
controller reacts to their reports as they arrive. This is `simctl live`'s default; the
lockstep executor (live/executor.py, `--lockstep`) stays for conformance checks.

What differs from lockstep, and why:
- Time is the wall clock from the step's start. An event's `time_s` is when the controller
  handled the report (non-decreasing, the order the policy sees); an iteration's row keeps
  the engine's own start and end. The makespan is the measured time at which the last
  request's finish reached the controller: what a deployment would show, contention for
  the host's cores, the controller's latency and stragglers included.
- Engines do not wait for each other, only for work. The controller's answer to a report
  (admissions, aborts, speculation changes) reaches that engine before one of its later
  iterations, usually the next; `reaction_s` keeps, per report, the time from receiving it
  to having sent the answer.
- Decisions depend on timing, so runs are measurements, not replays: a policy may see a
  different order of finishes from run to run. Token streams do not change (sampling is
  keyed by request and position), so outputs do not depend on placement.
- An engine that dies or raises loses its worker (live/losses.py); the step completes on
  the others.

Everything else (admission by priority up to `max_num_seqs`, chunks, migration, replicas,
what is approximated, the records) is the lockstep executor's code, reused.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from simctl.live.executor import LiveExecutor, stalled
from simctl.live.loop_engine import LoopEngine
from simctl.live.losses import INJECTED
from simctl.live.runtimes import Runtime
from simctl.live.state import LiveWorker

POLL_S = 0.02  # how long the controller waits for a report before checking for deaths


class ConcurrentExecutor(LiveExecutor):
    """Runs one policy over a workload on engines looping in `runtime`."""

    def __init__(self, policy: Any, runtime: Runtime, workload: Any, info: Any, **kw: Any) -> None:
        self.runtime = runtime
        self.loops = [LoopEngine(functools.partial(runtime.send, w)) for w in range(runtime.n)]
        super().__init__(policy, self.loops, workload, info, **kw)
        self.reaction_s: list[float] = []  # per report: received -> answer sent
        self.stray_reports = 0  # reports of dispatches aborted meanwhile, or of lost workers
        self._t0 = time.time()

    def run_step(self, work: Any) -> Any:
        self._t0 = time.time()
        return super().run_step(work)

    def _clock(self) -> float:
        return time.time() - self._t0

    # ------------------------------------------------------------------ driving
    def _drive(self, done: Callable[[], bool], stall_ok: bool = False) -> None:
        c = self.cluster
        next_check = 0.0
        while not done():
            self._flush()
            if time.monotonic() >= next_check:  # not per report: a Ray death check is a ping
                self._check_dead()
                next_check = time.monotonic() + POLL_S
            c.now = max(c.now, self._clock())
            self.losses.fire_due(self, c.now)
            if done():
                break
            if not any(w.running for w in self.workers if not w.lost):
                if stall_ok:
                    break
                raise stalled(c, self.policy.name)
            msg = self.runtime.receive(POLL_S)
            if msg is None:
                continue
            t_in = time.perf_counter()
            self._handle(msg)
            self._flush()
            self.reaction_s.append(time.perf_counter() - t_in)
        self._flush()

    def _flush(self) -> None:
        for loop in self.loops:
            loop.flush()

    def _handle(self, msg: tuple[Any, ...]) -> None:
        kind, wid = msg[0], msg[1]
        w = self.workers[wid]
        if w.lost:
            self.stray_reports += 1
            return
        if kind == "crash":
            self._lose(w, f"engine failed: {msg[2]}")
        elif kind == "iter":
            self._report(w, msg)

    def _report(self, w: LiveWorker, msg: tuple[Any, ...]) -> None:
        """One iteration's report: the lockstep executor's accounting, at real times."""
        _, _, deltas, timing, t_start, t_end, cpu_s, notes = msg
        c, acct = self.cluster, self._step_accounts()
        engine_s = t_end - t_start
        current = self.loops[w.id].receive(deltas, timing, engine_s)
        if not current and (not w.running or t_start < self._t0):
            # only dispatches aborted before this report arrived (e.g. the losing copies at
            # the previous step's end): no request of this step is in it
            self.stray_reports += 1
            return
        p0 = time.perf_counter()
        policy_before = acct.policy_s
        c.note(notes)
        c.now = max(c.now, self._clock())
        shape = self._batch_shape(w)
        # the engine's own timestamps: on another node they are off by the clocks' skew
        # (rows only; events and the makespan use the controller's clock)
        w.clock = t_end - self._t0
        seg = self._after_iteration(w, shape, current, timing, (t_start - self._t0, engine_s, cpu_s))
        seg[2] = w.clock
        acct.add_segment(seg, len(self.workers))
        acct.bookkeeping_s += time.perf_counter() - p0 - (acct.policy_s - policy_before)
        if self.on_progress is not None:
            self.on_progress(self)

    # ------------------------------------------------------------------- losses
    def _check_dead(self) -> None:
        for w in self.workers:
            if not w.lost:
                cause = self.runtime.dead(w.id)
                if cause is not None:
                    self._lose(w, cause)

    def _lose(self, w: LiveWorker, cause: str) -> None:
        self.loops[w.id].abandon()
        self.cluster.now = max(self.cluster.now, self._clock())
        self.losses.lose(self, w, cause)
        self._settle()

    def inject_loss(self, worker: int, time_s: float) -> None:
        """`--fail-worker`: kill the worker's engine (its process, thread or actor) now."""
        w = self.workers[worker]
        if w.lost:
            return
        self.runtime.kill(worker)
        self._lose(w, INJECTED)
