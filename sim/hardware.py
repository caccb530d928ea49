"""GPU catalogue: the handful of datasheet numbers the roofline cost model needs.

Units are SI bytes and seconds throughout (B, B/s, FLOP/s) so that nothing downstream
has to remember whether "GB" meant 1e9 or 2**30.  Bandwidths follow the vendor's own
convention, which differs per link and is easy to get wrong:

* ``hbm_bw``: aggregate HBM bandwidth as quoted on the datasheet (one direction only
  exists for DRAM).
* ``nvlink_bw``: the datasheet's *total bidirectional* NVLink bandwidth per GPU
  (900 GB/s on H100).  A ring all-reduce moves data in one direction per link, so
  the cost model uses ``nvlink_bw / 2``.
* ``rdma_bw``: per-GPU inter-node bandwidth in one direction (one NIC per GPU on DGX/HGX
  systems: 400 Gb/s ConnectX-7 = 50 GB/s).
* ``pcie_bw``: host link in one direction (PCIe Gen5 x16 = 64 GB/s, Gen4 x16 = 32 GB/s),
  used for KV offload / weight reload estimates.
* ``fp8_flops``: dense FP8 tensor-core peak (the datasheet's "with sparsity" figure halved),
  used for the matmuls of FP8-weight workers (``weights = "fp8"`` in the cluster spec);
  0 where the GPU has no FP8 tensor cores (A100: FP8 weights are dequantised to BF16).

HBM capacity uses the datasheet's decimal "80GB" (80e9), not the ~85.5e9 bytes that
``nvidia-smi`` reports: the ~5 GB difference stands in for the CUDA context, activation
workspace, CUDA graphs and NCCL buffers that an inference engine reserves anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

GB = 1e9
TB = 1e12


@dataclass(frozen=True)
class GPUSpec:
    """Datasheet numbers for one GPU; see the module docstring for the units."""

    name: str
    hbm_bytes: float
    hbm_bw: float
    bf16_flops: float
    nvlink_bw: float
    rdma_bw: float
    pcie_bw: float
    # Latency of one small-message TP all-reduce as the papers' engines ran on this GPU
    # (launch + sync + rank skew; the bandwidth term is separate). Fitted per platform to a
    # published b=1 decode latency; see each GPU below and docs/calibration.md.
    allreduce_latency_s: float = 45e-6
    fp8_flops: float = 0.0
    # Residual cost per running sequence of one engine iteration as the papers' engines ran
    # on this GPU's platform (EfficientRollout's c_T * B, Eq. 2: sampling, logits handling and
    # per-sequence host bookkeeping; "dominated by batch-dependent effects", App. E.3). It
    # shapes the large-batch body of a rollout, not batch 1. Default 10 us (an estimate);
    # A100 fitted to a published rollout completion curve (below).
    per_seq_overhead_s: float = 10e-6

    def to_dict(self) -> dict[str, float | str]:
        """Plain dict for JSON provenance records."""
        return {
            "name": self.name,
            "hbm_bytes": self.hbm_bytes,
            "hbm_bw": self.hbm_bw,
            "bf16_flops": self.bf16_flops,
            "nvlink_bw": self.nvlink_bw,
            "rdma_bw": self.rdma_bw,
            "pcie_bw": self.pcie_bw,
            "allreduce_latency_s": self.allreduce_latency_s,
            "fp8_flops": self.fp8_flops,
            "per_seq_overhead_s": self.per_seq_overhead_s,
        }


# NVIDIA H100 Tensor Core GPU datasheet (SXM5 column): 80 GB HBM3, 3.35 TB/s,
# BF16 1,979 TFLOPS *with sparsity* -> 989.4 TFLOPS dense, FP8 3,958 TFLOPS with sparsity
# -> 1,978.9 dense, NVLink 900 GB/s, PCIe Gen5 128 GB/s (bidirectional). DGX H100: 8x
# ConnectX-7 400 Gb/s, one per GPU.
# All-reduce latency 6.8 us: fitted to TLT (arXiv:2511.16665) Table 7, Qwen2.5-7B TP2 BS1
# on H100 without SD, 242.11 tok/s = 4.130 ms per token (56 all-reduces per step; the
# one-shot custom all-reduce of CUDA-graph engines is 5-8 us at these message sizes).
# Cross-check: microsoft/vidur data/profiling/network/h100_pair_nvlink/all_reduce.csv, a
# 2-GPU H100 NVLink all-reduce of 18-60 KB: min 7 us (medians 7 us or 28-30 us).
H100_SXM_80GB = GPUSpec(
    name="H100-SXM-80GB",
    hbm_bytes=80 * GB,
    hbm_bw=3.35 * TB,
    bf16_flops=989.4e12,
    nvlink_bw=900 * GB,
    rdma_bw=50 * GB,
    pcie_bw=64 * GB,
    allreduce_latency_s=6.8e-6,
    fp8_flops=1978.9e12,
)

# H800 SXM5 (China export variant of H100): same die, HBM and tensor throughput as the
# H100 SXM5 (FP8 3,958 TFLOPS with sparsity, 1,978.9 dense); NVLink cut to 400 GB/s
# (NVIDIA H800 product brief). Inter-node: one
# 400 Gb/s IB NIC per GPU, "IB (50 GB/s)" in the DeepSeek-V3 technical report §3.2.2.
# All-reduce latency 45 us: fitted to SpecActor (arXiv:2511.16193) §5.1, Qwen2.5-32B TP4
# decode at batch 1 "lower to 13 ms" on its H800 platform (vLLM 0.10 under veRL; 128
# all-reduces per step), which gives 12.9 ms. The gap to H100's 6.8 us is the engine as
# run on each platform (eager launches vs CUDA graphs), not the NVLink generation.
H800_SXM_80GB = GPUSpec(
    name="H800-SXM-80GB",
    hbm_bytes=80 * GB,
    hbm_bw=3.35 * TB,
    bf16_flops=989.4e12,
    nvlink_bw=400 * GB,
    rdma_bw=50 * GB,
    pcie_bw=64 * GB,
    allreduce_latency_s=45e-6,
    fp8_flops=1978.9e12,
)

# NVIDIA H200 Tensor Core GPU datasheet (SXM column): 141 GB HBM3e, 4.8 TB/s, BF16
# 1,979 TFLOPS with sparsity (989.4 dense), FP8 3,958 with sparsity (1,978.9 dense),
# NVLink 900 GB/s, PCIe Gen5 128 GB/s.
# All-reduce latency: H100's (same NVLink 4 / NVSwitch fabric; no H200 TP measurement
# in the papers).
H200_SXM_141GB = GPUSpec(
    name="H200-SXM-141GB",
    hbm_bytes=141 * GB,
    hbm_bw=4.8 * TB,
    bf16_flops=989.4e12,
    nvlink_bw=900 * GB,
    rdma_bw=50 * GB,
    pcie_bw=64 * GB,
    allreduce_latency_s=6.8e-6,
    fp8_flops=1978.9e12,
)

# NVIDIA A100 Tensor Core GPU datasheet (80GB SXM column): HBM2e 2,039 GB/s, BF16
# 312 TFLOPS dense, NVLink 600 GB/s, PCIe Gen4 64 GB/s (bidirectional); no FP8 tensor cores.
# DGX A100: 8x ConnectX-6 200 Gb/s HDR, one per GPU -> 25 GB/s.
# All-reduce latency: not fitted (every A100 measurement in the papers is TP1:
# EfficientRollout §4.1, TLT Table 2); the class default, H800's eager-engine value.
# Per-sequence cost 74 us: fitted to EfficientRollout App. B, Fig. 6c (veRL 0.7 + vLLM
# 0.11.2, Qwen2.5-7B, TP1, the first step of the second epoch: "about 50% of requests finish
# within 13 s"), replaying veRL on the efficientrollout-qwen7b-8k preset, whose lengths are
# pinned to the same paper (Table 5's mean response, Fig. 6c's quantile ratios). At 10 us
# that body ran at 15 ms per iteration and finished half its requests in 8.9 s; batch-1
# points (TLT Table 2, EfficientRollout Table 6) move by < 1%. sim/calibration_points.py
# checks p90, p99, the makespan and Table 2's 100-step mean rollout against it.
A100_SXM_80GB = GPUSpec(
    name="A100-SXM-80GB",
    hbm_bytes=80 * GB,
    hbm_bw=2.039 * TB,
    bf16_flops=312e12,
    nvlink_bw=600 * GB,
    rdma_bw=25 * GB,
    pcie_bw=32 * GB,
    per_seq_overhead_s=74e-6,
)

# NVIDIA H20 (HGX H20, the China export part): NVIDIA publishes no datasheet; its spec table
# as reproduced by the press (tomshardware.com, "New Nvidia AI GPUs designed to get around US
# export bans come to China: H20, L20 and L2", and tweaktown.com news/95224) and NVIDIA's own
# ai-dynamo/aiconfigurator @ 18aac73 src/aiconfigurator/systems/h20_sxm.yaml agree: 96 GB
# HBM3, 4.0 TB/s, BF16 148 TFLOPS and FP8 296 TFLOPS (dense: aiconfigurator's dense peaks),
# NVLink 900 GB/s; PCIe Gen5 (aiconfigurator only). Not verified: the NIC per GPU of an HGX
# H20 server (50 GB/s here is HGX H100's one ConnectX-7 per GPU, assumed) and any engine
# measurement, so the all-reduce latency and per-sequence cost are the class defaults.
# Decode on an H20 turns compute-bound from about 37 sequences per worker (148 TFLOPS over
# 4 TB/s, against ~295 on the H100), so at rollout batch sizes it is about as fast as an
# H100, not the 1.2x its bandwidth alone would give.
H20_96GB = GPUSpec(
    name="H20-96GB",
    hbm_bytes=96 * GB,
    hbm_bw=4.0 * TB,
    bf16_flops=148e12,
    nvlink_bw=900 * GB,
    rdma_bw=50 * GB,
    pcie_bw=64 * GB,
    fp8_flops=296e12,
)

# NVIDIA B200 as in the 8-GPU HGX/DGX B200: NVIDIA's HGX B200 specification column, 180 GB
# HBM3e, 7.7 TB/s, FP16/BF16 4.5 PFLOPS and FP8 9 PFLOPS *with sparsity* -> 2,250 / 4,500
# dense (pytorch/ao @ 0598012 torchao/testing/training/roofline_utils.py and aiconfigurator
# @ 095f58a b200_sxm.yaml use 2.25e15 / 4.5e15), NVLink 5 1.8 TB/s per GPU; DGX B200 user
# guide (docs.nvidia.com/dgx/dgxb200-user-guide): 1,440 GB over 8 GPUs, 8 single-port
# ConnectX-7 400 Gb/s (one per GPU, 50 GB/s), PCIe Gen5 host CPUs. (192 GB / 8 TB/s is the
# GB200 figure.) No engine measurement: the all-reduce latency and per-sequence cost are
# the class defaults.
B200_SXM_180GB = GPUSpec(
    name="B200-SXM-180GB",
    hbm_bytes=180 * GB,
    hbm_bw=7.7 * TB,
    bf16_flops=2250e12,
    nvlink_bw=1800 * GB,
    rdma_bw=50 * GB,
    pcie_bw=64 * GB,
    fp8_flops=4500e12,
)

DEFAULT_GPU = H100_SXM_80GB

GPUS: dict[str, GPUSpec] = {
    g.name: g for g in (H100_SXM_80GB, H800_SXM_80GB, H200_SXM_141GB, A100_SXM_80GB, H20_96GB, B200_SXM_180GB)
}

_ALIASES: dict[str, str] = {
    "h100": H100_SXM_80GB.name,
    "h100-sxm": H100_SXM_80GB.name,
    "h100-sxm5": H100_SXM_80GB.name,
    "h100-80gb": H100_SXM_80GB.name,
    "h100-sxm-80gb": H100_SXM_80GB.name,
    "h800": H800_SXM_80GB.name,
    "h800-sxm": H800_SXM_80GB.name,
    "h200": H200_SXM_141GB.name,
    "h200-sxm": H200_SXM_141GB.name,
    "a100": A100_SXM_80GB.name,
    "a100-80gb": A100_SXM_80GB.name,
    "a100-sxm": A100_SXM_80GB.name,
    "a100-80gb-sxm": A100_SXM_80GB.name,
    "h20": H20_96GB.name,
    "b200": B200_SXM_180GB.name,
    "b200-sxm": B200_SXM_180GB.name,
}


def _normalise(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def get_gpu(name: str) -> GPUSpec:
    """Look a GPU up by catalogue name or alias, ignoring case, '_' vs '-' and spaces."""
    key = _normalise(name)
    for canonical, spec in GPUS.items():
        if _normalise(canonical) == key:
            return spec
    if key in _ALIASES:
        return GPUS[_ALIASES[key]]
    known = ", ".join(sorted(GPUS))
    raise ValueError(f"unknown GPU {name!r}; known: {known} (aliases: h100, h800, h200, a100, h20, b200)")
