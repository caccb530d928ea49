"""The best drafter's fast paths against their straightforward forms, exactly (issue #17's
speed work changes no result): `_observe` (memoised readings of each setting and
integer-keyed conversions) against `record` per request, the best-arm scan with a cached
bar against the plain scan, arms' interned settings against fresh ones, and a worker's
mixed-batch rate (dict tallies) against a Counter-based one."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simctl.policies.best_drafter import MODEL_FREE, BestDrafter
from simctl.policies.contract import SPEC_OFF, SPEC_PLAIN, SpecConfig
from simctl.policies.drafter_arms import MULTI_PATH, Arm
from simctl.policies.drafter_assignment import Assignment, Option
from simctl.policies.seer_spec import DEPTHS, PATHS
from tests.policies.fakes import FakeView

SETTINGS = [
    SPEC_OFF,
    SPEC_PLAIN,
    SpecConfig(method="suffix", gamma=4),
    SpecConfig(method="suffix", gamma=4, topk=2, verify_tokens=8),
    SpecConfig(method="suffix", gamma=3, topk=4, verify_tokens=12),
    SpecConfig(method="draft_small", gamma=3),
    SpecConfig(method="eagle", gamma=6),
    SpecConfig(method="eagle", gamma=0),  # not enabled: follows its worker
]


def _reference_read(
    ref: BestDrafter, seen: dict[int, tuple[int, int]], rid: int, view: FakeView, worker: int
) -> None:
    """One request's read, as first written: the counters since the last read credited
    by `record` to the setting the request ran with (its own, else its worker's)."""
    rv = view.requests[rid]
    d0, a0 = seen.get(rid, (0, 0))
    seen[rid] = (rv.drafted_tokens, rv.accepted_tokens)
    spec = rv.spec
    if spec.plain:
        return
    if not spec.enabled:
        spec = ref.default.get(worker, SPEC_OFF)
    if not spec.enabled or spec.method is None:
        return
    ratio = ref._ratio.get(spec.topk, 1.0) if spec.method == MULTI_PATH else 1.0
    ref.record(rid, spec.method, spec.gamma, ratio, rv.drafted_tokens - d0, rv.accepted_tokens - a0)


def _plain_scan(arms: list[Arm], level: int) -> tuple[Arm | None, float]:
    """The straightforward best-arm scan `_best_of_method` must agree with."""
    best: tuple[Arm | None, float] = (None, -1.0)
    for arm in arms:
        rate = arm.tokens(level / 200) / arm.time_s
        if rate > best[1] * (1 + 1e-9):
            best = (arm, rate)
    return best


@settings(max_examples=120, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), reads=st.integers(1, 12), worker_setting=st.sampled_from(SETTINGS))
def test_observe_equals_record_per_request(seed: int, reads: int, worker_setting: SpecConfig) -> None:
    """Random counters and settings (plain, following the worker, chains, multi-path trees,
    counters that go back: a negative accepted count): `_observe` credits what `record`
    would, request by request, and returns each request's evidence."""
    rng = np.random.default_rng(seed)
    view = FakeView.make(1)
    fast, ref = BestDrafter(), BestDrafter()
    for d in (fast, ref):
        d._ratio = {1: 1.0, 2: 1.13, 4: 1.27}
        d.default[0] = worker_setting
    seen: dict[int, tuple[int, int]] = {}
    rids = list(range(int(rng.integers(1, 9))))
    for rid in rids:
        view.add_request(rid, 0)
    for _ in range(reads):
        for rid in rids:
            rv = view.requests[rid]
            drafted = rv.drafted_tokens + int(rng.choice([0, 4, 8, 128, 384, int(rng.integers(1, 999))]))
            accepted = rv.accepted_tokens + int(rng.integers(-3, drafted - rv.drafted_tokens + 1))
            spec = SETTINGS[int(rng.integers(0, len(SETTINGS)))] if rng.random() < 0.3 else rv.spec
            view.requests[rid] = rv._replace(drafted_tokens=drafted, accepted_tokens=accepted, spec=spec)
        chosen = [r for r in rids if rng.random() < 0.8]
        owns = fast._observe(chosen, view, 0)
        for rid in chosen:
            _reference_read(ref, seen, rid, view, 0)
        assert fast.own == ref.own and fast.pool == ref.pool
        assert all(own is fast.own.get(rid) for rid, own in zip(chosen, owns, strict=True))


def test_record_after_a_read_is_seen_by_the_next_read() -> None:
    """`record` for a request already read (no evidence yet) and a read afterwards: the
    read returns and fades the recorded evidence."""
    view = FakeView.make(1)
    view.add_request(0, 0, spec=SpecConfig(method="suffix", gamma=4))
    drafter = BestDrafter()
    assert drafter._observe([0], view, 0) == [None]
    drafter.record(0, "eagle", 4, 1.0, 40, 20)
    view.requests[0] = view.requests[0]._replace(drafted_tokens=8, accepted_tokens=4)
    (own,) = drafter._observe([0], view, 0)
    assert own is drafter.own[0] and set(own) == {"eagle", "suffix"}
    assert own["eagle"][0] < 10.0  # faded by the read's 2 iterations


@settings(max_examples=200, deadline=None)
def _eagle_arms() -> tuple[BestDrafter, FakeView, Any, list]:
    """A one-method drafter, its view, the key of a worker at batch 4 and 1,000 context
    tokens, and that key's EAGLE arms."""
    drafter = BestDrafter(("eagle",))
    view = FakeView.make(1)
    key = drafter._key(4, 1000.0)
    return drafter, view, key, drafter._method_arms(view, key, "eagle")


@given(
    times=st.lists(st.floats(1e-4, 1.0), min_size=1, max_size=24),
    level=st.integers(0, 200),
    tie=st.floats(0.0, 3e-9),
)
def test_best_of_method_is_the_plain_scan(times: list[float], level: int, tie: float) -> None:
    """The scan with a cached bar picks what `rate > best * (1 + 1e-9)` picks, near ties
    included (rates within the tolerance of one another)."""
    drafter, view, key, arms = _eagle_arms()
    n = min(len(arms), len(times))
    tokens = [arm.tokens(level / 200) for arm in arms[:n]]
    # arms with equal rates up to `tie` (relative): t = tokens / rate
    rates = [1.0 + (tie if i % 2 else 0.0) for i in range(n)] if tie else None
    drafter._arms_by_method[key]["eagle"] = [
        Arm(arm.spec, tokens[i] / rates[i] if rates else times[i], arm.ratio)
        for i, arm in enumerate(arms[:n])
    ]
    got = drafter._best_of_method(view, key, "eagle", level)
    best = _plain_scan(drafter._arms_by_method[key]["eagle"], level)
    assert got[0] is best[0] and got[1] == best[1]


def test_arms_settings_are_interned_and_equal_fresh_ones() -> None:
    """An arm's setting is the one object per (method, depth, paths), equal to the setting
    built directly, at every worker state and in every part."""
    view = FakeView.make(1)
    a, b = BestDrafter(), BestDrafter()
    for arm, other in zip(a.arms(view, 3, 1000.0), b.arms(view, 7, 5e4), strict=True):
        spec = arm.spec
        k, d = spec.topk, spec.gamma
        assert spec is other.spec
        assert spec == SpecConfig(method=spec.method, gamma=d, topk=k, verify_tokens=k * d if k > 1 else 0)
    assert {(x.spec.method, x.spec.gamma, x.spec.topk) for x in a.arms(view, 3, 1000.0)} >= {
        (MULTI_PATH, d, k) for d in DEPTHS for k in PATHS
    }


def _counter_rate(trial: Assignment, choice: list[Option | None]) -> float:
    """A worker's rate under `choice` as first written (Counter tallies)."""
    batch, ctx = trial.batch, trial.ctx
    tokens = float(batch - len(choice))
    for o in choice:
        tokens += 1.0 if o is None else o.arm.tokens(o.p)
    chosen = [o.arm for o in choice if o is not None]
    uses = Counter(map(id, chosen))
    arms = {id(arm): arm for arm in chosen}
    verify = float(batch)
    drafters: dict[str, tuple[int, int, int]] = {}
    for i, arm in arms.items():
        verify += arm.spec.tokens_verified * uses[i]
        n, d, k = drafters.get(arm.method, (0, 0, 1))
        drafters[arm.method] = (n + uses[i], max(d, arm.spec.gamma), max(k, arm.spec.topk))
    t = trial.view.cost(batch, verify, ctx)
    for m, (n, d, k) in drafters.items():
        t += trial.view.draft_cost(m, n * k, ctx * n / batch * k, d)
    return tokens / t


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_worker_rate_equals_the_counter_form(seed: int) -> None:
    """Random options on a worker: `Assignment.rate` equals the Counter-based rate."""
    rng = np.random.default_rng(seed)
    view = FakeView.make(1)
    arms = BestDrafter(("suffix", "draft_small", "eagle")).arms(view, 12, 3000.0)
    options = []
    for _ in range(int(rng.integers(1, 12))):
        picks = rng.choice(len(arms), int(rng.integers(1, 4)), replace=False)
        options.append(
            [
                Option(arms[i].method, arms[i], float(rng.uniform(0.5, 3.0)), float(rng.uniform(0, 1)))
                for i in picks
            ]
        )
    allowed = frozenset(o.method for opts in options for o in opts)
    trial = Assignment(view, 12, 3000.0, options, float(rng.uniform(0.5, 2.0)))
    got = trial.rate(allowed)
    want = _counter_rate(trial, trial.choice(allowed))
    assert got == want or (math.isnan(got) and math.isnan(want))


@settings(max_examples=300, deadline=None)
@given(
    rates=st.lists(
        st.one_of(st.sampled_from([0.0, 1.0, 1.0 + 1e-9, 1.0 + 2e-9, 1.0 + 3e-9]), st.floats(0.0, 5.0)),
        min_size=1,
        max_size=24,
    ),
    level=st.integers(0, 200),
)
def test_best_of_method_equals_the_scan_for_any_rates(rates: list[float], level: int) -> None:
    """`_best_of_method`'s shortcut (the highest rate when no other is within 1 + 2e-9 of
    it) against the plain scan, for rates with exact and near ties and zeros anywhere."""
    drafter, view, key, arms = _eagle_arms()
    n = min(len(arms), len(rates))
    tokens = [arm.tokens(level / 200) for arm in arms[:n]]
    # time = tokens / rate (an infinite time for a zero rate)
    drafter._arms_by_method[key]["eagle"] = [
        Arm(arm.spec, tokens[i] / rates[i] if rates[i] else math.inf, arm.ratio)
        for i, arm in enumerate(arms[:n])
    ]
    got = drafter._best_of_method(view, key, "eagle", level)
    best = _plain_scan(drafter._arms_by_method[key]["eagle"], level)
    assert got[0] is best[0] and got[1] == best[1]


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1), methods=st.sampled_from([("suffix", "draft_small", "eagle"), ("suffix",)])
)
def test_first_choice_equals_the_assignment_scan(seed: int, methods: tuple[str, ...]) -> None:
    """Random evidence (none, one method or two per request) and costs: where
    `_first_choice` answers, it is the first choice `Assignment` makes of `_options`."""
    rng = np.random.default_rng(seed)
    drafter = BestDrafter(methods)
    view = FakeView.make(1)
    view.t_per_token = float(10 ** rng.uniform(-6.5, -3.5))
    view.t_draft_step = float(rng.choice([0.0, 1e-5, 2e-3]))
    drafter._ratio = {1: 1.0, 2: 1.13, 4: 1.27}
    b = int(rng.integers(1, 40))
    key = drafter._key(b, float(rng.uniform(100, 1e5)))
    plain = drafter._plain_at(view, key)
    pooled = {m: float(rng.uniform(0.05, 0.95)) for m in methods}
    owns: list[dict[str, list[float]] | None] = []
    most = 2 if rng.random() < 0.2 else 1  # (two methods: the general path)
    for _ in range(b):
        ran = rng.choice(len(methods) + 1, int(rng.integers(0, most + 1)), replace=False)
        own = {}
        for i in ran.tolist():
            m = methods[i - 1] if i else "history"  # (a method not allowed here)
            it = float(rng.uniform(0.1, 300))
            own[m] = [it, it * float(rng.uniform(0.0, 0.99))]
        owns.append(own or (None if rng.random() < 0.5 else {}))
    rids = list(range(b))
    threshold = (1 + 1e-9) / plain
    got = drafter._first_choice(view, key, rids, pooled, owns, threshold)
    trial = Assignment(view, b, key[1], drafter._options(view, key, rids, pooled, owns), threshold)
    want = [o.arm if o is not None else None for o in trial.choice(frozenset(pooled))]
    if got is None:  # only where a draft model is chosen or a request has two methods
        alone = Assignment(view, b, key[1], drafter._options(view, key, [b], pooled, [None]), threshold)
        (pooled_choice,) = alone.choice(frozenset(pooled))
        assert (
            any(a is not None and a.method not in MODEL_FREE for a in want)
            or any(own is not None and len(own) > 1 for own in owns)
            or (pooled_choice is not None and pooled_choice.method not in MODEL_FREE)
        )
    else:
        assert got == want
