"""Cost model: published anchors, regimes, monotonicity, vectorisation, profiles."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simctl.sim.cluster import parse_cluster
from simctl.sim.cost_model import (
    DEFAULT_PARAMS,
    CostModel,
    ProfiledCostModel,
    RooflineCostModel,
    load_cost_model,
    nnls,
)
from simctl.sim.hardware import get_gpu
from simctl.sim.models import get_model

Q32_H100_TP4 = RooflineCostModel(get_model("Qwen2.5-32B"), get_gpu("h100"), 4)
Q7_A100_TP1 = RooflineCostModel(get_model("Qwen2.5-7B"), get_gpu("a100"), 1)
MOE_H100_TP8 = RooflineCostModel(get_model("Qwen3-235B-A22B"), get_gpu("h100"), 8)
DRAFTERS = ("ngram", "suffix", "history", "w4-self", "eagle", "model:qwen2.5-0.5b")


def decode(cm: RooflineCostModel, b: int, ctx_per_seq: int = 2048) -> float:
    return float(cm.iteration_time(b, b, b * ctx_per_seq))


def verify(cm: RooflineCostModel, b: int, gamma: int, ctx_per_seq: int = 2048) -> float:
    return float(cm.iteration_time(b, b * (gamma + 1), b * ctx_per_seq))


# --------------------------------------------------------------------------- anchors
def test_specactor_anchor_qwen32b_tp4_h800_decode_b1() -> None:
    # SpecActor §5.1: "decoding latency of Qwen2.5-32B ... 13 ms when per-worker batch is 1",
    # on its H800 platform (traces/layouts.py); TLT Table 7 pins H100's faster all-reduce.
    h800 = RooflineCostModel(get_model("Qwen2.5-32B"), get_gpu("h800"), 4)
    assert 11e-3 <= decode(h800, 1, ctx_per_seq=256) <= 15e-3
    assert decode(Q32_H100_TP4, 1, ctx_per_seq=256) < decode(h800, 1, ctx_per_seq=256)


def test_qwen7b_a100_tp1_decode_b1() -> None:
    # EfficientRollout Table 6: T_p = 10.45 ms; TLT Table 2: 92.8 tok/s (10.8 ms).
    assert 8e-3 <= decode(Q7_A100_TP1, 1, ctx_per_seq=512) <= 10.5e-3


def test_verification_is_nearly_free_at_batch_1() -> None:
    d = decode(Q32_H100_TP4, 1)
    for gamma in (3, 4, 7):
        assert verify(Q32_H100_TP4, 1, gamma) <= 1.1 * d


def test_model_drafters_pay_the_speculative_cycle_cost_once_per_cycle() -> None:
    # EfficientRollout Table 6: a 4-token EAGLE cycle's verify costs 1.37 T_p; the GPU work
    # is memory-bound like decode, the rest is the engine's fixed cost per cycle.
    cycle = DEFAULT_PARAMS.spec_cycle_overhead_s
    assert 3e-3 < cycle < 5e-3
    cm = Q7_A100_TP1
    for drafter in ("eagle", "w4-self", "model:qwen2.5-0.5b"):
        one, two, four = (float(cm.draft_time(drafter, 8, 8 * 2048, g)) for g in (1, 2, 4))
        step = two - one
        assert one == pytest.approx(step + cycle)
        assert four == pytest.approx(4 * step + cycle)
        assert float(cm.draft_time(drafter, 8, 8 * 2048, 0)) == 0.0
        arr = cm.draft_time(drafter, np.array([8.0, 8.0]), np.array([8 * 2048.0] * 2), np.array([0.0, 4.0]))
        assert arr.tolist() == pytest.approx([0.0, four])
    for free in ("ngram", "suffix", "history"):  # no proposer forward: no cycle cost
        assert float(cm.draft_time(free, 1, 2048, 4)) < 1e-3
    ratio = (verify(cm, 1, 3) + cycle) / decode(cm, 1)
    assert ratio == pytest.approx(1.37, rel=1e-3)


def test_plain_decode_and_verify_do_not_pay_the_cycle_cost() -> None:
    no_cycle = RooflineCostModel(
        get_model("Qwen2.5-7B"),
        get_gpu("a100"),
        1,
        dataclasses.replace(DEFAULT_PARAMS, spec_cycle_overhead_s=0.0),
    )
    assert decode(Q7_A100_TP1, 32) == decode(no_cycle, 32)
    assert verify(Q7_A100_TP1, 32, 3) == verify(no_cycle, 32, 3)
    assert float(Q7_A100_TP1.prefill_time(512)) == float(no_cycle.prefill_time(512))


def test_verification_becomes_compute_bound_at_large_batch() -> None:
    ratios = [verify(Q32_H100_TP4, b, 4) / decode(Q32_H100_TP4, b) for b in (1, 32, 128, 256)]
    assert ratios == sorted(ratios)
    assert ratios[-1] >= 1.5
    parts = Q32_H100_TP4.breakdown(256, 256 * 5, 256 * 2048)
    assert parts["compute_s"] > parts["memory_s"]
    small = Q32_H100_TP4.breakdown(1, 5, 2048)
    assert small["memory_s"] > 10 * small["compute_s"]


def test_kv_capacity_qwen32b_tp4_h100() -> None:
    expected = (4 * 80e9 * 0.9 - 65.5e9) / 262144
    assert Q32_H100_TP4.kv_capacity_tokens == pytest.approx(expected, rel=0.01)
    assert Q32_H100_TP4.weight_bytes_per_gpu == pytest.approx(65.5e9 / 4, rel=0.01)


def test_model_that_does_not_fit_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"Kimi-K2 .* does not fit"):
        RooflineCostModel(get_model("kimi-k2"), get_gpu("h100"), 8)


def test_moe_reads_only_touched_experts() -> None:
    moe = get_model("Qwen3-235B-A22B")
    one = MOE_H100_TP8.breakdown(1, 1, 0)["memory_s"]
    many = MOE_H100_TP8.breakdown(4096, 4096, 0)["memory_s"]
    assert many / one == pytest.approx(moe.param_count() / moe.active_param_count(), rel=0.15)
    assert decode(MOE_H100_TP8, 1) < decode(MOE_H100_TP8, 64) < decode(MOE_H100_TP8, 256)


def test_moe_verification_costs_most_at_small_batch_unlike_dense() -> None:
    """Verifying gamma + 1 tokens per sequence routes them to more experts than decode's one
    token, so at small batch a sparse MoE pays for reading far more expert weights; from
    medium batch decode touches nearly every expert already and verification is nearly
    free again, before compute binds (the non-monotonic shape of MoESD, arXiv:2505.19645).
    A dense model reads the same weights either way: its ratio only grows with the batch.
    (docs/calibration.md, "Speculation on MoE models")"""
    sparse = RooflineCostModel(get_model("gpt-oss-120b"), get_gpu("h100"), 4)

    def ratio(cm: RooflineCostModel, b: int) -> float:
        return verify(cm, b, 3) / decode(cm, b)

    assert ratio(sparse, 4) > 1.5 > 1.05 > ratio(Q32_H100_TP4, 4)
    assert ratio(sparse, 4) > ratio(sparse, 32) > ratio(sparse, 128)
    assert ratio(sparse, 128) < ratio(Q32_H100_TP4, 128)  # medium batch: MoE gains more
    dense = [ratio(Q32_H100_TP4, b) for b in (1, 4, 32, 128, 512)]
    assert dense == sorted(dense)


# --------------------------------------------------------------------------- drafters
def test_drafter_costs() -> None:
    cm = Q7_A100_TP1
    target = decode(cm, 1)

    def step(drafter: str) -> float:  # one draft step, without the per-cycle cost
        return float(cm.draft_time(drafter, 1, 2048, 2)) - float(cm.draft_time(drafter, 1, 2048, 1))

    assert 0.3 < step("w4-self") / target < 0.6  # EfficientRollout: W_D/W_T 0.33-0.36, times eta_D
    assert step("eagle") < 1.5e-3  # Table 6: T_q 0.82 ms
    assert step("model:qwen2.5-0.5b") < 0.2 * target
    for cpu in ("ngram", "suffix", "history"):
        per_seq_step = float(cm.draft_time(cpu, 1, 2048, 1))
        assert 1e-6 < per_seq_step < 100e-6
        assert float(cm.draft_time(cpu, 1, 2048, 0)) == 0.0
    w4_step = float(cm.draft_time("w4-self", 8, 8 * 2048, 2)) - float(
        cm.draft_time("w4-self", 8, 8 * 2048, 1)
    )
    assert float(cm.draft_time("w4-self", 8, 8 * 2048, 4)) == pytest.approx(
        4 * w4_step + DEFAULT_PARAMS.spec_cycle_overhead_s
    )
    with pytest.raises(ValueError, match="unknown drafter 'medusa'"):
        cm.draft_time("medusa", 1, 100, 2)


# --------------------------------------------------------------------------- properties
CTX = st.integers(0, 32768)
BATCH = st.integers(1, 512)
MODELS = (Q32_H100_TP4, Q7_A100_TP1, MOE_H100_TP8)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(MODELS), BATCH, BATCH, CTX)
def test_decode_monotone_in_batch(cm: RooflineCostModel, b1: int, b2: int, ctx: int) -> None:
    lo, hi = sorted((b1, b2))
    assert decode(cm, lo, ctx) <= decode(cm, hi, ctx) * (1 + 1e-12)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(MODELS), BATCH, st.integers(1, 8), CTX, CTX)
def test_monotone_in_context(cm: RooflineCostModel, b: int, g: int, c1: int, c2: int) -> None:
    lo, hi = sorted((c1, c2))
    n = b * (g + 1)
    assert cm.iteration_time(b, n, b * lo) <= cm.iteration_time(b, n, b * hi) * (1 + 1e-12)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(MODELS), BATCH, st.integers(0, 16), st.integers(0, 16), CTX)
def test_monotone_in_new_tokens(cm: RooflineCostModel, b: int, g1: int, g2: int, ctx: int) -> None:
    lo, hi = sorted((g1, g2))
    assert verify(cm, b, lo, ctx) <= verify(cm, b, hi, ctx) * (1 + 1e-12)


# --------------------------------------------------------------------------- vectorisation
def test_arrays_match_scalar_loops() -> None:
    rng = np.random.default_rng(0)
    b = rng.integers(1, 300, 200)
    n = b * rng.integers(1, 9, 200)
    ctx = b * rng.integers(0, 20000, 200)
    for cm in MODELS:
        vec = cm.iteration_time(b, n, ctx)
        assert vec.dtype == np.float64 and vec.shape == (200,)
        loop = [float(cm.iteration_time(int(x), int(y), int(z))) for x, y, z in zip(b, n, ctx, strict=True)]
        np.testing.assert_allclose(vec, loop, rtol=1e-9)
        np.testing.assert_allclose(
            cm.prefill_time(ctx[:20]), [float(cm.prefill_time(int(t))) for t in ctx[:20]], rtol=1e-9
        )
    g = rng.integers(0, 8, 50)
    for drafter in DRAFTERS:
        vec = Q32_H100_TP4.draft_time(drafter, b[:50], ctx[:50], g)
        loop = [
            float(Q32_H100_TP4.draft_time(drafter, int(x), int(z), int(k)))
            for x, z, k in zip(b[:50], ctx[:50], g, strict=True)
        ]
        np.testing.assert_allclose(vec, loop, rtol=1e-9)


def test_broadcasting_over_many_contexts() -> None:
    """The engine passes thousands of contexts per call: one vectorised evaluation, monotone in
    context, for dense and MoE models (speed is measured by bench/bench_sim.py, not here)."""
    ctx = np.arange(100_000, dtype=np.float64) * 16
    t = Q32_H100_TP4.iteration_time(64, 64, ctx)
    assert t.shape == ctx.shape and np.all(np.diff(t) >= 0)
    moe = MOE_H100_TP8.iteration_time(64, 320, ctx)
    assert moe.shape == ctx.shape and np.all(np.diff(moe) >= 0)
    assert float(moe[-1]) == pytest.approx(float(MOE_H100_TP8.iteration_time(64, 320, float(ctx[-1]))))


# --------------------------------------------------------------------------- profiles
# Canonical forms: decode rows have new_tokens == num_seqs and prefill rows num_seqs == 1,
# so those coefficients are not identifiable and the fit reports them as 0.
LAWS = {
    "decode": (4e-3, 35e-6, 0.0, 2e-9),
    "verify": (5e-3, 20e-6, 25e-6, 3e-9),
    "prefill": (2e-3, 0.0, 40e-6, 1e-9),
    "draft:model:qwen2.5-0.5b": (0.6e-3, 8e-6, 0.0, 1e-10),
}


def _profile(laws: dict[str, tuple[float, ...]]) -> dict:
    rows = []
    for kind, (c0, c1, c2, c3) in laws.items():
        for b in (1, 4, 16, 64, 256):
            for ctx_per_seq in (128, 2048, 16384):
                for gamma in (1, 4) if kind != "decode" else (0,):
                    n = b if kind in ("decode",) or kind.startswith("draft") else b * (gamma + 1)
                    if kind == "prefill":
                        b, n = 1, ctx_per_seq * gamma
                    ctx = b * ctx_per_seq
                    t = c0 + c1 * b + c2 * n + c3 * ctx
                    if kind.startswith("draft"):
                        t *= gamma
                    rows.append(
                        {
                            "kind": kind,
                            "num_seqs": b,
                            "new_tokens": n,
                            "context_tokens": ctx,
                            "gamma": gamma,
                            "time_s": t,
                        }
                    )
    return {
        "format": "simctl-profile/1",
        "backend": "synthetic",
        "model": "Qwen2.5-32B",
        "device": "test",
        "tp": 4,
        "kv_capacity_tokens": 800_000,
        "measurements": rows,
    }


def test_profile_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(_profile(LAWS)))
    prof = ProfiledCostModel.from_json(path)
    assert isinstance(prof, CostModel)
    for kind, law in LAWS.items():
        np.testing.assert_allclose(prof.coefficients[kind], law, rtol=0.01, atol=1e-12)
    assert prof.kv_capacity_tokens == 800_000
    assert prof.weight_bytes_per_gpu == pytest.approx(65.5e9 / 4, rel=0.01)
    c0, c1, c2, c3 = LAWS["verify"]
    assert float(prof.iteration_time(8, 40, 8000)) == pytest.approx(c0 + 8 * c1 + 40 * c2 + 8000 * c3)
    c0, c1, c2, c3 = LAWS["decode"]
    np.testing.assert_allclose(
        prof.iteration_time(np.array([8, 8]), np.array([8, 16]), 0),
        [c0 + 8 * c1 + 8 * c2, prof.iteration_time(8, 16, 0)],
    )
    assert float(prof.draft_time("model:qwen2.5-0.5b", 2, 100, 3)) == pytest.approx(
        3 * (0.6e-3 + 2 * 8e-6 + 100 * 1e-10)
    )
    with pytest.raises(ValueError, match="no 'draft:eagle'"):
        prof.draft_time("eagle", 1, 1, 1)


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d.update(format="v0"), "format"),
        (lambda d: d.update(tp=0), "tp"),
        (lambda d: d.pop("kv_capacity_tokens"), "kv_capacity_tokens"),
        (lambda d: d.update(measurements=[]), "measurements"),
        (lambda d: d["measurements"][3].update(kind="sample"), "measurements[3].kind"),
        (lambda d: d["measurements"][0].update(time_s=-1.0), "measurements[0].time_s"),
        (lambda d: d["measurements"][2].pop("num_seqs"), "measurements[2].num_seqs"),
        (lambda d: d.update(model="mystery-7b"), "weight_bytes_per_gpu"),
    ],
)
def test_malformed_profile(tmp_path: Path, mutate, field: str) -> None:
    doc = _profile(LAWS)
    mutate(doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError) as err:
        ProfiledCostModel.from_json(path)
    msg = str(err.value)
    assert "bad.json" in msg and repr(field) in msg and "\n" not in msg


def test_unreadable_profile(tmp_path: Path) -> None:
    path = tmp_path / "junk.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match=r"profile junk\.json: cannot read"):
        ProfiledCostModel.from_json(path)


def test_nnls_clips_negative_coefficients() -> None:
    rng = np.random.default_rng(1)
    a = np.column_stack([np.ones(40), rng.uniform(0, 100, 40), rng.uniform(0, 1e5, 40)])
    truth = np.array([2.0, 0.5, 3e-4])
    np.testing.assert_allclose(nnls(a, a @ truth), truth, rtol=1e-9)
    y = a @ np.array([1.0, 0.0, 0.0]) - 1e-3 * a[:, 1]  # unconstrained fit has c1 < 0
    x = nnls(a, y)
    assert np.all(x >= 0) and x[1] == 0.0


def test_load_cost_model(tmp_path: Path) -> None:
    cluster = parse_cluster("h100x512")
    roof = load_cost_model("qwen2.5-32b", cluster)
    assert isinstance(roof, RooflineCostModel) and isinstance(roof, CostModel)
    assert roof.kv_capacity_tokens == Q32_H100_TP4.kv_capacity_tokens
    path = tmp_path / "p.json"
    path.write_text(json.dumps(_profile(LAWS)))
    assert isinstance(load_cost_model("Qwen2.5-32B", cluster, path), ProfiledCostModel)
    with pytest.raises(ValueError, match="field 'tp'=4 but the cluster runs tp=8"):
        load_cost_model("Qwen2.5-32B", parse_cluster("h100x512:tp8"), path)
    with pytest.raises(ValueError, match=r"field 'model'='Qwen2\.5-32B'"):
        load_cost_model("Qwen2.5-7B", cluster, path)


def test_scalar_batch_fast_path_equals_general_path() -> None:
    """The engine's fast path (scalar batch, array of contexts) must equal the general one."""
    from simctl.sim.cluster import parse_cluster
    from simctl.sim.cost_model import RooflineCostModel
    from simctl.sim.models import get_model

    for name, tp in (("qwen2.5-32b", 4), ("qwen3-235b-a22b", 8), ("qwen2.5-7b", 1)):
        spec = parse_cluster(f"h100x8:tp{tp}")
        cm = RooflineCostModel(get_model(name), spec.gpu, tp)
        ctx = np.linspace(0, 2e6, 50)
        for b, n in ((1, 1), (128, 128), (128, 640), (256, 1280)):
            fast = cm.iteration_time(b, n, ctx)
            general = cm.iteration_time(np.full(50, float(b)), np.full(50, float(n)), ctx)
            np.testing.assert_allclose(fast, general, rtol=1e-9)


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(MODELS), BATCH, st.integers(0, 16), CTX, st.sampled_from((int, float, np.float64)))
def test_python_scalar_path_is_bit_identical(cm: RooflineCostModel, b: int, g: int, ctx: int, kind) -> None:
    """Policies call the cost with Python scalars on every event; that path skips numpy but
    must give exactly what the array path over the same scalars gives (decisions compare
    these numbers, so a last-bit difference would change a run)."""
    n = b * (g + 1)
    scalar = cm.iteration_time(kind(b), kind(n), kind(b * ctx))
    assert type(scalar) is np.float64
    assert scalar == float(cm.iteration_time(np.asarray(b), np.asarray(n), np.asarray(float(b * ctx))))
    for drafter in ("suffix", "history"):
        fast = cm.draft_time(drafter, kind(b), kind(b * ctx), g)
        assert fast == float(cm.draft_time(drafter, np.asarray(b), np.asarray(b * ctx), np.asarray(g)))
