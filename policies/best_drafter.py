"""Best drafter per request: each request speculates with the draft method that gives it the
most tokens per second, learned while the step runs (a policy part for composed policies).

No single drafter wins everywhere: Seer's grouped suffix tree is nearly free and good when
a group's siblings share text, RhymeRL's history tree is better once the prompt has an
earlier epoch, a draft model costs GPU time but does not depend on either, and a
request's acceptance differs per method (SpecActor Fig. 7). This part picks per request.

Expected rate of request r with arm (method m, depth d, paths k) on a worker with batch b
and KV context c:

    rate(r, arm) = tau(p_eff(r, m, k), d) / T(arm),          (`drafter_arms`)
    T(arm) = cost(b, b * (k*d + 1), c) + draft_cost(m, b*k, c*k, d)

(the iteration time if the whole batch ran the arm; `tau` is the i.i.d. acceptance length
of `seer_acceptance.expected_accept_len`). Plain decoding is 1 / cost(b, b, c). The depth
d comes from Seer's depth grid and so is chosen by concurrency exactly as Seer's adaptive
grouped SD does (`seer_spec`): deep drafts for a few requests, shallow or none for a full
batch. Multi-path (k = 2, 4) applies to the suffix tree only, with Seer Table 2's gain of
k paths over one at the group's references (`p_eff = p * ratio_k`).

Acceptance estimates (per-token probability p of a chain draft; `drafter_evidence`):
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

Which requests run on a worker comes from the view (`view.worker_requests`), with the
placements other parts of the composed policy made at the same instant, which the view
shows only once the executor applied them (`observe`: a scheduler part re-dispatching a
chunk, say). History drafting is offered only for prompts with an
earlier epoch (`view.history`), as HistoSpec does. Which methods the executor can draft
with is `methods` less what `view.draft_methods` lacks (a trace needs an `accept_<m>`
column per method; the vLLM backend has n-gram and suffix drafters only).
`fixed` restricts the requests' own speculation to one method while the ladder (the
Fastest-of-N ranking, `ladder`) still spans all methods.

Not modelled: decoupled drafting (SpecActor's Alg. 1/2), AIMD windows for history (the
depth follows the batch instead), tree drafting for model drafters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import cast

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
    StepStarted,
    Tick,
    WorkerId,
)
from simctl.policies.draft_methods import DraftMethod
from simctl.policies.draft_rule import DraftRule
from simctl.policies.drafter_arms import Arm, Key
from simctl.policies.drafter_assignment import Assignment, Option
from simctl.policies.drafter_evidence import DrafterEvidence
from simctl.policies.drafter_first_choice import MODEL_FREE, FirstChoice
from simctl.policies.fastest_of_n import Rung
from simctl.policies.rhymerl_spec import PREFIX_MAX, PREFIX_MIN
from simctl.policies.rhymerl_spec import PRIOR_ACCEPT as HISTORY_PRIOR
from simctl.policies.seer_acceptance import TABLE2_DRAFT, per_token_acceptance, table2_tau
from simctl.policies.seer_spec import FETCH_ITERATIONS, PATHS
from simctl.policies.speactor import DEFAULT_PRIOR

# The drafters the issue names: grouped suffix tree, history, a draft model (the 0.5B model,
# SpecActor's sweet spot, and EAGLE, the cheapest per draft token in the cost model).
DEFAULT_METHODS = (DraftMethod.SUFFIX, DraftMethod.HISTORY, DraftMethod.DRAFT_SMALL, DraftMethod.EAGLE)
# w4_self: EfficientRollout Table 4, tau 5.18 at gamma 5.
PRIORS: dict[str, float] = {**DEFAULT_PRIOR, DraftMethod.HISTORY: HISTORY_PRIOR, DraftMethod.W4_SELF: 0.94}
PER_REQUEST_BATCH = 64
POOL_PRIOR_ITERATIONS = 256.0
REQUEST_PRIOR_ITERATIONS = 32.0
POOL_HORIZON = 8192.0  # verify iterations over which a method's pooled evidence fades
REQUEST_HORIZON = 512.0  # the same for one request's evidence
LADDER_CONTEXT = 8192  # tokens per request assumed when the ladder is asked without requests


class BestDrafter(DrafterEvidence, FirstChoice, Policy):
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
        self._rules: dict[str, DraftRule] = {}
        if DraftMethod.SUFFIX in self.methods:
            self._rules[DraftMethod.SUFFIX] = DraftRule(source="group")
        if DraftMethod.HISTORY in self.methods:  # HistoSpec's tree; the depth is ours (no AIMD)
            self._rules[DraftMethod.HISTORY] = DraftRule(
                source="history", min_match=PREFIX_MIN, max_match=PREFIX_MAX, weight="reward"
            )
        self.pool: dict[str, list[float]] = {}  # method -> [iterations, p * iterations], all steps
        self._ratio: dict[int, float] = {1: 1.0}
        # request -> the worker another part placed it on at this instant (None: deferred)
        self._pending: dict[RequestId, WorkerId | None] = {}
        # the same grouped by worker, built when `placed` first reads it (None: not yet)
        self._pending_at: dict[WorkerId | None, list[RequestId]] | None = None
        self._reset()

    @property
    def draft_rules(self) -> Mapping[str, DraftRule]:
        return self._rules

    @property
    def draft_methods_used(self) -> frozenset[str]:
        return frozenset({self.fixed} if self.fixed else self.methods)

    def _reset(self) -> None:
        self.default: dict[WorkerId, SpecConfig] = {}  # worker -> its setting
        self.override: dict[RequestId, SpecConfig] = {}  # request -> its own setting
        self._history: dict[int, bool] = {}  # prompt -> has an earlier epoch
        self._history_step = False
        self._available: frozenset[str] | None = None  # the executor's draft methods (None: all)
        self._reset_evidence()
        self._reset_arms()

    def _allowed(self, prompt_id: int | None = None) -> tuple[str, ...]:
        out = []
        available = self._available
        for m in self.methods:
            if available is not None and m not in available:
                continue
            if m == DraftMethod.HISTORY:
                ok = self._history_step if prompt_id is None else self._history.get(prompt_id, False)
                if not ok:
                    continue
            out.append(m)
        return tuple(out)

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
        """Placements made by the composed policy (any part) at this instant."""
        for a in actions:
            if isinstance(a, Assign | Migrate):
                self._pending[a.request] = a.worker
                self._pending_at = None
            elif isinstance(a, Defer):
                self._pending[a.request] = None
                self._pending_at = None

    def placed(self, worker: WorkerId, view: ClusterView) -> list[RequestId]:
        """Requests on `worker` in ascending id order: the view's, with the placements
        observed since this part last answered an event (the executor applies them only
        after the composed policy answered; parts that place run before this one)."""
        pending = self._pending
        if not pending:
            return list(view.worker_requests(worker))
        # grouped by worker once per change, not scanned per worker: at a step start a
        # scheduler part places every request at once and this part then configures every
        # worker, which a scan per worker made quadratic in the cluster's size
        at = self._pending_at
        if at is None:
            at = self._pending_at = {}
            for r, w in pending.items():
                got = at.get(w)
                if got is None:
                    at[w] = [r]
                else:
                    got.append(r)
        out = [r for r in view.worker_requests(worker) if r not in pending]
        out += at.get(worker, ())
        out.sort()
        return out

    def on_event(self, event: Event, view: ClusterView) -> list[Action]:
        out = self._answer(event, view)
        self._pending = {}  # applied by the executor before the next event
        self._pending_at = None
        return out

    def _answer(self, event: Event, view: ClusterView) -> list[Action]:
        if isinstance(event, StepStarted):
            return self._start(event.requests, view)
        if isinstance(event, ChunkFinished | RequestFinished):
            self._observe_request(event.request, view, event.worker)
            return self.configure(event.worker, view)
        if isinstance(event, Tick):
            return self.configure(event.worker, view)
        return []

    def _start(self, requests: Sequence[RequestId], view: ClusterView) -> list[Action]:
        self._reset()
        self._available = view.draft_methods
        refs = max(0, view.info.group_size - 1)
        chain = table2_tau(refs, 1)
        self._ratio = {
            k: per_token_acceptance(table2_tau(refs, k), TABLE2_DRAFT)
            / per_token_acceptance(chain, TABLE2_DRAFT)
            for k in PATHS
        }
        if DraftMethod.SUFFIX not in self._prior_given:  # Seer Table 2 at the group's references
            self.prior[DraftMethod.SUFFIX] = per_token_acceptance(chain, TABLE2_DRAFT)
        with_history = 0
        views: dict[RequestId, RequestView] = {}  # each read once: nothing changes during the event
        for rid in requests:
            rv = views[rid] = view.request(rid)
            pid = self._prompt[rid] = rv.prompt_id
            if pid not in self._history:
                self._history[pid] = bool(view.history(pid).lengths)
            with_history += self._history[pid]
        self._history_step = with_history * 2 >= max(1, len(requests))
        out: list[Action] = []
        for w in range(view.num_workers):  # workers a part placed requests on at this event
            rids = self.placed(w, view)
            if rids:
                ctx = 0
                for r in rids:
                    got = views.get(r)
                    rv = got if got is not None else view.request(r)
                    ctx += rv.prompt_len + rv.generated
                out += self.configure(w, view, len(rids), float(ctx))
        return out

    # ------------------------------------------------------------- configure
    def configure(
        self, worker: WorkerId, view: ClusterView, batch: int | None = None, context: float | None = None
    ) -> list[Action]:
        """Choose the worker's setting and its requests' overrides (module docstring).

        This runs at every tick of every worker, so the per-request work is done once per
        call (each request's best arm per method, `_options`) and the greedy drop loop
        works on those (`Assignment`). Mostly no request chooses a draft model and the
        loop stops at its first choice, which `_first_choice` finds without the options."""
        wv = view.worker(worker)
        b = batch if batch is not None else wv.running + wv.waiting
        if b <= 0:
            return []
        ctx = context if context is not None else float(max(wv.kv_used_tokens, b))
        key = self._key(b, ctx)
        plain = self._plain_at(view, key)
        if b > self.per_request_batch:
            return self._set_worker(view, worker, self._worker_arm(view, key, plain))
        rids = self.placed(worker, view)
        if not rids:
            return self._set_worker(view, worker, self._worker_arm(view, key, plain), rids)
        owns = self._observe(rids, view, worker)
        pooled = {m: self.pooled(m) for m in self._allowed() if self.fixed is None or m == self.fixed}
        # (`_allowed` leaves out what the executor cannot draft with, `fixed` included)
        first = self._first_choice(view, key, rids, pooled, owns, (1 + 1e-9) / plain)
        if first is not None:  # no draft model chosen: the greedy loop would stop at once
            return self._apply(worker, first, rids)
        trial = Assignment(view, b, ctx, self._options(view, key, rids, pooled, owns), (1 + 1e-9) / plain)
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
        self,
        view: ClusterView,
        key: Key,
        rids: Sequence[RequestId],
        pooled: dict[str, float],
        owns: Sequence[dict[str, list[float]] | None] | None = None,
    ) -> list[list[Option]]:
        """Per request, its best arm per method of `pooled` (in that order, as `best_arm`
        scans them) at its own acceptance (`_blend`, inlined: this runs for every request of
        every configured worker). History only for prompts with an earlier epoch. `owns`:
        each request's evidence (its `own` entry, as `_observe` returns them; None: read
        from `own`).

        A request has evidence of its own for the one or two methods it ran; for the others
        its acceptance is the pooled one, the same for every request: those options are
        built once and shared, and a request's list is the shared one with its own
        methods' options put in."""
        n0 = self.request_prior_iterations
        methods, tables, shared = self._shared_options(view, key, pooled)
        # method -> (its column, its best-arm table, n0 * its pooled acceptance), for the
        # methods with an arm (an option is None only where its method has no arm)
        column = {m: (j, tables[j], n0 * pooled[m]) for j, m in enumerate(methods) if shared[j] is not None}
        history = methods.index(DraftMethod.HISTORY) if DraftMethod.HISTORY in pooled else None
        without_history = list(shared)
        if history is not None:
            without_history[history] = None
        complete = None not in shared
        if owns is None:
            owns = [self.own.get(rid) for rid in rids]
        has_history, prompt = self._history, self._prompt
        out: list[list[Option]] = []
        for rid, own in zip(rids, owns, strict=True):
            base = shared
            if history is not None and not has_history.get(prompt.get(rid, -1), False):
                base = without_history
            if not own:
                out.append(_present(base, complete and base is shared))
                continue
            opts = list(base)
            for m, ev in own.items():
                got = column.get(m)
                if got is None:  # not allowed here, or no arm at all
                    continue
                j, table, prior = got
                if base[j] is None:  # history, for a prompt without an earlier epoch
                    continue
                p = (ev[1] + prior) / (ev[0] + n0)
                level = round(p * 200)
                best = table.get(level)
                if best is None:
                    best = table[level] = self._best_of_method(view, key, m, level)
                arm = best[0]
                assert arm is not None  # (an arm: the shared option has one)
                opts[j] = Option(m, arm, best[1], p)
            out.append(_present(opts, complete and base is shared))
        return out

    def _worker_arm(self, view: ClusterView, key: Key, plain: float) -> Arm | None:
        allowed = (self.fixed,) if self.fixed else self._allowed()
        if self.fixed and self._available is not None and self.fixed not in self._available:
            allowed = ()
        arm, rate = self._best_at(view, key, {m: self.pooled(m) for m in allowed})
        return arm if arm is not None and rate > (1 + 1e-9) / plain else None

    # --------------------------------------------------------------- actions
    def _set_worker(
        self,
        view: ClusterView,
        worker: WorkerId,
        arm: Arm | None,
        members: Sequence[RequestId] | None = None,
    ) -> list[Action]:
        """One setting for the whole worker. Whatever the requests drafted under their old
        setting is credited to it first (evidence is converted at the depth it ran with).
        Only requests with an override are touched when the setting stays (a full worker
        holds hundreds, and is configured at every tick), in id order as before. The
        worker's requests (`members`, ascending) are read only where needed."""
        out: list[Action] = []
        spec = arm.spec if arm is not None else SPEC_OFF
        changed = self.default.get(worker, SPEC_OFF) != spec
        override = self.override
        if not changed and not override:
            return out
        if members is None:
            members = self.placed(worker, view)
        if changed:
            rids = list(members)
        elif len(override) < len(members):
            inside = set(members)
            rids = sorted(r for r in override if r in inside)
        else:
            rids = [r for r in members if r in override]
        if rids:
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
        tally: dict[int, int] = {}  # id(arm) -> requests
        arms: dict[int, Arm | None] = {}  # id -> arm, the distinct choices in order of first use
        for arm in choice:
            i = id(arm)
            n = tally.get(i)
            if n is None:
                tally[i] = 1
                arms[i] = arm
            else:
                tally[i] = n + 1
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
        override = self.override
        for rid, arm in zip(rids, choice, strict=True):
            want = want_of[id(arm)]
            have = override.get(rid)
            if want is have or want == have:  # (arms' specs are interned: mostly the first)
                continue
            if want is None:
                del override[rid]
                out.append(SetSpec(spec=SPEC_OFF, request=rid))
            else:
                override[rid] = want
                out.append(SetSpec(spec=want, request=rid))
        return out


def _spec_key(spec: SpecConfig) -> tuple[str, int, int]:
    return (spec.method or "", spec.gamma, spec.topk)


def _present(opts: list[Option | None], complete: bool) -> list[Option]:
    """The options that exist (`complete`: all of them, the list itself)."""
    return cast(list[Option], opts) if complete else [o for o in opts if o is not None]
