"""Deferred requests (RhymeRL inter-step migration) finish in the next step with their tokens."""

from __future__ import annotations

import numpy as np
import pandas as pd

from simctl.policies.contract import Assign, Defer, Policy, StepStarted
from simctl.sim.replay import CARRIED, _with_carried
from tests.factories import make_frame, make_trace
from tests.sim.test_speculation_modes import _run


class DeferLongest(Policy):
    """Step 0: defer the 4 requests of prompt 0 and place the rest; later steps: place all."""

    name = "defer-test"

    def on_event(self, event, view):
        if not isinstance(event, StepStarted):
            return []
        out = []
        for rid in event.requests:
            rv = view.request(rid)
            if event.step == 0 and rv.prompt_id == 0:
                out.append(Defer(request=rid))
            else:
                out.append(Assign(request=rid, worker=rid % view.num_workers))
        return out


def test_deferred_requests_finish_in_the_next_step_and_tokens_are_conserved() -> None:
    lengths0, lengths1 = np.array([900, 800, 700, 600, 50, 60, 70, 80]), np.full(8, 100)
    frames = [make_frame(lengths0, step=0), make_frame(lengths1, step=1)]
    frames[1]["prompt_id"] += 10
    run = _run(DeferLongest(), make_trace(pd.concat(frames, ignore_index=True)), cluster="h100x8")
    s0, s1 = run.steps
    assert s0.output_tokens == 50 + 60 + 70 + 80
    assert s1.output_tokens == 8 * 100 + 900 + 800 + 700 + 600
    req1 = run.requests[1]
    assert len(req1) == 12 and req1["finish_s"].notna().all()
    assert s1.rollout_makespan_s > s0.rollout_makespan_s  # the long deferred ones now run here
    # the run counts them; none is left over past its last step
    assert run.counters["deferred"] == 4 and "deferred_past_last_step" not in run.counters


def test_requests_deferred_past_the_last_step_are_counted() -> None:
    """A policy that defers out of the last step replayed generates nothing for those
    requests (deferring everything shows a makespan of 0): the run says how many."""
    frames = [make_frame(np.full(8, 100), step=0)]
    run = _run(DeferLongest(), make_trace(pd.concat(frames, ignore_index=True)), cluster="h100x8")
    assert run.counters["deferred"] == 4 and run.counters["deferred_past_last_step"] == 4


def test_carried_requests_keep_their_tokens() -> None:
    frame = make_frame([100, 200, 300, 400], step=1)
    carry = make_frame([500, 600, 700, 800], step=0).assign(**{CARRIED: np.array([10, 20, 30, 40])})
    carry.index = carry.index + 100
    merged, state = _with_carried(frame, carry, step=1)
    assert len(merged) == state.n_requests == 8
    assert state.generated.tolist() == [0, 0, 0, 0, 10, 20, 30, 40]
    assert state.start_generated.tolist() == state.generated.tolist()
    assert list(merged.index[4:]) == [100, 101, 102, 103]  # trace rows kept for token replay
