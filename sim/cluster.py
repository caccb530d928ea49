"""Cluster description: how many nodes of which GPU, and how rollout workers are cut.

A rollout worker is one inference-engine instance over ``tp`` GPUs of one node (tensor
parallelism never crosses the inter-node network in the systems we model), so
``gpus_per_node % tp == 0`` is required and ``num_workers = total_gpus // tp``.

Specs are written either as ``NAMExCOUNT[:tpN]`` (``h100x512`` = 64 nodes x 8 H100,
tp 4; ``a100x8:tp1``; ``h200x4`` = one node with 4 GPUs) or as a TOML file::

    nodes = 64
    gpus_per_node = 8
    gpu = "h100"
    tp = 4
    gpu_mem_util = 0.9      # optional
    nvlink_gbps = 900       # optional override, GB/s (gigaBYTES), datasheet convention
    rdma_gbps = 50          # optional override, GB/s (gigaBYTES) per GPU, one direction
"""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simctl.sim.hardware import GPUSpec, get_gpu
from simctl.traces.limits import fits_in_memory

GPUS_PER_NODE = 8
DEFAULT_TP = 4
DEFAULT_MEM_UTIL = 0.9
# Simulator memory per rollout worker: 2.75 KB measured (RSS of a verl replay of the
# efficientrollout sample, 4,096 -> 65,536 TP1 workers: 159 -> 328 MB), x3 for policies'
# per-worker state. A cluster whose estimate exceeds half this machine's memory is refused
# before the simulation starts.
BYTES_PER_WORKER = 8 * 1024
# Bandwidth overrides above this are not a datasheet value (NVLink 5 is 1,800 GB/s).
MAX_BANDWIDTH_GBPS = 100_000.0

_NAME_SPEC = re.compile(r"^(?P<gpu>[a-z0-9][a-z0-9-]*?)x(?P<count>\d+)(?::tp(?P<tp>\d+))?$")
_TOML_KEYS = {"nodes", "gpus_per_node", "gpu", "tp", "gpu_mem_util", "nvlink_gbps", "rdma_gbps"}


@dataclass(frozen=True)
class ClusterSpec:
    """A homogeneous GPU cluster cut into equal tensor-parallel rollout workers."""

    nodes: int
    gpus_per_node: int
    gpu: GPUSpec
    tp: int = DEFAULT_TP
    gpu_mem_util: float = DEFAULT_MEM_UTIL
    source: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        for name in ("nodes", "gpus_per_node", "tp"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"cluster: field {name!r}={value!r} must be a positive integer")
        if self.gpus_per_node % self.tp:
            raise ValueError(
                f"cluster: field 'tp'={self.tp} does not divide gpus_per_node={self.gpus_per_node}"
            )
        if not (isinstance(self.gpu_mem_util, int | float) and 0.0 < self.gpu_mem_util <= 1.0):
            raise ValueError(f"cluster: field 'gpu_mem_util'={self.gpu_mem_util!r} must be in (0, 1]")

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def num_workers(self) -> int:
        return self.total_gpus // self.tp

    @property
    def workers_per_node(self) -> int:
        return self.gpus_per_node // self.tp

    @property
    def label(self) -> str:
        return f"{self.nodes}x{self.gpus_per_node} {self.gpu.name} tp{self.tp}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready provenance: every number the simulation depended on."""
        return {
            "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node,
            "total_gpus": self.total_gpus,
            "tp": self.tp,
            "num_workers": self.num_workers,
            "gpu_mem_util": self.gpu_mem_util,
            "gpu": self.gpu.to_dict(),
            "source": self.source,
        }


def _default_tp(gpus_per_node: int) -> int:
    """Largest of 4, 2, 1 dividing the node, so small single-node specs still parse."""
    return next(tp for tp in (DEFAULT_TP, 2, 1) if gpus_per_node % tp == 0)


def _parse_name(spec: str) -> ClusterSpec:
    match = _NAME_SPEC.match(spec.strip().lower())
    if match is None:
        raise ValueError(f"cluster spec {spec!r}: expected NAMExCOUNT[:tpN] or a .toml file")
    try:
        gpu = get_gpu(match["gpu"])
    except ValueError as exc:
        raise ValueError(f"cluster spec {spec!r}: {exc}") from None
    count = int(match["count"])
    if count < 1:
        raise ValueError(f"cluster spec {spec!r}: GPU count {count} must be positive")
    if count < GPUS_PER_NODE:
        nodes, per_node = 1, count
    elif count % GPUS_PER_NODE:
        raise ValueError(
            f"cluster spec {spec!r}: GPU count {count} must be a multiple of "
            f"{GPUS_PER_NODE} (or below {GPUS_PER_NODE} for one node)"
        )
    else:
        nodes, per_node = count // GPUS_PER_NODE, GPUS_PER_NODE
    tp = int(match["tp"]) if match["tp"] else _default_tp(per_node)
    if tp < 1 or per_node % tp:
        raise ValueError(f"cluster spec {spec!r}: tp{tp} does not divide gpus_per_node={per_node}")
    return ClusterSpec(nodes, per_node, gpu, tp, source=spec)


def _field(path: Path, data: dict[str, Any], key: str, kind: type, default: Any = None) -> Any:
    """Typed TOML field; the error names file, field and value on one line."""
    if key not in data:
        if default is None:
            raise ValueError(f"cluster file {path.name}: missing field {key!r}")
        return default
    value = data[key]
    where = f"cluster file {path.name}: field {key!r}={value!r}"
    if kind is str:
        if not isinstance(value, str):
            raise ValueError(f"{where} must be a string")
        return value
    numeric = (int,) if kind is int else (int, float)
    if isinstance(value, bool) or not isinstance(value, numeric) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{where} must be a finite positive {kind.__name__}")
    return value


def _bandwidth(path: Path, data: dict[str, Any], key: str) -> float:
    """A GB/s override, as bytes per second; absurd values are refused, not simulated."""
    value = float(_field(path, data, key, float))
    if value > MAX_BANDWIDTH_GBPS:
        raise ValueError(
            f"cluster file {path.name}: field {key!r}={value!r} GB/s is above {MAX_BANDWIDTH_GBPS:,.0f} GB/s"
        )
    return value * 1e9


def check_size(spec: ClusterSpec, memory_bytes: int | None = None) -> None:
    """Refuse, before simulating, a cluster whose simulator state cannot fit in memory."""
    need = spec.num_workers * BYTES_PER_WORKER
    fits, have = fits_in_memory(need, memory_bytes)
    if not fits:
        raise ValueError(
            f"cluster {spec.source or spec.label}: {spec.total_gpus:,} GPUs are {spec.num_workers:,} "
            f"workers, about {need / 1e9:,.1f} GB of simulator state; "
            f"this machine has {have / 1e9:,.1f} GB"
        )


def _parse_toml(path: Path) -> ClusterSpec:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"cluster file {path.name}: cannot read: {reason}") from None
    unknown = sorted(set(data) - _TOML_KEYS)
    if unknown:
        raise ValueError(
            f"cluster file {path.name}: unknown field {unknown[0]!r}; known: {', '.join(sorted(_TOML_KEYS))}"
        )
    nodes = _field(path, data, "nodes", int)
    per_node = _field(path, data, "gpus_per_node", int)
    gpu_name = _field(path, data, "gpu", str)
    tp = _field(path, data, "tp", int, _default_tp(per_node))
    util = _field(path, data, "gpu_mem_util", float, DEFAULT_MEM_UTIL)
    try:
        gpu = get_gpu(gpu_name)
    except ValueError as exc:
        raise ValueError(f"cluster file {path.name}: field 'gpu': {exc}") from None
    if "nvlink_gbps" in data:
        gpu = dataclasses.replace(gpu, nvlink_bw=_bandwidth(path, data, "nvlink_gbps"))
    if "rdma_gbps" in data:
        gpu = dataclasses.replace(gpu, rdma_bw=_bandwidth(path, data, "rdma_gbps"))
    if per_node % tp:
        raise ValueError(
            f"cluster file {path.name}: field 'tp'={tp} does not divide gpus_per_node={per_node}"
        )
    if util > 1.0:
        raise ValueError(f"cluster file {path.name}: field 'gpu_mem_util'={util} must be <= 1")
    return ClusterSpec(nodes, per_node, gpu, tp, float(util), source=str(path))


def parse_cluster(spec: str | Path) -> ClusterSpec:
    """Parse ``h100x512[:tp8]``-style names or a path to a cluster TOML file."""
    text = str(spec)
    if text.lower().endswith(".toml") or Path(text).is_file():
        parsed = _parse_toml(Path(text))
    else:
        parsed = _parse_name(text)
    check_size(parsed)
    return parsed
