"""The cluster layout each generator preset's paper ran on, as a `--cluster` spec string.

`simctl trace gen` records the layout in the trace metadata (`TraceMeta.cluster`, scaled
with `--scale` so each rollout instance keeps the paper's load), and `simctl replay` uses it
when no `--cluster` is given. Paper short names as in traces/presets.py.

A layout the cluster spec cannot express is recorded as `None` with the reason in
`NOT_EXPRESSIBLE`: replaying such a trace without `--cluster` falls back to the default.
(Empty today: Seer's Kimi-K2 layout, DP32 attention + EP32 in FP8, became expressible with
the cluster spec's `:dpN` and `:fp8` options, sim/cluster.py.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

GPUS_PER_NODE = 8  # every paper's nodes hold 8 GPUs (the cluster spec's node size)
# Where a trace records no layout: 64 nodes x 8 H100 SXM, TP4 rollout workers
DEFAULT_CLUSTER = "h100x512"


@dataclass(frozen=True)
class PaperLayout:
    """`gpus` GPUs of `gpu` cut into rollout instances of `tp` x `dp` GPUs (TP-`tp`, or with
    `dp` > 1 data-parallel attention + expert parallelism), serving `weights`, with where
    that is stated."""

    gpu: str
    gpus: int
    tp: int
    source: str
    dp: int = 1
    weights: str = "bf16"

    def _spec(self, gpus: int) -> str:
        dp = f":dp{self.dp}" if self.dp > 1 else ""
        weights = f":{self.weights}" if self.weights != "bf16" else ""
        return f"{self.gpu}x{gpus}:tp{self.tp}{dp}{weights}"

    @property
    def spec(self) -> str:
        return self._spec(self.gpus)

    def scaled(self, scale: float) -> str:
        """The spec at `scale` of the prompts: instances scale the same way (at least one),
        rounded up to whole 8-GPU nodes above one node, so each keeps the paper's load."""
        if scale >= 1.0:
            return self.spec
        per_instance = self.tp * self.dp
        workers = max(1, round(self.gpus // per_instance * scale))
        gpus = workers * per_instance
        if gpus > GPUS_PER_NODE:
            gpus = math.ceil(gpus / GPUS_PER_NODE) * GPUS_PER_NODE
        return self._spec(gpus)


_SPECACTOR = (
    "SpecActor §5.1: Hopper 80 GB nodes with 400 GB/s NVLink (the H800 part, as the preset's "
    "hardware); the trace runs on 256 GPUs with TP4 rollout workers"
)

LAYOUTS: Mapping[str, PaperLayout] = MappingProxyType(
    {
        # §5.1 DAPO-32B-20K: "runs on 256 GPUs with a 4-degree TP ... per-worker batch size is 256"
        "dapo-32b-20k": PaperLayout("h800", 256, 4, _SPECACTOR),
        # §5.1 GRPO-32B-20K: 256 GPUs, TP4, initial per-worker batch 128
        "grpo-32b-20k": PaperLayout("h800", 256, 4, _SPECACTOR),
        # §5.1 PPO-32B-20K: "the same cluster setup like the above two traces"
        "ppo-32b-20k": PaperLayout("h800", 256, 4, _SPECACTOR),
        # Seer Table 5: 32 GPUs, 1 GPU per instance (§6.1: H800 nodes)
        "seer-moonlight-64k": PaperLayout("h800", 32, 1, "Seer §6.1, Table 5 (Moonlight)"),
        # Seer Table 5: 256 GPUs, 32 per instance; §6.1: "Kimi-K2 with data parallelism (DP32)
        # and expert parallelism (EP32)". FP8 assumed: Seer does not state the format; Kimi-K2
        # is released in block FP8 (Kimi K2 report, arXiv:2507.20534).
        "seer-kimi-k2-96k": PaperLayout(
            "h800",
            256,
            1,
            "Seer §6.1, Table 5 (Kimi-K2: DP32 attention, EP32; FP8 weights assumed)",
            dp=32,
            weights="fp8",
        ),
        # Seer Table 5: 128 GPUs, 8 per instance (TP8, §6.1)
        "seer-qwen2vl-72b-40k": PaperLayout("h800", 128, 8, "Seer §6.1, Table 5 (Qwen2-VL-72B)"),
        # RhymeRL §7: 16 nodes, 128 GPUs; Fig. 13 caption: 2-GPU TP for 8B/14B models
        "rhymerl-math-14b-16k": PaperLayout("h800", 128, 2, "RhymeRL §7 hardware settings, Fig. 13 caption"),
        # EfficientRollout §4.1 / App. F.1, F.3: one node of 8 A100-80GB, TP=1
        "efficientrollout-qwen7b-8k": PaperLayout("a100", 8, 1, "EfficientRollout §4.1, App. F.1/F.3"),
        # TLT §6.1: 8 DGX H100 (64 GPUs); TP "2, 4, or 8 depending on model scale": TP4 for
        # 32B assumed (Fig. 14's case study runs Qwen-32B on TP4 workers)
        "tlt-qwen32b-32k": PaperLayout("h100", 64, 4, "TLT §6.1 (TP4 for 32B assumed, Fig. 14)"),
    }
)

NOT_EXPRESSIBLE: Mapping[str, str] = MappingProxyType({})


def paper_layout(preset: str) -> PaperLayout | None:
    """The preset's paper layout, or None where the cluster spec cannot express it."""
    return LAYOUTS.get(preset)


def recorded_layout(meta_cluster: object) -> str | None:
    """The layout a trace's metadata records (`TraceMeta.cluster`), None where it records
    none (absent or blank): replay then uses DEFAULT_CLUSTER."""
    return meta_cluster if isinstance(meta_cluster, str) and meta_cluster.strip() else None


def layout_for(preset: str, scale: float = 1.0) -> str | None:
    """The `--cluster` spec of the preset's paper at `scale` (None: not expressible)."""
    layout = LAYOUTS.get(preset)
    return layout.scaled(scale) if layout else None
