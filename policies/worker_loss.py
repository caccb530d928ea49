"""What both executors do when a worker is lost and the policy does not say: the fallback
placement that keeps a step finishing on the surviving workers.

A policy learns of a loss through `WorkerLost` and may re-place the orphaned requests
itself (by prompt group, by predicted length...). Most seed policies predate the event and
ignore it; rather than let the step stall with requests nobody will place, the executor
asks `fallback_placements` for the rest and applies them, counting each. Both executors
call the same function, so a simulated fault (`--fail-worker W@T`) and a real one leave
requests in the same places. Pure: no I/O, no engine.
"""

from __future__ import annotations

from collections.abc import Iterable

from simctl.policies.contract import Assign, ClusterView, RequestId, WorkerId


def least_loaded(view: ClusterView, extra: dict[WorkerId, int] | None = None) -> WorkerId | None:
    """The surviving rollout-capable worker with the fewest requests (running + waiting,
    plus `extra` placed so far), lowest id on ties; None when every worker is lost."""
    best: tuple[int, WorkerId] | None = None
    for i in range(view.num_workers):
        w = view.worker(i)
        if not w.alive:
            continue
        load = w.running + w.waiting + (extra or {}).get(w.id, 0)
        if best is None or (load, w.id) < best:
            best = (load, w.id)
    return None if best is None else best[1]


def fallback_placements(view: ClusterView, requests: Iterable[RequestId]) -> list[Assign]:
    """Assign each request in `requests` that is still unassigned, one at a time, to the
    least-loaded surviving worker (counting the ones placed here). Empty when no worker
    survives: the executor then reports the step as failed."""
    placed: dict[WorkerId, int] = {}
    out: list[Assign] = []
    for rid in requests:
        if view.request(rid).state != "unassigned":
            continue
        w = least_loaded(view, placed)
        if w is None:
            return []
        placed[w] = placed.get(w, 0) + 1
        out.append(Assign(request=rid, worker=w))
    return out


def redirect(
    view: ClusterView, worker: WorkerId, extra: dict[WorkerId, int] | None = None
) -> WorkerId | None:
    """Where an action aimed at `worker` goes: itself while alive, else the least-loaded
    survivor (None: none survives)."""
    if view.worker(worker).alive:
        return worker
    return least_loaded(view, extra)
