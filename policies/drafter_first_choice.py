"""The best-drafter part's shortcut to a worker's first choice (`FirstChoice`).

`BestDrafter.configure` weighs every request on a worker at every tick: each request's best
option per method (`_options`), the choice among them, and a greedy loop that drops draft
models while that raises the worker's rate. Mostly no request chooses a draft model, and
the loop stops at its first choice, which depends on a request's options only through its
acceptance levels: `_first_choice` finds it without building the options, and is tested
against `Assignment`'s scan of `_options`.
"""

from __future__ import annotations

from collections.abc import Sequence

from simctl.policies.contract import ClusterView, RequestId
from simctl.policies.draft_methods import DraftMethod
from simctl.policies.drafter_arms import Arm, ArmTables, Key
from simctl.policies.drafter_assignment import Option

# drafting costs (almost) no GPU time
MODEL_FREE = frozenset(m.value for m in DraftMethod if m.model_free)


class FirstChoice(ArmTables):
    """Options at pooled acceptance, and the first choice of a worker's requests."""

    request_prior_iterations: float

    def _option(
        self,
        view: ClusterView,
        key: Key,
        method: str,
        p: float,
        table: dict[int, tuple[Arm | None, float]],
    ) -> Option | None:
        """The method's best option at acceptance p (None: the method has no arm)."""
        level = round(p * 200)
        got = table.get(level)
        if got is None:
            got = table[level] = self._best_of_method(view, key, method, level)
        return Option(method, got[0], got[1], p) if got[0] is not None else None

    def _shared_options(
        self, view: ClusterView, key: Key, pooled: dict[str, float]
    ) -> tuple[list[str], list[dict[int, tuple[Arm | None, float]]], list[Option | None]]:
        """(methods, their best-arm tables, their options) at the pooled acceptance: what
        every request without evidence of its own gets (as `_blend` at no evidence:
        n0 * pm / n0 need not be pm exactly, so it is computed the same way)."""
        n0 = self.request_prior_iterations
        methods = list(pooled)
        tables = [self._best.setdefault((key, m), {}) for m in methods]
        shared = [
            self._option(view, key, m, (0.0 + n0 * pooled[m]) / (0.0 + n0), tables[j])
            for j, m in enumerate(methods)
        ]
        return methods, tables, shared

    def _first_choice(
        self,
        view: ClusterView,
        key: Key,
        rids: Sequence[RequestId],
        pooled: dict[str, float],
        owns: Sequence[dict[str, list[float]] | None],
        threshold: float,
    ) -> list[Arm | None] | None:
        """Each request's first choice in `configure` (`Assignment.choice` of `_options`
        with every method of `pooled` allowed), or None where some request chose a draft
        model or the shortcut does not apply (the greedy loop then works on the options).

        Without history among the methods, a request's options are the shared ones with
        its own methods' put in, and nearly every request has evidence for one method
        only: its choice is then the scan of the shared options with column j's rate
        replaced, a function of (j, its acceptance level) evaluated from the shared scan's
        state before column j (`_scan_from`) and memoised per call."""
        if DraftMethod.HISTORY in pooled:
            return None
        n0 = self.request_prior_iterations
        methods, tables, shared = self._shared_options(view, key, pooled)
        rated = [(o.arm, o.rate) if o is not None else None for o in shared]
        # the scan's state (best arm, its rate) before each column, over the shared options
        before: list[tuple[Arm | None, float]] = []
        state: tuple[Arm | None, float] = (None, -1.0)
        for got in rated:
            before.append(state)
            if got is not None and got[1] > state[1] * (1 + 1e-9):
                state = got
        pooled_choice = state[0] if state[0] is not None and state[1] > threshold else None
        if pooled_choice is not None and pooled_choice.method not in MODEL_FREE:
            return None
        # method -> (its column, best-arm table, n0 * pooled acceptance, level -> choice)
        column: dict[str, tuple[int, dict[int, tuple[Arm | None, float]], float, dict[int, Arm | None]]] = {
            m: (j, tables[j], n0 * pooled[m], {}) for j, m in enumerate(methods) if shared[j] is not None
        }
        out: list[Arm | None] = []
        for own in owns:
            if not own:
                out.append(pooled_choice)
                continue
            if len(own) > 1:
                return None
            for m, ev in own.items():
                entry = column.get(m)
                if entry is None:  # not allowed here, or no arm at all
                    out.append(pooled_choice)
                    continue
                j, table, prior, memo = entry
                level = round((ev[1] + prior) / (ev[0] + n0) * 200)
                if level in memo:
                    out.append(memo[level])
                    continue
                arm = memo[level] = self._scan_from(
                    view, key, methods[j], table, level, rated, before[j], j, threshold
                )
                if arm is not None and arm.method not in MODEL_FREE:
                    return None
                out.append(arm)
        return out

    def _scan_from(
        self,
        view: ClusterView,
        key: Key,
        method: str,
        table: dict[int, tuple[Arm | None, float]],
        level: int,
        rated: list[tuple[Arm, float] | None],
        state: tuple[Arm | None, float],
        j: int,
        threshold: float,
    ) -> Arm | None:
        """`Assignment.choice`'s scan for a request whose only own option is column j's,
        at acceptance `level`: from the shared scan's `state` before column j, the own
        option, then the shared options after it."""
        best = table.get(level)
        if best is None:
            best = table[level] = self._best_of_method(view, key, method, level)
        assert best[0] is not None  # (an arm: the shared option has one)
        chosen, rate = state
        if best[1] > rate * (1 + 1e-9):
            chosen, rate = best
        for got in rated[j + 1 :]:
            if got is not None and got[1] > rate * (1 + 1e-9):
                chosen, rate = got
        return chosen if chosen is not None and rate > threshold else None
