"""Randomly initialised causal LMs from configs built in code: no hub access, no weights.

Tiny configs drive the CPU tests; the Qwen2.5 architecture configs give realistic shapes for
GPU timing (speed depends on shapes, not on weight values; acceptance rates do not transfer).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    PretrainedConfig,
    Qwen2Config,
    Qwen2ForCausalLM,
)


def tiny_llama_config(
    *,
    vocab_size: int = 256,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    initializer_range: float = 0.02,
    lm_head_gain: float = 25.0,
) -> LlamaConfig:
    """A Llama small enough for CPU tests.

    `lm_head_gain` (read by `random_model`) scales the LM head after init. With HF's default
    init a tiny random model is nearly uniform over the vocabulary, so every drafter's
    acceptance would be ~1/vocab and tests could not tell a good drafter from a bad one.
    Raising `initializer_range` instead also makes logits peaked, but makes the network chaotic
    (W4 rounding then flips most argmaxes, unlike in a trained model); a gain on the head alone
    gives confident predictions while the body stays smooth.
    """
    return LlamaConfig(  # type: ignore[call-arg]  # HF configs take **kwargs
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=4096,
        initializer_range=initializer_range,
        lm_head_gain=lm_head_gain,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        tie_word_embeddings=False,
    )


def tiny_qwen2_config(
    *,
    vocab_size: int = 256,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    initializer_range: float = 0.02,
    lm_head_gain: float = 25.0,
) -> Qwen2Config:
    """Qwen2 counterpart of `tiny_llama_config` (adds QKV biases)."""
    return Qwen2Config(  # type: ignore[call-arg]  # HF configs take **kwargs
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=4096,
        initializer_range=initializer_range,
        lm_head_gain=lm_head_gain,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        tie_word_embeddings=False,
        use_sliding_window=False,
    )


def qwen2_5_7b_config() -> Qwen2Config:
    """Qwen2.5-7B(-Instruct) architecture, values from its published config.json."""
    return Qwen2Config(  # type: ignore[call-arg]  # HF configs take **kwargs
        vocab_size=152064,
        hidden_size=3584,
        intermediate_size=18944,
        num_hidden_layers=28,
        num_attention_heads=28,
        num_key_value_heads=4,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        hidden_act="silu",
        initializer_range=0.02,
        bos_token_id=151643,
        eos_token_id=151645,
        tie_word_embeddings=False,
        use_sliding_window=False,
    )


def qwen2_5_0_5b_config(*, vocab_size: int = 152064) -> Qwen2Config:
    """Qwen2.5-0.5B architecture, a natural small drafter for the 7B.

    The real checkpoint has vocab 151936 (the 7B pads to 152064); the default here matches the
    7B so that random-weight targets, which can emit any id, never feed the drafter an id it
    lacks. Pass 151936 for the exact published shape.
    """
    return Qwen2Config(  # type: ignore[call-arg]  # HF configs take **kwargs
        vocab_size=vocab_size,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        hidden_act="silu",
        initializer_range=0.02,
        bos_token_id=151643,
        eos_token_id=151645,
        tie_word_embeddings=True,
        use_sliding_window=False,
    )


CONFIGS: dict[str, Callable[[], PretrainedConfig]] = {
    "tiny-llama": tiny_llama_config,
    "tiny-qwen2": tiny_qwen2_config,
    "qwen2.5-7b": qwen2_5_7b_config,
    "qwen2.5-0.5b": qwen2_5_0_5b_config,
}


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def random_model(
    config_name_or_config: str | PretrainedConfig,
    seed: int = 0,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
) -> torch.nn.Module:
    """A `LlamaForCausalLM` / `Qwen2ForCausalLM` with seeded random weights, in eval mode.

    Built directly on `device` in `dtype` so a 7B model never materialises in fp32 on the host.
    The global RNG state is restored afterwards, so building a model does not perturb callers.
    If the config has an `lm_head_gain` attribute (the tiny configs do), the LM head weights
    are multiplied by it (see `tiny_llama_config`).
    """
    if isinstance(config_name_or_config, str):
        try:
            config = CONFIGS[config_name_or_config]()
        except KeyError:
            raise ValueError(f"unknown config {config_name_or_config!r}; known: {sorted(CONFIGS)}") from None
    else:
        config = config_name_or_config
    classes = {"llama": LlamaForCausalLM, "qwen2": Qwen2ForCausalLM}
    try:
        cls = classes[config.model_type]
    except KeyError:
        raise ValueError(f"unsupported model_type {config.model_type!r}") from None
    device = torch.device(device)
    fork_devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=fork_devices), _default_dtype(dtype), device:
        torch.manual_seed(seed)
        model = cls(config)
    gain = float(getattr(config, "lm_head_gain", 1.0))
    if gain != 1.0:
        with torch.no_grad():
            model.get_output_embeddings().weight.mul_(gain)
    return model.to(dtype=dtype).eval()
