"""SpecActor (decoupled speculation + Fastest-of-N) as a policy, with its Fig. 15 ablations.

- `speactor-vanilla`: coupled draft-then-verify with the one method the draft ladder picks.
- `speactor-decoupled`: + Algorithm 1's plan (drafter GPUs per verifier, window w) at step start.
- `speactor-decoupled-reconfig`: + Algorithm 2 every 1000 decode iterations.
- `speactor`: + Fastest-of-N (Algorithm 3) on workers freed during the step.

Choices where the paper is open (all constructor keywords):
- Workers are the cluster's TP groups, so a verifier configuration is one worker
  (g_v = tp GPUs) and drafters are whole workers whose GPUs each host a drafter instance;
  a drafter worker serves tp/g_d verifiers.
- Algorithm 1 only enumerates decoupled plans; the coupled plan at the same cluster is also
  scored and kept when it is faster (e.g. for near-free n-gram drafting).
- "Profiled" acceptance: the per-token p of §4.1, recovered from the previous steps'
  tokens per verification at the windows drafted (policies.acceptance_estimate), with
  `prior` for methods never run. SpecActor profiles offline, once (§4.2): an executor's
  `offline_profile` (a replayed trace's acceptance) replaces the default priors, which
  are the batch means SpecActor-style traces show.
- Fastest-of-N replicas are coupled, on freed verifier workers and on drafter workers whose
  verifiers are done; their drafter piggybacks on the same worker (§4.2). Algorithm 3 is
  the standalone part `policies.fastest_of_n.FastestOfN`, started with this step's ladder.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any

from simctl.policies.acceptance_estimate import acceptance_of, pooled_acceptance
from simctl.policies.bulk_reads import request_rows
from simctl.policies.contract import (
    Action,
    Assign,
    Capability,
    ClusterView,
    Event,
    Policy,
    RequestFinished,
    RequestId,
    Role,
    SetRole,
    SetSpec,
    SpecConfig,
    StepFinished,
    StepStarted,
    Tick,
    WorkerIdle,
)
from simctl.policies.draft_methods import DraftMethod
from simctl.policies.family import Family
from simctl.policies.fastest_of_n import FastestOfN, Rung
from simctl.policies.params import Flag, Int, Method, Param, PolicyParams, SlashList
from simctl.policies.placement import contiguous_chunks
from simctl.policies.speactor_model import (
    Affine,
    CostLaws,
    LadderRung,
    best_window,
    draft_ladder,
    plan_search,
    reconfigure,
    tgs_coupled,
)

DEFAULT_METHODS = (DraftMethod.DRAFT_SMALL, DraftMethod.DRAFT_MEDIUM, DraftMethod.NGRAM)
# Batch-mean acceptance assumed before any step was profiled (SpecActor Fig. 10 shape).
DEFAULT_PRIOR: dict[str, float] = {
    DraftMethod.DRAFT_SMALL: 0.6,
    DraftMethod.DRAFT_MEDIUM: 0.66,
    DraftMethod.NGRAM: 0.4,
    DraftMethod.SUFFIX: 0.55,
    DraftMethod.EAGLE: 0.58,
}


class SpecActor(Policy):
    name = "speactor"

    def __init__(
        self,
        methods: tuple[str, ...] | str = DEFAULT_METHODS,
        decoupled: bool = True,
        reconfig: bool = True,
        fon: bool = True,
        reconfig_iterations: int = 1000,
        max_window: int = 8,
        fon_max_batch: int = 32,
        plan_context: int = 4096,
        prior: dict[str, float] | None = None,
    ) -> None:
        self.methods = tuple(methods.split("/")) if isinstance(methods, str) else tuple(methods)
        self.decoupled, self.reconfig, self.fon = decoupled, reconfig, fon
        self.max_window, self.fon_max_batch, self.plan_context = max_window, fon_max_batch, plan_context
        self.prior = {**DEFAULT_PRIOR, **(prior or {})}
        caps = {Capability.PLACE, Capability.SPEC_PER_WORKER}
        if decoupled:
            caps |= {Capability.DECOUPLED, Capability.ROLES}
        if reconfig:
            caps |= {Capability.SPEC_PER_REQUEST}
        if fon:
            caps |= {Capability.REPLICAS}
        self.requires = frozenset(caps)
        self.tick_iterations = reconfig_iterations if reconfig else None
        # method -> {window: [verify iterations, tokens]} over the steps so far
        self.profiled: dict[str, dict[int, list[float]]] = {}
        self.fastest = FastestOfN(max_batch=fon_max_batch)  # Algorithm 3, fed the step's ladder
        self._reset_step()

    def _reset_step(self) -> None:
        self.ladder: list[LadderRung] = []
        self.laws: dict[str, CostLaws] = {}
        self.drafter_of: dict[int, int] = {}  # verifier worker -> drafter worker
        self.drafters: set[int] = set()
        self.method = ""
        self.window = 0
        self.step_window = 1  # drafted per verification by requests without their own setting
        self.drafter_gpus = 0
        self.spec_of: dict[int, SpecConfig] = {}
        # (acceptance, drafter worker) -> Algorithm 2's setting this step (`_request_spec`)
        self._spec_memo: dict[tuple[float, int | None], SpecConfig] = {}

    # ------------------------------------------------------------------ events
    def on_event(self, event: Event, view: ClusterView) -> list[Action]:
        if isinstance(event, StepStarted):
            return self._start(event, view)
        if isinstance(event, RequestFinished):
            if self.fon:
                self.fastest.on_event(event, view)
            return []
        if isinstance(event, Tick) and self.reconfig:
            return self._reconfigure(event.worker, view)
        if isinstance(event, WorkerIdle) and self.fon:
            return self.fastest.on_event(event, view)
        if isinstance(event, StepFinished):
            self._profile(view)
        return []

    # ------------------------------------------------------------ step start
    def acceptance(self, method: str) -> float:
        """The per-token p the ladder and plan use: profiled from earlier steps once 500
        verify iterations are in (policies.acceptance_estimate), else the offline profile."""
        counts = self.profiled.get(method, {})
        if sum(it for it, _ in counts.values()) > 500:
            p = pooled_acceptance(counts)
            if p is not None:
                return p
        return self.prior.get(method, 0.5)

    def offline_profile(self, acceptance: Mapping[str, float]) -> None:
        """§4.2: the ladder's first selection uses acceptance "profiled" offline, once ("the
        profiled results are stable across different steps", Fig. 10); an executor that
        knows the workload's per-token acceptance by method replaces the default priors."""
        self.prior.update({m: float(p) for m, p in acceptance.items() if 0.0 < p < 1.0})

    def _laws(self, view: ClusterView, method: str) -> CostLaws:
        ctx = float(self.plan_context)
        verify = {w: _verify_law(view, w, ctx) for w in range(1, self.max_window + 1)}
        return CostLaws(
            draft=Affine.fit(lambda b: view.draft_cost(method, b, b * ctx, 1)),
            verify=verify.__getitem__,
            decode=Affine.fit(lambda b: view.cost(b, b, b * ctx)),
        )

    def _start(self, event: StepStarted, view: ClusterView) -> list[Action]:
        self._reset_step()
        n_workers = view.num_workers
        batch = len(event.requests) / n_workers
        self.laws = {m: self._laws(view, m) for m in self.methods}
        self.ladder = draft_ladder(
            self.laws, {m: self.acceptance(m) for m in self.methods}, batch, self.max_window
        )
        top = self.ladder[0]
        self.method, p = top.method, top.acceptance
        verifiers = list(range(n_workers))
        spec = SpecConfig(method=top.method, gamma=top.gamma)
        self.step_window = top.gamma
        actions: list[Action] = []
        if self.decoupled:
            tp = view.info.tp
            plan = plan_search(
                self.laws[top.method], p, len(event.requests), n_workers * tp, [tp], self.max_window
            )
            _, coupled_tgs = best_window(
                lambda w: tgs_coupled(self.laws[top.method], p, w, batch), self.max_window
            )
            if plan.tgs > coupled_tgs and n_workers >= 2:
                per_drafter = max(1, tp // plan.drafter_gpus)
                n_drafters = max(1, -(-n_workers // (per_drafter + 1)))
                self.drafters = set(range(n_workers - n_drafters, n_workers))
                verifiers = list(range(n_workers - n_drafters))
                self.window, self.drafter_gpus = plan.window, plan.drafter_gpus
                self.step_window = plan.window
                for i, v in enumerate(verifiers):
                    self.drafter_of[v] = n_workers - n_drafters + min(i // per_drafter, n_drafters - 1)
                actions += [SetRole(worker=d, role=Role.DRAFTER) for d in sorted(self.drafters)]
        groups: OrderedDict[int, list[int]] = OrderedDict()
        for rid in event.requests:
            groups.setdefault(view.request(rid).prompt_id, []).append(rid)
        for idx, rids in zip(contiguous_chunks(len(groups), len(verifiers)), groups.values(), strict=True):
            actions += [Assign(request=r, worker=verifiers[idx]) for r in rids]
        for v in verifiers:
            if v in self.drafter_of:
                vs = SpecConfig(
                    method=self.method,
                    gamma=self.window,
                    mode="decoupled",
                    window=self.window,
                    drafter_worker=self.drafter_of[v],
                )
            else:
                vs = spec
            actions.append(SetSpec(spec=vs, worker=v))
        if self.fon:
            # Algorithm 3 draws on the same ladder; drafters are lent to their verifiers
            rungs = [Rung(r.method, SpecConfig(method=r.method, gamma=max(1, r.gamma))) for r in self.ladder]
            self.fastest.start(event.requests, rungs, self.drafter_of)
        return actions

    # --------------------------------------------------- Algorithm 2 (reconfig)
    def _reconfigure(self, worker: int, view: ClusterView) -> list[Action]:
        """Algorithm 2 at a tick of `worker`: every running request below the worker's mean
        acceptance gets the speculation `reconfigure` picks at its acceptance. A tick reads
        every request of the worker, so they are read in bulk (`policies.bulk_reads`)."""
        rids = view.worker_requests(worker)
        rows = request_rows(view, rids)
        rates: dict[RequestId, float] = {}
        for rid, state, accepted, spec, iters in zip(
            rids, rows.state, rows.accepted, rows.spec, rows.verify_iterations, strict=True
        ):
            if state == "running" and iters:
                # "ProfileProbability(r)": per-token p under the request's setting
                p = acceptance_of(iters + accepted, iters, self._window_of(spec))
                if p is not None:
                    rates[rid] = p
        if len(rates) < 2:
            return []
        mean = sum(rates.values()) / len(rates)
        drafter = self.drafter_of.get(worker)
        actions: list[Action] = []
        for rid, p in rates.items():
            if p >= mean:
                continue
            spec = self._request_spec(p, drafter)
            prev = self.spec_of.get(rid)
            if prev is not spec and prev != spec:
                self.spec_of[rid] = spec
                actions.append(SetSpec(spec=spec, request=rid))
        return actions

    def _request_spec(self, p: float, drafter: int | None) -> SpecConfig:
        """Algorithm 2's setting for a request of acceptance `p` on a verifier served by
        `drafter` (None: no drafter, so coupled). A function of the two alone within a step
        (the laws, method and drafter GPUs are the step's), and ticks ask again for the
        same acceptance thousands of times, so the step remembers each answer."""
        key = (p, drafter)
        spec = self._spec_memo.get(key)
        if spec is not None:
            return spec
        laws = self.laws[self.method]
        mode, w, _ = reconfigure(laws, p, max(self.drafter_gpus, 1), self.max_window)
        if mode == "decoupled" and drafter is None:
            mode, w = "coupled", best_window(partial(tgs_coupled, laws, p, b=1.0), self.max_window)[0]
        decoupled = mode == "decoupled"
        spec = SpecConfig(
            method=self.method,
            gamma=w,
            mode="decoupled" if decoupled else "coupled",
            window=w if decoupled else 0,
            drafter_worker=drafter if decoupled else None,
        )
        self._spec_memo[key] = spec
        return spec

    # --------------------------------------------------------- profiling
    def _window_of(self, spec: SpecConfig) -> int:
        """Tokens a request drafted per verification: its own setting's (Algorithm 2's),
        or the step's."""
        if spec.enabled and spec.method == self.method:
            return spec.window if spec.mode == "decoupled" else spec.gamma
        return self.step_window

    def _profile(self, view: ClusterView) -> None:
        """Tokens and verify iterations observed this step (every request speculates with
        the step's method) feed the next step's ladder, per window, so that the per-token p
        is recovered in the unit the plan uses (policies.acceptance_estimate)."""
        if not self.method:
            return
        rows = request_rows(view, view.step_requests())
        counts = self.profiled.setdefault(self.method, {})
        for accepted, spec, iters in zip(rows.accepted, rows.spec, rows.verify_iterations, strict=True):
            if iters:
                c = counts.setdefault(self._window_of(spec), [0.0, 0.0])
                c[0] += iters
                c[1] += iters + accepted


def _verify_law(view: ClusterView, window: int, context: float) -> Affine:
    """Verification of `window` drafted tokens per request (plus the bonus token)."""
    return Affine.fit(lambda b: view.cost(b, b * (window + 1), b * context))


@dataclass(frozen=True)
class SpecActorParams(PolicyParams):
    methods: Annotated[
        tuple[DraftMethod, ...],
        Param(SlashList(Method()), "draft methods the ladder ranks (every step's best runs)"),
    ] = DEFAULT_METHODS
    decoupled: Annotated[bool, Param(Flag(), "Algorithm 1's decoupled plan at step start")] = True
    reconfig: Annotated[bool, Param(Flag(), "Algorithm 2's per-request reconfiguration at ticks")] = True
    fon: Annotated[bool, Param(Flag(), "Fastest-of-N replicas on freed workers (Algorithm 3)")] = True
    reconfig_iterations: Annotated[
        int, Param(Int(1, 1 << 20), "decode iterations between reconfigurations")
    ] = 1000
    max_window: Annotated[int, Param(Int(1, 64), "largest draft window w searched")] = 8
    fon_max_batch: Annotated[int, Param(Int(1, 1 << 16), "replicas per Fastest-of-N worker")] = 32
    plan_context: Annotated[
        int, Param(Int(1, 1 << 24), "context tokens per request the cost laws assume")
    ] = 4096


def _build(name: str, p: SpecActorParams) -> Policy:
    policy = SpecActor(
        p.methods,
        p.decoupled,
        p.reconfig,
        p.fon,
        p.reconfig_iterations,
        p.max_window,
        p.fon_max_batch,
        p.plan_context,
    )
    policy.name = name
    return policy


VARIANTS: dict[str, tuple[dict[str, object], str]] = {
    "speactor-vanilla": (
        {"decoupled": False, "reconfig": False, "fon": False},
        "SpecActor ablation: coupled, one ladder-picked method",
    ),
    "speactor-decoupled": (
        {"decoupled": True, "reconfig": False, "fon": False},
        "SpecActor ablation: + decoupled plan (Alg. 1)",
    ),
    "speactor-decoupled-reconfig": (
        {"decoupled": True, "reconfig": True, "fon": False},
        "SpecActor ablation: + per-request reconfiguration (Alg. 2)",
    ),
    "speactor": (
        {"decoupled": True, "reconfig": True, "fon": True},
        "SpecActor: decoupled speculation + reconfiguration + Fastest-of-N",
    ),
}

FAMILIES: tuple[Family[Any], ...] = tuple(
    Family(name, text, SpecActorParams, _build, defaults=defaults)
    for name, (defaults, text) in VARIANTS.items()
)
