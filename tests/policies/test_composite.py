"""The composite policy and its parts: Fastest-of-N as a standalone part, the per-request
drafter choice on hand-made acceptance, Seer's scheduler under replicas, and the composed
policy end to end in the simulator."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simctl.policies.acceptance_tables import p_from_tau, p_from_tau_bisect, tau_table
from simctl.policies.best_drafter import MODEL_FREE, BestDrafter
from simctl.policies.composite import VARIANTS, ReplicaAwareScheduler
from simctl.policies.contract import (
    SPEC_OFF,
    SPEC_PLAIN,
    Action,
    Assign,
    ClusterView,
    Event,
    LaunchReplica,
    ModelInfo,
    PromptHistory,
    RequestFinished,
    SetSpec,
    SpecConfig,
    StepStarted,
    Tick,
    WorkerIdle,
)
from simctl.policies.drafter_arms import MULTI_PATH, P_MAX, Arm
from simctl.policies.drafter_assignment import Assignment, Option
from simctl.policies.fastest_of_n import FastestOfN, Rung
from simctl.policies.registry import make_policy
from simctl.policies.seer_acceptance import expected_accept_len
from simctl.policies.seer_scheduler import WorkerLoad
from simctl.policies.seer_spec import DEPTHS, PATHS
from simctl.sim.replay import run_policy
from tests.factories import make_frame, make_setup, make_trace, random_lengths
from tests.policies.fakes import FakeView

SUFFIX = SpecConfig(method="suffix", gamma=6)
SMALL = SpecConfig(method="draft_small", gamma=3)
EAGLE = SpecConfig(method="eagle", gamma=4)
LADDER = [Rung("suffix", SUFFIX), Rung("draft_small", SMALL), Rung("eagle", EAGLE)]
MODEL_COSTS = ("draft_small", "eagle")  # draft models: their drafting costs GPU time


def fon_view() -> FakeView:
    """Workers 0 and 1 busy (suffix / draft model), 2 and 3 idle; request 3 drafts with
    EAGLE on its own setting."""
    view = FakeView.make(4)
    view.set_worker(0, running=1, spec=SUFFIX)
    view.set_worker(1, running=2, spec=SMALL)
    view.add_request(0, 0, drafted_tokens=100, accepted_tokens=50)
    view.add_request(1, 1, drafted_tokens=100, accepted_tokens=30)
    view.add_request(2, 1, state="finished")
    view.add_request(3, 1, spec=EAGLE, drafted_tokens=100, accepted_tokens=40)
    return view


def replicas(actions) -> list[tuple[int, str | None, int]]:
    return [(a.request, a.spec.method, a.worker) for a in actions if isinstance(a, LaunchReplica)]


def test_fon_replicas_appear_only_on_idle_workers_with_other_methods_than_the_original() -> None:
    view = fon_view()
    fon = FastestOfN(max_batch=32, ladder_source=lambda v, rids: LADDER)
    assert fon.on_event(StepStarted(0.0, 0, 0, (0, 1, 2, 3)), view) == []
    assert fon.on_event(RequestFinished(1.0, request=2, worker=1, length=10), view) == []
    # worker 2 runs dry: lowest acceptance first (1: 0.3, 3: 0.4, 0: 0.5); it is dedicated
    # to the best ladder method that some request does not run yet
    first = replicas(fon.on_event(WorkerIdle(2.0, worker=2), view))
    assert first == [(1, "suffix", 2), (3, "suffix", 2)]
    view.set_worker(2, running=2)
    # worker 3: the next method nobody races yet; never a request's own method
    second = replicas(fon.on_event(WorkerIdle(3.0, worker=3), view))
    assert second == [(1, "eagle", 3), (0, "eagle", 3)]
    own = {0: "suffix", 1: "draft_small", 3: "eagle"}
    assert all(method != own[rid] for rid, method, _ in first + second)
    assert {a.spec for a in fon.on_event(WorkerIdle(3.5, worker=3), view)} <= {r.spec for r in LADDER}


def test_fon_keeps_free_workers_back_for_a_rescheduling_scheduler() -> None:
    view = fon_view()
    fon = FastestOfN(max_batch=32, ladder_source=lambda v, rids: LADDER, reserve=1.0)
    fon.on_event(StepStarted(0.0, 0, 0, (0, 1, 3)), view)
    # three requests in flight keep three free workers back: one free worker races nothing
    assert fon.on_event(WorkerIdle(1.0, worker=2), view) == []
    # a fixed ladder from an owner (SpecActor's use) works the same way
    owned = FastestOfN(max_batch=1)
    owned.start((0, 1, 3), LADDER, reserved={0: 3})
    assert owned.on_event(WorkerIdle(1.0, worker=3), view) == []  # lent worker 3 is not free yet
    assert replicas(owned.on_event(WorkerIdle(1.0, worker=2), view)) == [(1, "suffix", 2)]


@dataclass
class CostView(FakeView):
    """FakeView with a per-method drafting cost per draft token."""

    draft_step: dict[str, float] = field(default_factory=dict)

    def draft_cost(self, method: str, num_seqs: float, context_tokens: float, gamma: int) -> float:
        return self.draft_step[method] * gamma


def drafter_setup(
    batch: int, methods: frozenset[str] | None = None, **kw: object
) -> tuple[BestDrafter, CostView]:
    view = CostView(workers=FakeView.make(1).workers, draft_step={"suffix": 0.0, "draft_small": 0.002})
    if methods is not None:
        view.methods = methods
    view.set_worker(0, running=batch, kv_used_tokens=100 * batch)
    for rid in range(batch):
        view.add_request(rid, None, state="unassigned", prompt_id=rid)
    drafter = BestDrafter(("suffix", "draft_small"), multi_path=False, **kw)  # type: ignore[arg-type]
    drafter.on_event(StepStarted(0.0, 0, 0, tuple(range(batch))), view)
    for rid in range(batch):  # placed by another part, then applied by the executor
        view.add_request(rid, 0, prompt_id=rid)
    return drafter, view


def hand_rate(view: CostView, batch: int, method: str, p: float) -> float:
    """Best tokens per second of one method over the depth grid, computed by hand."""
    return max(
        expected_accept_len(p, d)
        / (view.cost(batch, batch * (d + 1), 100 * batch) + view.draft_cost(method, batch, 0, d))
        for d in DEPTHS
    )


def test_drafter_choice_picks_the_best_expected_throughput_per_request() -> None:
    drafter, view = drafter_setup(batch=1)
    # request 0 drafts badly with the suffix tree: its evidence (1000 iterations at depth 4,
    # 250 tokens accepted, i.e. p = 0.2) outweighs the pooled value
    drafter.record(0, "suffix", depth=4, ratio=1.0, drafted=4000, accepted=250)
    assert drafter.acceptance(0, "suffix") == pytest.approx(0.2, abs=0.02)
    assert drafter.acceptance(0, "draft_small") == pytest.approx(0.6)  # never ran: the prior
    p_suffix, p_small = drafter.acceptance(0, "suffix"), drafter.acceptance(0, "draft_small")
    assert hand_rate(view, 1, "draft_small", p_small) > hand_rate(view, 1, "suffix", p_suffix)
    actions = drafter.configure(0, view)
    (spec,) = [a.spec for a in actions if isinstance(a, SetSpec)]
    assert spec.method == "draft_small"
    assert expected_accept_len(p_small, spec.gamma) / (
        view.cost(1, spec.gamma + 1, 100) + view.draft_cost("draft_small", 1, 0, spec.gamma)
    ) == pytest.approx(hand_rate(view, 1, "draft_small", p_small))
    # good suffix evidence turns it around
    drafter.record(0, "suffix", depth=4, ratio=1.0, drafted=40000, accepted=30000)
    assert [a.spec.method for a in drafter.configure(0, view) if isinstance(a, SetSpec)] == ["suffix"]


def test_methods_the_executor_lacks_are_never_asked_for() -> None:
    # as in the test above request 0 would take the draft model, but this executor has
    # only the suffix tree (vLLM's CPU backend, say)
    drafter, view = drafter_setup(batch=1, methods=frozenset({"suffix", "ngram"}))
    drafter.record(0, "suffix", depth=4, ratio=1.0, drafted=4000, accepted=250)
    used = {a.spec.method for a in drafter.configure(0, view) if isinstance(a, SetSpec)}
    assert used <= {"suffix", None}
    assert [r.method for r in drafter.ladder(view, [0])] == ["suffix"]
    # fixed to a method the executor lacks: plain decoding
    drafter, view = drafter_setup(batch=1, methods=frozenset({"suffix"}), fixed="draft_small")
    assert drafter.configure(0, view) == []


def test_a_request_better_off_plain_is_told_so_on_a_speculating_worker() -> None:
    drafter, view = drafter_setup(batch=3)
    view.t_per_token = 2e-3  # verification is dear: only requests that draft well gain
    for m in ("suffix", "draft_small"):
        drafter.record(0, m, depth=4, ratio=1.0, drafted=4000, accepted=0)  # never accepted
    for rid in (1, 2):
        drafter.record(rid, "suffix", depth=4, ratio=1.0, drafted=4000, accepted=3900)
    specs = {(a.worker, a.request): a.spec for a in drafter.configure(0, view) if isinstance(a, SetSpec)}
    assert specs[(0, None)].method == "suffix"  # the worker takes the majority's choice ...
    assert specs[(None, 0)] == SPEC_PLAIN  # ... and request 0 is kept off it, as its rate assumed
    assert set(specs) == {(0, None), (None, 0)}


def test_a_draft_model_one_request_wants_is_dropped_when_the_batch_pays_more_for_it() -> None:
    drafter, view = drafter_setup(batch=2)
    drafter.record(0, "suffix", depth=4, ratio=1.0, drafted=4000, accepted=250)  # p = 0.2
    drafter.record(1, "suffix", depth=4, ratio=1.0, drafted=4000, accepted=3000)  # p ~ 0.8
    # alone, request 0 would take the draft model ...
    p0 = {m: drafter.acceptance(0, m) for m in ("suffix", "draft_small")}
    assert drafter.best_arm(view, 2, 200.0, p0)[0].method == "draft_small"  # type: ignore[union-attr]
    # ... but its draft pass would slow request 1's iterations too: both use the suffix tree
    actions = drafter.configure(0, view)
    specs = [(a.worker, a.request, a.spec.method) for a in actions if isinstance(a, SetSpec)]
    assert specs[0] == (0, None, "suffix")
    assert all(a.spec.method in ("suffix", None) for a in actions if isinstance(a, SetSpec))


def test_full_batches_get_one_setting_and_history_needs_an_earlier_epoch() -> None:
    view = CostView(workers=FakeView.make(1).workers, draft_step={"suffix": 0.0, "history": 0.0})
    view.set_worker(0, running=500, kv_used_tokens=10**5)
    view.t_per_token = 1e-3  # verification is expensive at this batch: plain decoding wins
    drafter = BestDrafter(("suffix", "history"), per_request_batch=64)
    view.add_request(0, None, state="unassigned")
    drafter.on_event(StepStarted(0.0, 0, 0, (0,)), view)
    view.add_request(0, 0)  # placed
    assert drafter.configure(0, view) == []  # plain, as the worker already is
    view.t_per_token = 1e-7  # nearly free verification: the whole worker speculates, in one action
    view.add_request(0, None, state="unassigned")
    drafter.on_event(StepStarted(1.0, 1, 0, (0,)), view)  # cost tables are kept per step
    view.add_request(0, 0)
    (action,) = drafter.configure(0, view)
    assert isinstance(action, SetSpec) and action.worker == 0 and action.request is None
    assert action.spec.method == "suffix"  # no earlier epoch: no history drafting
    assert drafter.ladder(view, [0]) and all(r.method != "history" for r in drafter.ladder(view, [0]))


@pytest.mark.parametrize("depth", [-1, 0, *DEPTHS, 64])
def test_p_from_tau_is_the_bisection_exactly(depth: int) -> None:
    rng = np.random.default_rng(depth + 2)
    taus = [*rng.uniform(0.0, depth + 3.0, 2000), 0.0, 1.0, depth + 1.0, float("inf"), float("nan")]
    tables = tau_table(depth)
    if depth >= 1:
        assert tables is not None  # non-decreasing on the grid: the fast path is taken
        table = tables[1]
        for i in [*rng.integers(0, len(table), 1000), 0, 254, 255, 256, len(table) - 1]:
            taus += [table[i], np.nextafter(table[i], 0.0), np.nextafter(table[i], np.inf)]
    for tau in map(float, taus):
        got, want = p_from_tau(tau, depth), p_from_tau_bisect(tau, depth)
        assert got == want or (got != got and want != want), (tau, depth)


def test_assignment_rescans_only_what_a_dropped_method_can_change() -> None:
    """Choices derived from a superset's (the greedy loop's trials) equal full scans, near
    ties included (a rate within the 1e-9 tolerance of another's)."""
    rng = np.random.default_rng(0)
    methods = ["suffix", "history", "draft_small", "eagle"]
    arm = BestDrafter().arms(FakeView.make(1), 1, 100.0)[0]
    for _ in range(200):
        options = []
        for _ in range(12):
            base = rng.uniform(1.0, 2.0)
            opts = [
                Option(m, arm, base * (1 + rng.choice([0.0, 5e-10, 1.5e-9, 1e-3, -1e-3])), 0.5)
                for m in methods
                if rng.random() < 0.8
            ]
            options.append(opts)
        threshold = rng.uniform(0.9, 1.5)
        full = frozenset(methods)
        trial = Assignment(FakeView.make(1), 12, 100.0, options, threshold)
        trial.choice(full)
        for m in methods:
            derived = trial.choice(full - {m}, full)
            assert derived == Assignment(FakeView.make(1), 12, 100.0, options, threshold).choice(full - {m})
            for m2 in methods:
                if m2 != m:
                    smaller = full - {m, m2}
                    want = Assignment(FakeView.make(1), 12, 100.0, options, threshold).choice(smaller)
                    assert trial.choice(smaller, full - {m}) == want


@settings(max_examples=300, deadline=None)
@given(tau=st.floats(min_value=0.0, max_value=20.0), depth=st.sampled_from(DEPTHS))
def test_p_from_tau_is_the_bisection_for_any_tau(tau: float, depth: int) -> None:
    assert p_from_tau(tau, depth) == p_from_tau_bisect(tau, depth)


class ReferenceDrafter(BestDrafter):
    """BestDrafter's decisions computed the straightforward way, as first written: evidence
    converted by bisection at every read, every request's best arm by a scan of every arm
    for every trial of the greedy loop, one worker rate per trial, nothing shared between
    requests or memoised across calls. The fast path must match it exactly."""

    def _reset(self) -> None:
        super()._reset()
        self._read: dict[int, tuple[int, int]] = {}

    def record(self, rid: int, method: str, depth: int, ratio: float, drafted: int, accepted: int) -> None:
        if drafted <= 0 or depth <= 0:
            return
        iterations = drafted / depth
        p = min(P_MAX, p_from_tau_bisect(1.0 + accepted / iterations, depth) / ratio)
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

    def _observe_request(self, rid: int, view: ClusterView, worker: int | None) -> None:
        rv = view.request(rid)
        self._prompt[rid] = rv.prompt_id
        d0, a0 = self._read.get(rid, (0, 0))
        self._read[rid] = (rv.drafted_tokens, rv.accepted_tokens)
        spec = rv.spec
        if spec.plain:
            return
        if not spec.enabled and worker is not None:
            spec = self.default.get(worker, SPEC_OFF)
        if not spec.enabled or spec.method is None:
            return
        ratio = self._ratio.get(spec.topk, 1.0) if spec.method == MULTI_PATH else 1.0
        self.record(rid, spec.method, spec.gamma, ratio, rv.drafted_tokens - d0, rv.accepted_tokens - a0)

    def ref_arms(self, view: ClusterView, batch: int, context: float) -> list[Arm]:
        b, ctx = self._key(batch, context)
        out = []
        for m in self.methods:
            for k in PATHS if self.multi_path and m == MULTI_PATH else (1,):
                for d in DEPTHS:
                    t = view.cost(b, b * (k * d + 1), ctx) + view.draft_cost(m, b * k, ctx * k, d)
                    spec = SpecConfig(method=m, gamma=d, topk=k, verify_tokens=k * d if k > 1 else 0)
                    out.append(Arm(spec, t, self._ratio.get(k, 1.0) if m == MULTI_PATH else 1.0))
        return out

    def ref_best(
        self, view: ClusterView, batch: int, ctx: float, p_of: dict[str, float]
    ) -> tuple[Arm | None, float]:
        best, best_rate = None, -1.0
        arms = self.ref_arms(view, batch, ctx)
        for m, p in p_of.items():
            got: tuple[Arm | None, float] = (None, -1.0)
            for arm in arms:
                if arm.method == m:
                    rate = arm.tokens(round(p * 200) / 200) / arm.time_s
                    if rate > got[1] * (1 + 1e-9):
                        got = (arm, rate)
            if got[1] > best_rate * (1 + 1e-9):
                best, best_rate = got
        return best, best_rate

    def configure(
        self, worker: int, view: ClusterView, batch: int | None = None, context: float | None = None
    ) -> list[Action]:
        wv = view.worker(worker)
        b = batch if batch is not None else wv.running + wv.waiting
        if b <= 0:
            return []
        ctx = context if context is not None else float(max(wv.kv_used_tokens, b))
        key = self._key(b, ctx)
        plain = view.cost(key[0], key[0], key[1])
        rids = self.placed(worker, view)
        if b > self.per_request_batch or not rids:
            allowed_methods = (self.fixed,) if self.fixed else self._allowed()
            if self.fixed and self.fixed not in view.draft_methods:
                allowed_methods = ()
            arm, rate = self.ref_best(view, b, ctx, {m: self.pooled(m) for m in allowed_methods})
            return self.ref_set_worker(
                view, worker, arm if arm is not None and rate > (1 + 1e-9) / plain else None, rids
            )
        for rid in rids:
            self._observe_request(rid, view, worker)
        pooled = {m: self.pooled(m) for m in self._allowed() if self.fixed is None or m == self.fixed}
        p_req = {
            rid: {
                m: self._blend(rid, m, pm)
                for m, pm in pooled.items()
                if m != "history" or self._history.get(self._prompt.get(rid, -1), False)
            }
            for rid in rids
        }

        def choose(allowed: set[str]) -> dict[int, Arm | None]:
            out: dict[int, Arm | None] = {}
            for rid, ps in p_req.items():
                arm, rate = self.ref_best(view, b, ctx, {m: p for m, p in ps.items() if m in allowed})
                out[rid] = arm if arm is not None and rate > (1 + 1e-9) / plain else None
            return out

        def worker_rate(choice: dict[int, Arm | None]) -> float:
            tokens, verify = float(b - len(choice)), float(b)
            drafters: dict[str, tuple[int, int, int]] = {}
            for rid, arm in choice.items():
                if arm is None:
                    tokens += 1.0
                    continue
                tokens += arm.tokens(p_req[rid][arm.method])
                verify += arm.spec.tokens_verified
                n, d, k = drafters.get(arm.method, (0, 0, 1))
                drafters[arm.method] = (n + 1, max(d, arm.spec.gamma), max(k, arm.spec.topk))
            t = view.cost(b, verify, ctx)
            for m, (n, d, k) in drafters.items():
                t += view.draft_cost(m, n * k, ctx * n / b * k, d)
            return tokens / t

        allowed = set(pooled)
        best_choice: dict[int, Arm | None] = {}
        best_total = -1.0
        while True:
            choice = choose(allowed)
            total = worker_rate(choice)
            if total <= best_total * (1 + 1e-9):
                break
            best_choice, best_total = choice, total
            costly = {a.method for a in choice.values() if a is not None and a.method not in MODEL_FREE}
            trials = [(worker_rate(choose(allowed - {m})), m) for m in sorted(costly)]
            if not trials:
                break
            rate, drop = max(trials)
            if rate <= best_total * (1 + 1e-9):
                break
            allowed = allowed - {drop}
        return self.ref_apply(worker, best_choice, rids)

    def ref_set_worker(
        self, view: ClusterView, worker: int, arm: Arm | None, rids: list[int]
    ) -> list[Action]:
        out: list[Action] = []
        spec = arm.spec if arm is not None else SPEC_OFF
        changed = self.default.get(worker, SPEC_OFF) != spec
        for rid in rids:
            if changed or rid in self.override:
                self._observe_request(rid, view, worker)
        if changed:
            self.default[worker] = spec
            out.append(SetSpec(spec=spec, worker=worker))
        for rid in rids:
            if self.override.pop(rid, None) is not None:
                out.append(SetSpec(spec=SPEC_OFF, request=rid))
        return out

    def ref_apply(self, worker: int, choice: dict[int, Arm | None], rids: list[int]) -> list[Action]:
        counts: dict[SpecConfig, int] = {}
        for arm in choice.values():
            spec = arm.spec if arm is not None else SPEC_OFF
            counts[spec] = counts.get(spec, 0) + 1
        key = lambda s: (s.method or "", s.gamma, s.topk)  # noqa: E731
        default = max(sorted(counts, key=key), key=lambda s: counts[s]) if counts else SPEC_OFF
        out: list[Action] = []
        if self.default.get(worker, SPEC_OFF) != default:
            self.default[worker] = default
            out.append(SetSpec(spec=default, worker=worker))
        for rid in rids:
            arm = choice.get(rid)
            if arm is None:
                want = SPEC_PLAIN if default.enabled else None
            else:
                want = arm.spec if arm.spec != default else None
            if want == self.override.get(rid):
                continue
            if want is None:
                del self.override[rid]
                out.append(SetSpec(spec=SPEC_OFF, request=rid))
            else:
                self.override[rid] = want
                out.append(SetSpec(spec=want, request=rid))
        return out


@dataclass
class DrafterView(CostView):
    """CostView whose verification also pays per context token, with earlier epochs for
    some prompts and a group size (the suffix tree's multi-path gain depends on it)."""

    t_per_ctx: float = 0.0
    with_history: frozenset[int] = frozenset()
    group_size: int = 1

    @property
    def info(self) -> ModelInfo:
        return ModelInfo(model="m", gpu="g", tp=1, group_size=self.group_size, temperature=1.0)

    def cost(self, num_seqs: float, new_tokens: float, context_tokens: float) -> float:
        return self.t_base + self.t_per_token * new_tokens + self.t_per_ctx * context_tokens

    def draft_cost(self, method: str, num_seqs: float, context_tokens: float, gamma: int) -> float:
        return self.draft_step[method] * gamma * (1.0 + 1e-6 * context_tokens)

    def history(self, prompt_id: int) -> PromptHistory:
        return PromptHistory(lengths=((100,),)) if prompt_id in self.with_history else PromptHistory()


def _advance(view: DrafterView, rng: np.random.Generator, worker: int, rids: list[int]) -> None:
    """Some iterations for every request on the worker, drafting at its current setting."""
    for rid in rids:
        rv = view.requests[rid]
        spec = rv.spec if rv.spec.enabled else view.workers[worker].spec
        iters = int(rng.integers(0, 60))
        drafted = spec.tokens_verified * iters if spec.enabled else 0
        accepted = int(rng.binomial(drafted, rng.uniform(0.05, 0.95))) if drafted else 0
        view.requests[rid] = rv._replace(
            generated=rv.generated + iters + accepted,
            drafted_tokens=rv.drafted_tokens + drafted,
            accepted_tokens=rv.accepted_tokens + accepted,
        )
    ctx = sum(view.requests[r].prompt_len + view.requests[r].generated for r in rids)
    view.set_worker(worker, running=len(rids), kv_used_tokens=ctx)


def _apply_to(view: DrafterView, actions: list[Action]) -> None:
    for a in actions:
        assert isinstance(a, SetSpec)
        if a.request is not None:
            view.requests[a.request] = view.requests[a.request]._replace(spec=a.spec)
        else:
            assert a.worker is not None
            view.set_worker(a.worker, spec=a.spec)


@settings(max_examples=150, deadline=None)
@given(
    methods=st.sampled_from(
        [
            ("suffix",),
            ("suffix", "draft_small"),
            ("suffix", "history", "eagle"),
            ("suffix", "history", "draft_small", "eagle"),
            ("draft_small", "eagle"),
        ]
    ),
    fixed_first=st.booleans(),
    per_request_batch=st.sampled_from([0, 3, 64]),
    multi_path=st.booleans(),
    group_size=st.integers(1, 16),
    seed=st.integers(0, 2**32 - 1),
)
def test_fast_configuration_matches_the_straightforward_reference(
    methods: tuple[str, ...],
    fixed_first: bool,
    per_request_batch: int,
    multi_path: bool,
    group_size: int,
    seed: int,
) -> None:
    """Random evidence, costs and events on two workers: the actions, the requests' own
    evidence and the pooled evidence of BestDrafter equal ReferenceDrafter's exactly."""
    rng = np.random.default_rng(seed)
    kw = {
        "fixed": methods[0] if fixed_first else None,
        "per_request_batch": per_request_batch,
        "multi_path": multi_path,
    }
    fast, ref = BestDrafter(methods, **kw), ReferenceDrafter(methods, **kw)  # type: ignore[arg-type]
    costs = {"suffix": 0.0, "history": 0.0, **{m: float(rng.uniform(0.0, 0.004)) for m in MODEL_COSTS}}
    view = DrafterView(
        workers=FakeView.make(2).workers,
        draft_step=costs,
        group_size=group_size,
        t_per_ctx=float(rng.choice([0.0, 1e-7])),
    )
    view.t_per_token = float(10 ** rng.uniform(-6.5, -3.5))
    rid = 0
    for step in range(2):
        rids = list(range(rid, rid + int(rng.integers(1, 12))))
        rid = rids[-1] + 1
        on = {w: [r for r in rids if r % 2 == w] for w in (0, 1)}
        view.with_history = frozenset(int(p) for p in rng.choice(rids, int(rng.integers(0, len(rids) + 1))))
        for r in rids:
            view.add_request(r, r % 2, prompt_id=r, prompt_len=int(rng.integers(10, 4000)))
        for w in (0, 1):
            view.set_worker(w, running=len(on[w]), spec=SPEC_OFF)
        start = StepStarted(float(step), step, 0, tuple(rids))
        place = [Assign(request=r, worker=r % 2) for r in rids]
        for d in (fast, ref):
            d.observe(place)
        got, want = fast.on_event(start, view), ref.on_event(start, view)
        assert got == want
        _apply_to(view, got)
        for t in range(int(rng.integers(1, 8))):
            w = int(rng.integers(0, 2))
            _advance(view, rng, w, on[w])
            if on[w] and rng.random() < 0.3:  # a request leaves its worker
                gone = on[w].pop(int(rng.integers(0, len(on[w]))))
                view.requests[gone] = view.requests[gone]._replace(state="finished")
                event: Event = RequestFinished(t + 0.5, request=gone, worker=w, length=1)
                view.set_worker(w, running=len(on[w]))
            else:
                event = Tick(t + 0.5, worker=w, iteration=t)
            got, want = fast.on_event(event, view), ref.on_event(event, view)
            assert got == want
            assert fast.own == ref.own and fast.pool == ref.pool
            _apply_to(view, got)


def test_scheduler_worker_choice_is_the_least_key() -> None:
    """`ReplicaAwareScheduler._select_worker` against its definition: the least
    (runs replicas, reserved share, running, worker) among the workers the chunk fits."""
    rng = np.random.default_rng(1)
    sched = ReplicaAwareScheduler("fifo", max_seqs=4, kv_margin=0.1)
    for _ in range(300):
        n = int(rng.integers(1, 12))
        sched._caps = [int(c) for c in rng.choice([1000, 2000], n)]
        sched._loads = [
            WorkerLoad(reserved=int(rng.choice([0, 500, 900, 1500])), running=int(rng.integers(0, 5)))
            for _ in range(n)
        ]
        sched._replica_load = {int(w): int(rng.integers(0, 2)) for w in rng.integers(0, n, 3)}
        need = int(rng.choice([50, 200, 700]))
        fits = [
            w
            for w, ld in enumerate(sched._loads)
            if ld.running < 4 and (ld.reserved + need <= sched._caps[w] * 0.9 or ld.running == 0)
        ]
        key = {
            w: (
                sched._replica_load.get(w, 0) > 0,
                sched._loads[w].reserved / sched._caps[w],
                sched._loads[w].running,
                w,
            )
            for w in fits
        }
        assert sched._select_worker(need) == (min(fits, key=key.__getitem__) if fits else None)


def test_scheduler_releases_a_chunk_won_by_a_replica_where_it_was_reserved() -> None:
    view = FakeView.make(2)
    for rid in range(3):
        view.add_request(rid, None, state="unassigned", prompt_id=0, sample=rid, max_tokens=1000)
    sched = ReplicaAwareScheduler("fifo", chunk_tokens=500, max_seqs=1)
    placed = [(a.request, a.worker) for a in sched.on_event(StepStarted(0.0, 0, 0, (0, 1, 2)), view)]
    assert placed == [(0, 0), (1, 1)]  # request 2 waits in the buffer
    # a replica of request 0 on worker 1 wins: worker 0's slot frees, worker 1's is untouched
    sched.observe([LaunchReplica(request=0, worker=1, spec=SUFFIX)])
    view.add_request(0, 1, state="finished", prompt_id=0)
    got = sched.on_event(RequestFinished(1.0, request=0, worker=1, length=700), view)
    assert [(a.request, a.worker) for a in got] == [(2, 0)]
    assert sched._loads[1].running == 1 and sched._loads[0].running == 1
    # a request finished by a replica while buffered leaves the buffer
    sched2 = ReplicaAwareScheduler("fifo", chunk_tokens=500, max_seqs=1)
    view2 = FakeView.make(1)
    for rid in range(2):
        view2.add_request(rid, None, state="unassigned", prompt_id=0, sample=rid, max_tokens=1000)
    sched2.on_event(StepStarted(0.0, 0, 0, (0, 1)), view2)
    view2.add_request(1, 0, state="finished", prompt_id=0)
    assert sched2.on_event(RequestFinished(1.0, request=1, worker=0, length=300), view2) == []
    view2.add_request(0, 0, state="finished", prompt_id=0)
    assert sched2.on_event(RequestFinished(2.0, request=0, worker=0, length=300), view2) == []
    assert sched2._loads[0].running == 0


# ------------------------------------------------------------------------ simulator

ACCEPT_METHODS = ("suffix", "draft_small", "eagle")


def long_tail_trace(seed: int = 0):
    rng = np.random.default_rng(seed)
    lengths = np.concatenate([random_lengths(seed + 1, 56, lo=100, hi=1500), np.full(8, 6000)])
    accept = {m: rng.beta(6, 4, 64) for m in ACCEPT_METHODS}
    return make_trace(make_frame(lengths, group_size=8, accept=accept), group_size=8, model="qwen2.5-32b")


def test_composite_conserves_tokens_is_deterministic_and_not_slower_than_seer_context() -> None:
    trace = long_tail_trace()
    setup = make_setup(trace, cluster="h100x16")
    spec = "composite:chunk_tokens=1024,methods=suffix/draft_small/eagle"
    a, b = run_policy(setup, spec), run_policy(setup, spec)
    req = pd.concat(a.requests)
    assert req["finish_s"].notna().all()
    assert a.steps[0].output_tokens == int(trace.df["response_len"].sum())
    assert (req["accepted"] <= req["drafted"]).all() and a.steps[0].mean_accept_len > 1.5
    pd.testing.assert_frame_equal(req, pd.concat(b.requests))
    assert a.steps[0].rollout_makespan_s == b.steps[0].rollout_makespan_s
    seer = run_policy(setup, "seer-divided-context:chunk_tokens=1024")
    assert a.steps[0].rollout_makespan_s <= seer.steps[0].rollout_makespan_s
    assert a.counters.get("preemptions", 0) == 0


def test_fon_races_a_lone_straggler_on_spare_workers_in_the_simulator() -> None:
    rng = np.random.default_rng(1)
    lengths = np.concatenate([np.full(15, 200), [5000]])
    accept = {m: rng.beta(6, 4, 16) for m in ACCEPT_METHODS}
    trace = make_trace(make_frame(lengths, group_size=4, accept=accept), model="qwen2.5-32b")
    setup = make_setup(trace, cluster="h100x16")
    runs = {
        name: run_policy(setup, f"{name}:chunk_tokens=1024,methods=suffix/draft_small/eagle")
        for name in ("composite", "composite-no-fon")
    }
    fon = runs["composite"]
    assert fon.counters.get("replicas", 0) >= 2  # one per other method, on idle workers
    assert runs["composite-no-fon"].counters.get("replicas", 0) == 0
    assert fon.steps[0].output_tokens == int(lengths.sum())
    assert pd.concat(fon.requests)["finish_s"].notna().all()


@pytest.mark.parametrize("name", list(VARIANTS))
def test_variants_are_registered_with_parameters(name: str) -> None:
    policy = make_policy(f"{name}:fon_max_batch=2,methods=suffix/eagle,per_request_batch=8")
    params = policy.params()
    assert params["methods"] == ["suffix", "eagle"] and params["fon_max_batch"] == 2
    parts = {type(p).__name__: p for p in policy.parts}  # type: ignore[attr-defined]
    assert parts["BestDrafter"].methods == ("suffix", "eagle")
    assert params["fon"] == ("FastestOfN" in parts) == (name != "composite-no-fon")
    assert "suffix" in policy.draft_rules
    assert (
        params["fixed"]
        == parts["BestDrafter"].fixed
        == ("suffix" if name == "composite-fixed-drafter" else None)
    )
