"""Best drafter per request: each request speculates with the draft method that gives it the
most tokens per second, learned while the step runs (a policy part for composed policies).

No single drafter wins everywhere: Seer's grouped suffix tree is nearly free and good when
a group's siblings share text, RhymeRL's history tree is better once the prompt has an
earlier epoch, a draft model costs GPU time but does not depend on either, and a
request's acceptance differs per method (SpecActor Fig. 7). This part picks per request.

Expected rate of request r with arm (method m, depth d, paths k) on a worker with batch b
and KV context c:

    rate(r, arm) = tau(p_eff(r, m, k), d) / T(arm),
    T(arm) = cost(b, b * (k*d + 1), c) + draft_cost(m, b*k, c*k, d)

(the iteration time if the whole batch ran the arm; `tau` is the i.i.d. acceptance length
of `seer_acceptance.expected_accept_len`). Plain decoding is 1 / cost(b, b, c). The depth
d comes from Seer's depth grid and so is chosen by concurrency exactly as Seer's adaptive
grouped SD does (`seer_spec`): deep drafts for a few requests, shallow or none for a full
batch. Multi-path (k = 2, 4) applies to the suffix tree only, with Seer Table 2's gain of
k paths over one at the group's references (`p_eff = p * ratio_k`).

Acceptance estimates (per-token probability p of a chain draft):
- a per-method pooled estimate, kept across steps: the prior (`PRIORS`: SpecActor's batch
  means for draft models, RhymeRL's 65% for history, Seer Table 2 at the group's G - 1
  references for the suffix tree) worth `pool_prior_iterations` verify iterations, plus
  every observation;
- per request and method, the request's own observations on top of the pooled estimate
  worth `request_prior_iterations`: a request that drafts badly with its method falls
  back to the pooled value of the others and switches, a method it never ran keeps the
  pooled value ("prior until enough drafted").
Observations come from what the view reports per request (drafted / accepted since the
last read, converted to p at the depth the request drafted with; a request is read before
its setting changes, so evidence is never converted at the wrong depth). Evidence fades
over `pool_horizon` / `request_horizon` verify iterations: acceptance drifts within a step
(a group's suffix tree grows as its siblings generate), and a request's evidence for a
method it left fades back to the pooled value, so it can return to it. Without fading the
early, sparse-tree observations held the estimates down in the tail, where speculation
matters most (a 3% longer rollout than Seer's fixed Table 2 prior on seer-moonlight-64k).

Worker configuration (at every tick of a worker and whenever a request leaves it):
- batch above `per_request_batch` (a full batch: speculation rarely pays and per-request
  settings would be hundreds of actions): one arm for the worker from the pooled
  estimates, or plain decoding;
- otherwise every request on the worker gets its best arm. A draft model's step is paid
  by the whole batch however few requests use it, so the assignment is then checked
  against the worker's real mixed-batch time (verify tokens summed over requests, one
  draft pass per method used) and model methods are dropped greedily while that raises
  the worker's total tokens per second. The most common choice becomes the worker's
  setting, the others per-request overrides (an executor applies a request's own setting
  over its worker's); a request that prefers plain decoding on a worker that speculates
  is told `SPEC_PLAIN`.

Which requests run on a worker comes from the placements this part observes (`observe`,
fed by `policies.composite.Composite` with every action of the composed policy); without
that feed it configures workers only. History drafting is offered only for prompts with an
earlier epoch (`view.history`), as HistoSpec does. Which methods the executor can draft
with is `methods` less what `view.draft_methods` lacks (a trace needs an `accept_<m>`
column per method; the vLLM backend has n-gram and suffix drafters only).
`fixed` restricts the requests' own speculation to one method while the ladder (the
Fastest-of-N ranking, `ladder`) still spans all methods.

Not modelled: decoupled drafting (SpecActor's Alg. 1/2), AIMD windows for history (the
depth follows the batch instead), tree drafting for model drafters.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from itertools import pairwise

from simctl.policies.contract import (
    SPEC_OFF,
    SPEC_PLAIN,
    Action,
    Assign,
    Capability,
    ChunkFinished,
    ClusterView,
    Defer,
    Event,
    Migrate,
    Policy,
    RequestFinished,
    RequestId,
    RequestView,
    SetSpec,
    SpecConfig,
    StepFinished,
    StepStarted,
    Tick,
    WorkerId,
)
from simctl.policies.fastest_of_n import Rung
from simctl.policies.rhymerl_spec import PREFIX_MAX, PREFIX_MIN
from simctl.policies.rhymerl_spec import PRIOR_ACCEPT as HISTORY_PRIOR
from simctl.policies.seer_acceptance import (
    TABLE2_DRAFT,
    expected_accept_len,
    per_token_acceptance,
    table2_tau,
)
from simctl.policies.seer_spec import DEPTHS, FETCH_ITERATIONS, PATHS
from simctl.policies.speactor import DEFAULT_PRIOR
from simctl.policies.suffix_tree import DraftRule

# The drafters the issue names: grouped suffix tree, history, a draft model (the 0.5B model,
# SpecActor's sweet spot, and EAGLE, the cheapest per draft token in the cost model).
DEFAULT_METHODS = ("suffix", "history", "draft_small", "eagle")
# w4_self: EfficientRollout Table 4, tau 5.18 at gamma 5.
PRIORS: dict[str, float] = {**DEFAULT_PRIOR, "history": HISTORY_PRIOR, "w4_self": 0.94}
MULTI_PATH = "suffix"  # the method drafted as Seer's multi-path tree
MODEL_FREE = frozenset({"suffix", "history", "ngram"})  # drafting costs (almost) no GPU time
PER_REQUEST_BATCH = 64
POOL_PRIOR_ITERATIONS = 256.0
REQUEST_PRIOR_ITERATIONS = 32.0
POOL_HORIZON = 8192.0  # verify iterations over which a method's pooled evidence fades
REQUEST_HORIZON = 512.0  # the same for one request's evidence
LADDER_CONTEXT = 8192  # tokens per request assumed when the ladder is asked without requests
P_MAX = 0.99


@dataclass(frozen=True)
class Arm:
    """One way to speculate at a worker's batch: method, depth, paths and its cost."""

    spec: SpecConfig
    time_s: float  # iteration time if the whole batch ran this arm
    ratio: float  # p_eff = p * ratio (multi-path gain; 1 for a chain)

    @property
    def method(self) -> str:
        assert self.spec.method is not None
        return self.spec.method

    def tokens(self, p: float) -> float:
        """Expected tokens per iteration for a request of chain acceptance p."""
        return expected_accept_len(min(P_MAX, p * self.ratio), self.spec.gamma)


BISECTION_STEPS = 16  # p_from_tau resolves p to 2**-16
_GRID = 1 << BISECTION_STEPS
_BLOCK = 256  # tau_table entries per block of p_from_tau's two-level search
# depth -> (every _BLOCK-th entry of the table, the table), see tau_table
_TAU_TABLES: dict[int, tuple[list[float], array[float]] | None] = {}


def p_from_tau(tau: float, depth: int) -> float:
    """Per-token acceptance with expected_accept_len(p, depth) == tau: the result of a
    16-step bisection (`p_from_tau_bisect`), found by a binary search of `tau_table`.

    Why this is the bisection's result exactly: the bisection only ever probes grid points
    k / 2**16 and keeps `lo` at the largest probed point with expected_accept_len below
    tau. Where expected_accept_len is non-decreasing over the grid (checked when the
    table is built), that predicate is monotone, so the bisection ends at lo = j / 2**16
    with j the number of grid points (0 < k < 2**16) below tau, and returns the midpoint
    (j + 1/2) / 2**16; `bisect_left` counts j directly, first among every _BLOCK-th entry
    (a short list that stays in the CPU cache), then within the one block that holds j.
    It runs for every request's evidence at every worker configuration, where the
    bisection's 16 power evaluations dominated, and one search of the whole table missed
    the cache at nearly every step."""
    tables = _TAU_TABLES.get(depth) or tau_table(depth)
    if tables is None:
        return p_from_tau_bisect(tau, depth)
    coarse, table = tables
    # tau = min(max(tau, 1.0), depth + 1.0), without the builtins' call overhead
    if tau < 1.0:
        tau = 1.0
    elif tau > depth + 1.0:
        tau = depth + 1.0
    # coarse[b - 1] = table[b * _BLOCK - 1] < tau <= coarse[b] = table[b * _BLOCK + _BLOCK - 1]
    lo = bisect_left(coarse, tau) * _BLOCK
    return (bisect_left(table, tau, lo, min(lo + _BLOCK - 1, len(table))) + 0.5) / _GRID


def p_from_tau_bisect(tau: float, depth: int) -> float:
    """The reference definition of `p_from_tau`: bisection over p in [0, 1]."""
    tau = min(max(tau, 1.0), depth + 1.0)
    lo, hi = 0.0, 1.0
    for _ in range(BISECTION_STEPS):
        mid = (lo + hi) / 2
        if expected_accept_len(mid, depth) < tau:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def tau_table(depth: int) -> tuple[list[float], array[float]] | None:
    """expected_accept_len(k / 2**16, depth) for k = 1 .. 2**16 - 1 (an array: 512 kB per
    depth), with every _BLOCK-th entry (table[_BLOCK - 1::_BLOCK]), built on first use
    (about 30 ms per depth); None for depths below 1 or where floating-point rounding
    makes the table decrease somewhere (p_from_tau then bisects: a search could differ)."""
    if depth in _TAU_TABLES:
        return _TAU_TABLES[depth]
    tables: tuple[list[float], array[float]] | None = None
    if depth >= 1:
        table = array("d", [expected_accept_len(k / _GRID, depth) for k in range(1, _GRID)])
        if all(a <= b for a, b in pairwise(table)):
            tables = (table[_BLOCK - 1 :: _BLOCK].tolist(), table)
    _TAU_TABLES[depth] = tables
    return tables


class BestDrafter(Policy):
    """Per-request draft method and per-batch depth (see the module docstring)."""

    requires = frozenset({Capability.SPEC_PER_WORKER, Capability.SPEC_PER_REQUEST})

    def __init__(
        self,
        methods: Sequence[str] | str = DEFAULT_METHODS,
        fixed: str | None = None,
        per_request_batch: int = PER_REQUEST_BATCH,
        multi_path: bool = True,
        pool_prior_iterations: float = POOL_PRIOR_ITERATIONS,
        request_prior_iterations: float = REQUEST_PRIOR_ITERATIONS,
        pool_horizon: float = POOL_HORIZON,
        request_horizon: float = REQUEST_HORIZON,
        tick_iterations: int = FETCH_ITERATIONS,
        prior: dict[str, float] | None = None,
    ) -> None:
        self.methods = tuple(methods.split("/")) if isinstance(methods, str) else tuple(methods)
        assert self.methods, "BestDrafter needs at least one draft method"
        assert fixed is None or fixed in self.methods, f"fixed method {fixed!r} not among {self.methods}"
        assert per_request_batch >= 0 and tick_iterations >= 1
        self.fixed = fixed
        self.per_request_batch = int(per_request_batch)
        self.multi_path = bool(multi_path)
        self.pool_prior_iterations = float(pool_prior_iterations)
        self.request_prior_iterations = float(request_prior_iterations)
        self.pool_horizon = float(pool_horizon)
        self.request_horizon = float(request_horizon)
        self.tick_iterations = int(tick_iterations)
        self.prior = {**PRIORS, **(prior or {})}
        self._prior_given = frozenset(prior or ())
        self.name = "best-drafter"
        self.draft_rules: dict[str, DraftRule] = {}
        if "suffix" in self.methods:
            self.draft_rules["suffix"] = DraftRule(source="group")
        if "history" in self.methods:  # HistoSpec's tree; the depth is ours (no AIMD)
            self.draft_rules["history"] = DraftRule(
                source="history", min_match=PREFIX_MIN, max_match=PREFIX_MAX, weight="reward"
            )
        self.pool: dict[str, list[float]] = {}  # method -> [iterations, p * iterations], all steps
        self._ratio: dict[int, float] = {1: 1.0}
        self._reset()

    def params(self) -> dict[str, object]:
        return {
            "methods": list(self.methods),
            "fixed": self.fixed,
            "per_request_batch": self.per_request_batch,
            "multi_path": self.multi_path,
            "pool_prior_iterations": self.pool_prior_iterations,
            "request_prior_iterations": self.request_prior_iterations,
            "pool_horizon": self.pool_horizon,
            "request_horizon": self.request_horizon,
            "tick_iterations": self.tick_iterations,
        }

    def _reset(self) -> None:
        self.members: dict[WorkerId, set[RequestId]] = {}
        self.where: dict[RequestId, WorkerId] = {}
        self.default: dict[WorkerId, SpecConfig] = {}  # worker -> its setting
        self.override: dict[RequestId, SpecConfig] = {}  # request -> its own setting
        self.own: dict[RequestId, dict[str, list[float]]] = {}  # request -> method -> evidence
        self._seen: dict[RequestId, RequestView] = {}  # request -> its view at the last read
        self._history: dict[int, bool] = {}  # prompt -> has an earlier epoch
        self._history_step = False
        self._available: frozenset[str] | None = None  # the executor's draft methods (None: all)
        self._arms: dict[tuple[int, float], list[Arm]] = {}
        self._arms_by_method: dict[tuple[int, float], dict[str, list[Arm]]] = {}  # key -> method ->
        self._verify_time: dict[tuple[int, float], dict[int, float]] = {}  # key -> verify tokens -> s
        self._plain: dict[tuple[int, float], float] = {}
        self._level_tokens: dict[tuple[str, int], list[float]] = {}  # (method, level) -> per arm
        # (key, method) -> acceptance level (p * 200, rounded) -> the method's best (arm, rate)
        self._best: dict[tuple[tuple[int, float], str], dict[int, tuple[Arm | None, float]]] = {}
        self._prompt: dict[RequestId, int] = {}
        # record's memos: (drafted, depth) -> (iterations, request and pool fading factors);
        # (drafted, accepted, depth) -> p_from_tau (kept per step: they only grow)
        self._fade: dict[tuple[int, int], tuple[float, float, float]] = {}
        self._chain_p: dict[tuple[int, int, int], float] = {}

    # ------------------------------------------------------------- estimates
    def pooled(self, method: str) -> float:
        """Pooled chain acceptance of a method: the prior plus every observation."""
        it, ps = self.pool.get(method, (0.0, 0.0))
        n0 = self.pool_prior_iterations
        return (ps + n0 * self.prior.get(method, 0.5)) / (it + n0)

    def acceptance(self, rid: RequestId, method: str) -> float:
        """A request's chain acceptance for a method: its own evidence over the pooled one."""
        return self._blend(rid, method, self.pooled(method))

    def _blend(self, rid: RequestId, method: str, pooled: float) -> float:
        it, ps = self.own.get(rid, {}).get(method, (0.0, 0.0))
        n0 = self.request_prior_iterations
        return (ps + n0 * pooled) / (it + n0)

    def record(
        self, rid: RequestId, method: str, depth: int, ratio: float, drafted: int, accepted: int
    ) -> None:
        """Evidence from `drafted` draft tokens at `depth` of which `accepted` were accepted."""
        if drafted <= 0 or depth <= 0:
            return
        iterations = drafted / depth
        p = min(P_MAX, p_from_tau(1.0 + accepted / iterations, depth) / ratio)
        # Older evidence fades as the request moves on (acceptance drifts: a grouped tree
        # grows with the siblings), for the methods it no longer runs as well, which thus
        # return to their pooled value.
        self._credit(
            rid,
            method,
            iterations,
            p,
            math.exp(-iterations / self.request_horizon),
            math.exp(-iterations / self.pool_horizon),
        )

    def _credit(
        self, rid: RequestId, method: str, iterations: float, p: float, keep: float, keep_pool: float
    ) -> None:
        """`record` once the evidence is converted: fade the request's evidence by `keep`
        and the pooled one by `keep_pool`, then add `iterations` at acceptance p."""
        own = self.own.get(rid)
        if own is None:
            own = self.own[rid] = {}
        for ev in own.values():
            ev[0] *= keep
            ev[1] *= keep
        mine = own.get(method)
        if mine is None:
            mine = own[method] = [0.0, 0.0]
        mine[0] += iterations
        mine[1] += p * iterations
        pool = self.pool.get(method)
        if pool is None:
            pool = self.pool[method] = [0.0, 0.0]
        pool[0] = pool[0] * keep_pool + iterations
        pool[1] = pool[1] * keep_pool + p * iterations

    def _observe_request(self, rid: RequestId, view: ClusterView, worker: WorkerId | None) -> None:
        """Credit what the request drafted since the last read to the arm it ran with."""
        self._observe((rid,), view, worker)

    def _observe(self, rids: Sequence[RequestId], view: ClusterView, worker: WorkerId | None) -> None:
        """`_observe_request` for each of `rids` (on `worker`), as one loop: configuring a
        worker reads every request on it. `record`'s conversion is memoised on the integers
        it is computed from: reads repeat the same few (drafted, depth) pairs (a tick is a
        fixed number of iterations) and often the same accepted count. The view of the last
        read is kept whole rather than unpacked into a new tuple."""
        seen, ratios, fade, chain_p, credit = self._seen, self._ratio, self._fade, self._chain_p, self._credit
        fallback = self.default.get(worker, SPEC_OFF) if worker is not None else SPEC_OFF
        for rid in rids:
            rv = view.request(rid)
            last = seen.get(rid)
            seen[rid] = rv
            if last is None:  # first read this step (a request's prompt never changes)
                self._prompt[rid] = rv.prompt_id
                drafted, accepted = rv.drafted_tokens, rv.accepted_tokens
            else:
                drafted = rv.drafted_tokens - last.drafted_tokens
                accepted = rv.accepted_tokens - last.accepted_tokens
            if drafted <= 0:  # nothing drafted since the last read: `record` ignores it
                continue
            spec = rv.spec
            if spec.plain:
                continue
            if not spec.enabled:  # the request runs with its worker's setting, if any
                spec = fallback
                if not spec.enabled:
                    continue
            method, depth = spec.method, spec.gamma
            assert method is not None  # (enabled, so depth > 0 too)
            converted = fade.get((drafted, depth))
            if converted is None:
                iterations = drafted / depth
                converted = fade[(drafted, depth)] = (
                    iterations,
                    math.exp(-iterations / self.request_horizon),
                    math.exp(-iterations / self.pool_horizon),
                )
            iterations, keep, keep_pool = converted
            q = chain_p.get((drafted, accepted, depth))
            if q is None:
                q = chain_p[(drafted, accepted, depth)] = p_from_tau(1.0 + accepted / iterations, depth)
            if method == MULTI_PATH:
                q /= ratios.get(spec.topk, 1.0)
            credit(rid, method, iterations, q if q < P_MAX else P_MAX, keep, keep_pool)

    def _allowed(self, prompt_id: int | None = None) -> tuple[str, ...]:
        out = []
        available = self._available
        for m in self.methods:
            if available is not None and m not in available:
                continue
            if m == "history":
                ok = self._history_step if prompt_id is None else self._history.get(prompt_id, False)
                if not ok:
                    continue
            out.append(m)
        return tuple(out)

    # ------------------------------------------------------------------ arms
    def _key(self, batch: int, context: float) -> tuple[int, float]:
        """The memo key of a worker state: batch and context to 2 significant digits."""
        ctx = max(context, 1.0)
        return batch, round(ctx, 1 - math.floor(math.log10(ctx)))

    def arms(self, view: ClusterView, batch: int, context: float) -> list[Arm]:
        """Every (method, depth, paths) at this batch and context, with its iteration time."""
        key = self._key(batch, context)
        got = self._arms.get(key)
        if got is None:
            got = self._arms[key] = [a for m in self.methods for a in self._method_arms(view, key, m)]
        return got

    def _method_arms(self, view: ClusterView, key: tuple[int, float], method: str) -> list[Arm]:
        """One method's arms at a key, built when first asked for: a decision needs only the
        allowed methods' (no history without an earlier epoch, one method when `fixed`), and
        every arm costs the cost model a call or two. A method's arms have the same depths,
        paths and ratios at every key, in the same order (`_level_tokens` relies on it)."""
        by_method = self._arms_by_method.get(key)
        if by_method is None:
            by_method = self._arms_by_method[key] = {}
        got = by_method.get(method)
        if got is not None:
            return got
        b, ctx = key
        verify = self._verify_time.setdefault(key, {})  # tokens verified per request -> seconds
        out = []
        if method in self.methods:
            for k in PATHS if self.multi_path and method == MULTI_PATH else (1,):
                for d in DEPTHS:
                    if k * d not in verify:
                        verify[k * d] = view.cost(b, b * (k * d + 1), ctx)
                    t = verify[k * d] + view.draft_cost(method, b * k, ctx * k, d)
                    spec = SpecConfig(method=method, gamma=d, topk=k, verify_tokens=k * d if k > 1 else 0)
                    out.append(Arm(spec, t, self._ratio.get(k, 1.0) if method == MULTI_PATH else 1.0))
        by_method[method] = out
        return out

    def plain_time(self, view: ClusterView, batch: int, context: float) -> float:
        return self._plain_at(view, self._key(batch, context))

    def _plain_at(self, view: ClusterView, key: tuple[int, float]) -> float:
        got = self._plain.get(key)
        if got is None:
            got = self._plain[key] = view.cost(key[0], key[0], key[1])
        return got

    def best_arm(
        self, view: ClusterView, batch: int, context: float, p_of: dict[str, float]
    ) -> tuple[Arm | None, float]:
        """(arm, rate) maximising tau / T over the methods of `p_of` (their acceptance).
        Memoised per method at acceptance rounded to 0.005, which also keeps choices from
        flickering with noise in the estimates."""
        return self._best_at(view, self._key(batch, context), p_of)

    def _best_at(
        self, view: ClusterView, key: tuple[int, float], p_of: dict[str, float]
    ) -> tuple[Arm | None, float]:
        best, best_rate = None, -1.0
        for m, p in p_of.items():
            arm, rate = self._method_best(view, key, m, round(p * 200))
            if rate > best_rate * (1 + 1e-9):
                best, best_rate = arm, rate
        return best, best_rate

    def _method_best(
        self, view: ClusterView, key: tuple[int, float], method: str, level: int
    ) -> tuple[Arm | None, float]:
        """The method's best (arm, rate) at acceptance level / 200 (memoised)."""
        table = self._best.setdefault((key, method), {})
        got = table.get(level)
        if got is None:
            got = table[level] = self._best_of_method(view, key, method, level)
        return got

    def _best_of_method(
        self, view: ClusterView, key: tuple[int, float], method: str, level: int
    ) -> tuple[Arm | None, float]:
        """The method's best (arm, rate) at acceptance level / 200. Its arms' tokens per
        iteration depend on the level only, not on the key: computed once per level."""
        arms = self._method_arms(view, key, method)
        tokens = self._level_tokens.get((method, level))
        if tokens is None:
            p = level / 200
            tokens = self._level_tokens[(method, level)] = [arm.tokens(p) for arm in arms]
        got: tuple[Arm | None, float] = (None, -1.0)
        for arm, tok in zip(arms, tokens, strict=True):
            rate = tok / arm.time_s
            if rate > got[1] * (1 + 1e-9):
                got = (arm, rate)
        return got

    def ladder(self, view: ClusterView, requests: Sequence[RequestId]) -> list[Rung]:
        """Methods ranked by pooled rate at the batch a Fastest-of-N worker would run
        (one replica per request in flight, at most 32), each with its best arm."""
        b = max(1, min(len(requests), 32))
        ctx = float(LADDER_CONTEXT)
        if requests:
            views = [view.request(r) for r in requests[:64]]
            ctx = sum(rv.prompt_len + rv.generated for rv in views) / len(views)
        ranked = []
        for m in self._allowed():
            arm, rate = self.best_arm(view, b, b * ctx, {m: self.pooled(m)})
            if arm is not None:
                ranked.append((-rate, m, arm.spec))
        return [Rung(m, spec) for _, m, spec in sorted(ranked)]

    # ---------------------------------------------------------------- events
    def observe(self, actions: Sequence[Action]) -> None:
        """Placements made by the composed policy (any part): who runs where."""
        for a in actions:
            if isinstance(a, Assign | Migrate):
                old = self.where.get(a.request)
                if old is not None:
                    self.members.get(old, set()).discard(a.request)
                self.where[a.request] = a.worker
                self.members.setdefault(a.worker, set()).add(a.request)
            elif isinstance(a, Defer):
                old = self.where.pop(a.request, None)
                if old is not None:
                    self.members.get(old, set()).discard(a.request)

    def _leave(self, rid: RequestId, worker: WorkerId, finished: bool) -> None:
        self.members.get(worker, set()).discard(rid)
        if finished or self.where.get(rid) == worker:
            old = self.where.pop(rid, None)
            if finished and old is not None and old != worker:
                self.members.get(old, set()).discard(rid)

    def on_event(self, event: Event, view: ClusterView) -> list[Action]:
        if isinstance(event, StepStarted):
            return self._start(event.requests, view)
        if isinstance(event, ChunkFinished | RequestFinished):
            self._observe_request(event.request, view, event.worker)
            self._leave(event.request, event.worker, isinstance(event, RequestFinished))
            return self.configure(event.worker, view)
        if isinstance(event, Tick):
            return self.configure(event.worker, view)
        if isinstance(event, StepFinished):  # every request is done: no placement is left
            self.members, self.where = {}, {}
        return []

    def _start(self, requests: Sequence[RequestId], view: ClusterView) -> list[Action]:
        members, where = self.members, self.where  # placements observed before this event
        self._reset()
        self.members, self.where = members, where
        self._available = view.draft_methods
        refs = max(0, view.info.group_size - 1)
        chain = table2_tau(refs, 1)
        self._ratio = {
            k: per_token_acceptance(table2_tau(refs, k), TABLE2_DRAFT)
            / per_token_acceptance(chain, TABLE2_DRAFT)
            for k in PATHS
        }
        if "suffix" not in self._prior_given:  # Seer Table 2 at the group's references
            self.prior["suffix"] = per_token_acceptance(chain, TABLE2_DRAFT)
        with_history = 0
        for rid in requests:
            pid = view.request(rid).prompt_id
            if pid not in self._history:
                self._history[pid] = bool(view.history(pid).lengths)
            with_history += self._history[pid]
        self._history_step = with_history * 2 >= max(1, len(requests))
        out: list[Action] = []
        for w in sorted(self.members):
            rids = self.members[w]
            if rids:
                ctx = sum(view.request(r).prompt_len + view.request(r).generated for r in rids)
                out += self.configure(w, view, len(rids), float(ctx))
        return out

    # ------------------------------------------------------------- configure
    def configure(
        self, worker: WorkerId, view: ClusterView, batch: int | None = None, context: float | None = None
    ) -> list[Action]:
        """Choose the worker's setting and its requests' overrides (module docstring).

        This runs at every tick of every worker, so the per-request work is done once per
        call (each request's best arm per method, `_options`) and the greedy drop loop
        works on those (`_Assignment`)."""
        wv = view.worker(worker)
        b = batch if batch is not None else wv.running + wv.waiting
        if b <= 0:
            return []
        ctx = context if context is not None else float(max(wv.kv_used_tokens, b))
        key = self._key(b, ctx)
        plain = self._plain_at(view, key)
        members = self.members.get(worker, ())
        if b > self.per_request_batch or not members:
            return self._set_worker(view, worker, self._worker_arm(view, key, plain), members)
        rids = sorted(members)
        self._observe(rids, view, worker)
        pooled = {m: self.pooled(m) for m in self._allowed() if self.fixed is None or m == self.fixed}
        # (`_allowed` leaves out what the executor cannot draft with, `fixed` included)
        trial = _Assignment(view, b, ctx, self._options(view, key, rids, pooled), (1 + 1e-9) / plain)
        # Greedy: while model drafters are in use, drop the one whose removal most raises the
        # worker's rate, if it does. (The rate of the first choice is needed only to compare
        # a drop with; a choice moved to beat the previous one, so it needs no recheck.)
        allowed = frozenset(pooled)
        while True:
            choice = trial.choice(allowed)
            costly = {o.method for o in choice if o is not None and o.method not in MODEL_FREE}
            if not costly:
                break
            rate, drop = max((trial.rate(allowed - {m}, allowed), m) for m in sorted(costly))
            if rate <= trial.rate(allowed) * (1 + 1e-9):
                break
            allowed = allowed - {drop}
        return self._apply(worker, [o.arm if o is not None else None for o in choice], rids)

    def _options(
        self, view: ClusterView, key: tuple[int, float], rids: Sequence[RequestId], pooled: dict[str, float]
    ) -> list[list[_Option]]:
        """Per request, its best arm per method of `pooled` (in that order, as `best_arm`
        scans them) at its own acceptance (`_blend`, inlined: this runs for every request of
        every configured worker). History only for prompts with an earlier epoch.

        A request has evidence of its own for the one or two methods it ran; for the others
        its acceptance is the pooled one, the same for every request: those options are
        built once and shared, and a request's list is the shared one with its own
        methods' options put in."""
        n0 = self.request_prior_iterations
        methods = list(pooled)
        column = {m: j for j, m in enumerate(methods)}
        tables = [self._best.setdefault((key, m), {}) for m in methods]
        # (as `_blend` at no evidence: n0 * pm / n0 need not be pm exactly)
        shared = [
            self._option(view, key, m, (0.0 + n0 * pooled[m]) / (0.0 + n0), tables[j])
            for j, m in enumerate(methods)
        ]
        history = column.get("history")
        without_history = list(shared)
        if history is not None:
            without_history[history] = None
        complete = None not in shared  # (an option is None only where its method has no arm)
        no_evidence: dict[str, list[float]] = {}
        out = []
        for rid in rids:
            base = shared
            if history is not None and not self._history.get(self._prompt.get(rid, -1), False):
                base = without_history
            own = self.own.get(rid, no_evidence)
            if not own:
                opts = base if complete and base is shared else [o for o in base if o is not None]
                out.append(opts)
                continue
            opts = list(base)
            for m, (it, ps) in own.items():
                j = column.get(m)
                if j is None or base[j] is None:  # not allowed here, or no arm at all
                    continue
                p = (ps + n0 * pooled[m]) / (it + n0)
                level = round(p * 200)
                got = tables[j].get(level)
                if got is None:
                    got = tables[j][level] = self._best_of_method(view, key, m, level)
                opts[j] = _Option(m, got[0], got[1], p)  # (an arm: the shared option has one)
            out.append(opts if complete and base is shared else [o for o in opts if o is not None])
        return out

    def _option(
        self,
        view: ClusterView,
        key: tuple[int, float],
        method: str,
        p: float,
        table: dict[int, tuple[Arm | None, float]],
    ) -> _Option | None:
        """The method's best option at acceptance p (None: the method has no arm)."""
        level = round(p * 200)
        got = table.get(level)
        if got is None:
            got = table[level] = self._best_of_method(view, key, method, level)
        return _Option(method, got[0], got[1], p) if got[0] is not None else None

    def _worker_arm(self, view: ClusterView, key: tuple[int, float], plain: float) -> Arm | None:
        allowed = (self.fixed,) if self.fixed else self._allowed()
        if self.fixed and self._available is not None and self.fixed not in self._available:
            allowed = ()
        arm, rate = self._best_at(view, key, {m: self.pooled(m) for m in allowed})
        return arm if arm is not None and rate > (1 + 1e-9) / plain else None

    # --------------------------------------------------------------- actions
    def _set_worker(
        self, view: ClusterView, worker: WorkerId, arm: Arm | None, members: Collection[RequestId]
    ) -> list[Action]:
        """One setting for the whole worker. Whatever the requests drafted under their old
        setting is credited to it first (evidence is converted at the depth it ran with).
        Only requests with an override are touched when the setting stays (a full worker
        holds hundreds, and is configured at every tick), in id order as before."""
        out: list[Action] = []
        spec = arm.spec if arm is not None else SPEC_OFF
        changed = self.default.get(worker, SPEC_OFF) != spec
        override = self.override
        if changed:
            rids = sorted(members)
        elif len(override) < len(members):
            rids = sorted(r for r in override if r in members)
        else:
            rids = sorted(r for r in members if r in override)
        self._observe(rids, view, worker)
        if changed:
            self.default[worker] = spec
            out.append(SetSpec(spec=spec, worker=worker))
        for rid in rids:  # requests placed here follow the worker
            if override.pop(rid, None) is not None:
                out.append(SetSpec(spec=SPEC_OFF, request=rid))
        return out

    def _apply(
        self, worker: WorkerId, choice: Sequence[Arm | None], rids: Sequence[RequestId]
    ) -> list[Action]:
        """The most common choice (`choice[i]` is request `rids[i]`'s) becomes the worker's
        setting, the others per-request overrides. Choices are tallied per arm object and
        only the few distinct arms compared by spec: specs hash and compare field by field."""
        tally = Counter(map(id, choice))
        arms = {id(arm): arm for arm in choice}  # id -> arm, the distinct choices
        counts: dict[SpecConfig, int] = {}
        for i, arm in arms.items():
            spec = arm.spec if arm is not None else SPEC_OFF
            counts[spec] = counts.get(spec, 0) + tally[i]
        default = max(sorted(counts, key=_spec_key), key=lambda s: counts[s]) if counts else SPEC_OFF
        out: list[Action] = []
        if self.default.get(worker, SPEC_OFF) != default:
            self.default[worker] = default
            out.append(SetSpec(spec=default, worker=worker))
        # each arm's override: none where it runs as the worker's setting; a request better
        # off plain on a speculating worker is told so (the rate estimate counted it plain)
        plain = SPEC_PLAIN if default.enabled else None
        want_of = {
            i: (a.spec if a.spec != default else None) if a is not None else plain for i, a in arms.items()
        }
        for rid, arm in zip(rids, choice, strict=True):
            want = want_of[id(arm)]
            have = self.override.get(rid)
            if want is have or want == have:
                continue
            if want is None:
                del self.override[rid]
                out.append(SetSpec(spec=SPEC_OFF, request=rid))
            else:
                self.override[rid] = want
                out.append(SetSpec(spec=want, request=rid))
        return out


class _Option:
    """A request's best arm with one method, during one `configure` call."""

    __slots__ = ("arm", "method", "p", "rate", "tokens")

    def __init__(self, method: str, arm: Arm, rate: float, p: float) -> None:
        self.method = method
        self.arm = arm
        self.rate = rate  # at p rounded to the memo's level
        self.p = p  # the request's own acceptance with the method
        self.tokens: float | None = None  # arm.tokens(p), once a worker rate needs it


class _Assignment:
    """Choices and worker rates for the sets of methods `BestDrafter.configure`'s greedy
    drop loop tries, each computed once: the loop asks again for the set it moved to, and
    a trial's cost-model calls often repeat another's (a drafter the drop did not touch)."""

    def __init__(
        self, view: ClusterView, batch: int, ctx: float, options: list[list[_Option]], threshold: float
    ) -> None:
        self.view, self.batch, self.ctx = view, batch, ctx
        self.options = options  # per request, its best option per method
        self.threshold = threshold  # a rate must beat plain decoding's by this much
        # allowed methods -> per request: its choice, and the methods its scan ever took
        self._choice: dict[frozenset[str], list[_Option | None]] = {}
        self._taken: dict[frozenset[str], list[tuple[str, ...]]] = {}
        self._rate: dict[frozenset[str], float] = {}
        self._verify_cost: dict[float, float] = {}
        self._draft_cost: dict[tuple[str, int, int, int], float] = {}

    def choice(self, allowed: frozenset[str], parent: frozenset[str] | None = None) -> list[_Option | None]:
        """Each request's best option among `allowed` methods (None: plain decoding is
        faster). Ties as in `BestDrafter.best_arm`: scanning the options in order, one
        replaces the best so far only if its rate is higher by a factor above 1 + 1e-9.

        With `parent`, a superset whose choice is known, only the requests whose scan
        under `parent` ever took one of the removed methods are scanned again: an option a
        scan never took left the scan's state as it was, so without it the scan ends the
        same (the trials of the greedy drop loop remove one method each)."""
        got = self._choice.get(allowed)
        if got is not None:
            return got
        if parent is not None and parent in self._choice:
            removed = parent - allowed
            out = list(self._choice[parent])
            taken = list(self._taken[parent])
            for i, t in enumerate(taken):
                if not removed.isdisjoint(t):
                    out[i], taken[i] = self._scan(self.options[i], allowed)
        else:  # `_scan` of every request, inlined (the first choice of every configuration)
            out, taken = [], []
            threshold = self.threshold
            for opts in self.options:
                best, best_rate, took = None, -1.0, ()
                for o in opts:
                    if o.method in allowed and o.rate > best_rate * (1 + 1e-9):
                        best, best_rate, took = o, o.rate, (*took, o.method)
                out.append(best if best is not None and best_rate > threshold else None)
                taken.append(took)
        self._choice[allowed], self._taken[allowed] = out, taken
        return out

    def _scan(self, opts: list[_Option], allowed: frozenset[str]) -> tuple[_Option | None, tuple[str, ...]]:
        """One request's choice among `allowed` and the methods its scan took on the way."""
        best, best_rate, taken = None, -1.0, ()
        for o in opts:
            if o.method in allowed and o.rate > best_rate * (1 + 1e-9):
                best, best_rate, taken = o, o.rate, (*taken, o.method)
        return (best if best is not None and best_rate > self.threshold else None), taken

    def rate(self, allowed: frozenset[str], parent: frozenset[str] | None = None) -> float:
        """Tokens per second of the worker under `choice(allowed, parent)`, a mixed
        assignment: requests this part does not place (e.g. replicas) decode plainly in the
        estimate."""
        got = self._rate.get(allowed)
        if got is not None:
            return got
        choice = self.choice(allowed, parent)
        batch, ctx = self.batch, self.ctx
        # tokens summed request by request (float addition, in the original order); the rest
        # per distinct arm: integer token counts, and the drafters in order of first use
        tokens = float(batch - len(choice))
        for o in choice:
            if o is None:
                tokens += 1.0
                continue
            tok = o.tokens
            if tok is None:
                tok = o.tokens = o.arm.tokens(o.p)
            tokens += tok
        chosen = [o.arm for o in choice if o is not None]
        uses = Counter(map(id, chosen))  # id(arm) -> requests
        arms = {id(arm): arm for arm in chosen}  # in order of first use
        verify = float(batch)
        drafters: dict[str, tuple[int, int, int]] = {}  # method -> (requests, depth, paths)
        for i, arm in arms.items():
            spec = arm.spec
            verify += spec.tokens_verified * uses[i]
            n, d, k = drafters.get(arm.method, (0, 0, 1))
            drafters[arm.method] = (n + uses[i], max(d, spec.gamma), max(k, spec.topk))
        t = self._verify_cost.get(verify)
        if t is None:
            t = self._verify_cost[verify] = self.view.cost(batch, verify, ctx)
        for m, (n, d, k) in drafters.items():
            draft = self._draft_cost.get((m, n, d, k))
            if draft is None:
                draft = self.view.draft_cost(m, n * k, ctx * n / batch * k, d)
                self._draft_cost[(m, n, d, k)] = draft
            t += draft
        self._rate[allowed] = tokens / t
        return self._rate[allowed]


def _spec_key(spec: SpecConfig) -> tuple[str, int, int]:
    return (spec.method or "", spec.gamma, spec.topk)
