"""A speculative block's finishes and progress (sim.spec_planner.block_counts) are the same
integers whether numba's one-pass kernel (sim.kernels.block_counts) or the numpy passes
compute them: every output, its length and the block's end, on random tokens (zeros
included: a decoupled row sits out iterations) and remaining counts (rows done at once,
rows past the block, ties in finish columns)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simctl.sim import kernels as sim_kernels
from simctl.sim.compiled import kernels
from simctl.sim.spec_planner import block_counts, numpy_block_counts


@st.composite
def blocks(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, bool]:
    b, k = draw(st.integers(1, 12)), draw(st.integers(1, 30))
    x = np.array(draw(st.lists(st.integers(0, 6), min_size=b * k, max_size=b * k)), np.int16).reshape(b, k)
    big = draw(st.sampled_from([8, 60, 65535]))
    rem = np.array(draw(st.lists(st.integers(0, big), min_size=b, max_size=b)))
    dtype = draw(st.sampled_from([np.int32, np.int64]))
    return x, rem.astype(dtype), draw(st.booleans())


@settings(max_examples=400, deadline=None)
@given(blocks())
def test_the_kernel_gives_the_numpy_counts(case: tuple[np.ndarray, np.ndarray, bool]) -> None:
    x, rem, first_finish = case
    want = numpy_block_counts(x, rem, first_finish)
    got = sim_kernels.block_counts(x, rem, first_finish)
    assert int(got[0]) == want[0]
    for name, g, w in zip(("fin", "progress", "colsum", "order", "gone"), got[1:], want[1:], strict=True):
        assert g.shape == w.shape and g.tolist() == w.tolist(), name
    assert got[2].dtype == want[2].dtype == np.uint16


def test_block_counts_takes_the_kernel_where_the_progress_fits_uint16(monkeypatch) -> None:
    """numba is in the test extras; a row with more than 65,535 tokens left (progress past
    uint16) and SIMCTL_NO_NUMBA=1 take the numpy passes."""
    assert kernels() is sim_kernels
    calls: list[str] = []
    real = sim_kernels.block_counts

    def spy(*a: object) -> object:
        calls.append("kernel")
        return real(*a)

    monkeypatch.setattr(sim_kernels, "block_counts", spy)
    x = np.ones((2, 4), np.int16)
    block_counts(x, np.array([2, 3]), False)
    assert calls == ["kernel"]
    far = block_counts(x, np.array([2, 70_000]), False)
    assert calls == ["kernel"] and far[2].dtype != np.uint16
    monkeypatch.setenv("SIMCTL_NO_NUMBA", "1")
    block_counts(x, np.array([2, 3]), True)
    assert calls == ["kernel"]


@pytest.mark.parametrize("first_finish", [False, True])
def test_a_known_block(first_finish: bool) -> None:
    """Rows needing 3, 1 and 9 tokens at 2, 1 and 1 tokens per iteration over 4 iterations:
    they finish in columns 1, 0 and never; waiting requests cut the block after column 0."""
    x = np.array([[2, 2, 2, 2], [1, 1, 1, 1], [1, 1, 1, 1]], np.int16)
    k, fin, progress, colsum, order, gone = block_counts(x, np.array([3, 1, 9], np.int32), first_finish)
    if first_finish:
        assert k == 1 and fin.tolist() == [1, 0, 1] and progress.tolist() == [[2], [1], [1]]
        assert colsum.tolist() == [4] and order.tolist() == [1, 0, 2] and gone.tolist() == [0]
    else:
        assert k == 4 and fin.tolist() == [1, 0, 4]
        assert progress.tolist() == [[2, 3, 3, 3], [1, 1, 1, 1], [1, 2, 3, 4]]
        assert colsum.tolist() == [4, 6, 7, 8] and order.tolist() == [1, 0, 2]
        assert gone.tolist() == [0, 1, 2, 2]


def test_warm_loads_the_signatures_a_replay_uses(monkeypatch) -> None:
    """bench/ times steps, not process start-up: `warm` loads the kernels for the argument
    types replays pass, so that a replay afterwards compiles or loads nothing more."""
    from simctl.sim.compiled import warm
    from tests.factories import LinearCost, run_one
    from tests.sim.test_token_replay import base_responses, token_trace

    assert warm() is True
    loaded = {f: set(f.signatures) for f in (sim_kernels.block_counts, sim_kernels.step_block)}
    _, group = base_responses(9, 8, 300)
    run = run_one(token_trace([group]), "seer:chunk_tokens=64", cluster="h100x2:tp1", cost=LinearCost())
    assert run.counters["replay_drafted"] > 0  # (both kernels ran)
    assert {f: set(f.signatures) for f in loaded} == loaded
    monkeypatch.setenv("SIMCTL_NO_NUMBA", "1")
    assert warm() is False
