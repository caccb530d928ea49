"""Acceptance by response position (`accept_<method>_buckets`, sim.position_acceptance):
the block sampler equals stepping the iterations one at a time, a trace without buckets
(or with buckets equal to its means) replays exactly as before, and a replay really draws
from the buckets."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simctl.sim.acceptance import sample_tokens, tree_acceptance
from simctl.sim.acceptance_source import SampledAcceptance
from simctl.sim.cluster import parse_cluster
from simctl.sim.cost_model import load_cost_model
from simctl.sim.models import get_model
from simctl.sim.position_acceptance import MEAN_FLOOR, PositionAcceptance, _ratios
from simctl.sim.replay import ReplaySetup, run_policy
from simctl.sim.state import StepState
from simctl.traces.generate import generate_trace
from simctl.traces.io import Trace
from simctl.traces.schema import TraceMeta, bucket_column
from tests.factories import LinearCost, make_frame, random_lengths, run_one


def _positions(
    means: np.ndarray, buckets: list[list[float]], width: int
) -> tuple[StepState, PositionAcceptance]:
    n = len(means)
    group = 1 if n % 4 else 4
    state = StepState.from_frame(make_frame(np.full(n, 5000), group_size=group, accept={"eagle": 0.5}), 0)
    state.accept_mat[:, 0] = means
    table = _ratios(pa.array(buckets, pa.list_(pa.float32())), means)
    return state, PositionAcceptance(state, np.arange(n), width, {0: table})


def _stepwise(
    u: np.ndarray,
    chain: np.ndarray,
    buckets: list[list[float]],
    means: np.ndarray,
    start: np.ndarray,
    gamma: np.ndarray,
    width: np.ndarray,
    bucket_tokens: int,
    first_plain: np.ndarray,
) -> np.ndarray:
    """The reference: one iteration at a time, its acceptance at the position it starts
    from (sample_tokens' arithmetic on one cell)."""
    n, k = u.shape
    out = np.zeros((n, k), np.int64)
    for i in range(n):
        pos = int(start[i])
        for j in range(k):
            if j == 0 and first_plain[i]:
                out[i, j] = 1
                pos += 1
                continue
            own = buckets[i]
            if own:
                b = min(pos // bucket_tokens, len(own) - 1)
                ratio = float(np.float32(own[b])) / means[i] if means[i] > MEAN_FLOOR else 1.0
                a = min(max(chain[i] * ratio, 0.0), 1.0)
            else:
                a = float(chain[i])
            if width[i] > 1:
                a = float(
                    tree_acceptance(
                        np.array([a]), gamma[i : i + 1], width[i : i + 1], width[i : i + 1] * gamma[i]
                    )[0]
                )
            a = min(a, 1.0 - 1e-12)
            inv = np.float32(1.0 / np.log(a)) if a > 0 else np.float32(0.0)
            r = np.ceil(np.log(u[i, j]) * inv)
            t = int(min(max(r, 1.0), gamma[i] + 1)) if r == r else 1
            out[i, j] = t
            pos += t
    return out


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    n=st.integers(1, 6),
    k=st.integers(1, 40),
    bucket_tokens=st.sampled_from([1, 3, 16, 64]),
    seed=st.integers(0, 2**16),
)
def test_a_block_equals_stepping_one_iteration_at_a_time(data, n, k, bucket_tokens, seed) -> None:
    value = st.floats(0.0, 1.0, allow_nan=False, width=32)
    buckets = [data.draw(st.lists(value, min_size=0, max_size=6)) for _ in range(n)]
    means = np.array([data.draw(st.floats(0.0, 1.0)) for _ in range(n)])
    scale = data.draw(st.sampled_from([1.0, 0.8]))  # the simulator moved the mean (drafter aging)
    gamma = np.array([data.draw(st.integers(1, 8)) for _ in range(n)], np.int64)
    width = np.array([data.draw(st.sampled_from([1, 1, 2, 4])) for _ in range(n)], np.int64)
    start = np.array([data.draw(st.integers(0, 200)) for _ in range(n)], np.int64)
    first_plain = np.array([data.draw(st.booleans()) for _ in range(n)])
    state, positions = _positions(means, buckets, bucket_tokens)
    state.accept_mat[:, 0] = np.clip(means * scale, 0.0, 1.0)
    state.generated[:] = start
    chain = state.accept_mat[:, 0].copy()
    alpha = np.where(width > 1, tree_acceptance(chain, gamma, width, width * gamma), chain)
    got = positions.sample(
        np.random.default_rng(seed), np.arange(n), np.zeros(n, np.int64), alpha, gamma, width, k, first_plain
    )
    u = np.random.default_rng(seed).random((n, k), dtype=np.float32)
    want = _stepwise(u, chain, buckets, means, start, gamma, width, bucket_tokens, first_plain)
    assert got.dtype == np.int16
    np.testing.assert_array_equal(got, want)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 8), k=st.integers(1, 30), seed=st.integers(0, 2**16), data=st.data())
def test_buckets_equal_to_the_means_or_none_change_nothing(n, k, seed, data) -> None:
    """The same uniforms as sample_tokens: flat buckets, or rows whose method has none,
    give exactly its outcomes (chains and trees alike)."""
    means = np.array([data.draw(st.floats(0.01, 0.99)) for _ in range(n)])
    gamma = np.array([data.draw(st.integers(1, 8)) for _ in range(n)], np.int64)
    width = np.array([data.draw(st.sampled_from([1, 3])) for _ in range(n)], np.int64)
    flat = [[float(np.float32(m))] * data.draw(st.integers(1, 4)) for m in means]
    state, positions = _positions(np.float32(means).astype(np.float64), flat, 8)
    state.generated[:] = data.draw(st.integers(0, 100))
    chain = state.accept_mat[:, 0]
    alpha = np.where(width > 1, tree_acceptance(chain, gamma, width, width * gamma), chain)
    rids, methods = np.arange(n), np.zeros(n, np.int64)
    want = sample_tokens(np.random.default_rng(seed), alpha, gamma, k)
    got = positions.sample(np.random.default_rng(seed), rids, methods, alpha, gamma, width, k)
    np.testing.assert_array_equal(got, want)
    # a method without buckets: the source samples as before, without asking the buckets
    source = SampledAcceptance(positions)
    other = np.ones(n, np.int64)
    assert not positions.covers(other)
    drawn = source.draw(np.random.default_rng(seed), rids, other, alpha, gamma, 1, k, None, width)
    np.testing.assert_array_equal(drawn.tokens, want)


def test_an_iteration_takes_the_bucket_it_starts_in() -> None:
    """0.95 for the first 512 tokens, then 0.05: iterations starting early accept nearly
    every draft, later ones nearly none; a row past its last bucket keeps the last one."""
    n, k, gamma = 400, 200, 4
    state, positions = _positions(np.full(n, 0.5), [[0.95, 0.05]] * n, 512)
    state.generated[: n // 2] = 0
    state.generated[n // 2 :] = 4096  # far past the second bucket
    tokens = positions.sample(
        np.random.default_rng(0),
        np.arange(n),
        np.zeros(n, np.int64),
        np.full(n, 0.5),
        np.full(n, gamma),
        None,
        k,
    )
    early = tokens[: n // 2, :10].mean()  # the first 10 iterations stay below 512 tokens
    late = tokens[n // 2 :].mean()
    expect = lambda a: (1 - a ** (gamma + 1)) / (1 - a)  # noqa: E731
    assert early == pytest.approx(expect(0.95), rel=0.03)
    assert late == pytest.approx(expect(0.05), rel=0.03)
    # the early rows cross into 0.05 within the block: their last iterations are slow
    assert tokens[: n // 2, -10:].mean() == pytest.approx(expect(0.05), rel=0.05)


def _replay(trace: Trace) -> tuple[float, float]:
    spec = parse_cluster("a100x8:tp1")
    model = get_model(trace.meta.model)
    setup = ReplaySetup(trace=trace, cluster=spec, model=model, cost=load_cost_model(model, spec), steps=[0])
    run = run_policy(setup, "ngram")
    req = run.requests[0]
    return run.steps[0].rollout_makespan_s, float(req["accepted"].sum() / req["drafted"].sum())


def test_a_replay_draws_from_the_buckets() -> None:
    """The same trace replayed under n-gram speculation (sampled: no token ids) with flat
    buckets, with none, and with acceptance collapsing after the first 32 tokens (the
    generated responses are a few hundred tokens): flat and none are the same run; the
    collapse accepts less and takes longer."""
    df, meta, lists = generate_trace("efficientrollout-qwen7b-8k", 1, 0, scale=0.02)
    assert bucket_column("ngram") in lists and meta.accept_bucket_tokens == 512
    df = df.reset_index(drop=True)
    # means a float32 bucket equals exactly (a flat list is then a ratio of 1.0)
    df["accept_ngram"] = df["accept_ngram"].to_numpy(np.float32).astype(np.float64)
    mean = df["accept_ngram"].to_numpy()
    meta = dataclasses.replace(meta, accept_bucket_tokens=32)
    lengths = -(-df["response_len"].to_numpy() // 32)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    row = np.repeat(np.arange(len(df)), lengths)

    def with_buckets(values: np.ndarray) -> Trace:
        col = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values.astype(np.float32)))
        return Trace(df=df, meta=meta, lists={**lists, bucket_column("ngram"): col})

    flat = _replay(with_buckets(np.float32(mean)[row].astype(np.float64)))
    none = _replay(
        Trace(
            df=df,
            meta=dataclasses.replace(meta),
            lists={k: v for k, v in lists.items() if k != bucket_column("ngram")},
        )
    )
    first = np.r_[True, row[1:] != row[:-1]]
    collapse = _replay(with_buckets(np.where(first, 0.95, 0.02)))
    assert flat[0] == pytest.approx(none[0], rel=1e-9) and flat[1] == pytest.approx(none[1], rel=1e-6)
    assert collapse[1] < 0.5 * flat[1]
    assert collapse[0] > flat[0]


class _ZeroUniforms:
    """An rng whose every uniform is 0 (a float32 draw is 0 once in 2**24 or so)."""

    def random(self, shape: tuple[int, int], dtype: type = np.float64) -> np.ndarray:
        return np.zeros(shape, dtype)


def test_a_uniform_of_zero_gives_a_row_that_never_drafts_one_token() -> None:
    """ln 0 = -inf times 1 / ln a = 0 (acceptance 0) is NaN: one token, not a cast NaN
    (0 tokens, an iteration that emits nothing); a drafting row accepts its whole draft."""
    alpha, gamma = np.array([0.0, 0.6]), np.array([4, 4])
    rng = _ZeroUniforms()
    tokens = sample_tokens(rng, alpha, gamma, 3)  # type: ignore[arg-type]
    np.testing.assert_array_equal(tokens, [[1, 1, 1], [5, 5, 5]])
    _, positions = _positions(np.array([0.5, 0.5]), [[0.0, 0.0], [0.6, 0.6]], 8)
    got = positions.sample(rng, np.arange(2), np.zeros(2, np.int64), alpha, gamma, None, 3)  # type: ignore[arg-type]
    np.testing.assert_array_equal(got, [[1, 1, 1], [5, 5, 5]])


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**16), data=st.data())
def test_rows_of_two_methods_in_one_draw_read_their_own_buckets(seed, data) -> None:
    """A draw may mix methods (request overrides): each row reads its method's buckets."""
    n, k, width = 8, 25, 16
    value = st.floats(0.0, 1.0, allow_nan=False, width=32)
    lists = {m: [data.draw(st.lists(value, min_size=1, max_size=5)) for _ in range(n)] for m in (0, 1)}
    means = {m: np.array([data.draw(st.floats(0.05, 0.95)) for _ in range(n)]) for m in (0, 1)}
    frame = make_frame(np.full(n, 5000), accept={"eagle": 0.5, "ngram": 0.5})
    state = StepState.from_frame(frame, 0)
    tables = {}
    for m in (0, 1):
        state.accept_mat[:, m] = means[m]
        tables[m] = _ratios(pa.array(lists[m], pa.list_(pa.float32())), means[m])
    positions = PositionAcceptance(state, np.arange(n), width, tables)
    methods = np.array([data.draw(st.sampled_from([0, 1])) for _ in range(n)], np.int64)
    state.generated[:] = [data.draw(st.integers(0, 80)) for _ in range(n)]
    gamma, chain = np.full(n, 4), state.accept_mat[np.arange(n), methods]
    got = positions.sample(np.random.default_rng(seed), np.arange(n), methods, chain, gamma, None, k)
    u = np.random.default_rng(seed).random((n, k), dtype=np.float32)
    own = [lists[int(m)][i] for i, m in enumerate(methods)]
    mean = np.array([means[int(m)][i] for i, m in enumerate(methods)])
    ones, none = np.ones(n, np.int64), np.zeros(n, np.bool_)
    want = _stepwise(u, chain, own, mean, state.generated.copy(), gamma, ones, width, none)
    np.testing.assert_array_equal(got, want)


def test_a_step_reads_the_buckets_of_its_own_trace_rows() -> None:
    """Buckets are taken for the step's rows (trace rows 4-7 here), in the step's order:
    step 0's rows never accept, step 1's always do."""
    df0 = make_frame(np.full(4, 100), accept={"ngram": 0.5})
    df1 = make_frame(np.full(4, 100), step=1, accept={"ngram": 0.5})
    df = pd.concat([df0, df1], ignore_index=True)
    lists = {bucket_column("ngram"): pa.array([[0.0]] * 4 + [[1.0]] * 4, pa.list_(pa.float32()))}
    trace = Trace(df=df, meta=TraceMeta(group_size=4, accept_bucket_tokens=64), lists=lists)
    frame = df.iloc[[7, 5, 6, 4]]  # a step's rows, in any order
    state = StepState.from_frame(frame, 1)
    positions = PositionAcceptance.of_trace(trace, state, df.index.get_indexer(frame.index))
    assert positions is not None
    n = 4
    got = positions.sample(
        np.random.default_rng(0), np.arange(n), np.zeros(n, np.int64), np.full(n, 0.5), np.full(n, 3), None, 6
    )
    np.testing.assert_array_equal(got, np.full((n, 6), 4))


@settings(max_examples=10, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    policy=st.sampled_from(["ngram", "spec-coupled"]),
    bucket_tokens=st.sampled_from([8, 64, 512]),
    data=st.data(),
)
def test_every_token_generated_once_with_position_buckets(seed, policy, bucket_tokens, data) -> None:
    """Token conservation and the verification bounds hold whatever the buckets say
    (lists shorter or longer than the response, values 0 to 1), and a seed replays
    exactly."""
    lengths = random_lengths(seed, 32)
    frame = make_frame(lengths, accept={"ngram": 0.5, "draft_small": 0.6})
    value = st.floats(0.0, 1.0, allow_nan=False, width=32)
    lists = {
        bucket_column(m): pa.array(
            [data.draw(st.lists(value, min_size=0, max_size=8)) for _ in range(len(frame))],
            pa.list_(pa.float32()),
        )
        for m in ("ngram", "draft_small")
    }
    meta = TraceMeta(
        model="qwen2.5-7b", group_size=4, preset="test", seed=0, accept_bucket_tokens=bucket_tokens
    )
    trace = Trace(df=frame, meta=meta, lists=lists)
    run = run_one(trace, policy, cluster="h100x8", cost=LinearCost(), seed=seed)
    again = run_one(trace, policy, cluster="h100x8", cost=LinearCost(), seed=seed)
    req = run.requests[0]
    assert req["finish_s"].notna().all()
    assert int(req["response_len"].sum()) == run.steps[0].output_tokens == int(lengths.sum())
    assert (req["accepted"] <= req["drafted"]).all()
    admissions = req["dispatches"] + req["preemptions"]
    assert (req["response_len"] - req["accepted"] - req["spec_iters"] <= admissions).all()
    assert run.steps[0].rollout_makespan_s == again.steps[0].rollout_makespan_s
