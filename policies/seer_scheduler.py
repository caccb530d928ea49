"""Seer's divided rollout and context-aware scheduling (arXiv:2511.14617
§4.2-4.3, Alg. 1), as one global scheduler over a request buffer.

Divided rollout: every request is dispatched in chunks (`Assign.max_tokens` = chunk,
8K in §4.2) to the least-loaded worker by reserved KV and then concurrency; after each
chunk (`ChunkFinished`) it returns to the buffer and is dispatched again, possibly
elsewhere (the simulator keeps its KV valid: Seer's global KV-cache pool). A worker only
takes a request whose whole chunk fits its KV budget next to the chunks it already runs
(context at dispatch + chunk), so the engine never preempts. Where the budget left is
smaller than a full chunk the chunk shrinks to it (down to `min_chunk_tokens`): the
"maximum concurrency level that avoids preemption" of §4.2 at a KV utilisation near
Fig. 9's, which full 8K reservations would leave at 55-65% on memory-bound tasks.

Orderings of the buffer (`ordering`):
- "fifo": submission order; a request in flight keeps its place (§6.4.1 "No-Context").
- "context" (Alg. 1): the first request of each group is its speculative request, kept in
  a high-priority queue served shortest-generated-first; the rest wait until no
  speculative request is queued, then go longest-estimate-first, where a group's estimate
  is the longest response it has finished, or the budget while none has. Among the groups
  of the top estimate, a random one of the least-served (fewest tokens completed, in
  chunk units) goes first: §4.3's hedge against skewed estimates.
- "oracle": longest true length first (view.oracle_length; §6.4.1 "Oracle").

Choices the paper leaves open: `max_seqs` = the engine's concurrency limit per worker
(vLLM's max_num_seqs, `view.info.max_num_seqs`, unless given): a worker is handed no more
requests than it runs at once, so the rest wait in the global queue, where the scheduler
can still order them;
KV budgets keep `kv_margin` (2%) free, beyond vLLM's 1% admission watermark; re-dispatch
goes to the least-loaded worker whether or not it held the request before.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Literal

from simctl.policies.contract import (
    Action,
    Assign,
    Capability,
    ChunkFinished,
    ClusterView,
    Event,
    Policy,
    RequestFinished,
    RequestId,
    StepStarted,
    WorkerId,
)
from simctl.policies.params import Float, Int, Param, PolicyParams

CHUNK_TOKENS = 8192  # §4.2 "a small chunk size (e.g., 8K tokens)"
MAX_SEQS = 256  # vLLM's max_num_seqs default
MIN_CHUNK_TOKENS = 1024
KV_MARGIN = 0.02
SPEC_PRIORITY = 1.0

Ordering = Literal["fifo", "context", "oracle"]
ORDERINGS: tuple[Ordering, ...] = ("fifo", "context", "oracle")


@dataclass
class GroupContext:
    """What the scheduler has learned about one prompt group this step."""

    members: list[RequestId]
    speculative: RequestId
    budget: int  # the requests' max_tokens: the estimate while no response finished
    estimate: int | None = None  # longest finished response, None while none finished
    served: int = 0  # tokens completed by the group's finished chunks

    def observe_finish(self, length: int) -> None:
        self.estimate = length if self.estimate is None else max(self.estimate, length)


@dataclass
class WorkerLoad:
    reserved: int = 0  # KV tokens reserved by the chunks dispatched here
    running: int = 0
    by_request: dict[RequestId, int] = field(default_factory=dict)


class SeerScheduler(Policy):
    """Global request buffer with chunked dispatch (see the module docstring)."""

    requires = frozenset({Capability.PLACE, Capability.CHUNK, Capability.PRIORITY})

    def __init__(
        self,
        ordering: Ordering = "context",
        chunk_tokens: int = CHUNK_TOKENS,
        max_seqs: int = 0,
        kv_margin: float = KV_MARGIN,
        seed: int = 0,
        min_chunk_tokens: int = MIN_CHUNK_TOKENS,
    ) -> None:
        self.ordering = ordering
        self.chunk_tokens = int(chunk_tokens)
        self.min_chunk_tokens = max(1, min(int(min_chunk_tokens), self.chunk_tokens))
        # 0: the engine's limit, read at each step's start (`max_seqs` is then the one used)
        self.max_seqs_given = int(max_seqs)
        self.max_seqs = self.max_seqs_given or MAX_SEQS
        self.kv_margin = float(kv_margin)
        self.seed = int(seed)
        self.name = f"seer-scheduler-{ordering}"
        self._rng = random.Random(seed)
        self._groups: dict[int, GroupContext] = {}
        self._group_of: dict[RequestId, int] = {}
        self._loads: list[WorkerLoad] = []
        self._queue: list[tuple[float, int, RequestId]] = []  # fifo/oracle/speculative heap
        self._rest: dict[int, set[RequestId]] = {}  # context: group -> waiting non-speculative
        self._lfs: list[tuple[int, int, float, int]] = []  # (-estimate, served chunks, random, group)
        self._generated: dict[RequestId, int] = {}
        self._caps: list[int] = []
        # Equal KV capacities (the usual cluster): the least-loaded worker comes off a heap
        # of (reserved share, running, worker, reserved) with stale entries skipped, instead
        # of a scan of every worker per dispatch (which grew the step's cost with the
        # cluster squared). `_idle` holds the workers running nothing.
        self._uniform = False
        self._free: list[tuple[float, int, WorkerId, int]] = []
        self._idle: set[WorkerId] = set()
        self._window = 0

    # ------------------------------------------------------------------------ events
    def on_event(self, event: Event, view: ClusterView) -> list[Action]:
        if isinstance(event, StepStarted):
            self._start(event.requests, view)
        elif isinstance(event, ChunkFinished):
            self._release(event.request, event.worker, event.generated)
            self._enqueue(event.request, view)
        elif isinstance(event, RequestFinished):
            self._groups[self._group_of[event.request]].observe_finish(event.length)
            self._release(event.request, event.worker, event.length)
        else:
            return []
        return self._dispatch(view)

    def _start(self, requests: Sequence[RequestId], view: ClusterView) -> None:
        self._groups, self._group_of, self._rest, self._queue, self._lfs = {}, {}, {}, [], []
        self._generated = {}
        self.max_seqs = self.max_seqs_given or view.info.max_num_seqs
        self._loads = [WorkerLoad() for _ in range(view.num_workers)]
        self._caps = [view.worker(w).kv_capacity_tokens for w in range(view.num_workers)]
        # what each sequence holds besides its context (sliding-window layers): reserved too
        self._window = view.worker(0).kv_window_tokens if view.num_workers else 0
        self._uniform = len(set(self._caps)) == 1
        self._free = [(0.0, 0, w, 0) for w in range(view.num_workers)] if self.max_seqs > 0 else []
        self._idle = set(range(view.num_workers))
        for rid in requests:
            pid = view.request(rid).prompt_id
            grp = self._groups.get(pid)
            if grp is None:
                budget = view.request(rid).max_tokens
                grp = self._groups[pid] = GroupContext(members=[], speculative=rid, budget=budget)
            grp.members.append(rid)
            self._group_of[rid] = pid
        for rid in requests:
            self._enqueue(rid, view)

    def _release(self, rid: RequestId, worker: WorkerId, generated: int) -> None:
        load = self._loads[worker]
        load.reserved -= load.by_request.pop(rid, 0)
        load.running -= 1
        self._loaded(worker)
        grp = self._groups[self._group_of[rid]]
        grp.served += generated - self._generated.get(rid, 0)
        self._generated[rid] = generated
        self._push_group(self._group_of[rid])

    # ---------------------------------------------------------------------- ordering
    def _enqueue(self, rid: RequestId, view: ClusterView) -> None:
        if self.ordering == "fifo":
            heapq.heappush(self._queue, (float(rid), rid, rid))
        elif self.ordering == "oracle":
            heapq.heappush(self._queue, (-float(view.oracle_length(rid)), rid, rid))
        else:
            pid = self._group_of[rid]
            if self._groups[pid].speculative == rid:  # SFS: smallest generated first
                heapq.heappush(self._queue, (float(self._generated.get(rid, 0)), rid, rid))
            else:
                self._rest.setdefault(pid, set()).add(rid)
                self._push_group(pid)

    def _peek(self, view: ClusterView) -> tuple[RequestId, float] | None:
        """The next request by the ordering, and its Assign priority."""
        if self._queue:
            rid = self._queue[0][2]
            spec = self.ordering == "context"
            return rid, SPEC_PRIORITY if spec else 0.0
        if not self._rest:
            return None
        pid = self._pick_group()
        return min(self._rest[pid]), 0.0

    def _lfs_key(self, pid: int) -> tuple[int, int]:
        grp = self._groups[pid]
        return -self._estimate(pid), grp.served // self.chunk_tokens

    def _push_group(self, pid: int) -> None:
        """(Re-)rank a group with waiting requests; stale heap entries are skipped on pick."""
        if self.ordering == "context" and pid in self._rest:
            heapq.heappush(self._lfs, (*self._lfs_key(pid), self._rng.random(), pid))

    def _pick_group(self) -> int:
        """Approximate LFS over groups with waiting requests (Alg. 1 PICKLFS + §4.3 hedge):
        highest estimate, then fewest chunks served, then at random."""
        while True:
            neg_est, served, _, pid = self._lfs[0]
            if pid in self._rest and (neg_est, served) == self._lfs_key(pid):
                return pid
            heapq.heappop(self._lfs)

    def _estimate(self, pid: int) -> int:
        grp = self._groups[pid]
        return grp.budget if grp.estimate is None else grp.estimate

    def _pop(self, rid: RequestId) -> None:
        if self._queue and self._queue[0][2] == rid:
            heapq.heappop(self._queue)
            return
        pid = self._group_of[rid]
        waiting = self._rest[pid]
        waiting.discard(rid)
        if not waiting:
            del self._rest[pid]

    # ---------------------------------------------------------------------- dispatch
    def _dispatch(self, view: ClusterView) -> list[Action]:
        """Alg. 1, repeated until the buffer is empty or the next request fits nowhere. A
        chunk shrinks to the KV budget left on the chosen worker (never below
        `min_chunk_tokens`), so budgets fill without any worker ever overflowing."""
        out: list[Action] = []
        while True:
            nxt = self._peek(view)
            if nxt is None:
                break
            rid, priority = nxt
            req = view.request(rid)
            assert req.state == "unassigned", f"buffer holds request {rid} in state {req.state}"
            ctx = req.prompt_len + req.generated + self._window
            full = min(self.chunk_tokens, req.max_tokens - req.generated)
            worker = self._select_worker(ctx + min(full, self.min_chunk_tokens))
            if worker is None:
                break
            load = self._loads[worker]
            room = int(self._caps[worker] * (1.0 - self.kv_margin)) - load.reserved - ctx
            chunk = max(1, min(full, room)) if load.running else full
            self._pop(rid)
            load.reserved += ctx + chunk
            load.running += 1
            load.by_request[rid] = ctx + chunk
            self._loaded(worker)
            out.append(Assign(request=rid, worker=worker, max_tokens=chunk, priority=priority))
        return out

    def _loaded(self, w: WorkerId) -> None:
        """Worker `w`'s load changed: rank it afresh (its older heap entries go stale)."""
        load = self._loads[w]
        if load.running < self.max_seqs:
            heapq.heappush(self._free, (load.reserved / self._caps[w], load.running, w, load.reserved))
        if load.running == 0:
            self._idle.add(w)
        else:
            self._idle.discard(w)

    def _select_worker(self, need: int) -> WorkerId | None:
        """Least-loaded worker (reserved KV share, then concurrency) that fits `need`; an
        idle worker takes a chunk larger than any budget rather than none taking it."""
        if not self._uniform:
            return self._scan_workers(need)
        free = self._free
        while free:
            _, running, w, reserved = free[0]
            load = self._loads[w]
            if load.running == running and load.reserved == reserved:
                break
            heapq.heappop(free)
        if not free:
            return None
        w = free[0][2]
        load = self._loads[w]
        if load.reserved + need <= self._caps[w] * (1.0 - self.kv_margin) or load.running == 0:
            return w
        # Equal capacities: every other worker with room has reserved at least as much, so
        # none fits; only an idle one may still take the chunk (the least loaded of them).
        idle = [(self._loads[i].reserved / self._caps[i], i) for i in self._idle]
        return min(idle)[1] if idle else None

    def _scan_workers(self, need: int) -> WorkerId | None:
        """`_select_worker` by a scan of every worker (unequal KV capacities)."""
        best, best_key = None, None
        for w, load in enumerate(self._loads):
            budget = self._caps[w] * (1.0 - self.kv_margin)
            fits = load.reserved + need <= budget or load.running == 0
            if load.running >= self.max_seqs or not fits:
                continue
            key = (load.reserved / self._caps[w], load.running, w)
            if best_key is None or key < best_key:
                best, best_key = w, key
        return best


@dataclass(frozen=True)
class SchedulerParams(PolicyParams):
    """The scheduler's parameters, shared by the policies built on it (`seer`, `composite`)."""

    chunk_tokens: Annotated[int, Param(Int(1, 1 << 24), "tokens per dispatched chunk (§4.2: 8K)")] = (
        CHUNK_TOKENS
    )
    min_chunk_tokens: Annotated[
        int, Param(Int(1, 1 << 24), "smallest chunk a KV budget may shrink one to")
    ] = MIN_CHUNK_TOKENS
    max_seqs: Annotated[
        int, Param(Int(0, 1 << 16), "concurrent requests per worker (0: the engine's max_num_seqs)")
    ] = 0
    kv_margin: Annotated[
        float,
        Param(Float(-1.0, 1.0, lo_open=True, hi_open=True), "share of each worker's KV cache kept free"),
    ] = KV_MARGIN
    seed: Annotated[int, Param(Int(), "seed of the least-served tie-break among equal estimates")] = 0

    def scheduler(self, ordering: Ordering) -> SeerScheduler:
        """The scheduler part with these parameters."""
        return SeerScheduler(
            ordering, self.chunk_tokens, self.max_seqs, self.kv_margin, self.seed, self.min_chunk_tokens
        )
