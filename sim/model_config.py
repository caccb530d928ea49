"""A model outside the catalogue, read from its Hugging Face ``config.json``.

A researcher's policy model is rarely one of the catalogue's entries (sim/models.py): RL
runs train Qwen3, DeepSeek-R1 distills, their own fine-tunes. The cost model needs only
the handful of architecture fields a ``config.json`` already holds, so `simctl replay
--model DIR` (or ``DIR/config.json``) prices any model of a supported family, and a
trace can carry those fields itself (the trace metadata's ``model_config``: `simctl
live` and `simctl trace import` write it for a model outside the catalogue), so that a
replay elsewhere needs no file.

Families, by ``model_type`` (transformers' names and fields). Where a field is absent the
reader takes what transformers would: as many KV heads as heads, ``head_dim`` = hidden /
heads, the config class's ``tie_word_embeddings``; fields with no safe default (Qwen MoE's
shared expert width, whose class default is one model's) are required:
- dense, gated MLP (three matrices per layer): llama, mistral, qwen2, qwen3, gemma,
  gemma2, gemma3_text, olmo2, granite, phi3;
- routed experts: qwen2_moe, qwen3_moe (``decoder_sparse_step`` / ``mlp_only_layers``
  layers are dense), mixtral;
- multi-head latent attention with experts: deepseek_v2, deepseek_v3, kimi_k2.
A multimodal config is read as its language model: the one it nests (``text_config``), or
the fields it keeps at the top level (qwen2_vl, qwen2_5_vl). The vision tower is not
counted (it runs on image prefill only and weighs on memory; the catalogue's Qwen2-VL-72B
counts it).

What is left out is what the catalogue leaves out (norm weights of q/k, attention
biases, routers' gates below 0.1 %), and sliding-window layers (Gemma 2/3's local layers,
``sliding_window`` configs) are priced as full attention over the whole context, which
overstates their attention time on long sequences. A config the reader cannot use fails
in one line naming the file, the field and the value.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from simctl.sim.model_spec import ModelSpec, mla_attn_params

DENSE = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "olmo2", "granite", "phi3")
# Multimodal configs that keep their language model's fields at the top level (Qwen2-VL,
# Qwen2.5-VL): read as that language model.
FLAT_MULTIMODAL = {"qwen2_vl": "qwen2", "qwen2_5_vl": "qwen2"}
EXPERTS = ("qwen2_moe", "qwen3_moe", "mixtral")
LATENT = ("deepseek_v2", "deepseek_v3", "kimi_k2")
SUPPORTED = DENSE + EXPERTS + LATENT + tuple(FLAT_MULTIMODAL)
# transformers' config classes tie the input and output embeddings by default only for
# Gemma (GemmaConfig, Gemma2Config, Gemma3TextConfig); every other family here unties them.
_TIED_BY_DEFAULT = frozenset({"gemma", "gemma2", "gemma3_text"})

# The fields of a config the reader uses (what a trace's `model_config` keeps of one).
FIELDS = (
    "model_type",
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "tie_word_embeddings",
    "num_experts",
    "num_local_experts",
    "n_routed_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "n_shared_experts",
    "decoder_sparse_step",
    "mlp_only_layers",
    "first_k_dense_replace",
    "moe_layer_freq",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "v_head_dim",
)


class ModelConfigError(ValueError):
    """A config that does not describe a model the reader can price (one line)."""


def essentials(config: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of `config` the reader uses (its language model's, where nested): what
    a trace records as `model_config`, and reads back to the same model."""
    inner = _language_model(config)
    return {k: inner[k] for k in FIELDS if k in inner}


def read_config_file(path: str | Path) -> tuple[str, dict[str, Any]]:
    """(name, config) of a ``config.json`` or of a directory holding one. The name is the
    directory's (HF checkouts are named after the model), or the file's stem when it is
    not called config.json."""
    p = Path(path).expanduser()
    file = p / "config.json" if p.is_dir() else p
    if not file.is_file():
        raise ModelConfigError(f"model config {file}: no such file")
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelConfigError(f"model config {file}: cannot read ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ModelConfigError(f"model config {file}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(config, dict):
        raise ModelConfigError(f"model config {file}: not a JSON object")
    name = file.parent.resolve().name if file.name == "config.json" else file.stem
    return name or file.stem, config


def model_from_config(config: Mapping[str, Any], name: str, source: str = "model_config") -> ModelSpec:
    """The ModelSpec of a HF config (see the module docstring); `source` names it in errors."""
    cfg = _Fields(_language_model(config), source)
    kind = cfg.text("model_type")
    kind = FLAT_MULTIMODAL.get(kind, kind)
    if kind not in SUPPORTED:
        raise ModelConfigError(
            f"{source}: model_type '{kind}' is not supported (supported: {', '.join(SUPPORTED)})"
        )
    if kind in LATENT:
        return _latent(cfg, name)
    layers, hidden = cfg.count("num_hidden_layers"), cfg.count("hidden_size")
    heads = cfg.count("num_attention_heads")
    kv_heads = cfg.count("num_key_value_heads", heads)
    head_dim = cfg.count("head_dim", hidden // heads if hidden % heads == 0 else None)
    if heads % kv_heads:
        raise ModelConfigError(
            f"{source}: field 'num_key_value_heads' = {kv_heads} does not divide "
            f"num_attention_heads = {heads}"
        )
    spec = ModelSpec(
        name,
        layers,
        hidden,
        heads,
        kv_heads,
        head_dim,
        cfg.count("intermediate_size"),
        cfg.count("vocab_size"),
        tie_embeddings=cfg.flag("tie_word_embeddings", kind in _TIED_BY_DEFAULT),
    )
    return _experts(cfg, kind, spec) if kind in EXPERTS else spec


def _language_model(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's fields: `text_config` where a multimodal config nests them."""
    inner = config.get("text_config")
    if isinstance(inner, Mapping) and config.get("model_type") not in SUPPORTED:
        return inner
    return config


def _experts(cfg: _Fields, kind: str, dense: ModelSpec) -> ModelSpec:
    """Qwen MoE (routed + one shared expert, some layers dense) and Mixtral (all routed)."""
    layers = dense.layers
    if kind == "mixtral":
        experts = cfg.count("num_local_experts")
        return replace(
            dense,
            num_experts=experts,
            experts_per_token=cfg.top_k("num_experts_per_tok", experts, "num_local_experts"),
            moe_ffn=dense.ffn,  # (Mixtral's intermediate_size is each expert's width)
        )
    experts = cfg.count("num_experts")
    step = cfg.count("decoder_sparse_step", 1)
    only_dense = cfg.layer_list("mlp_only_layers", layers)
    sparse = sum(1 for i in range(layers) if i not in only_dense and (i + 1) % step == 0)
    return replace(
        dense,
        num_experts=experts,
        experts_per_token=cfg.top_k("num_experts_per_tok", experts, "num_experts"),
        moe_ffn=cfg.count("moe_intermediate_size"),
        # (required: Qwen2MoeConfig's default, 5632, is Qwen1.5-MoE-A2.7B's own width)
        shared_ffn=cfg.count("shared_expert_intermediate_size", zero=True) if kind == "qwen2_moe" else 0,
        dense_layers=layers - sparse,
    )


def _latent(cfg: _Fields, name: str) -> ModelSpec:
    """DeepSeek-V2/V3 (and Kimi K2, a V3): MLA attention, routed and shared experts, the
    first `first_k_dense_replace` layers (and those off `moe_layer_freq`) dense."""
    layers, hidden = cfg.count("num_hidden_layers"), cfg.count("hidden_size")
    heads = cfg.count("num_attention_heads")
    kv_lora, rope = cfg.count("kv_lora_rank"), cfg.count("qk_rope_head_dim")
    attn = mla_attn_params(
        hidden,
        heads,
        q_lora=cfg.count("q_lora_rank", 0, zero=True),
        kv_lora=kv_lora,
        nope=cfg.count("qk_nope_head_dim"),
        rope=rope,
        v=cfg.count("v_head_dim"),
    )
    experts = cfg.count("n_routed_experts")
    first_dense = cfg.count("first_k_dense_replace", 0, zero=True)
    freq = cfg.count("moe_layer_freq", 1)
    sparse = sum(1 for i in range(layers) if i >= first_dense and i % freq == 0)
    latent = kv_lora + rope
    return ModelSpec(
        name,
        layers,
        hidden,
        heads,
        1,
        latent,
        cfg.count("intermediate_size"),
        cfg.count("vocab_size"),
        num_experts=experts,
        experts_per_token=cfg.top_k("num_experts_per_tok", experts, "n_routed_experts"),
        moe_ffn=cfg.count("moe_intermediate_size"),
        shared_experts=cfg.count("n_shared_experts", 0, zero=True),
        dense_layers=layers - sparse,
        tie_embeddings=cfg.flag("tie_word_embeddings", False),
        attn_params=attn,
        mla_kv_dim=latent,
    )


_MISSING = object()


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _Fields:
    """Typed reads of a config's fields, each failing in one line naming it."""

    def __init__(self, config: Mapping[str, Any], source: str) -> None:
        self.config, self.source = config, source

    def _get(self, key: str, default: object, check: Callable[[Any], bool], want: str) -> Any:
        value = self.config.get(key, _MISSING)
        if value is _MISSING or value is None:  # (configs write null for "not used")
            if default is _MISSING or default is None:
                raise ModelConfigError(f"{self.source}: field '{key}' missing")
            return default
        if not check(value):
            raise ModelConfigError(f"{self.source}: field '{key}' must be {want}, got {value!r}")
        return value

    def text(self, key: str) -> str:
        return str(self._get(key, _MISSING, lambda v: isinstance(v, str), "a string"))

    def count(self, key: str, default: object = _MISSING, zero: bool = False) -> int:
        """A positive integer (`zero`: or 0); `default` where absent (None: required)."""
        low = 0 if zero else 1
        want = "a non-negative integer" if zero else "a positive integer"
        return int(self._get(key, default, lambda v: _is_int(v) and v >= low, want))

    def top_k(self, key: str, experts: int, experts_key: str) -> int:
        """Experts per token: at least 1, at most the experts there are."""
        k = self.count(key)
        if k > experts:
            raise ModelConfigError(f"{self.source}: field '{key}' = {k} exceeds {experts_key} = {experts}")
        return k

    def flag(self, key: str, default: bool) -> bool:
        return bool(self._get(key, default, lambda v: isinstance(v, bool), "true or false"))

    def layer_list(self, key: str, layers: int) -> frozenset[int]:
        """Layer numbers, each below `layers`."""

        def ok(value: Any) -> bool:
            return isinstance(value, list) and all(_is_int(i) and 0 <= i < layers for i in value)

        return frozenset(self._get(key, [], ok, f"a list of layer numbers below {layers}"))
