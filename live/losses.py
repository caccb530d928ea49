"""Losing a live worker mid-step without losing the run.

A worker is lost when its engine process or actor dies, when its engine raises (concurrent
mode: the engine is unusable, the run goes on without it), or when `--fail-worker W@T[:S]`
injects the loss. Either way the same thing happens, in this order:

1. the worker is marked lost (`WorkerView.alive` False; it gets no more work, and actions
   aimed at it are redirected, live/actions.py);
2. its requests come back unassigned with the tokens the controller had received (a
   re-placement continues from there: sampling is keyed by request and position, so the
   stream is unchanged); Fastest-of-N copies on it are cancelled;
3. the policy hears `WorkerLost` and its actions are applied;
4. whatever is still unassigned goes to the least-loaded survivor
   (policies/worker_loss.py, the rule the simulator applies too);
5. run.json's `worker_losses` records when, how many requests, how many the executor
   placed, and the cause.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from simctl.live.errors import LiveError
from simctl.live.state import PLACED, LiveWorker
from simctl.policies.contract import WorkerLost
from simctl.policies.worker_loss import fallback_placements
from simctl.traces.cli_options import WorkerFault
from simctl.traces.run_format import WorkerLossEntry

if TYPE_CHECKING:
    from simctl.live.executor import LiveExecutor

INJECTED = "injected"


class Losses:
    """The faults still to inject and the losses so far (over the whole run)."""

    def __init__(self, faults: Sequence[WorkerFault] = (), first_step: int = 0) -> None:
        self.pending = [(f.step if f.step is not None else first_step, f.time_s, f.worker) for f in faults]
        self.entries: list[WorkerLossEntry] = []

    def fire_due(self, ex: LiveExecutor, now: float) -> None:
        """Inject the faults of the current step whose time has come."""
        step = ex.cluster.step_no
        for fault in sorted(f for f in self.pending if f[0] == step and f[1] <= now):
            self.pending.remove(fault)
            ex.inject_loss(fault[2], fault[1])

    def fire_remaining(self, ex: LiveExecutor) -> None:
        """Faults timed after this step's end happen at its end (the worker held nothing
        by then) and keep the worker out of the later steps."""
        step = ex.cluster.step_no
        for fault in sorted(f for f in self.pending if f[0] == step):
            self.pending.remove(fault)
            ex.inject_loss(fault[2], ex.cluster.now)

    def lose(self, ex: LiveExecutor, w: LiveWorker, cause: str) -> None:
        """Steps 1-5 of the module docstring; `LiveError` when no worker is left."""
        if w.lost:
            return
        c = ex.cluster
        w.lost = True
        orphans = _release(ex, w)
        alive = [x for x in c.workers if not x.lost]
        if not alive:
            raise LiveError(f"every worker lost at step {c.step_no} (worker {w.id}: {cause})")
        ex.emit_event(WorkerLost(time_s=c.now, worker=w.id, requests=tuple(orphans)))
        fallback = fallback_placements(ex.view, orphans)
        ex.apply(fallback)
        c.counters["worker_lost_placed_by_executor"] += len(fallback)
        self.entries.append(
            {
                "worker": w.id,
                "step": c.step_no,
                "time_s": c.now,
                "requests": len(orphans),
                "placed_by_executor": len(fallback),
                "cause": cause,
            }
        )


def _release(ex: LiveExecutor, w: LiveWorker) -> list[int]:
    """Unplace everything on `w`: its requests (ascending ids) become unassigned, keeping
    their tokens; replica rows are cancelled; the engine forgets them."""
    c = ex.cluster
    orphans = []
    for rid in sorted({*w.running, *w.waiting_ids, *w.ending}):
        r = c.requests[rid]
        if r.worker != w.id or r.state not in PLACED:
            continue
        if r.origin != r.id:
            c.remove(r)
            c.replicas[r.origin].remove(rid)
            continue
        if r.state == "running" and rid in w.running:
            w.engine.abort(rid)
        r.state, r.worker = "unassigned", None
        if rid < c.n_requests:
            orphans.append(rid)
    w.running.clear()
    w.ending.clear()
    w.waiting_ids.clear()
    return orphans
