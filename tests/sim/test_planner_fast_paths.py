"""The speculative planner's second round of speed paths (sim/spec_planner.py,
sim/acceptance.py, sim/cost_model.py) equal the straightforward forms they replace, bit for
bit: the simulator's results must not move when it gets faster (issue #17)."""

from __future__ import annotations

import types

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from simctl.policies.contract import SpecConfig
from simctl.sim.acceptance import tree_acceptance
from simctl.sim.cluster import parse_cluster
from simctl.sim.cost_model import CostModelError, RooflineCostModel, load_cost_model
from simctl.sim.models import get_model
from simctl.sim.spec_planner import SpecPlanner, _prefix_sums, capped_progress, finish_columns
from simctl.sim.state import PLAIN_GAMMA, StepState

MODELS = ["Qwen2.5-7B", "Qwen2.5-32B", "Moonlight-16B-A3B", "Llama-3.1-8B"]
CLUSTERS = ["h100x8", "h100x8:tp2", "h100x8:tp4:fp8", "h800x8:tp1", "h100x16:dp8"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-1e9, 1e9), min_size=0, max_size=40))
def test_prefix_sums_equal_concatenated_cumsum(values: list[float]) -> None:
    v = np.asarray(values, np.float64)
    np.testing.assert_array_equal(_prefix_sums(v), np.concatenate([[0.0], v.cumsum()]))


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 40),
    st.integers(1, 300),
    st.integers(0, 2**32 - 1),
)
def test_layout_helpers_take_remaining_narrowed_to_int32(b: int, k: int, seed: int) -> None:
    """The planner accumulates int16 tokens in place after one cast and hands the layout
    helpers `remaining` as int32: the same finish columns and capped sums as the int64
    `remaining` and `cumsum(dtype=int32)` (small blocks and large ones alike)."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 34, (b, k)).astype(np.int16)
    remaining = rng.integers(0, 34 * k + 5, b).astype(np.int64)
    cum = x.astype(np.int32)
    np.cumsum(cum, axis=1, out=cum)
    want_cum = x.cumsum(axis=1, dtype=np.int32)
    np.testing.assert_array_equal(cum, want_cum)
    rem32 = remaining.astype(np.int32)
    fin, want_fin = finish_columns(cum, rem32), np.count_nonzero(want_cum < remaining[:, None], axis=1)
    assert fin.dtype == want_fin.dtype
    np.testing.assert_array_equal(fin, want_fin)
    progress, sums = capped_progress(cum, rem32)
    np.testing.assert_array_equal(progress, np.minimum(want_cum, remaining[:, None]))
    want = np.minimum(want_cum, remaining[:, None]).sum(axis=0, dtype=np.int64)
    assert sums.dtype == want.dtype
    np.testing.assert_array_equal(sums, want)


def _terms_reference(m: RooflineCostModel, p, num_seqs, new_tokens, kv_read_tokens, attn_context, ws=1.0):
    """RooflineCostModel._terms as it was before its no-op operations were dropped."""
    prm, gpu, tp = m.params, m.gpu, m.tp
    b = np.asarray(num_seqs, dtype=np.float64)
    n = np.asarray(new_tokens, dtype=np.float64)
    weights = p.dense_bytes * ws + np.zeros_like(n)
    if p.moe_layers:
        touched = p.num_experts * -np.expm1(n * np.log1p(-p.top_k / p.num_experts))
        weights = weights + p.moe_layers * touched * p.expert_bytes * ws
    kv = (np.asarray(kv_read_tokens, dtype=np.float64) * prm.kv_read_eff + n) * p.kv_bytes
    t_mem = (weights + kv) / (gpu.hbm_bw * prm.hbm_bw_eff)
    if m._fp8 and p is m._pass:
        t_compute = (2.0 * n * p.matmul_params / tp) / (m._matmul_flops * prm.compute_eff) + (
            n * p.attn_coeff * np.asarray(attn_context) / tp
        ) / (gpu.bf16_flops * prm.compute_eff)
    else:
        flops = n * (2.0 * p.matmul_params + p.attn_coeff * np.asarray(attn_context)) / tp
        t_compute = flops / (gpu.bf16_flops * prm.compute_eff)
    ring = 2.0 * (tp - 1) / tp * n * p.hidden * 2.0
    latency = gpu.allreduce_latency_s if prm.allreduce_latency_s is None else prm.allreduce_latency_s
    t_comm = p.allreduces * (latency + ring / (gpu.nvlink_bw / 2 * prm.nvlink_eff))
    t_over = p.overhead_s + m.per_seq_overhead_s * b + prm.per_token_overhead_s * n
    if p is m._pass:
        t_over = t_over + np.where(n > b, prm.verify_per_seq_overhead_s * b, 0.0)
    return np.maximum(t_mem, t_compute) + t_comm + t_over


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(MODELS),
    st.sampled_from(CLUSTERS[:4]),
    st.integers(0, 2**32 - 1),
    st.booleans(),
)
def test_iteration_and_prefill_time_equal_their_reference(
    model: str, cluster: str, seed: int, scalar: bool
) -> None:
    """Arrays of batch, query tokens and context as a block prices them, and the scalar
    prefill pass: the same float64 values as the straightforward numpy forms."""
    try:
        m = load_cost_model(get_model(model), parse_cluster(cluster))
    except CostModelError:  # the model does not fit that layout
        return
    assert isinstance(m, RooflineCostModel)
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 64))
    b = rng.integers(0, 256, k).astype(np.float64)
    n = np.rint(b * rng.uniform(1.0, 9.0, k))
    ctx = rng.uniform(0.0, 4e6, k)
    got = m.iteration_time(b, n, ctx)
    want = _terms_reference(m, m._pass, b, n, ctx, ctx / np.maximum(b, 1.0))
    np.testing.assert_array_equal(got, want)
    tokens = int(rng.integers(0, 40_000)) if scalar else float(rng.uniform(0.0, 40_000.0))
    t = np.float64(tokens)
    assert float(m.prefill_time(tokens)) == float(_terms_reference(m, m._pass, 1.0, t, 0.0, t / 2.0))


def test_prefill_time_of_a_dp_attention_worker_keeps_its_own_law() -> None:
    """A subclass that prices passes its own way (DP attention) takes the numpy form."""
    m = load_cost_model(get_model("Moonlight-16B-A3B"), parse_cluster(CLUSTERS[4]))
    t = np.asarray(5000.0)
    assert float(m.prefill_time(5000)) == float(m._time(m._pass, 1.0, t, 0.0, t / 2.0))


def _request_arrays_reference(planner: SpecPlanner, ids: np.ndarray) -> tuple[np.ndarray, ...]:
    """SpecPlanner._request_arrays as it was before its masked writes were skipped."""
    st, spec = planner.host.state, planner.spec
    method = st.req_method[ids].astype(np.int64)
    gamma = st.req_gamma[ids].astype(np.int64)
    window = st.req_window[ids].astype(np.int64)
    topk = st.req_topk[ids].astype(np.int64)
    verify = st.req_verify[ids].astype(np.int64)
    inherit = gamma <= 0
    if planner.method_idx >= 0:
        follow = gamma == 0
        method[follow] = planner.method_idx
        gamma[follow] = spec.gamma
        window[follow] = spec.window if spec.mode == "decoupled" else 0
        topk[follow] = max(1, spec.topk)
        verify[follow] = spec.tokens_verified
        inherit = gamma == PLAIN_GAMMA
    method[inherit] = -1
    gamma[inherit] = 0
    verify[inherit] = 0
    gamma = np.where(window > 0, window, gamma)
    verify = np.where(window > 0, window, verify)
    alpha = np.where(method >= 0, st.accept_mat[ids, np.maximum(method, 0)], 0.0)
    tree = topk > 1
    if tree.any():
        alpha = np.where(tree, tree_acceptance(alpha, gamma, topk, verify), alpha)
    return alpha, gamma, method, window, topk, verify


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(["off", "coupled", "tree", "decoupled"]))
def test_request_arrays_equal_their_reference(seed: int, worker: str) -> None:
    """Rows that follow the worker, override it (coupled, tree, decoupled) or opt out
    (PLAIN_GAMMA), in random mixes, some mixes without any row of a kind."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 30))
    df = pd.DataFrame(
        {
            "step": 0,
            "prompt_id": np.arange(n),
            "sample": 0,
            "prompt_len": 10,
            "response_len": 100,
            "max_tokens": 100,
            "finish_reason": "length",
            "accept_ngram": rng.random(n),
            "accept_suffix": rng.random(n),
        }
    )
    state = StepState.from_frame(df, 0)
    kind = rng.integers(0, 4, n) * (rng.random() < 0.8)  # 0: follow the worker
    state.req_gamma[:] = np.select(
        [kind == 1, kind == 2, kind == 3], [rng.integers(1, 8, n), 4, PLAIN_GAMMA], 0
    )
    state.req_method[:] = np.where(kind > 0, rng.integers(0, len(state.methods), n), -1)
    state.req_topk[:] = np.where(kind == 2, rng.integers(2, 6, n), 1)
    state.req_verify[:] = np.where(kind == 2, 16, state.req_gamma)
    state.req_window[:] = np.where((kind == 1) & (rng.random(n) < 0.5), rng.integers(1, 6, n), 0)
    host = types.SimpleNamespace(state=state, request_spec=True, method_index=state.method_index)
    planner = SpecPlanner(host, 10**9, np.random.default_rng(0), None)  # type: ignore[arg-type]
    specs = {
        "coupled": SpecConfig(method="ngram", gamma=3),
        "tree": SpecConfig(method="suffix", gamma=4, topk=3, verify_tokens=12),
        "decoupled": SpecConfig(method="suffix", gamma=2, mode="decoupled", window=4, drafter_worker=1),
    }
    if worker in specs:
        planner.set_spec(specs[worker])
    ids = rng.permutation(n)[: int(rng.integers(1, n + 1))]
    got = planner._request_arrays(ids)
    for a, b in zip(got, _request_arrays_reference(planner, ids), strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 60), min_size=1, max_size=40), st.integers(1, 70))
def test_plain_block_stops_equal_unique_of_the_finishes(remaining: list[int], k: int) -> None:
    """`_sorted_stops` (sim/worker.py) is np.unique of the finishes within the block plus
    the block's end, as the plain planner computed it before."""
    from simctl.sim.worker import _sorted_stops

    rem = np.sort(np.asarray(remaining, np.int64))
    want = np.unique(np.minimum(rem[rem <= k], k))
    if not len(want) or want[-1] != k:
        want = np.append(want, k)
    got = _sorted_stops(rem, k)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
