"""`composite`: Seer's divided rollout and context-aware scheduling, the best drafter per
request, and SpecActor's Fastest-of-N, in one policy (issue 7, "Beyond the papers").

| name | scheduling | speculation | Fastest-of-N |
|---|---|---|---|
| composite | Seer divided rollout + context (Alg. 1) | best drafter per request | yes |
| composite-no-fon | same | best drafter per request | - |
| composite-fixed-drafter | same | one method (`fixed`, the suffix tree) with depth by batch | yes |

Parts, in order (`compose.Composed` delivers every event to each, and every non-empty
answer of a part to the parts that observe answers, `Policy.observe`):
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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, cast

from simctl.policies.best_drafter import DEFAULT_METHODS, PER_REQUEST_BATCH, BestDrafter
from simctl.policies.compose import Composed
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
from simctl.policies.draft_methods import DraftMethod
from simctl.policies.family import Family
from simctl.policies.fastest_of_n import FastestOfN
from simctl.policies.params import Flag, Float, Int, Method, OneOf, OrNone, Param, ParamError, SlashList
from simctl.policies.seer_scheduler import (
    CHUNK_TOKENS,
    KV_MARGIN,
    MIN_CHUNK_TOKENS,
    ORDERINGS,
    Ordering,
    SchedulerParams,
    SeerScheduler,
)
from simctl.policies.seer_spec import FETCH_ITERATIONS

FON_MAX_BATCH = 4
FON_RESERVE = 1.0


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
        max_seqs: int = 0,
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
        if self._uniform and not any(n > 0 for n in self._replica_load.values()):
            # no worker runs replicas: the key is the scheduler's (reserved share, running)
            return super()._select_worker(need)
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


@dataclass(frozen=True)
class CompositeParams(SchedulerParams):
    """The scheduler's parameters (`SchedulerParams`), then speculation's and Fastest-of-N's."""

    ordering: Annotated[str, Param(OneOf(ORDERINGS), "buffer order (Seer Alg. 1: context)")] = "context"
    methods: Annotated[
        tuple[DraftMethod, ...], Param(SlashList(Method()), "draft methods a request may speculate with")
    ] = DEFAULT_METHODS
    fixed: Annotated[
        DraftMethod | None, Param(OrNone(Method()), "the one method requests speculate with (one of methods)")
    ] = None
    per_request_batch: Annotated[
        int, Param(Int(0, 1 << 16), "above this batch a worker gets one setting for all")
    ] = PER_REQUEST_BATCH
    multi_path: Annotated[bool, Param(Flag(), "draft the suffix tree as Seer's multi-path tree")] = True
    tick_iterations: Annotated[
        int, Param(Int(1, 1 << 20), "decode iterations between worker configurations")
    ] = FETCH_ITERATIONS
    fon: Annotated[bool, Param(Flag(), "Fastest-of-N replicas on spare workers")] = True
    fon_max_batch: Annotated[int, Param(Int(1, 1 << 16), "replicas per Fastest-of-N worker")] = FON_MAX_BATCH
    fon_reserve: Annotated[
        float, Param(Float(0.0), "free workers kept back per request in flight (for re-dispatch)")
    ] = FON_RESERVE

    def __post_init__(self) -> None:
        if self.fixed is not None and self.fixed not in self.methods:
            allowed = "one of " + "/".join(self.methods) + ", or none"
            raise ParamError("is not among methods", key="fixed", allowed=allowed)


def build(name: str, p: CompositeParams) -> Composed:
    """The composite policy from its parts' parameters."""
    scheduler = ReplicaAwareScheduler(
        cast(Ordering, p.ordering), p.chunk_tokens, p.max_seqs, p.kv_margin, p.seed, p.min_chunk_tokens
    )
    drafter = BestDrafter(
        p.methods,
        fixed=p.fixed,
        per_request_batch=p.per_request_batch,
        multi_path=p.multi_path,
        tick_iterations=p.tick_iterations,
    )
    parts: list[Policy] = [scheduler, drafter]
    if p.fon:
        parts.append(FastestOfN(p.fon_max_batch, drafter.ladder, p.fon_reserve))
    return Composed(name, parts)


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
        {"fixed": DraftMethod.SUFFIX},
        "composite with one drafter (Seer's grouped suffix tree) for every request",
    ),
}

FAMILIES: tuple[Family[Any], ...] = tuple(
    Family(name, text, CompositeParams, build, defaults=defaults)
    for name, (defaults, text) in VARIANTS.items()
)
