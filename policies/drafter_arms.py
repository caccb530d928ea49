"""The speculation arms of the best-drafter part and their costs, memoised per worker state.

An arm is one way a worker's batch may speculate (method, depth, paths) with the iteration
time the cost model predicts for it. `ArmTables` builds a method's arms at a worker state
(batch, context to 2 significant digits) when first asked, and the best arm per method
and acceptance level (acceptance rounded to 0.005, which also keeps choices from
flickering with noise in the estimates); the tables live for one step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from operator import truediv

from simctl.policies.contract import ClusterView, SpecConfig
from simctl.policies.draft_methods import DraftMethod
from simctl.policies.seer_acceptance import expected_accept_len
from simctl.policies.seer_spec import DEPTHS, PATHS

P_MAX = 0.99
MULTI_PATH = DraftMethod.SUFFIX  # the method drafted as Seer's multi-path tree

Key = tuple[int, float]  # a worker state: batch, context tokens to 2 significant digits


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


class ArmTables:
    """Arms and their rates per worker state, for a policy part drafting with `methods`
    (paths > 1 only for the multi-path suffix tree, when `multi_path`); `_ratio` maps paths
    to the multi-path acceptance gain, set by the part at each step start."""

    methods: tuple[str, ...]
    multi_path: bool
    _ratio: dict[int, float]

    def _reset_arms(self) -> None:
        """Forget the tables (every step: the cost model's context changes)."""
        self._arms: dict[Key, list[Arm]] = {}
        self._arms_by_method: dict[Key, dict[str, list[Arm]]] = {}  # key -> method ->
        self._verify_time: dict[Key, dict[int, float]] = {}  # key -> verify tokens -> s
        self._plain: dict[Key, float] = {}
        self._arm_times: dict[tuple[Key, str], list[float]] = {}  # (key, method) -> per arm
        self._level_tokens: dict[tuple[str, int], list[float]] = {}  # (method, level) -> per arm
        # (key, method) -> acceptance level (p * 200, rounded) -> the method's best (arm, rate)
        self._best: dict[tuple[Key, str], dict[int, tuple[Arm | None, float]]] = {}

    def _key(self, batch: int, context: float) -> Key:
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

    def _method_arms(self, view: ClusterView, key: Key, method: str) -> list[Arm]:
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
                    spec = _spec(method, d, k)
                    out.append(Arm(spec, t, self._ratio.get(k, 1.0) if method == MULTI_PATH else 1.0))
        by_method[method] = out
        return out

    def plain_time(self, view: ClusterView, batch: int, context: float) -> float:
        return self._plain_at(view, self._key(batch, context))

    def _plain_at(self, view: ClusterView, key: Key) -> float:
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

    def _best_at(self, view: ClusterView, key: Key, p_of: dict[str, float]) -> tuple[Arm | None, float]:
        best, best_rate = None, -1.0
        for m, p in p_of.items():
            arm, rate = self._method_best(view, key, m, round(p * 200))
            if rate > best_rate * (1 + 1e-9):
                best, best_rate = arm, rate
        return best, best_rate

    def _method_best(self, view: ClusterView, key: Key, method: str, level: int) -> tuple[Arm | None, float]:
        """The method's best (arm, rate) at acceptance level / 200 (memoised)."""
        table = self._best.get((key, method))
        if table is None:
            table = self._best[(key, method)] = {}
        got = table.get(level)
        if got is None:
            got = table[level] = self._best_of_method(view, key, method, level)
        return got

    def _best_of_method(
        self, view: ClusterView, key: Key, method: str, level: int
    ) -> tuple[Arm | None, float]:
        """The method's best (arm, rate) at acceptance level / 200. Its arms' tokens per
        iteration depend on the level only, not on the key: computed once per level."""
        arms = self._method_arms(view, key, method)
        tokens = self._level_tokens.get((method, level))
        if tokens is None:
            p = level / 200
            tokens = self._level_tokens[(method, level)] = [arm.tokens(p) for arm in arms]
        rates = list(map(truediv, tokens, self._times(key, method, arms)))
        # The scan below picks the highest rate whenever the rates are not negative and no
        # other is within a factor 1 + 2e-9 of it (then the best so far stays below it by
        # more than the tolerance when the scan reaches it, and nothing replaces it after):
        # found in C, without the scan, for nearly every level. (No NaN: the sum would
        # carry it.)
        if len(rates) > 1 and sum(rates) == sum(rates):
            ranked = sorted(rates)
            top = ranked[-1]
            if ranked[0] >= 0.0 and ranked[-2] < top / (1 + 2e-9):
                return arms[rates.index(top)], top
        # an arm replaces the best so far if its rate is above `bar` = best rate * (1 + 1e-9)
        best: Arm | None = None
        best_rate = -1.0
        bar = best_rate * (1 + 1e-9)
        for arm, rate in zip(arms, rates, strict=True):
            if rate > bar:
                best, best_rate, bar = arm, rate, rate * (1 + 1e-9)
        return best, best_rate

    def _times(self, key: Key, method: str, arms: list[Arm]) -> list[float]:
        """The iteration times of a method's arms at a key (`_best_of_method` divides by
        them at every new acceptance level)."""
        got = self._arm_times.get((key, method))
        if got is None:
            got = self._arm_times[(key, method)] = [arm.time_s for arm in arms]
        return got


_SPECS: dict[tuple[str, int, int], SpecConfig] = {}  # (method, depth, paths) -> its arms' spec


def _spec(method: str, depth: int, paths: int) -> SpecConfig:
    """The setting of an arm, one object per (method, depth, paths) at every worker state
    and step (interned): a request's override is compared with its new one at every
    configuration, and equal settings are then mostly the same object (`is`, where `==`
    compares a dataclass field by field)."""
    got = _SPECS.get((method, depth, paths))
    if got is None:
        verify = paths * depth if paths > 1 else 0
        got = _SPECS[(method, depth, paths)] = SpecConfig(
            method=method, gamma=depth, topk=paths, verify_tokens=verify
        )
    return got
