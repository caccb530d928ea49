"""A worker's policy Ticks: one every `Policy.tick_iterations` decode iterations, delivered
only while the policy wants them (`Policy.wants_ticks`).

Split from the worker (sim.worker) because a Tick is where a planned block stops for the
policy, and most Ticks of some policies are answered with nothing: the cadence decides
where a block stops for them, and keeps counting through the Ticks it skips so that the
ones delivered fall on the same iterations as if none had been skipped.

The policy is asked when the worker plans a block; while it declines, it is asked again
after each event the worker emitted (a finish or chunk end there: what it heard may make
it want the Tick at that very iteration, delivered after those events as always) and at
ticks where the block stops anyway (a grouped-drafter block checks its acceptance drift
there). A Tick it then wants re-arms the block in flight: its remaining Ticks become stops.
"""

from __future__ import annotations

import numpy as np

from simctl.sim.plan import Plan
from simctl.sim.worker_host import WorkerHost


class TickCadence:
    def __init__(self, host: WorkerHost, worker: int) -> None:
        self.host = host
        self.worker = worker
        self.since = 0  # iterations since the last tick (delivered or not)
        # whether the policy wanted this worker's Ticks when its current block was planned
        # (or since): unwanted ones are neither stopped at nor delivered
        self.wanted = True
        self.rearmed = False  # wanted since the block was planned: it adds its tick stops

    @property
    def period(self) -> int | None:
        return self.host.tick_iterations

    def to_next(self) -> int:
        """Iterations until the next tick (a period is set)."""
        period = self.period
        assert period
        return period - self.since

    def add_stops(self, plan: Plan, block_ends_at_tick: bool) -> Plan:
        """Ask whether the policy wants this worker's Ticks and, if it does (or the plan is
        drawn from the grouped-drafter model, whose drift is checked at ticks), stop the
        plan at every tick inside it. `block_ends_at_tick`: the plan is already capped at
        the next tick (exact grouped drafting re-plans there)."""
        period, k = self.period, plan.iterations
        self.wanted = bool(period) and self.host.wants_ticks(self.worker)
        if not period or block_ends_at_tick or not (self.wanted or plan.probe is not None):
            return plan
        if period - self.since > k:
            return plan
        ticks = np.arange(period - self.since, k + 1, period)
        stops = plan.stops if plan.stops is not None else np.array([k])
        plan.stops = merge_sorted(stops, ticks)
        return plan

    def advance(self, iterations: int) -> bool:
        """Count applied iterations; True when they end exactly on a tick (a stretch holds
        at most one when the block stops at them; ticks passed inside a stretch were not
        wanted, and keep the cadence)."""
        period = self.period
        if not period:
            return False
        self.since += iterations
        if self.since < period:
            return False
        on_tick = self.since % period == 0
        self.since %= period
        return on_tick

    def deliver(self, on_tick: bool, heard_events: bool) -> bool:
        """After the stretch's events: whether to deliver the Tick it ended on, asking the
        policy again if it declined them at planning and has heard something since (or
        the block stopped at this tick anyway)."""
        asks = self.period and not self.wanted and (heard_events or on_tick)
        if asks and self.host.wants_ticks(self.worker):
            self.wanted = self.rearmed = True
        return on_tick and self.wanted

    def rearm(self, done: int, k: int, rest: list[int]) -> list[int]:
        """`rest` of a block's stops with its ticks after iteration `done` added, once the
        policy came to want them mid-block."""
        self.rearmed = False
        period = self.period
        assert period
        return sorted(set(rest).union(range(done + period - self.since, k + 1, period)))


def merge_sorted(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The sorted union of two sorted arrays of distinct values (`np.union1d` of them,
    without its general-purpose passes: this runs on every plan that stops at ticks).

    >>> merge_sorted(np.array([3, 5, 9]), np.array([4, 5, 8, 9]))
    array([3, 4, 5, 8, 9])
    """
    m = np.concatenate((a, b))
    m.sort()
    keep = np.empty(len(m), bool)
    keep[:1] = True
    np.not_equal(m[1:], m[:-1], out=keep[1:])
    return m[keep]
