"""Carrying out a policy's actions on the live cluster (the executor applies them before
the next event). Each action is checked against the cluster first: a policy that names a
worker or request that does not exist, or acts on a request in the wrong state, stops the
run with one line. Actions the engines cannot carry out exactly are carried out
approximately and counted in `ClusterState.approximated`.
"""

from __future__ import annotations

from collections.abc import Sequence

from simctl.live.cluster_state import ClusterState
from simctl.live.errors import LiveError
from simctl.live.state import PLACED, LiveRequest, LiveWorker
from simctl.policies.contract import (
    Action,
    Assign,
    Cancel,
    ClusterView,
    Defer,
    LaunchReplica,
    Migrate,
    Role,
    SetRole,
    SetSpec,
)
from simctl.policies.draft_methods import ALL_METHODS as KNOWN_METHODS
from simctl.policies.worker_loss import redirect


class ActionApplier:
    """Applies one policy's actions to `cluster` (errors name the policy)."""

    def __init__(self, cluster: ClusterState, policy_name: str, view: ClusterView | None = None) -> None:
        self.cluster = cluster
        self.policy_name = policy_name
        self.view = view  # for redirecting work aimed at a lost worker

    def _target(self, wid: int | None, a: Action) -> LiveWorker:
        """The worker an Assign, Migrate or LaunchReplica goes to: the one named, or the
        least-loaded survivor when that one was lost (counted)."""
        w = self._worker(wid, a)
        if not w.lost or self.view is None:
            return w
        to = redirect(self.view, w.id)
        if to is None:
            raise LiveError(f"policy '{self.policy_name}': {a}: every worker is lost")
        self.cluster.counters["worker_lost_redirected"] += 1
        return self.cluster.workers[to]

    def apply(self, actions: Sequence[Action]) -> None:
        for a in actions:
            if isinstance(a, Assign):
                self._assign(a)
            elif isinstance(a, SetSpec):
                self._set_spec(a)
            elif isinstance(a, Migrate):
                self._migrate(a)
            elif isinstance(a, SetRole):
                self._set_role(a)
            elif isinstance(a, Defer):
                self._defer(a)
            elif isinstance(a, LaunchReplica):
                self._launch_replica(a)
            elif isinstance(a, Cancel):
                self._cancel(a)
            else:
                raise LiveError(
                    f"policy '{self.policy_name}' used {type(a).__name__}, unknown to the live executor"
                )

    def _worker(self, wid: int | None, a: Action) -> LiveWorker:
        workers = self.cluster.workers
        if wid is None or not 0 <= wid < len(workers):
            raise LiveError(f"policy '{self.policy_name}': {a} names worker {wid}, run has {len(workers)}")
        return workers[wid]

    def _request(self, rid: int, a: Action) -> LiveRequest:
        requests = self.cluster.requests
        if not 0 <= rid < len(requests):
            raise LiveError(f"policy '{self.policy_name}': {a} names request {rid}, step has {len(requests)}")
        return requests[rid]

    def _assign(self, a: Assign) -> None:
        w = self._target(a.worker, a)
        r = self._request(a.request, a)
        if r.state != "unassigned":
            raise LiveError(f"policy '{self.policy_name}': {a} for a request that is not unassigned")
        r.priority = a.priority
        r.dispatch_end = r.budget if a.max_tokens is None else min(r.budget, r.generated + a.max_tokens)
        r.dispatches += 1
        if r.submit_s is None:
            r.submit_s = self.cluster.now
        self.cluster.enqueue(r, w)

    def _set_spec(self, a: SetSpec) -> None:
        c = self.cluster
        if a.spec.enabled and a.spec.method not in KNOWN_METHODS:
            raise LiveError(
                f"policy '{self.policy_name}': unknown draft method '{a.spec.method}'; "
                f"known: {', '.join(KNOWN_METHODS)}"
            )
        if a.request is not None:
            r = self._request(a.request, a)
            r.spec = a.spec
            if r.state == "running" and r.worker is not None:
                c.refresh(r, c.workers[r.worker])
        if a.worker is not None:
            w = self._worker(a.worker, a)
            w.spec = a.spec
            for rid in w.running:
                c.refresh(c.requests[rid], w)

    def _set_role(self, a: SetRole) -> None:
        w = self._worker(a.worker, a)
        w.role = a.role
        self.cluster.roles.append((w.id, self.cluster.now, a.role.value))
        if a.role not in (Role.ROLLOUT, Role.IDLE):
            self.cluster.approximated[
                f"SetRole({a.role.value}): recorded only, live workers run no other work"
            ] += 1

    def _migrate(self, a: Migrate) -> None:
        c = self.cluster
        dst = self._target(a.worker, a)
        r = self._request(a.request, a)
        if r.state not in PLACED or r.worker is None:
            raise LiveError(f"policy '{self.policy_name}': {a} for a request that is not queued or running")
        src = c.workers[r.worker]
        if r.id in src.ending:
            # its dispatch ended in the iteration being wound up; the end is announced
            # next (RequestFinished or ChunkFinished): nothing is left to move
            c.counters["migrations_after_end"] += 1
            return
        if r.state == "running":
            src.engine.abort(r.id)
            src.running.remove(r.id)
        else:
            src.drop_waiting(r.id)
        if a.transfer_kv:
            c.approximated["Migrate(transfer_kv=True): KV recomputed on the new worker"] += 1
        c.counters["migrations"] += 1
        c.enqueue(r, dst)

    def _launch_replica(self, a: LaunchReplica) -> None:
        """Fastest-of-N: a copy from the request's furthest progress on another worker (KV
        recomputed there). The sampling key is the request's, so every copy emits the same
        tokens: only how fast differs, which is the point of the race."""
        c = self.cluster
        w = self._target(a.worker, a)
        if not 0 <= a.request < c.n_requests:
            raise LiveError(f"policy '{self.policy_name}': {a} names request {a.request}")
        rows = [a.request, *c.replicas.get(a.request, [])]
        origin = c.requests[a.request]
        if origin.state in ("finished", "deferred", "cancelled") and not c.replicas.get(a.request):
            raise LiveError(f"policy '{self.policy_name}': {a} for a request that is not in flight")
        if any(c.requests[i].worker == w.id and c.requests[i].state in PLACED for i in rows):
            raise LiveError(f"policy '{self.policy_name}': {a}: the request already runs on worker {w.id}")
        progress = max((c.requests[i] for i in rows), key=lambda x: x.generated)
        row = LiveRequest(len(c.requests), origin.spec_in, tokens=list(progress.tokens), origin=a.request)
        row.spec, row.priority = a.spec, max(origin.priority, 0.0) + 1.0
        row.dispatch_end, row.dispatches, row.submit_s = row.budget, 1, c.now
        c.requests.append(row)
        c.replicas.setdefault(a.request, []).append(row.id)
        c.counters["replicas"] += 1
        c.enqueue(row, w)

    def _cancel(self, a: Cancel) -> None:
        c = self.cluster
        for i in [a.request, *c.replicas.get(a.request, [])]:
            r = c.requests[i]
            if r.worker == a.worker and r.state in PLACED:
                c.remove(r)
                if i != a.request:
                    c.replicas[a.request].remove(i)
                return
        raise LiveError(f"policy '{self.policy_name}': {a}: no copy of the request runs on that worker")

    def _defer(self, a: Defer) -> None:
        c = self.cluster
        r = self._request(a.request, a)
        if r.state not in ("unassigned", "waiting"):
            raise LiveError(f"policy '{self.policy_name}': {a} for a request that is running or done")
        if r.state == "waiting" and r.worker is not None:
            c.workers[r.worker].drop_waiting(r.id)
        r.state = "deferred"
        c.unfinished -= 1
        c.approximated["Defer: generated after this step's makespan (outside it), not in the next step"] += 1
