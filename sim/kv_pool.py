"""Cost of moving a request's KV cache through Seer's global KV-cache pool (Seer §4.2, §5:
Mooncake-style DRAM/SSD pool across nodes, prefetched to the target instance).

A chunked request that is dispatched to another instance reads its context's KV from the
pool over the nodes' RDMA NICs: every GPU of the target instance pulls its shard at the
GPU's RDMA bandwidth. Seer prefetches while the request waits in the buffer, so the
transfer overlaps decoding; the simulator therefore does not stall on it, and reports use
this estimate to show what overlapping has to hide.
"""

from __future__ import annotations

from simctl.sim.cluster import ClusterSpec
from simctl.sim.models import ModelSpec

KV_BYTES_PER_ELEM = 2  # BF16 KV cache


def kv_bytes(model: ModelSpec, tokens: float) -> float:
    """Bytes of KV cache for `tokens` context tokens (all layers, unsharded; sliding-window
    layers hold at most their window)."""
    return model.sequence_kv_bytes(tokens, KV_BYTES_PER_ELEM)


def transfer_seconds(model: ModelSpec, cluster: ClusterSpec, tokens: float) -> float:
    """Seconds to pull `tokens` tokens of KV into one instance of `cluster.gpus_per_worker` GPUs.

    >>> from sim.cluster import parse_cluster
    >>> from sim.models import get_model
    >>> round(transfer_seconds(get_model("qwen2.5-7b"), parse_cluster("h100x8:tp1"), 10_000), 3)
    0.011
    """
    return kv_bytes(model, tokens) / (cluster.gpu.rdma_bw * cluster.gpus_per_worker)
