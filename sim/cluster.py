"""Cluster description: how many nodes of which GPU, and how rollout workers are cut.

A rollout worker is one inference-engine instance. Two layouts:

* **Tensor parallel** (the default): ``tp`` GPUs of one node (tensor parallelism never
  crosses the inter-node network in the systems we model), so ``gpus_per_node % tp == 0``.
* **Data-parallel attention + expert parallelism** (``dp`` > 1, MoE models): ``dp`` GPUs,
  each a DP rank that runs attention for its own sequences with the attention weights
  replicated, while the MoE layers' experts are sharded over all ``dp`` GPUs (EP = dp) and
  tokens reach their experts by an all-to-all (dispatch, then combine) per MoE layer. This
  is the Kimi-K2 layout of Seer (arXiv:2511.14617, §6.1, Table 5: DP32 attention, EP32
  experts, 32 H800 per instance). Such a worker may span nodes: a worker of more GPUs than
  a node takes whole nodes (``dp % gpus_per_node == 0``), and its all-to-all then crosses
  the inter-node network, priced by sim/cost_model.py from the GPU's ``rdma_bw`` (one NIC
  per GPU); a worker inside one node must divide it. DP ranks run TP1 attention
  (``tp = 1``); a tensor-parallel DP rank is not modelled.

``gpus_per_worker = tp * dp`` and ``num_workers = total_gpus // gpus_per_worker``.
``weights`` is the weight format the engine serves: ``"bf16"`` (default) or ``"fp8"``
(one byte per parameter; the matmuls then run at the GPU's FP8 peak, sim/hardware.py).

Specs are written either as ``NAMExCOUNT[:tpN][:dpN][:fp8|:bf16]`` (``h100x512`` = 64
nodes x 8 H100, tp 4; ``a100x8:tp1``; ``h200x4`` = one node with 4 GPUs;
``h800x256:dp32:fp8`` = 8 workers of 32 H800 each, DP32 attention / EP32, FP8 weights;
with ``:dpN`` and no ``:tpN`` the tp is 1) or as a TOML file::

    nodes = 64
    gpus_per_node = 8
    gpu = "h100"
    tp = 4
    dp = 1                  # optional: data-parallel attention ranks per worker (EP = dp)
    weights = "bf16"        # optional: "bf16" or "fp8"
    gpu_mem_util = 0.9      # optional
    nvlink_gbps = 900       # optional override, GB/s (gigaBYTES), datasheet convention
    rdma_gbps = 50          # optional override, GB/s (gigaBYTES) per GPU, one direction

A GPU outside the catalogue (sim/hardware.py) is the base ``gpu`` with its datasheet's
numbers, each optional: ``gpu_name``, ``hbm_gb`` (decimal GB), ``hbm_tbps``,
``bf16_tflops`` and ``fp8_tflops`` (dense, not "with sparsity"), ``pcie_gbps`` (one
direction). A datasheet does not give the engine constants the catalogue fits per platform
(the small-message all-reduce latency and the cost per running sequence): they stay the
base's, or ``allreduce_us`` / ``per_seq_us`` set them (an engine measured otherwise; pick
the base whose engine is closest: ``h100``'s CUDA-graph engine, ``h800``'s eager one).

``to_dict`` records every field (``dp``, ``gpus_per_worker`` and ``weights`` included) in
the run directory's provenance.
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
# ... and below this (1 Gb/s Ethernet is 0.125 GB/s) a typo, not a link.
MIN_BANDWIDTH_GBPS = 0.1

_NAME_SPEC = re.compile(r"^(?P<gpu>[a-z0-9][a-z0-9-]*?)x(?P<count>\d+)(?P<options>(?::[a-z0-9]+)*)$")
_OPTION = re.compile(r"^(?P<key>tp|dp)(?P<value>\d+)$")
# A GPU outside the catalogue, as overrides of the base `gpu`'s datasheet numbers in a
# cluster file: key, GPUSpec field, unit, range (every GPU's datasheet value is well inside
# it; outside, the simulation would report days per step rather than refuse the typo).
_GPU_FIELDS = (
    ("hbm_gb", "hbm_bytes", 1e9, (1.0, 100_000.0)),
    ("hbm_tbps", "hbm_bw", 1e12, (0.01, 1_000.0)),
    ("bf16_tflops", "bf16_flops", 1e12, (1.0, 1_000_000.0)),
    ("fp8_tflops", "fp8_flops", 1e12, (1.0, 1_000_000.0)),
    ("pcie_gbps", "pcie_bw", 1e9, (MIN_BANDWIDTH_GBPS, MAX_BANDWIDTH_GBPS)),
    # the base GPU's engine constants (sim/hardware.py), for an engine measured otherwise
    ("allreduce_us", "allreduce_latency_s", 1e-6, (0.0, 1e6)),
    ("per_seq_us", "per_seq_overhead_s", 1e-6, (0.0, 1e6)),
)
_TOML_KEYS = {
    "nodes",
    "gpus_per_node",
    "gpu",
    "tp",
    "dp",
    "weights",
    "gpu_mem_util",
    "nvlink_gbps",
    "rdma_gbps",
    *(key for key, _, _, _ in _GPU_FIELDS),
    "gpu_name",
}
# Weight formats an engine serves, and their bytes per parameter (block-FP8 scales, one
# float per 128x128 block, are 0.02% more and not counted).
WEIGHT_FORMATS: dict[str, float] = {"bf16": 2.0, "fp8": 1.0}


@dataclass(frozen=True)
class ClusterSpec:
    """A homogeneous GPU cluster cut into equal rollout workers (TP, or DP attention + EP)."""

    nodes: int
    gpus_per_node: int
    gpu: GPUSpec
    tp: int = DEFAULT_TP
    gpu_mem_util: float = DEFAULT_MEM_UTIL
    source: str = field(default="", compare=False)
    dp: int = 1
    weights: str = "bf16"

    def __post_init__(self) -> None:
        for name in ("nodes", "gpus_per_node", "tp", "dp"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"cluster: field {name!r}={value!r} must be a positive integer")
        if self.gpus_per_node % self.tp:
            raise ValueError(
                f"cluster: field 'tp'={self.tp} does not divide gpus_per_node={self.gpus_per_node}"
            )
        problem = _worker_problem(self.nodes, self.gpus_per_node, self.tp, self.dp)
        if problem:
            raise ValueError(f"cluster: {problem}")
        if not (isinstance(self.gpu_mem_util, int | float) and 0.0 < self.gpu_mem_util <= 1.0):
            raise ValueError(f"cluster: field 'gpu_mem_util'={self.gpu_mem_util!r} must be in (0, 1]")
        if self.weights not in WEIGHT_FORMATS:
            raise ValueError(
                f"cluster: field 'weights'={self.weights!r} must be one of {', '.join(WEIGHT_FORMATS)}"
            )

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def gpus_per_worker(self) -> int:
        return self.tp * self.dp

    @property
    def num_workers(self) -> int:
        return self.total_gpus // self.gpus_per_worker

    @property
    def workers_per_node(self) -> int:
        """Workers whose GPUs lie in one node (0 when a worker spans several nodes)."""
        return self.gpus_per_node // self.gpus_per_worker

    @property
    def spans_nodes(self) -> bool:
        """Whether a worker's GPUs are on several nodes (its collectives use the RDMA NICs)."""
        return self.gpus_per_worker > self.gpus_per_node

    def worker_node(self, worker: int) -> int:
        """The node holding `worker`'s first GPU."""
        return worker * self.gpus_per_worker // self.gpus_per_node

    @property
    def label(self) -> str:
        extra = f" dp{self.dp}" if self.dp > 1 else ""
        extra += f" {self.weights}" if self.weights != "bf16" else ""
        return f"{self.nodes}x{self.gpus_per_node} {self.gpu.name} tp{self.tp}{extra}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready provenance: every number the simulation depended on."""
        return {
            "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node,
            "total_gpus": self.total_gpus,
            "tp": self.tp,
            "dp": self.dp,
            "gpus_per_worker": self.gpus_per_worker,
            "weights": self.weights,
            "num_workers": self.num_workers,
            "gpu_mem_util": self.gpu_mem_util,
            "gpu": self.gpu.to_dict(),
            "source": self.source,
        }


def _worker_problem(nodes: int, per_node: int, tp: int, dp: int) -> str | None:
    """Why workers of tp*dp GPUs cannot tile the cluster (None: they can); see the module
    docstring for the rules."""
    if dp == 1:
        return None
    if tp != 1:
        return f"field 'tp'={tp} with 'dp'={dp}: data-parallel attention ranks run tp1 attention"
    if dp <= per_node:
        if per_node % dp:
            return f"field 'dp'={dp} does not divide gpus_per_node={per_node}"
        return None
    if dp % per_node:
        return f"field 'dp'={dp}: a worker spanning nodes takes whole nodes of {per_node} GPUs"
    if (nodes * per_node) % dp:
        return f"field 'dp'={dp} does not divide the {nodes * per_node} GPUs of {nodes} nodes"
    return None


def _default_tp(gpus_per_node: int) -> int:
    """Largest of 4, 2, 1 dividing the node, so small single-node specs still parse."""
    return next(tp for tp in (DEFAULT_TP, 2, 1) if gpus_per_node % tp == 0)


def _name_options(spec: str, options: str) -> tuple[int | None, int, str]:
    """(tp or None, dp, weights) from the ``:tpN:dpN:fp8`` tail of a name spec."""
    found: dict[str, str] = {}
    for option in options.split(":")[1:]:
        match = _OPTION.match(option)
        key = match["key"] if match else ("weights" if option in WEIGHT_FORMATS else None)
        if key is None:
            raise ValueError(
                f"cluster spec {_shown(spec)}: unknown option {option!r}; expected tpN, dpN, "
                f"{' or '.join(WEIGHT_FORMATS)}"
            )
        if key in found:
            raise ValueError(f"cluster spec {_shown(spec)}: option {key!r} given twice")
        found[key] = match["value"] if match else option
    tp = int(found["tp"]) if "tp" in found else None
    dp = int(found.get("dp", "1"))
    if (tp is not None and tp < 1) or dp < 1:
        raise ValueError(f"cluster spec {_shown(spec)}: tp and dp must be positive")
    return tp, dp, found.get("weights", "bf16")


def _parse_name(spec: str) -> ClusterSpec:
    match = _NAME_SPEC.match(spec.strip().lower())
    if match is None:
        raise ValueError(
            f"cluster spec {_shown(spec)}: expected NAMExCOUNT[:tpN][:dpN][:fp8] or a .toml file"
        )
    try:
        gpu = get_gpu(match["gpu"])
    except ValueError as exc:
        raise ValueError(f"cluster spec {_shown(spec)}: {exc}") from None
    count = int(match["count"])
    if count < 1:
        raise ValueError(f"cluster spec {_shown(spec)}: GPU count {count} must be positive")
    if count < GPUS_PER_NODE:
        nodes, per_node = 1, count
    elif count % GPUS_PER_NODE:
        raise ValueError(
            f"cluster spec {_shown(spec)}: GPU count {count} must be a multiple of "
            f"{GPUS_PER_NODE} (or below {GPUS_PER_NODE} for one node)"
        )
    else:
        nodes, per_node = count // GPUS_PER_NODE, GPUS_PER_NODE
    given_tp, dp, weights = _name_options(spec, match["options"])
    tp = given_tp if given_tp is not None else (1 if dp > 1 else _default_tp(per_node))
    if per_node % tp:
        raise ValueError(f"cluster spec {_shown(spec)}: tp{tp} does not divide gpus_per_node={per_node}")
    problem = _worker_problem(nodes, per_node, tp, dp)
    if problem:
        raise ValueError(f"cluster spec {_shown(spec)}: {problem}")
    return ClusterSpec(nodes, per_node, gpu, tp, source=spec, dp=dp, weights=weights)


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
    if value < MIN_BANDWIDTH_GBPS:
        raise ValueError(
            f"cluster file {path.name}: field {key!r}={value!r} GB/s is below {MIN_BANDWIDTH_GBPS} GB/s"
        )
    return value * 1e9


def _plain(x: float) -> str:
    return f"{x:,.0f}" if x == int(x) else f"{x:g}"


def _gpu_overrides(path: Path, data: dict[str, Any], gpu: GPUSpec) -> GPUSpec:
    """The base GPU with the file's datasheet overrides (a GPU outside the catalogue, from
    its datasheet), named `gpu_name` where given, else the base's name marked as changed.
    What a datasheet does not give (the all-reduce latency and the cost per sequence its
    engines ran at) stays the base's unless the file sets it."""
    changes: dict[str, Any] = {}
    if "nvlink_gbps" in data:
        changes["nvlink_bw"] = _bandwidth(path, data, "nvlink_gbps")
    if "rdma_gbps" in data:
        changes["rdma_bw"] = _bandwidth(path, data, "rdma_gbps")
    for key, attr, unit, (low, high) in _GPU_FIELDS:
        if key in data:
            value = float(_field(path, data, key, float))
            if not low <= value <= high:
                span = f"{_plain(low)}-{_plain(high)}"
                raise ValueError(f"cluster file {path.name}: field {key!r}={value!r} is outside {span}")
            changes[attr] = value * unit
    if "gpu_name" in data:
        name = _field(path, data, "gpu_name", str).strip()
        if not name.isprintable() or len(name) > 80:  # (a name goes into one-line messages)
            raise ValueError(f"cluster file {path.name}: field 'gpu_name' must be one printable line")
        changes["name"] = name or gpu.name
    elif set(changes) - {"nvlink_bw", "rdma_bw"}:  # (link overrides keep the name, as before)
        changes["name"] = f"{gpu.name} (modified)"
    return dataclasses.replace(gpu, **changes) if changes else gpu


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
        if isinstance(exc, OSError) and exc.strerror:  # (its text repeats the whole path)
            reason = exc.strerror
        else:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        # (a name too long to exist is cut short like a layout's)
        raise ValueError(f"cluster file {_shown_name(path)}: cannot read: {reason}") from None
    unknown = sorted(set(data) - _TOML_KEYS)
    if unknown:
        raise ValueError(
            f"cluster file {path.name}: unknown field {unknown[0]!r}; known: {', '.join(sorted(_TOML_KEYS))}"
        )
    nodes = _field(path, data, "nodes", int)
    per_node = _field(path, data, "gpus_per_node", int)
    gpu_name = _field(path, data, "gpu", str)
    dp = _field(path, data, "dp", int, 1)
    tp = _field(path, data, "tp", int, 1 if dp > 1 else _default_tp(per_node))
    weights = _field(path, data, "weights", str, "bf16")
    if weights not in WEIGHT_FORMATS:
        known = ", ".join(WEIGHT_FORMATS)
        raise ValueError(f"cluster file {path.name}: field 'weights'={weights!r} must be one of {known}")
    util = _field(path, data, "gpu_mem_util", float, DEFAULT_MEM_UTIL)
    try:
        gpu = get_gpu(gpu_name)
    except ValueError as exc:
        raise ValueError(f"cluster file {path.name}: field 'gpu': {exc}") from None
    gpu = _gpu_overrides(path, data, gpu)
    if per_node % tp:
        raise ValueError(
            f"cluster file {path.name}: field 'tp'={tp} does not divide gpus_per_node={per_node}"
        )
    problem = _worker_problem(nodes, per_node, tp, dp)
    if problem:
        raise ValueError(f"cluster file {path.name}: {problem}")
    if not 0.01 <= util <= 1.0:  # (below 1% no model's weights fit: a typo, shown as 0%)
        raise ValueError(f"cluster file {path.name}: field 'gpu_mem_util'={util} must be in 0.01-1")
    return ClusterSpec(nodes, per_node, gpu, tp, float(util), source=str(path), dp=dp, weights=weights)


def _shown(spec: str) -> str:
    """A layout as a message quotes it: its repr, cut short (a message stays one line of
    reasonable length whatever a trace's metadata or a command line held)."""
    text = repr(spec)
    return text if len(text) <= 80 else text[:76] + "...'"


def _shown_name(path: Path) -> str:
    """A cluster file's name as a message shows it, cut short like `_shown`."""
    return path.name if len(path.name) <= 80 else path.name[:77] + "..."


def _is_file(text: str) -> bool:
    """Whether `text` names a file; False for what cannot be a path (a name too long for
    the file system, a NUL byte), which then reads as a layout name and is refused as one."""
    try:
        return Path(text).is_file()
    except (OSError, ValueError):
        return False


def parse_cluster(spec: str | Path) -> ClusterSpec:
    """Parse ``h100x512[:tp8]`` / ``h800x256:dp32:fp8``-style names or a path to a cluster TOML file."""
    text = str(spec)
    if text.lower().endswith(".toml") or _is_file(text):
        parsed = _parse_toml(Path(text))
    else:
        parsed = _parse_name(text)
    check_size(parsed)
    return parsed
