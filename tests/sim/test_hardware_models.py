"""GPU and model catalogues: lookups, datasheet numbers, derived parameter counts."""

from __future__ import annotations

import pytest

from simctl.sim.hardware import DEFAULT_GPU, GPUS, get_gpu
from simctl.sim.models import MODELS, SMOLLM2_135M, get_model


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [
        ("h100", "H100-SXM-80GB"),
        ("H100-SXM", "H100-SXM-80GB"),
        ("h100_sxm_80gb", "H100-SXM-80GB"),
        ("H800", "H800-SXM-80GB"),
        ("h200", "H200-SXM-141GB"),
        ("A100", "A100-SXM-80GB"),
        ("a100-80gb-sxm", "A100-SXM-80GB"),
        ("H20", "H20-96GB"),
        ("b200", "B200-SXM-180GB"),
    ],
)
def test_gpu_aliases(alias: str, canonical: str) -> None:
    assert get_gpu(alias).name == canonical


def test_unknown_gpu_is_one_line_listing_names() -> None:
    with pytest.raises(ValueError) as err:
        get_gpu("mi300x")
    msg = str(err.value)
    assert "\n" not in msg and "'mi300x'" in msg
    assert all(name in msg for name in GPUS)


def test_datasheet_numbers() -> None:
    h100, a100, h200, h800 = (get_gpu(n) for n in ("h100", "a100", "h200", "h800"))
    assert DEFAULT_GPU is h100
    assert h100.hbm_bw == pytest.approx(3.35e12) and h100.bf16_flops == pytest.approx(989.4e12)
    assert a100.hbm_bw == pytest.approx(2.039e12) and a100.bf16_flops == pytest.approx(312e12)
    assert h200.hbm_bytes == pytest.approx(141e9) and h200.hbm_bw == pytest.approx(4.8e12)
    assert h800.nvlink_bw < h100.nvlink_bw
    h20, b200 = get_gpu("h20"), get_gpu("b200")
    assert (h20.hbm_bytes, h20.hbm_bw, h20.bf16_flops, h20.fp8_flops) == (96e9, 4.0e12, 148e12, 296e12)
    assert (b200.hbm_bytes, b200.hbm_bw, b200.bf16_flops, b200.fp8_flops) == (180e9, 7.7e12, 2250e12, 4500e12)
    assert b200.nvlink_bw == 2 * h100.nvlink_bw
    assert h100.to_dict()["name"] == "H100-SXM-80GB"


# Published totals (model cards); MLA/MoE entries marked approximate in sim/models.py.
@pytest.mark.parametrize(
    ("name", "total_b", "active_b", "rel"),
    [
        ("Qwen2.5-0.5B", 0.49, 0.49, 0.02),
        ("Qwen2.5-1.5B", 1.54, 1.54, 0.02),
        ("Qwen2.5-7B", 7.61, 7.61, 0.02),
        ("Qwen2.5-14B", 14.7, 14.7, 0.02),
        ("Qwen2.5-32B", 32.5, 32.5, 0.02),
        ("Qwen2.5-72B", 72.7, 72.7, 0.02),
        ("Llama-3.1-8B", 8.03, 8.03, 0.02),
        ("Qwen3-235B-A22B", 235.0, 22.0, 0.03),
        ("Qwen2-VL-72B", 73.4, 72.7, 0.03),
        ("Moonlight-16B-A3B", 16.0, 3.0, 0.10),
        ("Kimi-K2", 1040.0, 32.0, 0.05),
        ("SmolLM2-135M", 0.135, 0.135, 0.02),
        # RL post-training models (sim/models.py cites each config): cards, and the hub's
        # safetensors totals where read (Qwen3-32B, Qwen2.5-3B, the R1 distills of 32B and 8B)
        ("Qwen3-0.6B", 0.6, 0.6, 0.02),
        ("Qwen3-1.7B", 1.7, 1.7, 0.02),
        ("Qwen3-4B", 4.0, 4.0, 0.02),
        ("Qwen3-8B", 8.2, 8.2, 0.02),
        ("Qwen3-14B", 14.8, 14.8, 0.02),
        ("Qwen3-32B", 32.762123264, 32.762123264, 0.001),
        ("Qwen3-30B-A3B", 30.5, 3.3, 0.02),
        ("Qwen2.5-3B", 3.085938688, 3.085938688, 0.001),
        ("DeepSeek-R1-Distill-Qwen-32B", 32.763876352, 32.763876352, 0.001),
        ("DeepSeek-R1-Distill-Llama-8B", 8.030261248, 8.030261248, 0.001),
        ("Llama-3.3-70B", 70.6, 70.6, 0.02),
    ],
)
def test_param_counts_match_model_cards(name: str, total_b: float, active_b: float, rel: float) -> None:
    m = get_model(name)
    assert m.param_count() / 1e9 == pytest.approx(total_b, rel=rel)
    assert m.active_param_count() / 1e9 == pytest.approx(active_b, rel=rel)


def test_kv_bytes_and_weight_bytes() -> None:
    q32 = get_model("qwen2.5-32b")
    assert q32.kv_bytes_per_token() == 2 * 64 * 8 * 128 * 2 == 262144
    assert q32.weight_bytes() == pytest.approx(65.5e9, rel=0.005)
    assert q32.weight_bytes(1.0) == pytest.approx(q32.weight_bytes() / 2)
    # MLA caches one latent (512 + 64) per layer, not K and V per head.
    assert get_model("kimi-k2").kv_bytes_per_token() == 61 * 576 * 2


def test_flops_per_token() -> None:
    q7 = get_model("Qwen2.5-7B")
    base = q7.flops_per_token(0)
    assert base == pytest.approx(2 * q7.matmul_param_count())
    assert q7.flops_per_token(4096) - base == pytest.approx(4 * 28 * 28 * 128 * 4096)
    moe = get_model("Qwen3-235B-A22B")
    assert moe.flops_per_token(0) < 2.1 * moe.active_param_count()


def test_smollm2_architecture() -> None:
    s = SMOLLM2_135M
    assert (s.layers, s.hidden, s.heads, s.kv_heads, s.head_dim, s.ffn, s.vocab) == (
        30,
        576,
        9,
        3,
        64,
        1536,
        49152,
    )
    assert s.tie_embeddings


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [
        ("qwen2.5-32b", "Qwen2.5-32B"),
        ("Qwen/Qwen2.5-32B-Instruct", "Qwen2.5-32B"),
        ("QWEN2.5-7B-INSTRUCT", "Qwen2.5-7B"),
        ("meta-llama/Meta-Llama-3.1-8B-Instruct", "Llama-3.1-8B"),
        ("llama3.1-8b", "Llama-3.1-8B"),
        ("Qwen/Qwen3-235B-A22B-Instruct-2507", "Qwen3-235B-A22B"),
        ("moonshotai/Kimi-K2-Instruct", "Kimi-K2"),
        ("moonlight-16b-a3b", "Moonlight-16B-A3B"),
        ("HuggingFaceTB/SmolLM2-135M-Instruct", "SmolLM2-135M"),
        ("Qwen/Qwen3-8B-Base", "Qwen3-8B"),
        ("qwen3-30b-a3b", "Qwen3-30B-A3B"),
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "DeepSeek-R1-Distill-Qwen-7B"),
        ("meta-llama/Llama-3.1-70B-Instruct", "Llama-3.3-70B"),
        ("Qwen/Qwen2.5-Math-1.5B-Instruct", "Qwen2.5-Math-1.5B"),
    ],
)
def test_model_aliases(alias: str, canonical: str) -> None:
    assert get_model(alias).name == canonical


def test_unknown_model_is_one_line_listing_names() -> None:
    with pytest.raises(ValueError) as err:
        get_model("gpt-5")
    msg = str(err.value)
    assert "\n" not in msg and "'gpt-5'" in msg
    assert all(name in msg for name in MODELS)


def test_h20_decode_is_compute_bound_early() -> None:
    """The H20's ridge point: 148 TFLOPS over 4 TB/s. Its decode step beats the H100's while
    the batch is small (more bandwidth) and loses once it is large (far fewer FLOPs)."""
    from simctl.sim.cluster import parse_cluster
    from simctl.sim.cost_model import load_cost_model

    model = get_model("qwen2.5-7b")
    h20, h100 = (load_cost_model(model, parse_cluster(f"{g}x8:tp1")) for g in ("h20", "h100"))
    small, large = 1, 256
    assert float(h20.iteration_time(small, small, 2000.0 * small)) < float(
        h100.iteration_time(small, small, 2000.0 * small)
    )
    assert float(h20.iteration_time(large, large, 2000.0 * large)) > float(
        h100.iteration_time(large, large, 2000.0 * large)
    )
