"""Policy.wants_ticks: a policy that declines the Ticks its handler would answer with nothing
gets the same rollout as with every Tick delivered, and the simulator stops for fewer.

Each policy below is replayed twice over a few steps (so TLT's drafter gets trained and
RhymeRL's history exists): as registered, and wrapped so that it wants every Tick (the
contract's default). Requests, per-step metrics and busy time must agree; only the
number of delivered events (and timeline segments) may fall.
"""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simctl.policies.compose import Composed
from simctl.policies.contract import ClusterView, Policy, WorkerId
from simctl.policies.registry import make_policy
from simctl.sim.replay import run_policy
from tests.factories import make_frame, make_setup, make_trace, random_lengths

ACCEPT = {"eagle": 0.7, "ngram": 0.4, "w4_self": 0.8, "history": 0.6}


class _EveryTick(Composed):
    """The policy as it was, but wanting every Tick (the contract's default answer)."""

    def __init__(self, inner: Policy) -> None:
        super().__init__(inner.name, [inner])
        self.parameters = inner.parameters

    def wants_ticks(self, worker: WorkerId, view: ClusterView) -> bool:
        return True


def _trace(seed: int, steps: int = 3, n: int = 96):
    frames = [
        make_frame(random_lengths(seed * 31 + s, n, 20, 2500), group_size=8, step=s, accept=ACCEPT)
        for s in range(steps)
    ]
    return make_trace(frames, group_size=8)


def _both(policy: str, seed: int, **kw):
    if policy.startswith("efficientrollout"):
        # TP1 workers: there W4 self-drafting pays off and EfficientRollout's toggle switches
        # SD on (on TP4 its draft step costs ~0.7 of a decode step and it stays off)
        kw.setdefault("cluster", "h100x16:tp1")
    trace = _trace(seed)
    fast = run_policy(make_setup(trace, seed=seed, **kw), make_policy(policy))
    every = run_policy(make_setup(trace, seed=seed, **kw), _EveryTick(make_policy(policy)))
    return fast, every


def _busy(run) -> float:
    tl = pd.concat(run.timeline, ignore_index=True)
    return float((tl["t1_s"] - tl["t0_s"]).sum())


def _assert_same(fast, every) -> None:
    for a, b in zip(fast.requests, every.requests, strict=True):
        pd.testing.assert_frame_equal(a, b)
    for a, b in zip(fast.steps, every.steps, strict=True):
        da, db = a.to_dict(), b.to_dict()
        assert da.pop("gpu_idle_fraction") == pytest.approx(db.pop("gpu_idle_fraction"), abs=1e-12)
        # equal up to the last bits: a block that stops at a delivered Tick sums its
        # iterations in two parts (the same rounding bench/check_sim_identity.py --loose allows)
        assert da.keys() == db.keys()
        for key, value in da.items():
            if isinstance(value, float):
                assert value == pytest.approx(db[key], rel=1e-12), key
            else:
                assert value == db[key], key
    assert _busy(fast) == pytest.approx(_busy(every), rel=1e-12)
    iters = [int(pd.concat(r.timeline)["iterations"].sum()) for r in (fast, every)]
    assert iters[0] == iters[1]


@pytest.mark.parametrize(
    "policy", ["tlt", "tlt-static-drafter", "tlt:scope=global", "efficientrollout", "rhymerl", "rhymerl-pipe"]
)
def test_declined_ticks_change_nothing(policy: str) -> None:
    fast, every = _both(policy, seed=3)
    _assert_same(fast, every)
    assert fast.events <= every.events


@pytest.mark.parametrize("policy", ["tlt", "efficientrollout"])
def test_declined_ticks_are_skipped(policy: str) -> None:
    """The saving is real: these policies decline most Ticks of a step."""
    fast, every = _both(policy, seed=5)
    assert fast.events < every.events
    assert sum(len(t) for t in fast.timeline) < sum(len(t) for t in every.timeline)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), threshold=st.sampled_from([4, 16, 64]), tick=st.sampled_from([3, 16]))
def test_tlt_any_threshold_and_cadence(seed: int, threshold: int, tick: int) -> None:
    spec = f"tlt:threshold={threshold},tick_iterations={tick}"
    fast, every = _both(spec, seed=seed, max_num_seqs=16)
    _assert_same(fast, every)


class _Part(Policy):
    def __init__(self, tick: int | None, wants: bool) -> None:
        self.tick_iterations, self._wants = tick, wants

    def on_event(self, event, view):  # type: ignore[no-untyped-def]
        return []

    def wants_ticks(self, worker: WorkerId, view: ClusterView) -> bool:
        return self._wants


def test_composed_wants_a_tick_when_a_ticking_part_does() -> None:
    view = None  # not read by these parts
    assert Policy.wants_ticks(_Part(16, False), 0, view)  # type: ignore[arg-type]  # the default
    assert Composed("c", [_Part(16, False), _Part(64, True)]).wants_ticks(0, view)  # type: ignore[arg-type]
    assert not Composed("c", [_Part(16, False), _Part(64, False)]).wants_ticks(0, view)  # type: ignore[arg-type]
    # a part that asked for no Ticks does not make the composition want them
    assert not Composed("c", [_Part(16, False), _Part(None, True)]).wants_ticks(0, view)  # type: ignore[arg-type]


class _Host:
    """The two members of a WorkerHost that TickCadence reads."""

    def __init__(self, period: int, wants: bool) -> None:
        self.tick_iterations, self.wants, self.asked = period, wants, 0

    def wants_ticks(self, worker: int) -> bool:
        self.asked += 1
        return self.wants


def test_cadence_keeps_its_phase_through_skipped_ticks() -> None:
    from simctl.sim.tick_cadence import TickCadence

    c = TickCadence(_Host(16, False), 0)  # type: ignore[arg-type]
    assert [c.advance(n) for n in (10, 10, 12, 40)] == [False, False, True, False]
    assert c.since == (10 + 10 + 12 + 40) % 16
    assert c.to_next() == 16 - c.since


def test_cadence_rearms_when_the_policy_comes_to_want_ticks() -> None:
    from simctl.sim.tick_cadence import TickCadence

    host = _Host(8, False)
    c = TickCadence(host, 0)  # type: ignore[arg-type]
    c.wanted = False
    assert not c.deliver(on_tick=False, heard_events=False) and host.asked == 0  # nothing heard
    assert not c.deliver(on_tick=False, heard_events=True) and not c.rearmed
    host.wants = True
    c.since = 3
    assert not c.deliver(on_tick=False, heard_events=True)  # not on a tick: nothing to deliver now
    assert c.rearmed and c.wanted
    # block at iteration 20 of 40, stops left at 30 and 40; ticks 5 iterations on, then every 8
    assert c.rearm(20, 40, [30, 40]) == [25, 30, 33, 40]
    assert not c.rearmed


@given(
    a=st.sets(st.integers(1, 4096), max_size=40),
    b=st.sets(st.integers(1, 4096), max_size=40),
)
def test_merge_sorted_is_union1d(a: set[int], b: set[int]) -> None:
    import numpy as np

    from simctl.sim.tick_cadence import merge_sorted

    x, y = np.array(sorted(a), np.int64), np.array(sorted(b), np.int64)
    np.testing.assert_array_equal(merge_sorted(x, y), np.union1d(x, y))
