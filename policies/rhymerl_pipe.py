"""RhymeRL HistoPipe (History Rhymes, arXiv:2508.18588 §6): ranking groups from the previous
epoch's lengths, alternating across steps, outlier migration, two-tier worker allocation.

- Ranking (§6.2): prompts sorted by the median of their last occurrence's response lengths
  and cut into `ranking_groups` equal groups. Step s (0-based; the paper counts from 1)
  lays the groups out over workers 0..W-1 shortest-first when s is even (the paper's odd
  steps) and longest-first when s is odd, so a worker that drew short prompts in one step
  draws long ones in the next: with the one-step off-policy pipeline (rollout workers start
  the next step on their own, §4.2), the two steps complement each other. Without history
  (first epoch) the placement is veRL's.
- Migration (§6.3): once at most `alpha` (10%) of a ranking group's requests are
  unfinished, an unfinished one that generated more than beta x the group's longest
  historical response is an outlier. beta is the 75th percentile over prompts of the
  growth of the median length between their last two occurrences (at least 1.1). An
  outlier of the shorter half of the groups moves (KV recomputed, tokens kept) to the
  least-busy worker of a longer group still running; otherwise it is deferred to the next
  step (`Defer`).
- Two-tier (§6.4, Fig. 12): workers per ranking group by binary search on the slope d of
  target completion times t0 + i d (i = 0 the longest group, whose time on MAX_WKS
  workers is t0: the reading under which long groups get the extra workers, as §6.4
  says), each group taking the fewest workers that meet its target, with tau(group,
  workers) predicted from the executor's cost model over the group's historical length
  distribution (the paper looks tau up in a profiled table of the group's mean length;
  the distribution keeps the within-group tail, which the mean hides). Workers the search
  leaves over go to the groups predicted slowest.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from simctl.policies.contract import (
    Action,
    Assign,
    Capability,
    ClusterView,
    Defer,
    Event,
    Migrate,
    Policy,
    RequestFinished,
    RequestId,
    StepStarted,
    Tick,
    WorkerId,
)
from simctl.policies.placement import contiguous_chunks

RANKING_GROUPS = 16  # §7.2.3: 16 ranking groups for math models
ALPHA = 0.10  # §6.3
BETA_MIN = 1.1  # §6.3
TAU_POINTS = 48  # integration points of the predicted group time
MIGRATION_TICK = 256  # decode iterations between outlier checks
# Fig. 12's MAX_WKS, which the paper leaves open: a ranking group takes at most twice its
# fair share of workers (the longest group, which sets t0, takes exactly that).
MAX_SHARE = 2.0


def median_length(lengths: Sequence[int]) -> float:
    return float(statistics.median(lengths)) if lengths else 0.0


def ranking_groups(prompts: Sequence[int], medians: Sequence[float], n_groups: int) -> list[list[int]]:
    """Prompts sorted by historical median length (ties: prompt id), cut into `n_groups`
    contiguous groups of near-equal size, shortest group first.

    >>> ranking_groups([7, 8, 9, 10], [30.0, 10.0, 20.0, 40.0], 2)
    [[8, 9], [7, 10]]
    """
    order = sorted(range(len(prompts)), key=lambda i: (medians[i], prompts[i]))
    n_groups = max(1, min(n_groups, len(prompts)))
    bins = contiguous_chunks(len(order), n_groups)
    out: list[list[int]] = [[] for _ in range(n_groups)]
    for b, i in zip(bins, order, strict=True):
        out[b].append(prompts[i])
    return out


def ascending(step: int) -> bool:
    """Shortest group on worker 0 in the paper's odd steps (our even, 0-based, steps)."""
    return step % 2 == 0


def growth_beta(histories: Sequence[Sequence[Sequence[int]]], floor: float = BETA_MIN) -> float:
    """75th percentile of per-prompt growth of the median length between its last two
    occurrences; `floor` when that is lower or unknown.

    >>> growth_beta([[[10], [12]], [[10], [10]], [[10], [20]], [[10], [30]]])
    2.25
    """
    rates = sorted(
        median_length(h[-1]) / median_length(h[-2])
        for h in histories
        if len(h) >= 2 and median_length(h[-2]) > 0
    )
    if not rates:
        return floor
    q = statistics.quantiles(rates, n=4, method="inclusive")[2] if len(rates) > 1 else rates[0]
    return max(floor, q)


def plan_allocation(
    tau: Callable[[int, int], float],
    n_groups: int,
    workers: int,
    t0_floor: float = 0.0,
    min_wks: int = 1,
    max_wks: int | None = None,
    precision: float = 1e-3,
) -> list[int]:
    """Fig. 12: workers per ranking group, groups given longest first, so that predicted
    completion times rise linearly, t(i) = t0 + i d, with the smallest feasible slope d;
    t0 is the longest group's time on `max_wks` workers (at least `t0_floor`, the last
    training time). `tau(i, k)` predicts group i's time on k workers (non-increasing in
    k); `precision` is relative to the initial d range. Spare workers go to the groups
    predicted slowest.

    >>> plan_allocation(lambda i, k: (4.0 - 3.0 * i) / k, 2, 5, max_wks=4)
    [4, 1]
    """
    assert workers >= n_groups * min_wks, "fewer workers than ranking groups"
    top = workers - (n_groups - 1) * min_wks
    max_wks = min(max_wks or top, top)
    if n_groups == 1:
        return [workers]
    t0 = max(tau(0, max_wks), t0_floor)

    def cal_wks(d: float) -> list[int] | None:
        plan = []
        for i in range(n_groups):
            target = t0 + i * d
            k = next((k for k in range(min_wks, max_wks + 1) if tau(i, k) <= target), None)
            if k is None:
                return None
            plan.append(k)
        return plan

    def feasible(plan: list[int] | None) -> bool:
        return plan is not None and sum(plan) <= workers

    lo = 0.0
    hi = max((tau(n_groups - 1, min_wks) - t0) / (n_groups - 1), 0.0)
    best = cal_wks(hi)
    while not feasible(best):  # tau need not fall with i: widen until every group fits
        hi = 2 * hi + 1e-6
        best = cal_wks(hi)
        if hi > 1e12:
            return [workers // n_groups + (i < workers % n_groups) for i in range(n_groups)]
    eps = precision * max(hi, 1e-9)
    while hi - lo > eps:
        mid = (lo + hi) / 2
        plan = cal_wks(mid)
        if feasible(plan):
            best, hi = plan, mid
        else:
            lo = mid
    assert best is not None
    for _ in range(workers - sum(best)):
        open_ = [g for g in range(n_groups) if best[g] < max_wks]
        if not open_:
            break
        g = max(open_, key=lambda i: (tau(i, best[i]), -i))
        best[g] += 1
    return best


def group_time(view: ClusterView, lengths: Sequence[int], prompt_len: float, workers: int) -> float:
    """Predicted seconds for `workers` data-parallel workers to decode responses of the
    given lengths: the batch drains as responses end (integrated over TAU_POINTS steps)."""
    if not lengths:
        return 0.0
    lens = sorted(lengths)
    top = lens[-1]
    total = 0.0
    step = max(1.0, top / TAU_POINTS)
    t, i = 0.0, 0
    while t < top:
        while i < len(lens) and lens[i] <= t:
            i += 1
        alive = (len(lens) - i) / workers
        if alive <= 0:
            break
        n = max(alive, 1.0)
        ctx = n * (prompt_len + t + step / 2)
        total += step * float(view.cost(n, n, ctx))
        t += step
    return total


@dataclass
class RankingGroup:
    prompts: list[int]
    requests: list[RequestId] = field(default_factory=list)
    workers: list[WorkerId] = field(default_factory=list)
    threshold: float = float("inf")  # generated length beyond which a tail request is an outlier
    unfinished: int = 0
    rank: int = 0  # 0 = shortest
    # unfinished requests in placement order (the outlier scan reads only these)
    open: dict[RequestId, None] = field(default_factory=dict)


class HistoPipe(Policy):
    """Placement by historical length ranking, with migration and two-tier allocation."""

    requires = frozenset({Capability.PLACE, Capability.MIGRATE, Capability.DEFER})

    def __init__(
        self,
        ranking_groups: int = RANKING_GROUPS,
        two_tier: bool = False,
        migrate: bool = True,
        alpha: float = ALPHA,
        beta_min: float = BETA_MIN,
        inter_step: bool = True,
        t_train_s: float = 0.0,
        tick_iterations: int = MIGRATION_TICK,
        max_share: float = MAX_SHARE,
    ) -> None:
        self.n_groups = int(ranking_groups)
        self.two_tier = bool(two_tier)
        self.migrate = bool(migrate)
        self.alpha = float(alpha)
        self.beta_min = float(beta_min)
        self.inter_step = bool(inter_step)
        self.t_train_s = float(t_train_s)
        self.max_share = float(max_share)
        self.tick_iterations = int(tick_iterations) if migrate else None
        self.name = "histopipe" + ("-2tier" if two_tier else "")
        self._groups: list[RankingGroup] = []
        self._group_of: dict[RequestId, int] = {}
        self._worker_group: dict[WorkerId, int] = {}
        self._migrated: set[RequestId] = set()
        self.allocation: list[int] = []  # workers per ranking group, last step (reports)
        self.beta = beta_min
        self.migrations = {"intra": 0, "inter": 0}

    # ------------------------------------------------------------------------- events
    def on_event(self, event: Event, view: ClusterView) -> list[Action]:
        if isinstance(event, StepStarted):
            return self._place(event.step, event.requests, view)
        if not self._groups or not self.migrate:
            return []
        if isinstance(event, RequestFinished):
            g = self._group_of.get(event.request)
            if g is None:
                return []
            self._groups[g].unfinished -= 1
            self._groups[g].open.pop(event.request, None)
            return self._outliers(g, view)
        if isinstance(event, Tick):
            g = self._worker_group.get(event.worker)
            return [] if g is None else self._outliers(g, view)
        return []

    def wants_ticks(self, worker: WorkerId, view: ClusterView) -> bool:
        """Ticks look for outliers only on the workers of a ranking group (assigned at
        StepStarted, fixed for the step)."""
        return worker in self._worker_group

    # ---------------------------------------------------------------------- placement
    def _place(self, step: int, requests: Sequence[RequestId], view: ClusterView) -> list[Action]:
        self._groups, self._group_of, self._worker_group, self._migrated = [], {}, {}, set()
        by_prompt: dict[int, list[RequestId]] = {}
        for rid in requests:
            by_prompt.setdefault(view.request(rid).prompt_id, []).append(rid)
        prompts = list(by_prompt)
        hist = {p: view.history(p).lengths for p in prompts}
        if any(not hist[p] for p in prompts):
            return self._static(by_prompt, view)  # first epoch: no history (§6.2)
        medians = [median_length(hist[p][-1]) for p in prompts]
        n_groups = min(self.n_groups, view.num_workers, len(prompts))
        cut = ranking_groups(prompts, medians, n_groups)
        self.beta = growth_beta([hist[p] for p in prompts], self.beta_min)
        counts = self._allocation(cut, hist, by_prompt, view)
        self.allocation = counts
        layout = list(range(n_groups)) if ascending(step) else list(range(n_groups - 1, -1, -1))
        out: list[Action] = []
        first = 0
        for g in layout:
            group = RankingGroup(prompts=cut[g], rank=g)
            group.workers = list(range(first, first + counts[g]))
            first += counts[g]
            longest = max(max(hist[p][-1]) for p in cut[g])
            group.threshold = self.beta * longest
            bins = contiguous_chunks(len(cut[g]), len(group.workers))
            for b, p in zip(bins, cut[g], strict=True):
                for rid in by_prompt[p]:
                    out.append(Assign(request=rid, worker=group.workers[b]))
                    group.requests.append(rid)
            group.unfinished = len(group.requests)
            group.open = dict.fromkeys(group.requests)
            idx = len(self._groups)
            self._groups.append(group)
            for rid in group.requests:
                self._group_of[rid] = idx
            for w in group.workers:
                self._worker_group[w] = idx
        return out

    def _static(self, by_prompt: dict[int, list[RequestId]], view: ClusterView) -> list[Action]:
        bins = contiguous_chunks(len(by_prompt), view.num_workers)
        pairs = zip(bins, by_prompt.values(), strict=True)
        return [Assign(request=r, worker=w) for w, rids in pairs for r in rids]

    def _allocation(
        self,
        cut: list[list[int]],
        hist: dict[int, tuple[tuple[int, ...], ...]],
        by_prompt: dict[int, list[RequestId]],
        view: ClusterView,
    ) -> list[int]:
        n, workers = len(cut), view.num_workers
        if not self.two_tier:
            return [workers // n + (i < workers % n) for i in range(n)]
        lengths = [[x for p in grp for x in hist[p][-1]] for grp in cut]
        prompt_len = [statistics.fmean(view.request(by_prompt[p][0]).prompt_len for p in grp) for grp in cut]
        memo: dict[tuple[int, int], float] = {}

        def tau(i: int, k: int) -> float:  # i counts from the longest group
            g = n - 1 - i
            if (g, k) not in memo:
                memo[(g, k)] = group_time(view, lengths[g], prompt_len[g], k)
            return memo[(g, k)]

        fair = -(-workers // n)
        plan = plan_allocation(
            tau, n, workers, t0_floor=self.t_train_s, max_wks=max(1, round(self.max_share * fair))
        )
        return plan[::-1]

    # ---------------------------------------------------------------------- migration
    def _outliers(self, g: int, view: ClusterView) -> list[Action]:
        group = self._groups[g]
        if group.unfinished > self.alpha * len(group.requests) or group.unfinished <= 0:
            return []
        out: list[Action] = []
        for rid in group.open:
            if rid in self._migrated:
                continue
            req = view.request(rid)
            if req.state not in ("waiting", "running") or req.generated <= group.threshold:
                continue
            target = self._intra_target(group, view)
            self._migrated.add(rid)
            if target is not None:
                out.append(Migrate(request=rid, worker=target, transfer_kv=False))
                self.migrations["intra"] += 1
            elif self.inter_step:
                assert req.worker is not None
                if req.state == "running":  # leave the batch first, then finish next step
                    out.append(Migrate(request=rid, worker=req.worker, transfer_kv=False))
                out.append(Defer(request=rid))
                self.migrations["inter"] += 1
        return out

    def _intra_target(self, group: RankingGroup, view: ClusterView) -> WorkerId | None:
        """Least-busy worker of a longer ranking group still running, for outliers of the
        shorter half; None sends the outlier to the next step."""
        if group.rank >= len(self._groups) / 2:
            return None
        best, best_key = None, None
        for other in self._groups:
            if other.rank <= group.rank or other.unfinished <= 0:
                continue
            for w in other.workers:
                wv = view.worker(w)
                key = (wv.running + wv.waiting, wv.kv_used_tokens, w)
                if best_key is None or key < best_key:
                    best, best_key = w, key
        return best
