"""Exact draft counters of replayed requests (sim.token_replay).

The engine applies only part of a planned block when it re-plans early, and the AIMD
window is invisible to it, so each request's last planned block is remembered here and
credited with the progress the engine actually applied the next time the request is
drafted for (or when the step ends).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from simctl.sim.state import StepState


@dataclass
class RequestStats:
    """Exact draft counters of one request (the AIMD window is invisible to the engine)."""

    iterations: int = 0
    drafted: int = 0
    accepted: int = 0
    window: int = 0  # AIMD window at the request's current position (0: not started)


@dataclass
class PlannedDrafts:
    """One spec_tokens answer for one request, until the engine's progress is known."""

    pos0: int
    pos_after: np.ndarray
    drafted: np.ndarray
    accepted: np.ndarray
    window_after: np.ndarray


class DraftLedger:
    def __init__(self, state: StepState) -> None:
        self.state = state
        self.stats: dict[int, RequestStats] = {}
        self.plans: dict[int, PlannedDrafts] = {}

    def stats_of(self, rid: int) -> RequestStats:
        s = self.stats.get(rid)
        if s is None:
            s = self.stats[rid] = RequestStats()
        return s

    def remember(self, rid: int, pos0: int, pos_after, drafted, accepted, window_after) -> None:
        self.plans[rid] = PlannedDrafts(
            pos0,
            np.asarray(pos_after, np.int64),
            np.asarray(drafted, np.int64),
            np.asarray(accepted, np.int64),
            np.asarray(window_after, np.int64),
        )

    def reconcile(self, rid: int) -> None:
        """Credit the iterations of the request's last plan that the engine applied: the
        planned positions increase strictly, so the current position says how many."""
        plan = self.plans.pop(rid, None)
        if plan is None:
            return
        gen = int(self.state.generated[rid])
        if gen <= plan.pos0:
            return
        done = int(np.searchsorted(plan.pos_after, gen, side="right"))
        before = int(plan.pos_after[done - 1]) if done else plan.pos0
        partial = gen > before and done < len(plan.pos_after)
        s = self.stats_of(rid)
        s.iterations += done + int(partial)
        s.drafted += int(plan.drafted[:done].sum())
        s.accepted += int(plan.accepted[:done].sum())
        if partial:
            s.drafted += int(plan.drafted[done])
            s.accepted += max(0, min(int(plan.accepted[done]), gen - before - 1))
        last = done + int(partial) - 1
        if last >= 0:
            s.window = int(plan.window_after[last])

    def finish(self, counters: Counter[str] | None = None) -> None:
        """Credit the last planned blocks, and add the exact totals to `counters`
        (replay_iterations, replay_drafted, replay_accepted)."""
        for rid in list(self.plans):
            self.reconcile(rid)
        if counters is not None and self.stats:
            counters["replay_iterations"] += sum(s.iterations for s in self.stats.values())
            counters["replay_drafted"] += sum(s.drafted for s in self.stats.values())
            counters["replay_accepted"] += sum(s.accepted for s in self.stats.values())
