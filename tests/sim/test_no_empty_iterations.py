"""A worker whose block has no request left stops there: a speculative block is sampled past
its rows' expected finishes (sim.spec_planner), and its iterations after the last finish
would be empty batches priced at a full weight read, counted as busy time and delaying the
worker's WorkerIdle (which idle-driven policies act on: Fastest-of-N, TLT's spot trainer)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.factories import make_frame, make_trace, random_lengths, run_one


def _last_busy_vs_last_finish(policy: str, seed: int, accept: float) -> tuple[np.ndarray, np.ndarray]:
    frame = make_frame(
        random_lengths(seed, 64, 20, 3000), group_size=8, accept={"ngram": accept, "draft_small": accept}
    )
    run = run_one(make_trace(frame, group_size=8), policy, cluster="h100x16", seed=seed)
    tl = pd.concat(run.timeline, ignore_index=True)
    rq = pd.concat(run.requests, ignore_index=True)
    busy_end = tl.groupby("worker")["t1_s"].max()
    last_finish = rq.groupby("worker")["finish_s"].max()
    return busy_end.to_numpy(), last_finish.reindex(busy_end.index).to_numpy()


@pytest.mark.parametrize("policy", ["spec-coupled", "ngram", "verl"])
def test_worker_busy_ends_with_its_last_finish(policy: str) -> None:
    busy_end, last_finish = _last_busy_vs_last_finish(policy, seed=1, accept=0.8)
    np.testing.assert_allclose(busy_end, last_finish, rtol=0, atol=1e-9)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), accept=st.floats(0.1, 0.95))
def test_no_empty_batches_any_acceptance(seed: int, accept: float) -> None:
    busy_end, last_finish = _last_busy_vs_last_finish("spec-coupled", seed, accept)
    np.testing.assert_allclose(busy_end, last_finish, rtol=0, atol=1e-9)
