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
  layers are dense), mixtral, minimax_m2 (MiniMax-M2), gpt_oss (its MXFP4 experts, from
  ``quantization_config``, weigh 4.25 bits per parameter: 4-bit elements and an 8-bit
  scale per 32, the OCP Microscaling spec v1.0), glm4_moe (GLM-4.5/4.6: DeepSeek-style
  routed and shared experts after ``first_k_dense_replace`` dense layers, GQA attention);
- multi-head latent attention with experts: deepseek_v2, deepseek_v3, kimi_k2.

Sliding-window layers (sim/model_spec.py says how they are priced), as transformers lays
them out: the config's ``layer_types`` where it has one; else Gemma 2 and gpt-oss slide on
every even-numbered layer, Gemma 3 on all but every ``sliding_window_pattern``-th (6), and
Qwen configs only with ``use_sliding_window`` (layers from ``max_window_layers`` on). A
``sliding_window`` of any other family (Mistral 7B v0.1's applies to every layer) is
priced as full attention.
A multimodal config is read as its language model: the one it nests (``text_config``), or
the fields it keeps at the top level (qwen2_vl, qwen2_5_vl). The vision tower is not
counted (it runs on image prefill only and weighs on memory; the catalogue's Qwen2-VL-72B
counts it).

What is left out is what the catalogue leaves out (norm weights of q/k, attention
biases, routers' gates below 0.1 %), multi-token-prediction layers (GLM's and
MiniMax's, outside ``num_hidden_layers``), and quantization other than MXFP4 experts
(FP8 serving is a cluster setting). Where a field is absent and its config class has a
model's own value as default (Gemma 3's text config omits vocabulary and heads), the
class default is taken, as transformers would. A config the reader cannot use fails in
one line naming the file, the field and the value.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from simctl.sim.model_spec import ModelSpec, mla_attn_params
from simctl.traces.paths import user_path

COUNT_LIMIT = 2**31 - 1  # (the largest size, count or context a config field may give)
DENSE = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "olmo2", "granite", "phi3")
# Multimodal configs that keep their language model's fields at the top level (Qwen2-VL,
# Qwen2.5-VL): read as that language model.
FLAT_MULTIMODAL = {"qwen2_vl": "qwen2", "qwen2_5_vl": "qwen2"}
EXPERTS = ("qwen2_moe", "qwen3_moe", "mixtral", "minimax_m2", "gpt_oss", "glm4_moe")
# Families whose routed experts are `num_local_experts` of width `intermediate_size`
# in every layer (Mixtral's layout)
_LOCAL_EXPERTS = ("mixtral", "minimax_m2", "gpt_oss")
LATENT = ("deepseek_v2", "deepseek_v3", "kimi_k2")
SUPPORTED = DENSE + EXPERTS + LATENT + tuple(FLAT_MULTIMODAL)
# transformers' config classes tie the input and output embeddings by default only for
# Gemma (GemmaConfig, Gemma2Config, Gemma3TextConfig); every other family here unties them.
_TIED_BY_DEFAULT = frozenset({"gemma", "gemma2", "gemma3_text"})
# Config-class defaults that are one model's own values, which official configs rely on
# (transformers' Gemma3TextConfig, Gemma2Config, GptOssConfig, Qwen2Config, Qwen3Config).
_CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {
        "vocab_size": 262208,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "sliding_window": 4096,
        "sliding_window_pattern": 6,
    },
    "gemma2": {"sliding_window": 4096},
    "gpt_oss": {"sliding_window": 128},
    "qwen2": {"max_window_layers": 28},
    "qwen3": {"max_window_layers": 28},
    "qwen2_moe": {"max_window_layers": 28},
    "qwen3_moe": {"max_window_layers": 28},
}
# Families that slide on every other layer (the even-numbered ones) without `layer_types`
_ALTERNATING = ("gemma2", "gpt_oss")
_QWEN = ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe")
MXFP4_BYTES_PER_PARAM = 4.25 / 8  # E2M1 elements + one E8M0 scale per 32 (OCP MX v1.0)

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
    "shared_intermediate_size",
    "sliding_window",
    "layer_types",
    "use_sliding_window",
    "max_window_layers",
    "sliding_window_pattern",
    "quantization_config",
)


class ModelConfigError(ValueError):
    """A config that does not describe a model the reader can price (one line)."""


def essentials(config: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of `config` the reader uses (its language model's, where nested): what
    a trace records as `model_config`, and reads back to the same model."""
    inner = _language_model(config)
    kept = {k: inner[k] for k in FIELDS if k in inner}
    quant = kept.pop("quantization_config", None)
    if isinstance(quant, Mapping) and "quant_method" in quant:  # all the reader uses of it
        kept["quantization_config"] = {"quant_method": quant["quant_method"]}
    return kept


def read_config_file(path: str | Path) -> tuple[str, dict[str, Any]]:
    """(name, config) of a ``config.json`` or of a directory holding one. The name is the
    directory's (HF checkouts are named after the model), or the file's stem when it is
    not called config.json."""
    p = user_path(path)
    file = p / "config.json" if p.is_dir() else p
    if not file.is_file():
        raise ModelConfigError(f"model config {file}: no such file")
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelConfigError(f"model config {file}: cannot read ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ModelConfigError(f"model config {file}: not JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise ModelConfigError(f"model config {file}: JSON nested too deeply") from None
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
            f"{source}: model_type {kind!r} is not supported (supported: {', '.join(SUPPORTED)})"
        )
    cfg.defaults = _CLASS_DEFAULTS.get(kind, {})
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
    window, window_layers = _windows(cfg, kind, layers)
    spec = replace(spec, window=window, window_layers=window_layers)
    return _experts(cfg, kind, spec) if kind in EXPERTS else spec


def _windows(cfg: _Fields, kind: str, layers: int) -> tuple[int, int]:
    """(window, sliding layers) as transformers lays them out (module docstring)."""
    types = cfg.layer_types(layers)
    if types is not None:
        sliding = sum(1 for t in types if t == "sliding_attention")
    elif kind in _ALTERNATING:
        sliding = (layers + 1) // 2  # layers 0, 2, 4, ...
    elif kind == "gemma3_text":
        sliding = layers - layers // cfg.count("sliding_window_pattern")
    elif kind in _QWEN and cfg.flag("use_sliding_window", False):
        sliding = max(0, layers - cfg.count("max_window_layers", zero=True))
    else:
        return 0, 0
    if not sliding:
        return 0, 0
    return cfg.count("sliding_window"), sliding


def _language_model(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's fields: `text_config` where a multimodal config nests them."""
    inner = config.get("text_config")
    if isinstance(inner, Mapping) and config.get("model_type") not in SUPPORTED:
        return inner
    return config


def _experts(cfg: _Fields, kind: str, dense: ModelSpec) -> ModelSpec:
    """Qwen MoE (routed + one shared expert, some layers dense) and Mixtral (all routed)."""
    layers = dense.layers
    if kind in _LOCAL_EXPERTS:
        experts = cfg.count("num_local_experts")
        return replace(
            dense,
            num_experts=experts,
            experts_per_token=cfg.top_k("num_experts_per_tok", experts, "num_local_experts"),
            moe_ffn=dense.ffn,  # (their intermediate_size is each expert's width)
            shared_ffn=cfg.count("shared_intermediate_size", 0, zero=True),
            expert_bytes_per_param=MXFP4_BYTES_PER_PARAM if cfg.quant_method() == "mxfp4" else 0.0,
        )
    if kind == "glm4_moe":
        experts = cfg.count("n_routed_experts")
        return replace(
            dense,
            num_experts=experts,
            experts_per_token=cfg.top_k("num_experts_per_tok", experts, "n_routed_experts"),
            moe_ffn=cfg.count("moe_intermediate_size"),
            shared_experts=cfg.count("n_shared_experts", 0, zero=True),
            dense_layers=min(layers, cfg.count("first_k_dense_replace", 0, zero=True)),
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
        self.defaults: Mapping[str, Any] = {}  # the family's config-class defaults

    def _get(self, key: str, default: object, check: Callable[[Any], bool], want: str) -> Any:
        value = self.config.get(key, _MISSING)
        if (value is _MISSING or value is None) and key in self.defaults:
            value = self.defaults[key]
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
        """A positive integer (`zero`: or 0) below 2**31 (no model has a dimension, count or
        context beyond: a larger one is a typo, which would surface as another field's
        problem); `default` where absent (None: required)."""
        low = 0 if zero else 1
        want = "a non-negative integer" if zero else "a positive integer"
        value = int(self._get(key, default, lambda v: _is_int(v) and v >= low, want))
        if value > COUNT_LIMIT:
            shown = str(value) if len(str(value)) <= 20 else str(value)[:17] + "..."
            raise ModelConfigError(f"{self.source}: field '{key}' = {shown} exceeds {COUNT_LIMIT}")
        return value

    def top_k(self, key: str, experts: int, experts_key: str) -> int:
        """Experts per token: at least 1, at most the experts there are."""
        k = self.count(key)
        if k > experts:
            raise ModelConfigError(f"{self.source}: field '{key}' = {k} exceeds {experts_key} = {experts}")
        return k

    def flag(self, key: str, default: bool) -> bool:
        return bool(self._get(key, default, lambda v: isinstance(v, bool), "true or false"))

    def layer_types(self, layers: int) -> list[str] | None:
        """`layer_types`: full_attention or sliding_attention per layer (None: absent)."""
        value = self.config.get("layer_types")
        if value is None:
            return None
        kinds = ("full_attention", "sliding_attention")
        if not (isinstance(value, list) and len(value) == layers and all(v in kinds for v in value)):
            shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
            raise ModelConfigError(
                f"{self.source}: field 'layer_types' must be a list of {layers} entries, each "
                f"{' or '.join(kinds)}, got {shown}"
            )
        return list(value)

    def quant_method(self) -> str | None:
        """`quantization_config.quant_method`, if the config has one."""
        quant = self.config.get("quantization_config")
        if quant is None:
            return None
        if not isinstance(quant, Mapping) or not isinstance(quant.get("quant_method"), str):
            raise ModelConfigError(
                f"{self.source}: field 'quantization_config' must be an object with a string "
                f"'quant_method', got {quant!r}"
            )
        return str(quant["quant_method"])

    def layer_list(self, key: str, layers: int) -> frozenset[int]:
        """Layer numbers, each below `layers`."""

        def ok(value: Any) -> bool:
            return isinstance(value, list) and all(_is_int(i) and 0 <= i < layers for i in value)

        return frozenset(self._get(key, [], ok, f"a list of layer numbers below {layers}"))
