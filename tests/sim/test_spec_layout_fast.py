"""The speculative planner's block layout helpers (`finish_columns`, `capped_progress`)
equal the direct formulas they replace, on random blocks: speed work must not move a block
boundary (issue #17)."""

from __future__ import annotations

from unittest import mock

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simctl.sim import spec_planner
from simctl.sim.spec_planner import capped_progress, finish_columns


@st.composite
def blocks(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    """Tokens per row per iteration (0 = a decoupled stall .. 9) and each row's tokens left."""
    rows = draw(st.integers(1, 12))
    cols = draw(st.integers(1, 40))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 10, (rows, cols)).astype(np.int16)
    remaining = rng.integers(1, 10 * cols + 20, rows).astype(np.int64)
    return np.cumsum(x, axis=1, dtype=np.int32), remaining


@settings(max_examples=300, deadline=None)
@given(blocks())
def test_finish_columns_counts_columns_below_remaining(block: tuple[np.ndarray, np.ndarray]) -> None:
    cum, remaining = block
    with mock.patch.object(spec_planner, "SMALL_BLOCK_CELLS", 0):  # the large-block form
        got = finish_columns(cum, remaining)
    assert np.array_equal(got, finish_columns(cum, remaining))
    want = np.count_nonzero(cum < remaining[:, None], axis=1)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@settings(max_examples=300, deadline=None)
@given(blocks())
def test_capped_progress_equals_the_int64_minimum_and_its_sums(block: tuple[np.ndarray, np.ndarray]) -> None:
    cum, remaining = block
    with mock.patch.object(spec_planner, "SMALL_BLOCK_CELLS", 0):  # the large-block form
        progress, got = capped_progress(cum, remaining)
    small_progress, small = capped_progress(cum, remaining)
    assert np.array_equal(got, small) and np.array_equal(progress, small_progress)
    capped = np.minimum(cum, remaining[:, None])
    want = capped.sum(axis=0, dtype=np.int64)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)
    # kept in uint16 (every remaining fits): the same values as the int64 minimum
    assert progress.dtype == np.uint16
    np.testing.assert_array_equal(progress.astype(np.int64), capped)


def test_a_block_above_the_small_size_takes_the_fast_forms_and_agrees() -> None:
    rng = np.random.default_rng(7)
    x = rng.integers(0, 6, (64, 512)).astype(np.int16)
    cum = np.cumsum(x, axis=1, dtype=np.int32)
    remaining = rng.integers(1, 1800, 64).astype(np.int64)
    assert cum.size > spec_planner.SMALL_BLOCK_CELLS
    fin = finish_columns(cum, remaining)
    np.testing.assert_array_equal(fin, np.count_nonzero(cum < remaining[:, None], axis=1))
    assert 0 < (fin < 512).sum() < 64  # some rows finish inside the block, some do not
    want = np.minimum(cum, remaining[:, None]).sum(axis=0, dtype=np.int64)
    np.testing.assert_array_equal(capped_progress(cum, remaining)[1], want)


def test_capped_progress_widens_where_int32_would_overflow_and_uint16_cannot_hold_it() -> None:
    cum = np.full((3, 2048), 2**30, np.int32)
    remaining = np.full(3, 2**30 + 5, np.int64)
    progress, sums = capped_progress(cum, remaining)
    np.testing.assert_array_equal(sums, np.full(2048, 3 * 2**30))
    assert progress.dtype == np.int32 and int(progress.max()) == 2**30


def test_remaining_beyond_int32_is_compared_unnarrowed() -> None:
    cum = np.array([[5, 2**31 - 1]], np.int32)
    with mock.patch.object(spec_planner, "SMALL_BLOCK_CELLS", 0):
        assert finish_columns(cum, np.array([2**33], np.int64)).tolist() == [2]
        assert finish_columns(cum, np.array([6], np.int64)).tolist() == [1]
