"""Torch-native backend of the live executor: a small batched engine over a HF causal LM
whose speculative decoding is lossless by construction (position-seeded sampling, exact-match
verification), with pluggable drafters and random-weight models for tests and timing."""

from simctl.live.torch_engine.drafters import (
    Drafter,
    ModelDrafter,
    NgramDrafter,
    SuffixDrafter,
    propose_many,
)
from simctl.live.torch_engine.engine import (
    RequestResult,
    StepDelta,
    StepStats,
    TorchEngine,
    run_to_completion,
)
from simctl.live.torch_engine.kv_cache import KVBuffer
from simctl.live.torch_engine.quantize import quantize_w4_rtn, rtn_quantize
from simctl.live.torch_engine.ragged_forward import ragged_forward
from simctl.live.torch_engine.random_models import (
    CONFIGS,
    qwen2_5_0_5b_config,
    qwen2_5_7b_config,
    random_model,
    tiny_llama_config,
    tiny_qwen2_config,
)
from simctl.live.torch_engine.sampling import SamplingParams, gumbel_noise, request_key, sample_tokens

__all__ = [
    "CONFIGS",
    "Drafter",
    "KVBuffer",
    "ModelDrafter",
    "NgramDrafter",
    "RequestResult",
    "SamplingParams",
    "StepDelta",
    "StepStats",
    "SuffixDrafter",
    "TorchEngine",
    "gumbel_noise",
    "propose_many",
    "quantize_w4_rtn",
    "qwen2_5_0_5b_config",
    "qwen2_5_7b_config",
    "ragged_forward",
    "random_model",
    "request_key",
    "rtn_quantize",
    "run_to_completion",
    "sample_tokens",
    "tiny_llama_config",
    "tiny_qwen2_config",
]
