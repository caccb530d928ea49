"""What a live step leaves behind: its record (trace rows, timeline, per-iteration table)
and the executor's own time accounting, which run.json reports next to engine time."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from simctl.live.state import LiveRequest
from simctl.live.workload import StepWork
from simctl.traces.run_format import ITERATION_COLUMNS

__all__ = ["ITERATION_COLUMNS", "Overhead", "StepAccounts", "StepRecord"]


@dataclass
class StepRecord:
    """Everything one step produced; the recorder turns it into trace rows and tables."""

    step: int
    epoch: int
    requests: list[LiveRequest]  # the step's requests, then Fastest-of-N replica rows
    n_requests: int
    makespan_s: float
    segments: list[list]  # [worker, t0, t1, iterations, batch, kv_tokens, gamma_mean]
    roles: list[tuple[int, float, str]]
    engine_s: float
    policy_s: float
    bookkeeping_s: float
    wall_s: float
    events: int
    counters: Counter[str]
    complete: bool = True
    # One row per engine iteration, ITERATION_COLUMNS (the run format's iterations table, less
    # policy and step): what the cost model is asked to price (batch, query tokens, context,
    # prefill) next to what the engine measured.
    iterations: list[tuple] = field(default_factory=list)


@dataclass
class Overhead:
    engine_s: float = 0.0
    policy_s: float = 0.0
    bookkeeping_s: float = 0.0

    @property
    def fraction(self) -> float:
        """Controller time over engine time (issue target: < 2%)."""
        return (self.policy_s + self.bookkeeping_s) / self.engine_s if self.engine_s else 0.0


@dataclass
class StepAccounts:
    """One step's time accounting, timeline and iteration rows, filled while it runs."""

    work: StepWork
    t_wall0: float
    segments: list[list] = field(default_factory=list)
    events: int = 0
    policy_s: float = 0.0
    engine_s: float = 0.0
    bookkeeping_s: float = 0.0
    iterations: list[tuple] = field(default_factory=list)

    def add_segment(self, seg: list, n_workers: int) -> None:
        """Merge runs of iterations with the same batch and draft length (as the
        simulator's fast-forward blocks), keeping the timeline table small."""
        segs = self.segments
        for last in reversed(segs[-n_workers:]):
            if last[0] == seg[0]:
                if abs(last[2] - seg[1]) < 1e-12 and last[4] == seg[4] and last[6] == seg[6]:
                    last[2] = seg[2]
                    last[3] += 1
                    return
                break
        segs.append(seg)
