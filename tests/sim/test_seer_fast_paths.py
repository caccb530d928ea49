"""The speed paths of the speculative planner and the grouped-drafter acceptance model
(sim/spec_planner.py, sim/token_replay.py, sim/acceptance.py) equal the straightforward
forms they replace, bit for bit: results must not move when the simulator gets faster."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from simctl.policies.suffix_tree import DraftRule
from simctl.sim.acceptance import MAX_ACCEPT, expected_tokens, sample_tokens, tree_acceptance
from simctl.sim.cluster import parse_cluster
from simctl.sim.cost_model import CostModelError, RooflineCostModel, _eagle_pass, load_cost_model
from simctl.sim.models import get_model
from simctl.sim.spec_planner import _any_miss, block_stops, setting_rows
from simctl.sim.state import FINISHED, RUNNING, StepState
from simctl.sim.token_replay import StepReplay


def sample_tokens_reference(
    rng: np.random.Generator, alpha: np.ndarray, gamma: np.ndarray, iterations: int
) -> np.ndarray:
    """sample_tokens as it was before its speed changes (new log array, scalar clamp)."""
    a = np.minimum(np.maximum(np.asarray(alpha, dtype=np.float64), 0.0), MAX_ACCEPT)
    g = np.asarray(gamma, dtype=np.int64)
    u = rng.random((len(a), iterations), dtype=np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(a > 0, 1.0 / np.log(np.maximum(a, 1e-300)), 0.0).astype(np.float32)
        r = np.log(u)
    r *= inv[:, None]
    np.ceil(r, out=r)
    np.maximum(r, 1, out=r)
    np.minimum(r, (g + 1).astype(np.float32)[:, None], out=r)
    return r.astype(np.int16)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 40), min_size=1, max_size=30),
    st.integers(1, 40),
)
def test_block_stops_equal_unique_finishes_plus_the_block_end(fin: list[int], k: int) -> None:
    f = np.minimum(np.asarray(fin, np.int64), k)
    want = np.unique(f[f < k] + 1)
    if not len(want) or want[-1] != k:
        want = np.append(want, k)
    got = block_stops(np.sort(f), k)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=64),
    st.integers(1, 16),
    st.integers(1, 8),
    st.integers(0, 64),
    st.integers(0, 2**32 - 1),
)
def test_setting_rows_equal_the_per_plan_formulas(
    accept: list[float], gamma: int, topk: int, verify: int, seed: int
) -> None:
    """A plan's rows gathered from the per-step cache equal tree acceptance and expected
    tokens computed on those rows alone (as `_worker_arrays` and `_block_length` did)."""
    n = len(accept)
    mat = np.column_stack([np.asarray(accept), np.linspace(0.0, 1.0, n)])
    ids = np.random.default_rng(seed).integers(0, n, max(1, n // 2))
    alpha_all, expected_all = setting_rows(mat, 0, gamma, topk, verify, {})
    depth = np.full(len(ids), gamma, np.int64)
    alpha = mat[ids, 0]
    if topk > 1:
        alpha = tree_acceptance(
            alpha, depth, np.full(len(ids), topk, np.int64), np.full(len(ids), verify, np.int64)
        )
    assert np.array_equal(alpha_all.take(ids), alpha)
    assert np.array_equal(expected_all.take(ids), expected_tokens(alpha, depth))


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12),
    st.integers(1, 12),
    st.integers(1, 200),
    st.integers(0, 2**32 - 1),
)
def test_sample_tokens_equals_its_reference(
    alpha: list[float], gamma: int, iterations: int, seed: int
) -> None:
    a = np.asarray(alpha)
    g = np.full(len(a), gamma, np.int64)
    got = sample_tokens(np.random.default_rng(seed), a, g, iterations)
    want = sample_tokens_reference(np.random.default_rng(seed), a, g, iterations)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-1e9, 1e9), min_size=1, max_size=50))
def test_rint_is_round_to_zero_decimals(values: list[float]) -> None:
    x = np.asarray([*values, 0.5, 1.5, 2.5, -0.5, -2.5])
    np.testing.assert_array_equal(np.rint(x), np.round(x))


def test_any_miss_follows_the_matrix_it_is_given() -> None:
    full, cache = np.ones((4, 2)), {}
    assert not _any_miss(full, cache)
    partial = full.copy()
    partial[3, 1] = 0.5
    assert _any_miss(partial, cache)
    assert not _any_miss(full, cache)


def group_model_reference(
    replay: StepReplay, rule: DraftRule, rids: np.ndarray, alpha: np.ndarray, paths: np.ndarray
) -> np.ndarray:
    """StepReplay._group_model as it was before its speed changes."""
    state = replay.state
    if rule.source == "group":
        origin = state.origin[rids]
        sib = replay._member_matrix()[replay._group_index[origin]]
        s = np.maximum(sib, 0)
        gen = state.generated[s]
        vis = gen - gen % rule.append_tokens
        share = np.minimum(1.0, vis / np.maximum(state.generated[rids], 1)[:, None])
        share[state.state[s] == FINISHED] = 1.0
        share[(sib < 0) | (sib == origin[:, None])] = 0.0
        refs = share.sum(axis=1)
    else:
        refs = np.zeros(len(rids))
    out = np.empty(len(rids))
    for k in np.unique(paths).tolist():
        sel = paths == k
        grid_refs, grid_p = replay._table2_grid(int(k))
        out[sel] = np.interp(refs[sel], grid_refs, grid_p)
    ref = replay._ref_accept
    if ref is None:
        replay._group_model(rule, rids[:1], alpha[:1], paths[:1])
        ref = replay._ref_accept
    assert ref is not None
    return np.minimum(np.maximum(out * alpha / max(ref, 1e-9), 0.0), 0.99)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(["group", "own"]), st.integers(1, 64))
def test_group_model_equals_its_reference(seed: int, source: str, append: int) -> None:
    """Groups of uneven size (padding columns), siblings running or finished at random
    progress, a replica row and mixed path counts."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 9, 5)
    pid = np.repeat(np.arange(len(sizes)), sizes)
    n = len(pid)
    df = pd.DataFrame(
        {
            "step": 0,
            "prompt_id": pid,
            "sample": np.concatenate([np.arange(s) for s in sizes]),
            "prompt_len": 10,
            "response_len": 500,
            "max_tokens": 500,
            "finish_reason": "length",
            "accept_suffix": rng.random(n),
        }
    )
    state = StepState.from_frame(df, 0)
    state.generated[:] = rng.integers(0, 500, n)
    state.state[:] = np.where(rng.random(n) < 0.3, FINISHED, RUNNING)
    replica = state.clone_row(int(rng.integers(0, n)))
    state.generated[replica] = int(rng.integers(0, 500))
    replay = StepReplay(state, np.arange(n), None, {"suffix": DraftRule(source="group")})
    rule = DraftRule(source=source, append_tokens=append)
    rids = rng.permutation(n + 1)[: int(rng.integers(1, n + 2))]
    chain = state.accept_mat[rids, 0]
    paths = rng.choice(np.array([1, 2, 4]), len(rids))
    want = group_model_reference(replay, rule, rids, chain, paths)
    assert np.array_equal(replay._group_model(rule, rids, chain, paths), want)
    siblings = replay._siblings(rids)
    assert np.array_equal(replay._group_model(rule, rids, chain, paths, siblings), want)
    one = np.full(len(rids), 2, np.int64)
    assert np.array_equal(
        replay._group_model(rule, rids, chain, one), group_model_reference(replay, rule, rids, chain, one)
    )


def draft_time_reference(m: RooflineCostModel, drafter: str, b: float, ctx: float, gamma: int) -> float:
    """RooflineCostModel.draft_time of a model drafter as it was before its scalar path."""
    prm = m.params
    bb = np.asarray(b, dtype=np.float64)
    cc = np.asarray(ctx, dtype=np.float64)
    g = np.asarray(gamma, dtype=np.float64)
    per_seq_ctx = cc / np.maximum(bb, 1.0)
    if drafter == "w4-self":
        w4 = dataclasses.replace(m._pass, overhead_s=prm.draft_step_overhead_s)
        step = m._time(w4, bb, bb, cc, per_seq_ctx, prm.w4_weight_ratio * prm.eta_d)
    else:
        step = m._time(_eagle_pass(m.model, m.tp, prm), bb, bb, cc, per_seq_ctx)
    cycle = np.where((g > 0) & (bb > 0), prm.spec_cycle_overhead_s, 0.0)  # once per cycle
    return float(g * step + cycle)


@settings(max_examples=80, deadline=None)
@given(
    st.sampled_from(["Qwen2.5-7B", "Qwen2.5-32B", "Llama-3.1-8B", "Moonlight-16B-A3B"]),
    st.sampled_from(["h100x8", "h100x8:tp2", "h100x8:tp4:fp8", "h800x8:tp1"]),
    st.sampled_from(["w4-self", "eagle"]),
    st.one_of(st.integers(0, 512), st.floats(0.0, 512.0)),
    st.floats(0.0, 1e7),
    st.integers(0, 16),
)
def test_scalar_model_draft_time_equals_its_numpy_form(
    model: str, cluster: str, drafter: str, b: float, ctx: float, gamma: int
) -> None:
    try:
        m = load_cost_model(get_model(model), parse_cluster(cluster))
    except CostModelError:  # the model does not fit that layout
        return
    if not isinstance(m, RooflineCostModel):
        return
    got = m.draft_time(drafter, b, ctx, gamma)
    assert float(got) == draft_time_reference(m, drafter, b, ctx, gamma)
    again = m.draft_time(drafter, b, ctx, gamma)  # the cached drafter pass
    assert float(again) == float(got)
