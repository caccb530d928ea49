"""The live cluster's mutable state, shared by the executor (which steps engines), its
action handler (live/actions.py) and the policies' view (live/view.py).

Holding it apart from the executor is what lets the view and the action handler read and
change the cluster without importing the executor. The operations here are the
bookkeeping every one of them needs: queueing a request on a worker, stopping a copy,
telling an engine a request's new draft settings.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from simctl.live.errors import LiveError
from simctl.live.state import PLACED, LiveRequest, LiveWorker
from simctl.live.workload import StepWork
from simctl.policies.contract import SPEC_OFF, Role, SpecConfig


@dataclass(eq=False)
class ClusterState:
    """Workers, the step's request rows (its requests, then Fastest-of-N replica rows) and
    the executor's clock (`now`: the clock of the worker whose iteration is being wound up)."""

    workers: list[LiveWorker]
    requests: list[LiveRequest] = field(default_factory=list)
    n_requests: int = 0
    replicas: dict[int, list[int]] = field(default_factory=dict)  # request -> its replica rows
    unfinished: int = 0
    now: float = 0.0
    step_no: int = 0
    epoch: int = 0
    makespan: float = 0.0
    approximated: Counter[str] = field(default_factory=Counter)  # over the whole run
    counters: Counter[str] = field(default_factory=Counter)  # this step's (chunks, migrations...)
    roles: list[tuple[int, float, str]] = field(default_factory=list)  # this step's role changes

    def begin_step(self, work: StepWork) -> None:
        """A step's requests, all unassigned, on workers that must have run dry."""
        self.step_no, self.epoch = work.step, work.epoch
        self.requests = [LiveRequest(i, spec) for i, spec in enumerate(work.requests)]
        self.n_requests = len(self.requests)
        self.replicas = {}
        for r in self.requests:
            r.dispatch_end = r.budget
        self.unfinished = len(self.requests)
        self.now = 0.0
        self.makespan = 0.0
        for w in self.workers:
            if w.running or w.waiting:
                raise LiveError(f"worker {w.id} still holds requests from the previous step")
            w.clock, w.role, w.iteration, w.since_tick, w.idle_reported = 0.0, Role.ROLLOUT, 0, 0, False
            w.prefill_tokens = 0
        self.counters = Counter()
        self.roles = [(w.id, 0.0, Role.ROLLOUT.value) for w in self.workers]

    # ------------------------------------------------------------------- reading
    def kv_used(self, w: LiveWorker) -> int:
        return sum(self.requests[rid].prompt_len + self.requests[rid].generated for rid in w.running)

    def effective(self, r: LiveRequest, w: LiveWorker) -> SpecConfig:
        """The draft settings `r` runs with on `w`: its own, else the worker's."""
        if r.spec.plain:
            return SPEC_OFF
        return r.spec if r.spec.enabled else w.spec

    def worker_requests(self, worker: int) -> list[int]:
        """The step's requests (not replica rows) waiting or running on `worker`, ascending.

        Candidates are the worker's batch, queue and the requests whose dispatch ended in
        the iteration being wound up; each is kept only if its state says it is still
        placed there, so the answer is the scan of every request's state, at the cost of
        the worker's own requests."""
        w = self.workers[worker]
        n = self.n_requests
        candidates = {rid for rid in (*w.running, *w.waiting_ids, *w.ending) if rid < n}
        return sorted(
            rid
            for rid in candidates
            if self.requests[rid].worker == worker and self.requests[rid].state in PLACED
        )

    # ------------------------------------------------------------------- changing
    def note(self, notes: Sequence[str]) -> None:
        """Count what an engine carried out only approximately (run.json's "approximated")."""
        for n in notes:
            self.approximated[n] += 1

    def enqueue(self, r: LiveRequest, w: LiveWorker) -> None:
        r.state, r.worker, r.ready_s = "waiting", w.id, self.now
        w.push(r.id, r.priority)

    def refresh(self, r: LiveRequest, w: LiveWorker) -> None:
        """Tell `w`'s engine when the draft settings `r` runs with changed."""
        spec = self.effective(r, w)
        if spec != r.running_spec:
            self.note(w.engine.set_spec(r.id, spec))
            r.running_spec = spec

    def remove(self, r: LiveRequest) -> None:
        """Stop a copy wherever it is (queue or batch); counted as cancelled unless done."""
        if r.worker is not None:
            w = self.workers[r.worker]
            if r.state == "running" and r.id in w.running:
                w.engine.abort(r.id)
                w.running.remove(r.id)
            elif r.state == "waiting":
                w.drop_waiting(r.id)
        if r.state != "finished":
            r.state = "cancelled"
            self.counters["cancelled"] += 1

    def cancel_copies(self, request: int, keep: int) -> list[int]:
        """The first copy to finish wins; every other copy stops now. Returns the workers
        of the copies stopped (the policy hears of each)."""
        losers = []
        for i in [request, *self.replicas.pop(request, [])]:
            if i != keep:
                r = self.requests[i]
                if r.state in PLACED and r.worker is not None:
                    losers.append(r.worker)
                self.remove(r)
        return losers
