"""`composite`: Seer's divided rollout and context-aware scheduling, the best drafter per
request, and SpecActor's Fastest-of-N, in one policy (issue 7, "Beyond the papers").

| name | scheduling | speculation | Fastest-of-N |
|---|---|---|---|
| composite | Seer divided rollout + context (Alg. 1) | best drafter per request | yes |
| composite-no-fon | same | best drafter per request | - |
| composite-fixed-drafter | same | one method (`fixed`, the suffix tree) with depth by batch | yes |

Parts, in order (`Composite` delivers every event to each, then lets every part observe
the actions the others returned):
1. `ReplicaAwareScheduler`: `seer_scheduler.SeerScheduler`, plus what Fastest-of-N
   requires of it: a request finished by a replica releases the chunk the scheduler
   reserved for it where it was dispatched (or leaves the buffer if it was waiting there),
   and re-dispatch prefers workers that run no replicas.
2. `best_drafter.BestDrafter`: method, depth and paths per request from its observed
   acceptance and the cost model.
3. `fastest_of_n.FastestOfN`: freed workers race replicas of the requests in flight, each
   with another method of the ladder the drafter part ranks from what it has learned.
   Two departures from SpecActor's settings, both because divided rollout re-dispatches
   every straggler's next chunk to an idle worker where it runs nearly alone:
   `fon_max_batch` is 4, not 32 (a replica in a batch of 32 never outruns a straggler
   decoding alone), and `fon_reserve` = 1 keeps one free worker per request in flight for
   those re-dispatches, so replicas use only the workers beyond (with every freed worker
   racing, re-dispatched chunks landed next to replicas and the tail grew by up to 4%).

Parameters (`name:key=value`): chunk_tokens, min_chunk_tokens, max_seqs, kv_margin, seed,
ordering (scheduler); methods (slash-separated, e.g. `methods=suffix/draft_small`),
per_request_batch, multi_path, tick_iterations, fixed (speculation); fon_max_batch,
fon_reserve (Fastest-of-N).
The trace must carry an `accept_<m>` column for every method in `methods`.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from typing import cast

from simctl.policies.best_drafter import DEFAULT_METHODS, PER_REQUEST_BATCH, BestDrafter
from simctl.policies.contract import (
    Action,
    Assign,
    ClusterView,
    Event,
    LaunchReplica,
    Policy,
    RequestFinished,
    RequestId,
    WorkerId,
)
from simctl.policies.fastest_of_n import FastestOfN
from simctl.policies.registry import register
from simctl.policies.seer_scheduler import (
    CHUNK_TOKENS,
    KV_MARGIN,
    MAX_SEQS,
    MIN_CHUNK_TOKENS,
    Ordering,
    SeerScheduler,
)
from simctl.policies.seer_spec import FETCH_ITERATIONS
from simctl.policies.suffix_tree import Drafting

FON_MAX_BATCH = 4
FON_RESERVE = 1.0


class Composite(Drafting):
    """A composed policy whose parts may also observe each other's actions: after a part
    answers an event, every part with an `observe(actions)` method sees those actions, so a
    later part can act on placements an earlier one made at the same instant (the view
    shows them only once the executor applied them)."""

    def __init__(self, name: str, parts: Sequence[Policy]) -> None:
        super().__init__(name, parts)
        self._observers: list[Callable[[Sequence[Action]], None]] = [
            obs for p in self.parts if callable(obs := getattr(p, "observe", None))
        ]

    def on_event(self, event: Event, view: ClusterView) -> list[Action]:
        out: list[Action] = []
        for part in self.parts:
            actions = part.on_event(event, view)
            if actions:
                out.extend(actions)
                for observe in self._observers:
                    observe(actions)
        return out


class ReplicaAwareScheduler(SeerScheduler):
    """Seer's scheduler in a policy that launches Fastest-of-N replicas (module docstring).

    A replica that wins completes the request on the replica's worker, while the scheduler
    holds the chunk on the worker it dispatched the original to, or still buffers the
    request if its chunk had ended; both are settled here. Workers that run replicas are
    chosen last for new chunks, as their KV and batch are not in the scheduler's books."""

    def __init__(
        self,
        ordering: Ordering = "context",
        chunk_tokens: int = CHUNK_TOKENS,
        max_seqs: int = MAX_SEQS,
        kv_margin: float = KV_MARGIN,
        seed: int = 0,
        min_chunk_tokens: int = MIN_CHUNK_TOKENS,
    ) -> None:
        super().__init__(ordering, chunk_tokens, max_seqs, kv_margin, seed, min_chunk_tokens)
        self._held: dict[RequestId, WorkerId] = {}  # request -> worker holding its chunk
        self._replicas: dict[RequestId, list[WorkerId]] = {}
        self._replica_load: dict[WorkerId, int] = {}
        self._budgets: list[float] = []  # KV budget per worker, for the capacities _budgets_of
        self._budgets_of: list[int] | None = None

    def observe(self, actions: Sequence[Action]) -> None:
        for a in actions:
            if isinstance(a, LaunchReplica):
                self._replicas.setdefault(a.request, []).append(a.worker)
                self._replica_load[a.worker] = self._replica_load.get(a.worker, 0) + 1

    def on_event(self, event: Event, view: ClusterView) -> list[Action]:
        if isinstance(event, RequestFinished):
            for w in self._replicas.pop(event.request, ()):
                self._replica_load[w] -= 1
        return super().on_event(event, view)

    def _start(self, requests: Sequence[RequestId], view: ClusterView) -> None:
        self._held, self._replicas, self._replica_load = {}, {}, {}
        super()._start(requests, view)

    def _dispatch(self, view: ClusterView) -> list[Action]:
        out = super()._dispatch(view)
        for a in out:
            if isinstance(a, Assign):
                self._held[a.request] = a.worker
        return out

    def _release(self, rid: RequestId, worker: WorkerId, generated: int) -> None:
        held = self._held.pop(rid, None)
        if held is not None:
            super()._release(rid, held, generated)
            return
        # finished by a replica while its original waited in the buffer
        pid = self._group_of[rid]
        self._queue = [e for e in self._queue if e[2] != rid]
        heapq.heapify(self._queue)
        waiting = self._rest.get(pid)
        if waiting is not None:
            waiting.discard(rid)
            if not waiting:
                del self._rest[pid]
        grp = self._groups[pid]
        grp.served += generated - self._generated.get(rid, 0)
        self._generated[rid] = generated
        self._push_group(pid)

    def _select_worker(self, need: int) -> WorkerId | None:
        """The worker with the least (runs replicas, reserved KV share, running) among those
        with a free slot whose KV budget fits `need` (or that run nothing), the lowest id
        among equals. It scans every worker for every dispatched chunk, so the key's parts
        are compared in turn rather than built into a tuple per worker."""
        if self._budgets_of is not self._caps:  # the KV budgets, per set of capacities
            self._budgets_of = self._caps
            self._budgets = [cap * (1.0 - self.kv_margin) for cap in self._caps]
        caps, budgets, max_seqs = self._caps, self._budgets, self.max_seqs
        replicas = {w for w, n in self._replica_load.items() if n > 0}
        best: WorkerId | None = None
        best_rep, best_share, best_running = True, 0.0, 0
        for w, load in enumerate(self._loads):
            running = load.running
            if running >= max_seqs:
                continue
            reserved = load.reserved
            if running and reserved + need > budgets[w]:  # does not fit
                continue
            share = reserved / caps[w]
            rep = w in replicas
            # (rep, share, running) < the best's, as tuples compare
            if (
                best is None
                or rep < best_rep
                or (
                    rep == best_rep
                    and (share < best_share or (share == best_share and running < best_running))
                )
            ):
                best, best_rep, best_share, best_running = w, rep, share, running
        return best


def build(
    name: str,
    fon: bool = True,
    fixed: str | None = None,
    chunk_tokens: int = CHUNK_TOKENS,
    min_chunk_tokens: int = MIN_CHUNK_TOKENS,
    max_seqs: int = MAX_SEQS,
    kv_margin: float = KV_MARGIN,
    seed: int = 0,
    ordering: str = "context",
    methods: str | Sequence[str] = DEFAULT_METHODS,
    per_request_batch: int = PER_REQUEST_BATCH,
    multi_path: bool = True,
    tick_iterations: int = FETCH_ITERATIONS,
    fon_max_batch: int = FON_MAX_BATCH,
    fon_reserve: float = FON_RESERVE,
) -> Composite:
    """The composite policy from its parts' parameters."""
    scheduler = ReplicaAwareScheduler(
        cast(Ordering, ordering),
        int(chunk_tokens),
        int(max_seqs),
        float(kv_margin),
        int(seed),
        int(min_chunk_tokens),
    )
    drafter = BestDrafter(
        methods,
        fixed=fixed or None,
        per_request_batch=int(per_request_batch),
        multi_path=bool(multi_path),
        tick_iterations=int(tick_iterations),
    )
    parts: list[Policy] = [scheduler, drafter]
    if fon:
        parts.append(FastestOfN(int(fon_max_batch), drafter.ladder, float(fon_reserve)))
    return Composite(name, parts)


def _variant(name: str, **fixed_kw: object) -> Callable[..., Policy]:
    def factory(**kw: object) -> Policy:
        return build(name, **{**fixed_kw, **kw})  # type: ignore[arg-type]

    return factory


VARIANTS: dict[str, tuple[dict[str, object], str]] = {
    "composite": (
        {},
        "Seer divided rollout + context scheduling, best drafter per request, Fastest-of-N",
    ),
    "composite-no-fon": (
        {"fon": False},
        "composite without Fastest-of-N replicas",
    ),
    "composite-fixed-drafter": (
        {"fixed": "suffix"},
        "composite with one drafter (Seer's grouped suffix tree) for every request",
    ),
}

for _name, (_fixed, _help) in VARIANTS.items():
    register(_name, _variant(_name, **_fixed), _help)
