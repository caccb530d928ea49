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
  follows the worker (an override cannot say "plain").

Which requests run on a worker comes from the placements this part observes (`observe`,
fed by `policies.composite.Composite` with every action of the composed policy); without
that feed it configures workers only. History drafting is offered only for prompts with an
earlier epoch (`view.history`), as HistoSpec does. Which methods the executor can draft
with is the `methods` argument (a trace needs an `accept_<m>` column for each).
`fixed` restricts the requests' own speculation to one method while the ladder (the
Fastest-of-N ranking, `ladder`) still spans all methods.

Not modelled: decoupled drafting (SpecActor's Alg. 1/2), AIMD windows for history (the
depth follows the batch instead), tree drafting for model drafters.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from policies.contract import (
    SPEC_OFF,
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
    SetSpec,
    SpecConfig,
    StepFinished,
    StepStarted,
    Tick,
    WorkerId,
)
from policies.fastest_of_n import Rung
from policies.rhymerl_spec import PREFIX_MAX, PREFIX_MIN
from policies.rhymerl_spec import PRIOR_ACCEPT as HISTORY_PRIOR
from policies.seer_acceptance import TABLE2_DRAFT, expected_accept_len, per_token_acceptance, table2_tau
from policies.seer_spec import DEPTHS, FETCH_ITERATIONS, PATHS
from policies.speactor import DEFAULT_PRIOR
from policies.suffix_tree import DraftRule

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


def p_from_tau(tau: float, depth: int) -> float:
    """Per-token acceptance with expected_accept_len(p, depth) == tau (bisection)."""
    tau = min(max(tau, 1.0), depth + 1.0)
    lo, hi = 0.0, 1.0
    for _ in range(16):
        mid = (lo + hi) / 2
        if expected_accept_len(mid, depth) < tau:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


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
        self._seen: dict[RequestId, tuple[int, int]] = {}  # request -> (drafted, accepted) read
        self._history: dict[int, bool] = {}  # prompt -> has an earlier epoch
        self._history_step = False
        self._arms: dict[tuple[int, float], list[Arm]] = {}
        self._plain: dict[tuple[int, float], float] = {}
        self._best: dict[tuple[tuple[int, float], str, int], tuple[Arm | None, float]] = {}
        self._prompt: dict[RequestId, int] = {}

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
        own = self.own.setdefault(rid, {})
        keep = math.exp(-iterations / self.request_horizon)
        for ev in own.values():
            ev[0] *= keep
            ev[1] *= keep
        mine = own.setdefault(method, [0.0, 0.0])
        mine[0] += iterations
        mine[1] += p * iterations
        pool = self.pool.setdefault(method, [0.0, 0.0])
        keep = math.exp(-iterations / self.pool_horizon)
        pool[0] = pool[0] * keep + iterations
        pool[1] = pool[1] * keep + p * iterations

    def _observe_request(self, rid: RequestId, view: ClusterView, worker: WorkerId | None) -> None:
        """Credit what the request drafted since the last read to the arm it ran with."""
        rv = view.request(rid)
        self._prompt[rid] = rv.prompt_id
        d0, a0 = self._seen.get(rid, (0, 0))
        self._seen[rid] = (rv.drafted_tokens, rv.accepted_tokens)
        spec = rv.spec
        if not spec.enabled and worker is not None:
            spec = self.default.get(worker, SPEC_OFF)
        if not spec.enabled or spec.method is None:
            return
        ratio = self._ratio.get(spec.topk, 1.0) if spec.method == MULTI_PATH else 1.0
        self.record(rid, spec.method, spec.gamma, ratio, rv.drafted_tokens - d0, rv.accepted_tokens - a0)

    def _allowed(self, prompt_id: int | None = None) -> tuple[str, ...]:
        out = []
        for m in self.methods:
            if m == "history":
                ok = self._history_step if prompt_id is None else self._history.get(prompt_id, False)
                if not ok:
                    continue
            out.append(m)
        return tuple(out)

    # ------------------------------------------------------------------ arms
    def _key(self, batch: int, context: float) -> tuple[int, float]:
        ctx = max(context, 1.0)
        return batch, round(ctx, 1 - math.floor(math.log10(ctx)))  # 2 significant digits

    def arms(self, view: ClusterView, batch: int, context: float) -> list[Arm]:
        """Every (method, depth, paths) at this batch and context, with its iteration time."""
        key = self._key(batch, context)
        got = self._arms.get(key)
        if got is not None:
            return got
        b, ctx = key
        out = []
        verify: dict[int, float] = {}  # tokens verified per request -> seconds
        for m in self.methods:
            for k in (PATHS if self.multi_path and m == MULTI_PATH else (1,)):
                for d in DEPTHS:
                    if k * d not in verify:
                        verify[k * d] = view.cost(b, b * (k * d + 1), ctx)
                    t = verify[k * d] + view.draft_cost(m, b * k, ctx * k, d)
                    spec = SpecConfig(method=m, gamma=d, topk=k, verify_tokens=k * d if k > 1 else 0)
                    out.append(Arm(spec, t, self._ratio.get(k, 1.0) if m == MULTI_PATH else 1.0))
        self._arms[key] = out
        self._plain[key] = view.cost(b, b, ctx)
        return out

    def plain_time(self, view: ClusterView, batch: int, context: float) -> float:
        key = self._key(batch, context)
        if key not in self._plain:
            self.arms(view, batch, context)
        return self._plain[key]

    def best_arm(
        self, view: ClusterView, batch: int, context: float, p_of: dict[str, float]
    ) -> tuple[Arm | None, float]:
        """(arm, rate) maximising tau / T over the methods of `p_of` (their acceptance).
        Memoised per method at acceptance rounded to 0.005, which also keeps choices from
        flickering with noise in the estimates."""
        key = self._key(batch, context)
        best, best_rate = None, -1.0
        for m, p in p_of.items():
            memo_key = (key, m, round(p * 200))
            got = self._best.get(memo_key)
            if got is None:
                got = self._best[memo_key] = self._best_of_method(view, key, m, memo_key[2] / 200)
            if got[1] > best_rate * (1 + 1e-9):
                best, best_rate = got
        return best, best_rate

    def _best_of_method(
        self, view: ClusterView, key: tuple[int, float], method: str, p: float
    ) -> tuple[Arm | None, float]:
        got: tuple[Arm | None, float] = (None, -1.0)
        for arm in self.arms(view, *key):
            if arm.method == method:
                rate = arm.tokens(p) / arm.time_s
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
        refs = max(0, view.info.group_size - 1)
        chain = table2_tau(refs, 1)
        self._ratio = {k: per_token_acceptance(table2_tau(refs, k), TABLE2_DRAFT)
                       / per_token_acceptance(chain, TABLE2_DRAFT) for k in PATHS}
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
        """Choose the worker's setting and its requests' overrides (module docstring)."""
        wv = view.worker(worker)
        b = batch if batch is not None else wv.running + wv.waiting
        if b <= 0:
            return []
        ctx = context if context is not None else float(max(wv.kv_used_tokens, b))
        plain = self.plain_time(view, b, ctx)
        rids = sorted(self.members.get(worker, ()))
        if b > self.per_request_batch or not rids:
            return self._set_worker(view, worker, self._worker_arm(view, b, ctx, plain), rids)
        for rid in rids:
            self._observe_request(rid, view, worker)
        pooled = {m: self.pooled(m) for m in self._allowed() if self.fixed is None or m == self.fixed}
        p_req: dict[RequestId, dict[str, float]] = {}
        for rid in rids:
            with_history = self._history.get(self._prompt.get(rid, -1), False)
            p_req[rid] = {m: self._blend(rid, m, pm) for m, pm in pooled.items()
                          if m != "history" or with_history}
        allowed = set(pooled)
        best_choice: dict[RequestId, Arm | None] = {}
        best_total = -1.0
        while True:
            choice = self._choose(view, b, ctx, p_req, plain, allowed)
            total = self._worker_rate(view, choice, p_req, b, ctx)
            if total <= best_total * (1 + 1e-9):
                break
            best_choice, best_total = choice, total
            # the model drafters in use: dropping one may speed up the whole batch
            costly = {a.method for a in choice.values() if a is not None and a.method not in MODEL_FREE}
            trials = []
            for m in sorted(costly):
                c = self._choose(view, b, ctx, p_req, plain, allowed - {m})
                trials.append((self._worker_rate(view, c, p_req, b, ctx), m))
            if not trials:
                break
            rate, drop = max(trials)
            if rate <= best_total * (1 + 1e-9):
                break
            allowed = allowed - {drop}
        return self._apply(worker, best_choice, rids)

    def _worker_arm(self, view: ClusterView, batch: int, ctx: float, plain: float) -> Arm | None:
        allowed = (self.fixed,) if self.fixed else self._allowed()
        arm, rate = self.best_arm(view, batch, ctx, {m: self.pooled(m) for m in allowed})
        return arm if arm is not None and rate > (1 + 1e-9) / plain else None

    def _choose(
        self,
        view: ClusterView,
        batch: int,
        ctx: float,
        p_req: dict[RequestId, dict[str, float]],
        plain: float,
        allowed: set[str],
    ) -> dict[RequestId, Arm | None]:
        """Each request's best arm among `allowed` (None: plain decoding is faster)."""
        out: dict[RequestId, Arm | None] = {}
        for rid, ps in p_req.items():
            arm, rate = self.best_arm(view, batch, ctx, {m: p for m, p in ps.items() if m in allowed})
            out[rid] = arm if arm is not None and rate > (1 + 1e-9) / plain else None
        return out

    def _worker_rate(
        self,
        view: ClusterView,
        choice: dict[RequestId, Arm | None],
        p_req: dict[RequestId, dict[str, float]],
        batch: int,
        ctx: float,
    ) -> float:
        """Tokens per second of the worker under a mixed assignment: requests this part does
        not place (e.g. replicas) decode plainly in the estimate."""
        tokens = float(batch - len(choice))
        verify = float(batch)
        drafters: dict[str, tuple[int, int, int]] = {}  # method -> (requests, depth, paths)
        for rid, arm in choice.items():
            if arm is None:
                tokens += 1.0
                continue
            tokens += arm.tokens(p_req[rid][arm.method])
            verify += arm.spec.tokens_verified
            n, d, k = drafters.get(arm.method, (0, 0, 1))
            drafters[arm.method] = (n + 1, max(d, arm.spec.gamma), max(k, arm.spec.topk))
        t = view.cost(batch, verify, ctx)
        for m, (n, d, k) in drafters.items():
            t += view.draft_cost(m, n * k, ctx * n / batch * k, d)
        return tokens / t

    # --------------------------------------------------------------- actions
    def _set_worker(
        self, view: ClusterView, worker: WorkerId, arm: Arm | None, rids: Sequence[RequestId]
    ) -> list[Action]:
        """One setting for the whole worker. Whatever the requests drafted under their old
        setting is credited to it first (evidence is converted at the depth it ran with)."""
        out: list[Action] = []
        spec = arm.spec if arm is not None else SPEC_OFF
        changed = self.default.get(worker, SPEC_OFF) != spec
        for rid in rids:
            if changed or rid in self.override:
                self._observe_request(rid, view, worker)
        if changed:
            self.default[worker] = spec
            out.append(SetSpec(spec=spec, worker=worker))
        for rid in rids:  # requests placed here follow the worker
            if self.override.pop(rid, None) is not None:
                out.append(SetSpec(spec=SPEC_OFF, request=rid))
        return out

    def _apply(
        self, worker: WorkerId, choice: dict[RequestId, Arm | None], rids: Sequence[RequestId]
    ) -> list[Action]:
        counts: dict[SpecConfig, int] = {}
        for arm in choice.values():
            spec = arm.spec if arm is not None else SPEC_OFF
            counts[spec] = counts.get(spec, 0) + 1
        default = max(sorted(counts, key=_spec_key), key=lambda s: counts[s]) if counts else SPEC_OFF
        out: list[Action] = []
        if self.default.get(worker, SPEC_OFF) != default:
            self.default[worker] = default
            out.append(SetSpec(spec=default, worker=worker))
        for rid in rids:
            arm = choice.get(rid)
            want = arm.spec if arm is not None and arm.spec != default else None
            have = self.override.get(rid)
            if want == have:
                continue
            if want is None:
                del self.override[rid]
                out.append(SetSpec(spec=SPEC_OFF, request=rid))
            else:
                self.override[rid] = want
                out.append(SetSpec(spec=want, request=rid))
        return out


def _spec_key(spec: SpecConfig) -> tuple[str, int, int]:
    return (spec.method or "", spec.gamma, spec.topk)
