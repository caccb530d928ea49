"""`StepState.clone_row` appends into buffers with spare rows (the speed work of issue #17);
it must leave every column equal, value for value and dtype for dtype, to the straightforward
form that concatenates each column with the cloned row, whatever the clones and the writes
between them (writes through the columns, and a column replaced outright)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simctl.sim.state import StepState

ZEROED = ("drafted", "accepted", "spec_iters", "spec_tokens", "preemptions", "dispatches", "kv_resident")


def _state(n: int, seed: int) -> StepState:
    rng = np.random.default_rng(seed)
    return StepState(
        step=0,
        epoch=0,
        prompt_id=np.arange(n, dtype=np.int64) // 2,
        sample=np.arange(n, dtype=np.int32) % 2,
        prompt_len=rng.integers(1, 100, n),
        target_len=rng.integers(1, 500, n),
        max_tokens=np.full(n, 1000, np.int64),
        accept={"ngram": rng.random(n), "draft_small": rng.random(n)},
    )


def _clone_by_concatenation(st_: StepState, columns: dict[str, np.ndarray], rid: int) -> None:
    """The form `clone_row` replaced, on a dict of columns."""
    new = len(columns["prompt_id"])
    for name in StepState._ROW_ARRAYS:
        arr = columns[name]
        columns[name] = np.concatenate([arr, arr[rid : rid + 1]])
    for name in ZEROED:
        columns[name][new] = 0
    columns["finish_s"][new] = np.nan
    columns["worker"][new] = -1


# an operation: ("clone", row pick), ("write", column, row pick, value), ("replace", column)
operation = st.one_of(
    st.tuples(st.just("clone"), st.floats(0, 1, exclude_max=True)),
    st.tuples(
        st.just("write"),
        st.sampled_from(["generated", "state", "finish_s", "drafted", "accept_mat", "worker"]),
        st.floats(0, 1, exclude_max=True),
        st.integers(0, 100),
    ),
    st.tuples(st.just("replace"), st.sampled_from(["generated", "priority", "accept_mat"])),
)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 40), st.integers(0, 2**31), st.lists(operation, max_size=120))
def test_clone_row_equals_concatenation(n: int, seed: int, ops: list[tuple]) -> None:
    fast = _state(n, seed)
    ref = {name: getattr(fast, name).copy() for name in StepState._ROW_ARRAYS}
    specs = list(fast.spec)
    for op in ops:
        rows = len(ref["prompt_id"])
        if op[0] == "clone":
            rid = int(op[1] * rows)
            assert fast.clone_row(rid) == rows
            _clone_by_concatenation(fast, ref, rid)
            specs.append(specs[rid])
        elif op[0] == "write":
            _, name, pick, value = op
            row = int(pick * rows)
            getattr(fast, name)[row] = value
            ref[name][row] = value
        else:
            name = op[1]
            setattr(fast, name, getattr(fast, name) + 1)
            ref[name] = ref[name] + 1
        for name in StepState._ROW_ARRAYS:
            got, want = getattr(fast, name), ref[name]
            assert got.dtype == want.dtype and got.shape == want.shape, name
            np.testing.assert_array_equal(got, want, err_msg=name)
        assert fast.n == len(ref["prompt_id"])
        assert fast.spec == specs
