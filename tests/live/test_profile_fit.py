"""How a calibrated profile prices iterations (sim.cost_model.ProfiledCostModel): local
affine laws around each batch size and draft length, so measurements that are not one affine
law over the whole grid (a CPU's verify cost) are still reproduced. Synthetic measurements,
no engine: the numbers are exact."""

from __future__ import annotations

import numpy as np
import pytest

from simctl.sim.cost_model import ProfiledCostModel

BATCHES = (1, 2, 4, 8, 16, 32)
CONTEXTS = (64, 256)


def decode_cost(b: float, ctx: float) -> float:
    # superlinear in the batch, as a CPU's sampling and KV copies are
    return 0.04 + 0.012 * b + 0.0004 * b * b + 5e-5 * ctx


def verify_cost(b: float, n: float, ctx: float, gamma: int) -> float:
    # the forward is padded to gamma + 1 query slots per sequence; sampling costs per filled slot
    return 0.05 + 0.006 * b * (gamma + 1) + 0.002 * n + 6e-5 * ctx + 0.0004 * b * b


def _profile(gammas: tuple[int, ...] = (4,)) -> dict:
    rows = []
    for b in BATCHES:
        for per_seq in CONTEXTS:
            ctx = b * per_seq
            rows.append(_m("decode", b, b, ctx, 0, decode_cost(b, ctx)))
            for g in gammas:
                for k in sorted({1, b}):
                    n = b + k * g
                    rows.append(_m("verify", b, n, ctx, g, verify_cost(b, n, ctx, g)))
            rows.append(_m("draft:ngram", b, b, ctx, 4, 4 * (1e-4 * b + 1e-8 * ctx)))
    for n in (64, 256, 1024):
        rows.append(_m("prefill", 1, n, n, 0, 0.01 + 0.003 * n))
    return {
        "format": "simctl-profile/1",
        "backend": "torch",
        "model": "SmolLM2-135M",
        "device": "cpu",
        "tp": 1,
        "kv_capacity_tokens": 100_000,
        "weight_bytes_per_gpu": 5e8,
        "measurements": rows,
    }


def _m(kind: str, b: int, n: int, ctx: int, gamma: int, t: float) -> dict:
    return {"kind": kind, "num_seqs": b, "new_tokens": n, "context_tokens": ctx, "gamma": gamma, "time_s": t}


def _rel(a: float, b: float) -> float:
    return abs(a / b - 1.0)


def test_local_laws_reproduce_measurements_a_global_fit_cannot() -> None:
    doc = _profile()
    prof = ProfiledCostModel.from_dict(doc)
    worst_local = worst_global = 0.0
    for m in doc["measurements"]:
        if m["kind"] not in ("decode", "verify"):
            continue
        b, n, ctx, t = m["num_seqs"], m["new_tokens"], m["context_tokens"], m["time_s"]
        worst_local = max(worst_local, _rel(float(prof.iteration_time(b, n, ctx)), t))
        c = prof.coefficients[m["kind"]]  # the one global affine law per kind
        worst_global = max(worst_global, _rel(c[0] + c[1] * b + c[2] * n + c[3] * ctx, t))
    assert worst_local < 0.01
    assert worst_global > 0.10


def test_between_measured_shapes() -> None:
    """Between measured batch sizes the law interpolates: off by what a chord of the convex
    cost curve is off (4% at most for these costs, at b=24 between 16 and 32)."""
    prof = ProfiledCostModel.from_dict(_profile())
    for b in (3, 6, 12, 24):
        for per_seq in (100, 200):
            ctx = b * per_seq
            assert _rel(float(prof.iteration_time(b, b, ctx)), decode_cost(b, ctx)) < 0.04
            for drafted in (4, 2 * b):  # one request drafting, half the slots filled
                n = b + drafted
                assert _rel(float(prof.iteration_time(b, n, ctx)), verify_cost(b, n, ctx, 4)) < 0.03
    assert float(prof.iteration_time(12, 12, 0)) < float(prof.iteration_time(12, 13, 0))  # verify law


def test_verify_law_per_draft_length() -> None:
    """Several draft lengths measured: `gamma` picks the law of the batch's widest draft (the
    padded forward); without it the laws are pooled, which lands in between."""
    prof = ProfiledCostModel.from_dict(_profile(gammas=(2, 8)))
    assert prof.verify_gammas == (2, 8)
    b, ctx = 16, 16 * 128
    n = b + 6
    t2, t8 = verify_cost(b, n, ctx, 2), verify_cost(b, n, ctx, 8)
    assert _rel(float(prof.iteration_time(b, n, ctx, gamma=2)), t2) < 0.02
    assert _rel(float(prof.iteration_time(b, n, ctx, gamma=8)), t8) < 0.02
    assert _rel(float(prof.iteration_time(b, n, ctx, gamma=1)), t2) < 0.02  # clamped to the range
    assert t2 < float(prof.iteration_time(b, n, ctx)) < t8
    t4 = float(prof.iteration_time(b, n, ctx, gamma=4))
    assert t2 < t4 < t8


def test_vectorised_and_scalar_paths_agree() -> None:
    prof = ProfiledCostModel.from_dict(_profile())
    b = np.array([1, 3, 16, 16, 40])
    n = np.array([1, 7, 16, 30, 40])
    ctx = np.array([10.0, 500.0, 3000.0, 3000.0, 9000.0])
    vec = prof.iteration_time(b, n, ctx)
    assert vec.shape == (5,)
    for i in range(5):
        assert vec[i] == pytest.approx(float(prof.iteration_time(int(b[i]), int(n[i]), ctx[i])))
    many = prof.iteration_time(16, 16, np.arange(1000.0) * 16)  # the engine's fast path
    assert many.shape == (1000,) and np.all(np.diff(many) > 0)


def test_outside_the_measured_batches_extends_the_edge_law() -> None:
    prof = ProfiledCostModel.from_dict(_profile())
    t32, t48, t64 = (float(prof.iteration_time(b, b, b * 100)) for b in (32, 48, 64))
    assert 0 < t32 < t48 < t64
    assert t64 - t48 == pytest.approx(t48 - t32)  # linear beyond the last measured batch


def test_prefill_and_draft_laws() -> None:
    prof = ProfiledCostModel.from_dict(_profile())
    assert float(prof.prefill_time(512)) == pytest.approx(0.01 + 0.003 * 512, rel=1e-6)
    assert float(prof.draft_time("ngram", 8, 8 * 100, 4)) == pytest.approx(4 * (8e-4 + 8e-6), rel=1e-6)


def test_affine_measurements_give_the_affine_law() -> None:
    doc = _profile()
    for m in doc["measurements"]:
        if m["kind"] == "verify":
            m["time_s"] = 0.05 + 0.03 * m["num_seqs"] + 0.002 * m["new_tokens"] + 6e-5 * m["context_tokens"]
    prof = ProfiledCostModel.from_dict(doc)
    np.testing.assert_allclose(prof.coefficients["verify"], [0.05, 0.03, 0.002, 6e-5], rtol=1e-6)
    for b, n, ctx in ((1, 5, 64), (7, 20, 900), (16, 70, 4000), (100, 300, 20000)):
        assert float(prof.iteration_time(b, n, ctx)) == pytest.approx(
            0.05 + 0.03 * b + 0.002 * n + 6e-5 * ctx, rel=1e-6
        )
