"""What the cost model knows of a model: a decoder-only LM's architecture numbers.

The cost model needs only a few aggregates (weight bytes, bytes touched per step, FLOPs
per token, KV bytes per token), so a model is described by the handful of config fields
that determine them.  Parameter counts are derived, not copied, so that they stay
consistent with the fields.  Small terms (RMSNorm weights, Qwen's q/k/v biases, MoE router)
are included where cheap or ignored where below 0.1 %.

MoE models: ``num_experts`` routed experts of width ``moe_ffn`` per MoE layer, of which
``experts_per_token`` are used per token; ``shared_experts`` always-on experts of the
same width, or ``shared_ffn``, the total width of always-on experts where it is not a
multiple of ``moe_ffn`` (Qwen MoE configs give it so); the other ``dense_layers`` layers
use a dense FFN of width ``ffn``.
MLA models (DeepSeek-V3 family): ``attn_params`` overrides the per-layer attention
parameter count and ``mla_kv_dim`` (kv_lora_rank + qk_rope_head_dim) is the cached
latent per token per layer; ``head_dim`` is then that latent width, because absorbed
MLA decode attends over the latent, which is what the attention FLOP term needs.

Sliding-window attention (Gemma 2/3, gpt-oss): ``window_layers`` of the layers attend to
the last ``window`` tokens only, and keep only those (vLLM's hybrid KV cache manager frees
the blocks that leave the window: its docs/design/hybrid_kv_cache_manager.md). So the KV a
sequence holds grows per context token with the other layers (``context_layers``) only,
plus a window's worth in the sliding layers, which `window_kv_tokens` states in the same
per-context-token unit. A model whose every layer slides is priced as full attention
(its KV would not grow with the context at all; none of the catalogue's does).
MXFP4 experts (gpt-oss): ``expert_bytes_per_param`` is the routed experts' weight bytes
per parameter where the checkpoint stores them narrower than the rest (0: as the rest).

The catalogue of named models is sim/models.py; a model from its ``config.json``,
sim/model_config.py.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


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
    shared_ffn: int = 0
    window: int = 0
    window_layers: int = 0
    expert_bytes_per_param: float = 0.0
    hf_ids: tuple[str, ...] = ()

    def same_architecture(self, other: ModelSpec) -> bool:
        """Every field but the names: a catalogue entry and the same model read from its
        config.json (or under another directory name) price alike."""
        return replace(self, name="", hf_ids=()) == replace(other, name="", hf_ids=())

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

    @property
    def shared_width(self) -> int:
        """Total FFN width of the always-on experts of an MoE layer (0: none)."""
        return self.shared_ffn or self.shared_experts * self.moe_ffn

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
        moe_ffn = routed_experts * self.expert_params() + 3 * self.hidden * self.shared_width
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

    def routed_expert_param_count(self) -> int:
        """Parameters of every routed expert (what `expert_bytes_per_param` applies to)."""
        return self.param_count() - self.vision_params - self.non_expert_param_count()

    def weight_bytes(self, bytes_per_param: float = 2.0) -> float:
        """Stored weights at `bytes_per_param`, routed experts at their own width if set."""
        if not self.expert_bytes_per_param:
            return self.param_count() * bytes_per_param
        experts = self.routed_expert_param_count()
        return (self.param_count() - experts) * bytes_per_param + experts * self.expert_bytes_per_param

    @property
    def windowed(self) -> bool:
        """Some layers (not all) attend within a sliding window (module docstring)."""
        return self.window > 0 and 0 < self.window_layers < self.layers

    @property
    def context_layers(self) -> int:
        """Layers whose KV grows with every context token."""
        return self.layers - self.window_layers if self.windowed else self.layers

    def window_kv_tokens(self) -> float:
        """A full window's KV in the sliding layers, in context tokens of the other layers
        (their per-token KV): what each running sequence holds besides its context."""
        return self.window * self.window_share

    def kv_bytes_per_token(self, bytes_per_elem: int = 2) -> int:
        """KV-cache bytes per context token: K and V per KV head per layer, or the MLA
        latent (sliding-window layers hold a window instead: `window_kv_tokens`)."""
        if self.mla_kv_dim:
            return self.layers * self.mla_kv_dim * bytes_per_elem
        return 2 * self.context_layers * self.kv_heads * self.head_dim * bytes_per_elem

    def sequence_kv_bytes(self, tokens: float, bytes_per_elem: int = 2) -> float:
        """KV bytes one sequence of `tokens` context holds (its sliding layers: at most a window)."""
        per_token = float(self.kv_bytes_per_token(bytes_per_elem))
        if not self.windowed:
            return per_token * tokens
        return per_token * (tokens + min(tokens, self.window) * self.window_share)

    def attended_context(self, context: float, sequences: float = 1.0) -> float:
        """`context` tokens over `sequences` sequences as the context-layer tokens that cost
        the same attention reads: each sliding layer reads at most a window per sequence
        (the batch's context taken as evenly spread: exact once every sequence is past
        the window). Without a window, `context` itself."""
        if not self.windowed:
            return context
        return context + min(context, sequences * self.window) * self.window_share

    @property
    def window_share(self) -> float:
        """Sliding layers per context layer (0 without a window): what a token attended in
        every sliding layer costs in context-layer tokens."""
        return self.window_layers / self.context_layers if self.windowed else 0.0

    def attn_flops_per_context_token(self) -> float:
        """Attention FLOPs of one query token per attended context-layer token (see
        `attended_context`): QK^T and AV, 2 matmuls x 2 FLOPs, in the context layers."""
        return 4.0 * self.context_layers * self.heads * self.head_dim

    def attn_flops_per_token(self, context: float) -> float:
        """Attention FLOPs of one query token over `context` cached tokens, every layer (a
        sliding layer attends to at most its window)."""
        return self.attn_flops_per_context_token() * self.attended_context(context)

    def flops_per_token(self, context: float = 0.0) -> float:
        """Forward FLOPs for one token: 2 per matmul weight plus attention over `context`."""
        return 2.0 * self.matmul_param_count() + self.attn_flops_per_token(context)


def mla_attn_params(
    hidden: int, heads: int, q_lora: int, kv_lora: int, nope: int = 128, rope: int = 64, v: int = 128
) -> int:
    """Multi-head latent attention's projections per layer (DeepSeek-V2, arXiv:2405.04434):
    q (through a rank-`q_lora` bottleneck, or direct where 0), the shared KV latent and rope
    key, the per-head up-projection of the latent to keys and values, and the output.
    Defaults: DeepSeek-V3's qk_nope 128, qk_rope 64, v_head 128."""
    q = hidden * heads * (nope + rope) if q_lora == 0 else (hidden * q_lora + q_lora * heads * (nope + rope))
    kv_a = hidden * (kv_lora + rope)
    kv_b = kv_lora * heads * (nope + v)
    o = heads * v * hidden
    return q + kv_a + kv_b + o
