"""What a speculative plan keeps while its block runs (sim/plan.py, sim/spec_planner.py).

Every worker holds one plan, and a block with nothing waiting is sampled up to 4,096
iterations ahead: at 4,096 GPUs SpecActor's first plans held 3.2 GB of per-cell matrices
(cumulative tokens in int32 and the tokens in int16), and touching that much fresh memory
made the simulator's cost grow faster than the cluster (issue #17's growth figure). A plan
now keeps one uint16 matrix of capped progress, and a bool matrix only for decoupled rows;
applying a stretch of it must read the same progress and iterations as the full matrices.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simctl.policies.contract import SpecConfig
from simctl.sim import spec_planner
from simctl.sim.acceptance import stall_after_rejection
from simctl.sim.plan import Plan
from simctl.sim.spec_planner import capped_progress, finish_columns
from tests.sim.test_speculation_modes import OneWorkerSpec, _run, _trace


def _reference_stretch(
    x: np.ndarray, remaining: np.ndarray, fin: np.ndarray, dec: np.ndarray, pos: int, done: int
):
    """`speculative_stretch` from the full matrices, as the planner kept them before."""
    cum = np.cumsum(x, axis=1, dtype=np.int32)
    progress = np.minimum(cum[:, done - 1], remaining)
    prev = np.minimum(cum[:, pos - 1], remaining) if pos else np.zeros_like(remaining)
    last = fin + 1
    iters = np.minimum(done, last) - np.minimum(pos, last)
    cols = np.arange(pos, done)
    iters[dec] = ((x[dec, pos:done] > 0) & (cols < last[dec, None])).sum(axis=1)
    return progress, progress - prev, iters


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 12),
    st.integers(1, 60),
    st.integers(0, 2**32 - 1),
    st.data(),
)
def test_a_stretch_reads_the_same_progress_and_iterations_as_the_full_matrices(
    rows: int, k: int, seed: int, data: st.DataObject
) -> None:
    rng = np.random.default_rng(seed)
    window = rng.integers(0, 4, rows)  # 0: coupled
    x = rng.integers(1, 6, (rows, k)).astype(np.int16)
    dec = window > 0
    if dec.any():
        x[dec] = stall_after_rejection(np.minimum(x[dec], window[dec, None] + 1), window[dec])
    remaining = rng.integers(1, 6 * k + 10, rows).astype(np.int64)
    cum = np.cumsum(x, axis=1, dtype=np.int32)
    fin = finish_columns(cum, remaining)
    progress, _ = capped_progress(cum, remaining)
    plan = Plan(
        np.arange(rows),
        np.arange(1, k + 1, dtype=np.float64),
        remaining,
        np.ones(rows, bool),
        np.ones(rows, np.int64),
        0,
        1.0,
        progress=progress,
        finish=fin,
        last=fin + 1,
        decoupled_rows=dec if dec.any() else None,
        verified=x[dec] > 0 if dec.any() else None,
    )
    done = data.draw(st.integers(1, k))
    pos = data.draw(st.integers(0, done - 1))
    got_progress, got_prev, got_gained, got_iters = plan.speculative_stretch(done, pos)
    want_progress, want_gained, want_iters = _reference_stretch(x, remaining, fin, dec, pos, done)
    np.testing.assert_array_equal(got_progress, want_progress)
    np.testing.assert_array_equal(got_gained, want_gained)
    np.testing.assert_array_equal(got_iters, want_iters)
    assert got_progress.dtype == np.int64 and got_gained.dtype == np.int64
    assert (got_prev is None) == (pos == 0)


def _plans_of(policy, trace, monkeypatch) -> list[Plan]:
    plans: list[Plan] = []
    plan = spec_planner.SpecPlanner.plan

    def keep(self, *args, **kwargs):
        out = plan(self, *args, **kwargs)
        plans.append(out)
        return out

    monkeypatch.setattr(spec_planner.SpecPlanner, "plan", keep)
    _run(policy, trace)
    return plans


def test_a_coupled_plan_keeps_two_bytes_per_cell(monkeypatch) -> None:
    plans = _plans_of(OneWorkerSpec(SpecConfig("draft_small", gamma=4)), _trace(0.8), monkeypatch)
    assert plans
    for p in plans:
        assert p.progress is not None and p.progress.dtype == np.uint16
        assert p.verified is None and p.decoupled_rows is None
        assert p.progress.shape == (len(p.ids), p.iterations)
        # capped at each row's dispatch end
        assert (p.progress.astype(np.int64) <= p.remaining[:, None]).all()


def test_a_decoupled_plan_keeps_a_verified_mask_of_its_decoupled_rows_only(monkeypatch) -> None:
    spec = SpecConfig("draft_small", gamma=4, mode="decoupled", window=4, drafter_worker=1)
    plans = _plans_of(OneWorkerSpec(spec, drafter_role=True), _trace(0.3), monkeypatch)
    assert plans
    for p in plans:
        assert p.decoupled_rows is not None and p.verified is not None
        assert p.verified.dtype == np.bool_
        assert p.verified.shape == (int(p.decoupled_rows.sum()), p.iterations)
    # rejected windows leave stalled iterations, which the mask records
    assert any(not p.verified.all() for p in plans if p.verified is not None and p.verified.size)
