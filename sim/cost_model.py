"""Per-iteration cost of a rollout worker: a fitted roofline, or a measured profile.

The engine calls :class:`CostModel` with numpy arrays (thousands of iterations at a time),
so every method is elementwise numpy, broadcasting, returning float64 seconds.

Roofline (EfficientRollout Eq. 2 / App. E.3, extended with TP communication)::

    t = max(bytes / (hbm_bw * hbm_bw_eff), flops / (bf16_flops * compute_eff))
        + allreduces * (latency + ring(tp) * new_tokens * hidden * 2 B / nvlink)
        + iteration_overhead + per_seq * num_seqs + per_token * new_tokens

A model-based drafter's cycle of gamma steps costs gamma * (its own pass, same law) +
spec_cycle_overhead (the engine's proposer path, RooflineParams).

Per GPU: bytes = weights touched + KV read (context_tokens) + KV written (new_tokens);
flops = 2 * matmul params * new_tokens + 4 * layers * heads * head_dim * new_tokens *
context_per_seq, both divided by tp.  MoE weights touched: a batch of n tokens, each
routed to k of E experts (uniform, independent), touches E * (1 - (1 - k/E)**n) distinct
experts per layer in expectation; only those are read.  On a tensor-parallel worker (one
node) experts are sharded like dense layers and no all-to-all is modelled.

FP8 weights (cluster ``weights = "fp8"``): one byte per parameter instead of
``bytes_per_param``, and the matmul FLOPs run at the GPU's FP8 peak (``fp8_flops``, datasheet;
BF16 where the GPU has none); attention over the KV cache stays BF16.

Data-parallel attention + expert parallelism (cluster ``dp`` > 1, :class:`DPAttentionRoofline`;
Seer's Kimi-K2 layout, arXiv:2511.14617 §6.1): each of the worker's G = dp GPUs is one DP
rank holding the attention weights whole and its own sequences' KV; everything else (vocab-
parallel embedding and LM head, dense FFN, shared and routed experts) is sharded over the G
GPUs.  Per GPU, for b sequences the busiest rank holds ceil(b/dp) of them (share
s = ceil(b/dp)/b)::

    bytes = attention weights + other weights touched / G + s * (KV read + KV written)
    flops = 2 * (matmul params - attention params) * n / G            at the weights' peak
            + s * n * (2 * attention params)                          at the weights' peak
            + s * n * attention FLOPs per context token * context     at BF16
    comm  = moe_layers * (max(lat, s*n*k*hidden*1 B / bw) + max(lat, s*n*k*hidden*2 B / bw))

The last line is the all-to-all of each MoE layer: dispatch (FP8 activations, 1 B) and
combine (BF16, 2 B) of each of the rank's tokens to its k experts, at the per-GPU NIC
bandwidth ``rdma_bw`` when the worker spans nodes (``nvlink_bw / 2 * nvlink_eff`` inside
one node), each bounded below by one collective's latency (the GPU's fitted
``allreduce_latency_s``, standing in for the all-to-all launch + sync).  Check against
DeepEP's published low-latency kernels (github.com/deepseek-ai/DeepEP README: H800, CX7
400 Gb/s, EP32, 128 tokens per rank, hidden 7168, top-8): 155 us dispatch + 273 us combine
= 428 us measured; this law gives 147 + 294 = 441 us (+3%).  No overlap of the all-to-all
with computation (two-batch overlap) is modelled.

Measured profile (``simctl calibrate`` writes it; :class:`ProfiledCostModel` reads it)::

    {"format": "simctl-profile/1", "backend": str, "model": str, "device": str, "tp": int,
     "kv_capacity_tokens": int, "weight_bytes_per_gpu": float (optional, else catalogue),
     "measurements": [{"kind": "decode" | "verify" | "prefill" | "draft:<drafter>",
                       "num_seqs": int, "new_tokens": int, "context_tokens": int,
                       "gamma": int, "time_s": float}, ...]}

Per kind an affine law t = c0 + c1*num_seqs + c2*new_tokens + c3*context_tokens prices
iterations, refitted around each queried batch size (and, for verify rows measured at
several ``gamma``, draft length) by weighted least squares with non-negative slopes and
relative residuals (``_LocalLaw``): measured costs are not one affine law over the whole
grid. ``coefficients`` keeps one global non-negative fit (NNLS) per kind as a summary. A
regressor identical to an earlier one on every row (new_tokens == num_seqs for decode,
num_seqs == 1 for prefill) is unidentifiable and gets 0.
``draft:<d>`` rows hold the time to propose ``gamma`` tokens per sequence; they are fitted
per draft step (time_s / gamma, new_tokens = num_seqs).  ``iteration_time`` uses the
verify law where new_tokens > num_seqs (if measured), else the decode law; prefill falls
back to verify, then decode. Other row fields (``cpu_s``: the CPU time of the same steps)
are kept for diagnosis and not read here.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike

from simctl.sim.cluster import WEIGHT_FORMATS, ClusterSpec
from simctl.sim.hardware import GPUSpec
from simctl.sim.models import ModelSpec, get_model

_SCALARS = (int, float, np.float64, np.int64)  # types the scalar fast paths accept
# `float`, for values a fast path has checked are scalars (by type or 0-d): mypy cannot
# narrow ArrayLike by those checks.
_scalar: Callable[[Any], float] = float


class CostModelError(ValueError):
    """A cost model that cannot price what the run asks (a profile that cannot be read, or
    lacks a kind of step a policy needs; a model that does not fit); one line."""


@runtime_checkable
class CostModel(Protocol):
    """What the engine calls. Arguments broadcast elementwise; results are float64 seconds.

    iteration_time: one forward pass of one worker over `num_seqs` sequences processing
    `new_tokens` query tokens in total (decode: num_seqs; verification: sum(gamma_i + 1);
    prefill chunk: its prompt tokens) attending `context_tokens` KV tokens in total.
    draft_time: proposing `gamma` tokens for each of `num_seqs` sequences.
    """

    kv_capacity_tokens: int
    weight_bytes_per_gpu: float

    def iteration_time(
        self, num_seqs: ArrayLike, new_tokens: ArrayLike, context_tokens: ArrayLike
    ) -> np.ndarray: ...

    def prefill_time(self, tokens: ArrayLike) -> np.ndarray: ...

    def draft_time(
        self, drafter: str, num_seqs: ArrayLike, context_tokens: ArrayLike, gamma: ArrayLike
    ) -> np.ndarray: ...


@dataclass(frozen=True)
class RooflineParams:
    """Fitted efficiency/overhead terms; anchors in tests/sim/test_cost_model.py."""

    # Fraction of datasheet HBM bandwidth reached by decode GEMVs. EfficientRollout
    # App. E.3 fits BW_eff = 1560-1620 GB/s on A100 (0.77-0.79 of 2039); TLT Table 2
    # (Qwen2.5-7B, b=1, TP1: 6.07 ms H100, 10.8 ms A100) implies 0.75 / 0.70 end to end.
    hbm_bw_eff: float = 0.78
    # Fraction of dense BF16 peak reached by large-M GEMMs (verify/prefill): H100 SXM
    # cuBLAS BF16 GEMMs reach ~600-700 of 989 TFLOP/s on TP-sharded shapes.
    compute_eff: float = 0.62
    # rho_kappa of EfficientRollout E.3: effective / theoretical KV traffic.
    kv_read_eff: float = 1.0
    # Achieved fraction of one-direction NVLink bandwidth in a ring all-reduce.
    nvlink_eff: float = 0.7
    # Latency per TP all-reduce (2 per layer), incl. rank skew: None takes the GPU's
    # `GPUSpec.allreduce_latency_s`, fitted per platform to a published b=1 decode latency
    # (sim/hardware.py: H100 to TLT Table 7, H800 to SpecActor §5.1). A number overrides it.
    allreduce_latency_s: float | None = None
    # Fixed per-iteration cost: scheduler, input prep, launch, sampling setup. TLT Table 2
    # (H100, 7B, TP1): 6.07 ms measured vs 5.83 ms of weight streaming at hbm_bw_eff.
    iteration_overhead_s: float = 0.3e-3
    # Extra per iteration when tp > 1: vLLM V1 multiproc executor broadcasts the scheduler
    # output to the TP ranks over a shared-memory queue and gathers rank 0's result.
    tp_iteration_overhead_s: float = 0.5e-3
    # c_T * B of EfficientRollout E.3: per-sequence sampling and host bookkeeping. None
    # takes the GPU's `GPUSpec.per_seq_overhead_s` (fitted per platform where a published
    # measurement shows it, sim/hardware.py); a number overrides it.
    per_seq_overhead_s: float | None = None
    # Per query token: full-vocab sampling / rejection sampling (estimate).
    per_token_overhead_s: float = 2e-6
    # Residual cost of a speculative verification per sequence beyond per_seq/per_token
    # overheads: EfficientRollout's c_V*B term (Eq. 2, App. E.3; its fitted values are not
    # published). 0: no published micro-measurement isolates it, and SpecActor Fig. 6b
    # ("verification with a 2x batch (from 128 to 256) only incurs a 1.4x higher
    # latency", §3) bounds it: any c_V > 0 pushes that ratio towards 2. (It was 120 us,
    # tuned to make vanilla speculation break even at batch 128 -- an output, removed.)
    verify_per_seq_overhead_s: float = 0.0
    # Fixed host-side cost of one speculative cycle of a model-based drafter ("eagle",
    # "w4-self", "model:<name>"), whatever the batch and draft length: the engine's proposer
    # path around the draft forwards (rejection-sampling bookkeeping, drafter input
    # preparation from the verified tokens and hidden states, launches outside the target's
    # CUDA graph). Fitted to EfficientRollout Table 6 (vLLM, A100, Qwen2.5-7B EAGLE-3: T_V/T_p
    # = 1.37 for a 4-token verify where the roofline gives 1.00; vLLM's timer books it with
    # verification, simctl with drafting: the cycle's sum is what the simulator prices).
    # Checked against TLT Tables 1, 2 and 7 (SGLang EAGLE trees, H100/A100, batch 1: the
    # measured cycles leave 3.1-5.7 ms over drafting + verification), see
    # sim/calibration_points.py. Model-free drafters (n-gram, suffix, history) do not pay
    # it: no published measurement shows one, and they have no draft forward to prepare.
    # A cycle with no sequences costs nothing.
    spec_cycle_overhead_s: float = 3.70e-3
    bytes_per_param: float = 2.0
    kv_bytes_per_elem: int = 2
    # Drafter steps run inside one engine step: launch + sampling but no scheduler.
    # EfficientRollout Table 6: a one-layer EAGLE step costs 0.82-0.91 ms on A100.
    draft_step_overhead_s: float = 0.3e-3
    # EAGLE-3 heads predict over a reduced draft vocabulary (draft_vocab_size=32000 in
    # released EAGLE-3 configs), which is what makes EfficientRollout Table 6's one-token
    # drafter step 0.82 ms on A100 7B; 0 = full target vocabulary (EAGLE-1/2).
    eagle_vocab: int = 32000
    # Small "model:<name>" drafters run unsharded (vLLM speculative_draft_tensor_parallel
    # _size=1 is the usual choice below ~2B: no all-reduces).
    draft_model_tp: int = 1
    # EfficientRollout App. E.3: W4 RTN drafter weights are 33-36 % of BF16 ...
    w4_weight_ratio: float = 0.35
    # ... and eta_D > 1 covers W4A16 dequantisation/kernel overhead (estimate: Marlin
    # reaches ~3-3.5x of the ideal 4x at small batch).
    eta_d: float = 1.25
    # CPU drafters, serialised with the GPU step as in vLLM V1. n-gram scans the context
    # (Seer §2.2: cost grows with context); suffix/history trees cost per lookup + per token
    # walked (SuffixDecoding, Oliaro et al. 2025: tens of us per request). Estimates.
    ngram_s_per_seq: float = 5e-6
    ngram_s_per_context_token: float = 2e-9
    tree_s_per_seq: float = 20e-6
    tree_s_per_token: float = 1e-6


DEFAULT_PARAMS = RooflineParams()


@dataclass(frozen=True)
class _Pass:
    """One forward pass of some network on one worker, reduced to per-GPU roofline inputs."""

    dense_bytes: float  # weights read every step, per GPU
    expert_bytes: float  # one routed expert of one layer, per GPU
    moe_layers: int
    num_experts: int
    top_k: int
    matmul_params: float  # per token, whole model (divided by tp later)
    attn_coeff: float  # attention FLOPs per query token per context token
    kv_bytes: float  # KV bytes per token per GPU
    allreduces: int
    hidden: int
    overhead_s: float
    # KV written per new token, in context-layer tokens: sliding-window layers write too
    kv_write: float = 1.0


def _kv_bytes_per_gpu(model: ModelSpec, tp: int, bytes_per_elem: int) -> float:
    """MLA latents are replicated on every TP rank; GQA heads are split, never below one."""
    if model.mla_kv_dim:
        return float(model.kv_bytes_per_token(bytes_per_elem))
    heads_per_gpu = max(model.kv_heads / tp, 1.0)
    return 2.0 * model.context_layers * heads_per_gpu * model.head_dim * bytes_per_elem


def _model_pass(
    model: ModelSpec, tp: int, p: RooflineParams, overhead_s: float, bytes_per_param: float | None = None
) -> _Pass:
    bpp = (p.bytes_per_param if bytes_per_param is None else bytes_per_param) / tp
    return _Pass(
        dense_bytes=model.non_expert_param_count() * bpp,
        expert_bytes=model.expert_params() * (model.expert_bytes_per_param / tp or bpp),
        moe_layers=model.moe_layers,
        num_experts=model.num_experts,
        top_k=model.experts_per_token,
        matmul_params=model.matmul_param_count(),
        attn_coeff=model.attn_flops_per_context_token(),
        kv_bytes=_kv_bytes_per_gpu(model, tp, p.kv_bytes_per_elem),
        allreduces=2 * model.layers if tp > 1 else 0,
        hidden=model.hidden,
        overhead_s=overhead_s,
        kv_write=model.layers / model.context_layers,
    )


def _fmax(a: float, b: float) -> float:
    """np.maximum of two floats: the first unless the second is larger, NaN wins."""
    return a if a >= b or a != a else b


def _scalar_pass_time(
    m: RooflineCostModel, p: _Pass, b: float, n: float, kv_read: float, attn: float, weight_scale: float
) -> float:
    """`RooflineCostModel._time` of a dense pass (no routed experts) for Python floats: the
    same IEEE operations in the same order as its numpy form (x + 0.0 for its zeros_like
    broadcast), without numpy's per-call cost on 0-d arrays."""
    prm, gpu, tp = m.params, m.gpu, m.tp
    weights = p.dense_bytes * weight_scale + 0.0
    kv = (kv_read * prm.kv_read_eff + n * p.kv_write) * p.kv_bytes
    t_mem = (weights + kv) / (gpu.hbm_bw * prm.hbm_bw_eff)
    if m._fp8 and p is m._pass:
        t_compute = (2.0 * n * p.matmul_params / tp) / (m._matmul_flops * prm.compute_eff) + (
            n * p.attn_coeff * attn / tp
        ) / (gpu.bf16_flops * prm.compute_eff)
    else:
        flops = n * (2.0 * p.matmul_params + p.attn_coeff * attn) / tp
        t_compute = flops / (gpu.bf16_flops * prm.compute_eff)
    ring = 2.0 * (tp - 1) / tp * n * p.hidden * 2.0
    latency = gpu.allreduce_latency_s if prm.allreduce_latency_s is None else prm.allreduce_latency_s
    per_ar = latency + ring / (gpu.nvlink_bw / 2 * prm.nvlink_eff)
    t_comm = p.allreduces * per_ar
    t_over = p.overhead_s + m.per_seq_overhead_s * b + prm.per_token_overhead_s * n
    if p is m._pass:
        t_over = t_over + (prm.verify_per_seq_overhead_s * b if n > b else 0.0)
    return _fmax(t_mem, t_compute) + t_comm + t_over


def _eagle_pass(model: ModelSpec, tp: int, p: RooflineParams) -> _Pass:
    """TLT/EAGLE drafter: feature-fusion fc (2h->h), one decoder layer, the target's lm head."""
    layer = model.attn_params_per_layer() + 3 * model.hidden * model.ffn
    vocab = p.eagle_vocab or model.vocab
    params = layer + 2 * model.hidden**2 + vocab * model.hidden
    one_layer = dataclasses.replace(model, layers=1)
    return _Pass(
        dense_bytes=params * p.bytes_per_param / tp,
        expert_bytes=0.0,
        moe_layers=0,
        num_experts=0,
        top_k=0,
        matmul_params=params,
        attn_coeff=one_layer.attn_flops_per_context_token(),
        kv_bytes=_kv_bytes_per_gpu(one_layer, tp, p.kv_bytes_per_elem),
        allreduces=2 if tp > 1 else 0,
        hidden=model.hidden,
        overhead_s=p.draft_step_overhead_s,
    )


class RooflineCostModel:
    """Roofline over architecture and datasheet, plus fitted overheads (see RooflineParams)."""

    def __init__(
        self,
        model: ModelSpec,
        gpu: GPUSpec,
        tp: int,
        params: RooflineParams = DEFAULT_PARAMS,
        gpu_mem_util: float = 0.9,
        weights: str = "bf16",
    ) -> None:
        self.model, self.gpu, self.tp, self.params = model, gpu, tp, params
        self.gpu_mem_util = gpu_mem_util
        self.weights = weights
        # FP8 weights: one byte per parameter, matmuls at the FP8 peak (module docstring)
        self._fp8 = weights == "fp8"
        bpp = WEIGHT_FORMATS[weights] if self._fp8 else params.bytes_per_param
        self._matmul_flops = gpu.fp8_flops if self._fp8 and gpu.fp8_flops > 0 else gpu.bf16_flops
        # c_T: the parameter's, else the platform's (RooflineParams.per_seq_overhead_s)
        seq = params.per_seq_overhead_s
        self.per_seq_overhead_s = gpu.per_seq_overhead_s if seq is None else seq
        overhead = params.iteration_overhead_s + (params.tp_iteration_overhead_s if tp > 1 else 0)
        self._pass = _model_pass(model, tp, params, overhead, bpp)
        self.weight_bytes_per_gpu = self._weight_bytes_per_gpu(bpp)
        free = gpu.hbm_bytes * gpu_mem_util - self.weight_bytes_per_gpu
        if free <= 0:
            raise CostModelError(
                f"model {model.name} ({self.weight_bytes_per_gpu / 1e9:.1f} GB/GPU at {self._layout_name()}) "
                f"does not fit in {gpu_mem_util:.0%} of {gpu.name} ({gpu.hbm_bytes / 1e9:.0f} GB)"
            )
        self.kv_capacity_tokens = self._kv_capacity(free)
        # what each running sequence holds in sliding-window layers, in those tokens
        self.kv_window_tokens = model.window_kv_tokens()
        self._draft_models: dict[str, RooflineCostModel] = {}
        self._drafter_passes: dict[str, tuple[RooflineParams, _Pass, _Pass, float]] = {}
        self._affine_cache: dict[tuple[float, float], tuple[float, float, float, float, float]] = {}

    def _weight_bytes_per_gpu(self, bytes_per_param: float) -> float:
        return self.model.weight_bytes(bytes_per_param) / self.tp

    def _kv_capacity(self, free_bytes_per_gpu: float) -> int:
        return int(free_bytes_per_gpu // self._pass.kv_bytes)

    def _layout_name(self) -> str:
        return f"tp={self.tp}"

    def _terms(
        self,
        p: _Pass,
        num_seqs: ArrayLike,
        new_tokens: ArrayLike,
        kv_read_tokens: ArrayLike,
        attn_context: ArrayLike,
        weight_scale: float = 1.0,
    ) -> tuple[np.ndarray, ...]:
        """(memory, compute, communication, overhead) seconds of pass `p`.

        attn_context is the context each query token attends to (per sequence).
        """
        prm, gpu, tp = self.params, self.gpu, self.tp
        b = np.asarray(num_seqs, dtype=np.float64)
        n = np.asarray(new_tokens, dtype=np.float64)
        # The dense weights as a scalar: the same sums as an array of them (x + 0.0 is x),
        # broadcast by `kv`, which has `n`'s shape.
        weights: np.ndarray | float = p.dense_bytes * weight_scale
        if p.moe_layers:
            touched = p.num_experts * -np.expm1(n * math.log1p(-p.top_k / p.num_experts))
            weights = weights + p.moe_layers * touched * p.expert_bytes * weight_scale
        kv_read = np.asarray(kv_read_tokens, dtype=np.float64)
        if prm.kv_read_eff != 1.0:  # (x * 1.0 is x)
            kv_read = kv_read * prm.kv_read_eff
        kv = (kv_read + n * p.kv_write) * p.kv_bytes
        t_mem = (weights + kv) / (gpu.hbm_bw * prm.hbm_bw_eff)
        if self._fp8 and p is self._pass:  # matmuls at the FP8 peak, attention at BF16
            t_compute = (2.0 * n * p.matmul_params / tp) / (self._matmul_flops * prm.compute_eff) + (
                n * p.attn_coeff * np.asarray(attn_context) / tp
            ) / (gpu.bf16_flops * prm.compute_eff)
        else:
            flops = n * (2.0 * p.matmul_params + p.attn_coeff * np.asarray(attn_context)) / tp
            t_compute = flops / (gpu.bf16_flops * prm.compute_eff)
        # (x * hidden) * 2.0 as x * (hidden * 2.0): doubling is exact either way
        ring = 2.0 * (tp - 1) / tp * n * (p.hidden * 2.0)
        latency = gpu.allreduce_latency_s if prm.allreduce_latency_s is None else prm.allreduce_latency_s
        per_ar = latency + ring / (gpu.nvlink_bw / 2 * prm.nvlink_eff)
        t_comm = p.allreduces * per_ar
        t_over = p.overhead_s + self.per_seq_overhead_s * b + prm.per_token_overhead_s * n
        # verification of drafted tokens by the target (with no such overhead, the term adds
        # 0.0 * b = 0.0 to a positive overhead: nothing)
        if p is self._pass and prm.verify_per_seq_overhead_s != 0.0:
            t_over = t_over + np.where(n > b, prm.verify_per_seq_overhead_s * b, 0.0)
        return t_mem, t_compute, t_comm, t_over

    def _time(
        self,
        p: _Pass,
        num_seqs: ArrayLike,
        new_tokens: ArrayLike,
        kv_read_tokens: ArrayLike,
        attn_context: ArrayLike,
        weight_scale: float = 1.0,
    ) -> np.ndarray:
        t_mem, t_compute, t_comm, t_over = self._terms(
            p, num_seqs, new_tokens, kv_read_tokens, attn_context, weight_scale
        )
        return np.maximum(t_mem, t_compute) + t_comm + t_over

    def _context_affine(self, b: float, n: float) -> tuple[float, float, float, float, float]:
        """For fixed batch and query tokens, memory and compute time are affine in the
        context: (mem0, mem1, comp0, comp1, rest) with t = max(mem0 + mem1*ctx,
        comp0 + comp1*ctx) + rest. The engine calls with scalar b, n and thousands of
        contexts, so this keeps the per-call work to a few array operations."""
        key = (b, n)
        hit = self._affine_cache.get(key)
        if hit is not None:
            return hit
        terms0 = self._terms(self._pass, b, n, 0.0, 0.0)
        terms1 = self._terms(self._pass, b, n, 1.0, 1.0 / max(b, 1.0))
        mem0, comp0, comm, over = (float(x) for x in terms0)
        out = (mem0, float(terms1[0]) - mem0, comp0, float(terms1[1]) - comp0, comm + over)
        if len(self._affine_cache) < 65536:
            self._affine_cache[key] = out
        return out

    def iteration_time(
        self, num_seqs: ArrayLike, new_tokens: ArrayLike, context_tokens: ArrayLike
    ) -> np.ndarray:
        if self.model.windowed:  # sliding layers read at most a window per sequence
            context_tokens = self._attended(num_seqs, context_tokens)
        if type(context_tokens) in _SCALARS and type(num_seqs) in _SCALARS and type(new_tokens) in _SCALARS:
            # Policies ask one scalar at a time, often dozens per event: plain float
            # arithmetic is the same IEEE result at a tenth of numpy's per-call cost.
            mem0, mem1, comp0, comp1, rest = self._context_affine(_scalar(num_seqs), _scalar(new_tokens))
            c = _scalar(context_tokens)
            return np.float64(max(mem0 + mem1 * c, comp0 + comp1 * c) + rest)  # type: ignore[return-value]
        if np.ndim(num_seqs) == 0 and np.ndim(new_tokens) == 0:
            mem0, mem1, comp0, comp1, rest = self._context_affine(_scalar(num_seqs), _scalar(new_tokens))
            ctx = np.asarray(context_tokens, dtype=np.float64)
            return np.maximum(mem0 + mem1 * ctx, comp0 + comp1 * ctx) + rest
        ctx = np.asarray(context_tokens, dtype=np.float64)
        per_seq_ctx = ctx / np.maximum(np.asarray(num_seqs, dtype=np.float64), 1.0)
        return self._time(self._pass, num_seqs, new_tokens, ctx, per_seq_ctx)

    def _attended(self, num_seqs: ArrayLike, context_tokens: ArrayLike) -> Any:
        """`ModelSpec.attended_context` of a batch, elementwise (scalars stay floats)."""
        m = self.model
        if type(context_tokens) in _SCALARS and type(num_seqs) in _SCALARS:
            return m.attended_context(_scalar(context_tokens), _scalar(num_seqs))
        ctx = np.asarray(context_tokens, dtype=np.float64)
        return ctx + np.minimum(ctx, np.asarray(num_seqs, dtype=np.float64) * m.window) * m.window_share

    def _prefill_attended(self, tokens: Any) -> Any:
        """Keys a prompt's query attends to on average in the context layers' terms: t/2
        (causal), plus in each sliding layer t/2 up to the window and W - W^2/(2t) past it."""
        m = self.model
        ratio = m.window_share
        half = tokens / 2.0
        if type(tokens) in _SCALARS:
            past = m.window - m.window * m.window / (2.0 * max(tokens, 1.0))
            return half + (half if tokens <= m.window else past) * ratio
        t = np.asarray(tokens, dtype=np.float64)
        past = m.window - m.window * m.window / (2.0 * np.maximum(t, 1.0))
        return half + np.where(t <= m.window, half, past) * ratio

    def prefill_time(self, tokens: ArrayLike) -> np.ndarray:
        """One prompt of `tokens` tokens; causal attention sees tokens/2 keys on average."""
        if self.model.windowed:
            t = _scalar(tokens) if type(tokens) in _SCALARS else np.asarray(tokens, dtype=np.float64)
            return self._time(self._pass, 1.0, t, 0.0, self._prefill_attended(t))
        if type(tokens) in _SCALARS and self._scalar_terms and not self._pass.moe_layers:
            # a worker's prefill pass before each plan that admitted requests: plain floats,
            # the same IEEE operations as the numpy form below
            tf = _scalar(tokens)
            return np.float64(_scalar_pass_time(self, self._pass, 1.0, tf, 0.0, tf / 2.0, 1.0))  # type: ignore[return-value]
        t = np.asarray(tokens, dtype=np.float64)
        return self._time(self._pass, 1.0, t, 0.0, t / 2.0)

    def draft_time(
        self, drafter: str, num_seqs: ArrayLike, context_tokens: ArrayLike, gamma: ArrayLike
    ) -> np.ndarray:
        prm = self.params
        if (
            drafter in ("suffix", "history") and type(num_seqs) in _SCALARS and type(gamma) in _SCALARS
        ):  # model-free tree drafting: no context term
            bf, gf = _scalar(num_seqs), _scalar(gamma)
            return np.float64(bf * (prm.tree_s_per_seq + prm.tree_s_per_token * gf) * float(gf > 0))  # type: ignore[return-value]
        b = np.asarray(num_seqs, dtype=np.float64)
        ctx = np.asarray(context_tokens, dtype=np.float64)
        g = np.asarray(gamma, dtype=np.float64)
        if drafter in ("suffix", "history"):  # no context term (Seer's drafter, every plan)
            return b * (prm.tree_s_per_seq + prm.tree_s_per_token * g) * (g > 0)
        per_seq_ctx = ctx / np.maximum(b, 1.0)
        if drafter == "ngram":
            return b * (prm.ngram_s_per_seq + prm.ngram_s_per_context_token * per_seq_ctx) * (g > 0)
        if drafter == "w4-self" and self.model.windowed:  # the target's own sliding layers
            ctx = np.asarray(self._attended(b, ctx), dtype=np.float64)
            per_seq_ctx = ctx / np.maximum(b, 1.0)
        if drafter in ("w4-self", "eagle"):
            p, scale = self._drafter_pass(drafter)
            if self._scalar_terms and not p.moe_layers and b.ndim == 0 and ctx.ndim == 0 and g.ndim == 0:
                # a policy's one scalar question: plain floats, the same IEEE operations
                bf, cf = float(b), float(ctx)
                t = _scalar_pass_time(self, p, bf, bf, cf, cf / _fmax(bf, 1.0), scale)
                gf = float(g)
                cycle = prm.spec_cycle_overhead_s if gf > 0 and bf > 0 else 0.0
                return np.float64(gf * t + cycle)  # type: ignore[return-value]
            step = self._time(p, b, b, ctx, per_seq_ctx, scale)
        elif drafter.startswith("model:"):
            step = self._draft_model(drafter[len("model:") :]).iteration_time(b, b, ctx)
        else:
            raise CostModelError(
                f"unknown drafter {drafter!r}; known: ngram, suffix, history, "
                "w4-self, eagle, model:<catalogue name>"
            )
        return g * step + np.where((g > 0) & (b > 0), prm.spec_cycle_overhead_s, 0.0)

    def _drafter_pass(self, drafter: str) -> tuple[_Pass, float]:
        """The pass and weight scale of a model-based drafter ("w4-self", "eagle"), built
        once per parameter set (a policy prices one at every tick)."""
        prm = self.params
        hit = self._drafter_passes.get(drafter)
        if hit is None or hit[0] is not prm or hit[1] is not self._pass:
            if drafter == "w4-self":
                p, scale = (
                    dataclasses.replace(self._pass, overhead_s=prm.draft_step_overhead_s),
                    (prm.w4_weight_ratio * prm.eta_d),
                )
            else:
                p, scale = _eagle_pass(self.model, self.tp, prm), 1.0
            hit = self._drafter_passes[drafter] = (prm, self._pass, p, scale)
        return hit[2], hit[3]

    @property
    def _scalar_terms(self) -> bool:
        """Whether `_scalar_pass_time` prices like this model's `_time` (not overridden)."""
        cls = type(self)
        return cls._terms is RooflineCostModel._terms and cls._time is RooflineCostModel._time

    def _draft_model(self, name: str) -> RooflineCostModel:
        if name not in self._draft_models:
            prm = dataclasses.replace(self.params, iteration_overhead_s=self.params.draft_step_overhead_s)
            self._draft_models[name] = RooflineCostModel(
                get_model(name), self.gpu, self.params.draft_model_tp, prm, self.gpu_mem_util
            )
        return self._draft_models[name]

    def breakdown(self, num_seqs: float, new_tokens: float, context_tokens: float) -> dict[str, float]:
        """Terms of one iteration, for reports and regime tests (memory- vs compute-bound)."""
        if self.model.windowed:
            context_tokens = float(self._attended(num_seqs, context_tokens))
        ctx_seq = context_tokens / max(num_seqs, 1.0)
        terms = self._terms(self._pass, num_seqs, new_tokens, context_tokens, ctx_seq)
        mem, compute, comm, over = (float(t) for t in terms)
        return {
            "memory_s": mem,
            "compute_s": compute,
            "comm_s": comm,
            "overhead_s": over,
            "total_s": max(mem, compute) + comm + over,
        }


class DPAttentionRoofline(RooflineCostModel):
    """Roofline of a worker of `dp` GPUs with data-parallel attention and expert parallelism
    over them (law in the module docstring): each GPU reads the attention weights whole, a
    1/dp shard of the rest, and only its own sequences' KV, so its KV read scales with
    1/dp and the worker's KV capacity with dp; each MoE layer pays a dispatch and a combine
    all-to-all, over the RDMA NICs when `spans_nodes`. Drafter passes are priced as in the
    parent (their own TP1 passes)."""

    def __init__(
        self,
        model: ModelSpec,
        gpu: GPUSpec,
        dp: int,
        params: RooflineParams = DEFAULT_PARAMS,
        gpu_mem_util: float = 0.9,
        weights: str = "bf16",
        spans_nodes: bool = False,
    ) -> None:
        if not model.is_moe:
            raise CostModelError(
                f"cluster dp{dp}: data-parallel attention is modelled with expert parallelism, "
                f"for MoE models; model {model.name} is dense (use a tp layout)"
            )
        self.dp = dp
        self._attn_params = float(model.attn_params_per_layer() * model.layers)
        bpp = WEIGHT_FORMATS[weights] if weights == "fp8" else params.bytes_per_param
        self._replicated_bytes = (self._attn_params + 2.0 * model.hidden * model.layers) * bpp
        super().__init__(model, gpu, 1, params, gpu_mem_util, weights)
        sharded = model.non_expert_param_count() * bpp - self._replicated_bytes
        self._pass = dataclasses.replace(
            self._pass,
            dense_bytes=self._replicated_bytes + sharded / dp,
            expert_bytes=model.expert_params() * (model.expert_bytes_per_param or bpp) / dp,
            allreduces=0,
            overhead_s=params.iteration_overhead_s + params.tp_iteration_overhead_s,
        )
        self._a2a_bw = gpu.rdma_bw if spans_nodes else gpu.nvlink_bw / 2 * params.nvlink_eff
        self.spans_nodes = spans_nodes

    def _weight_bytes_per_gpu(self, bytes_per_param: float) -> float:
        rest = self.model.weight_bytes(bytes_per_param) - self._replicated_bytes
        return self._replicated_bytes + rest / self.dp

    def _kv_capacity(self, free_bytes_per_gpu: float) -> int:
        return self.dp * int(free_bytes_per_gpu // self._pass.kv_bytes)

    def _layout_name(self) -> str:
        return f"dp={self.dp}"

    def _terms(
        self,
        p: _Pass,
        num_seqs: ArrayLike,
        new_tokens: ArrayLike,
        kv_read_tokens: ArrayLike,
        attn_context: ArrayLike,
        weight_scale: float = 1.0,
    ) -> tuple[np.ndarray, ...]:
        if p is not self._pass:
            return super()._terms(p, num_seqs, new_tokens, kv_read_tokens, attn_context, weight_scale)
        prm, gpu = self.params, self.gpu
        b = np.asarray(num_seqs, dtype=np.float64)
        n = np.asarray(new_tokens, dtype=np.float64)
        seqs = np.maximum(b, 1.0)
        share = np.ceil(seqs / self.dp) / seqs  # the busiest rank's fraction of the sequences
        weights = p.dense_bytes * weight_scale + np.zeros_like(n)
        touched = p.num_experts * -np.expm1(n * math.log1p(-p.top_k / p.num_experts))
        weights = weights + p.moe_layers * touched * p.expert_bytes * weight_scale
        kv_read = np.asarray(kv_read_tokens, dtype=np.float64)
        kv = share * (kv_read * prm.kv_read_eff + n * p.kv_write) * p.kv_bytes
        t_mem = (weights + kv) / (gpu.hbm_bw * prm.hbm_bw_eff)
        rank_n = share * n
        matmul = 2.0 * (p.matmul_params - self._attn_params) * n / self.dp + 2.0 * self._attn_params * rank_n
        attention = rank_n * p.attn_coeff * np.asarray(attn_context)
        t_compute = matmul / (self._matmul_flops * prm.compute_eff) + attention / (
            gpu.bf16_flops * prm.compute_eff
        )
        latency = gpu.allreduce_latency_s if prm.allreduce_latency_s is None else prm.allreduce_latency_s
        a2a = rank_n * p.top_k * p.hidden / self._a2a_bw
        t_comm = p.moe_layers * (np.maximum(latency, a2a * 1.0) + np.maximum(latency, a2a * 2.0))
        t_over = p.overhead_s + share * (self.per_seq_overhead_s * b + prm.per_token_overhead_s * n)
        t_over = t_over + np.where(n > b, prm.verify_per_seq_overhead_s * share * b, 0.0)
        return t_mem, t_compute, t_comm, t_over


def nnls(a: np.ndarray, y: np.ndarray, max_iter: int = 100) -> np.ndarray:
    """Lawson-Hanson active-set NNLS: min ||a x - y|| s.t. x >= 0 (scipy is not a dependency)."""
    scale = np.linalg.norm(a, axis=0)
    scale[scale == 0] = 1.0
    a = a / scale
    x = np.zeros(a.shape[1])
    passive = np.zeros(a.shape[1], dtype=bool)
    for _ in range(max_iter):
        grad = a.T @ (y - a @ x)
        if passive.all() or grad[~passive].max(initial=-np.inf) <= 1e-12 * max(1.0, abs(y).max()):
            break
        passive[np.argmax(np.where(passive, -np.inf, grad))] = True
        while True:
            z = np.zeros_like(x)
            z[passive] = np.linalg.lstsq(a[:, passive], y, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            neg = passive & (z <= 0)
            step = np.min(x[neg] / (x[neg] - z[neg]))
            x = x + step * (z - x)
            passive &= x > 1e-15
    return x / scale


def _identifiable(x: np.ndarray) -> list[int]:
    """Columns of x that are not all zero and repeat no earlier kept column."""
    keep: list[int] = []
    for j in range(x.shape[1]):
        if not any(np.allclose(x[:, j], x[:, k]) for k in keep) and x[:, j].any():
            keep.append(j)
    return keep


# The largest number a profile may hold: 1e15 bytes, tokens or seconds is past any GPU;
# beyond it a typo's 1e308 overflows the fit (its squares are infinite).
PROFILE_MAX_VALUE = 1e15


def _fit_affine(rows: np.ndarray) -> np.ndarray:
    """NNLS of time on [1, num_seqs, new_tokens, context]; rows [1, b, n, ctx, t].

    Columns that repeat an earlier one (decode: new_tokens == num_seqs; prefill: num_seqs
    == 1 == intercept) cannot be told apart, so they are dropped and get coefficient 0.
    """
    x, y = rows[:, :4], rows[:, 4]
    keep = _identifiable(x)
    coef = np.zeros(4)
    coef[keep] = nnls(x[:, keep], y)
    return coef


def _fit_local(rows: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Weighted fit of time on [1, b, n, ctx] with non-negative slopes around the weighted
    centre of the rows: the intercept there is a (positive) cost, so it is not constrained
    at zero load, where a superlinear cost's tangent has a negative intercept."""
    x, y = rows[:, :4], rows[:, 4]
    keep = _identifiable(x)
    slopes = [j for j in keep if j > 0]
    w = weights / weights.sum()
    centre = w @ x
    a = np.column_stack([np.ones(len(x)), x[:, slopes] - centre[slopes]])
    sw = np.sqrt(w)[:, None]
    sol = nnls(a * sw, y * sw[:, 0])
    coef = np.zeros(4)
    coef[slopes] = sol[1:]
    coef[0] = sol[0] - float(coef[slopes] @ centre[slopes])
    return coef


# Bandwidths of the local fits (in natural-log units of num_seqs and of gamma): a query at
# batch b weighs a measurement at batch b' by exp(-ln(b'/b)**2 / (2 w**2)). At 0.25 a
# measured batch size is priced from its own rows (its neighbours a factor of 2 away weigh
# 0.02: enough to fix the slope in b) and between measured sizes the law interpolates.
LOCAL_BATCH_WIDTH = 0.25
LOCAL_GAMMA_WIDTH = 0.25


class _LocalLaw:
    """Affine law t = c0 + c1*b + c2*n + c3*ctx refitted around each queried batch size b
    (and draft length gamma, for verify rows measured at several): weighted NNLS over every
    measurement of the kind, weights from a kernel in log b (log gamma), residuals relative
    to the measured time, slopes non-negative. Measured costs are not one affine law over the whole grid (a
    32-sequence verify with every slot filled is not 32x a 1-sequence one on a CPU), and a
    single fit in absolute seconds is dominated by the largest shapes: it mispriced the
    16-sequence verify iterations of a live CPU run by +34% to +137%. Locally the law is
    affine; on data that is affine globally every local fit is the global law.

    Outside the measured batch (gamma) range the fit at the nearest end is used, so the
    law extrapolates linearly from there."""

    _MAX_CACHE = 1 << 16

    def __init__(self, rows: np.ndarray, gammas: np.ndarray) -> None:
        self.rows = rows  # [1, b, n, ctx, t]
        self.gammas = gammas
        self.log_b = np.log(np.maximum(rows[:, 1], 1.0))
        self.b_range = (float(rows[:, 1].min()), float(rows[:, 1].max()))
        measured_g = gammas[gammas > 0]
        self.g_range = (float(measured_g.min()), float(measured_g.max())) if len(measured_g) else None
        self.rel = 1.0 / np.square(rows[:, 4])
        self._cache: dict[tuple[float, float | None], np.ndarray] = {}

    def coef(self, b: float, gamma: float | None = None) -> np.ndarray:
        b = min(max(float(b), self.b_range[0]), self.b_range[1])
        if gamma is not None:
            gamma = min(max(float(gamma), self.g_range[0]), self.g_range[1]) if self.g_range else None
        key = (b, gamma)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        z = (self.log_b - math.log(max(b, 1.0))) / LOCAL_BATCH_WIDTH
        if gamma is not None:
            z2 = np.log(np.maximum(self.gammas, 1.0) / gamma) / LOCAL_GAMMA_WIDTH
            z = np.sqrt(np.square(z) + np.square(z2))
        # relative to the nearest rows, so that far queries do not underflow every weight
        w = np.exp(-0.5 * (np.square(z) - np.square(z).min())) * self.rel
        out = _fit_local(self.rows, w)
        if len(self._cache) < self._MAX_CACHE:
            self._cache[key] = out
        return out

    def __call__(self, b: ArrayLike, n: ArrayLike, ctx: ArrayLike, gamma: float | None = None) -> np.ndarray:
        b_arr = np.asarray(b, dtype=np.float64)
        n_arr = np.asarray(n, dtype=np.float64)
        ctx_arr = np.asarray(ctx, dtype=np.float64)
        if b_arr.ndim == 0:
            c = self.coef(float(b_arr), gamma)
            return c[0] + c[1] * b_arr + c[2] * n_arr + c[3] * ctx_arr
        uniq, inv = np.unique(b_arr, return_inverse=True)
        cs = np.stack([self.coef(float(u), gamma) for u in uniq])[inv.reshape(b_arr.shape)]
        return cs[..., 0] + cs[..., 1] * b_arr + cs[..., 2] * n_arr + cs[..., 3] * ctx_arr


_FIELDS = ("num_seqs", "new_tokens", "context_tokens", "gamma", "time_s")
_BASE_KINDS = ("decode", "verify", "prefill")


class ProfiledCostModel:
    """Measured laws per kind (format in the module docstring): `coefficients` holds one
    global affine fit per kind (a summary); prices come from local fits around each batch
    size (`_LocalLaw`) when the measurements are given, as `from_dict` does."""

    def __init__(
        self,
        coefficients: dict[str, np.ndarray],
        kv_capacity_tokens: int,
        weight_bytes_per_gpu: float,
        meta: dict[str, Any] | None = None,
        measurements: dict[str, np.ndarray] | None = None,
    ) -> None:
        if "decode" not in coefficients:
            raise CostModelError("profile: needs 'decode' measurements")
        self.coefficients = {k: np.asarray(c, dtype=np.float64) for k, c in coefficients.items()}
        self.kv_capacity_tokens = int(kv_capacity_tokens)
        self.weight_bytes_per_gpu = float(weight_bytes_per_gpu)
        self.meta = dict(meta or {})
        # measurements[kind]: rows [1, b, n, ctx, t, gamma]
        self._local = {
            k: _LocalLaw(np.asarray(r, np.float64)[:, :5], np.asarray(r, np.float64)[:, 5])
            for k, r in (measurements or {}).items()
        }

    def _law(
        self, kind: str, b: ArrayLike, n: ArrayLike, ctx: ArrayLike, gamma: float | None = None
    ) -> np.ndarray:
        local = self._local.get(kind)
        if local is not None:
            return local(b, n, ctx, gamma)
        c = self.coefficients[kind]
        return (
            c[0]
            + c[1] * np.asarray(b, dtype=np.float64)
            + c[2] * np.asarray(n, np.float64)
            + c[3] * np.asarray(ctx, dtype=np.float64)
        )

    @property
    def verify_gammas(self) -> tuple[int, ...]:
        """Draft lengths the verify measurements were taken at."""
        local = self._local.get("verify")
        return tuple(sorted({int(g) for g in local.gammas})) if local is not None else ()

    def iteration_time(
        self,
        num_seqs: ArrayLike,
        new_tokens: ArrayLike,
        context_tokens: ArrayLike,
        gamma: float | None = None,
    ) -> np.ndarray:
        """`gamma` (optional, the widest draft in the batch) selects the verify law of that
        draft length when several were measured: an engine that pads its verify forward to
        the widest request pays for gamma + 1 query slots per sequence, however few of them
        the drafter filled. Without it the verify measurements of all draft lengths are pooled."""
        decode = self._law("decode", num_seqs, new_tokens, context_tokens)
        if "verify" not in self.coefficients:
            return decode
        verify = self._law("verify", num_seqs, new_tokens, context_tokens, gamma)
        return np.where(np.asarray(new_tokens) > np.asarray(num_seqs), verify, decode)

    def prefill_time(self, tokens: ArrayLike) -> np.ndarray:
        kind = next(k for k in ("prefill", "verify", "decode") if k in self.coefficients)
        return self._law(kind, 1.0, tokens, tokens)

    def missing_drafters(self, drafters: Iterable[str]) -> list[str]:
        """The measurement kinds (`draft:<drafter>`) of `drafters` this profile lacks: a run
        that drafts with one of them cannot be priced (checked before it starts)."""
        return sorted({f"draft:{d}" for d in drafters} - set(self.coefficients))

    def unpriced(self, kind: str) -> str:
        """The one-line error of a run that drafts with `kind` (`draft:<drafter>`), which
        this profile has no measurements of."""
        have = ", ".join(k for k in self.coefficients if k.startswith("draft:")) or "none"
        source = self.meta.get("source") or "profile"
        return (
            f"profile {source}: no {kind!r} measurements (has: {have}); "
            "calibrate the drafter the policy uses or drop --profile"
        )

    def draft_time(
        self, drafter: str, num_seqs: ArrayLike, context_tokens: ArrayLike, gamma: ArrayLike
    ) -> np.ndarray:
        kind = f"draft:{drafter}"
        if kind not in self.coefficients:
            raise CostModelError(self.unpriced(kind))
        step = self._law(kind, num_seqs, num_seqs, context_tokens)
        return np.asarray(gamma, dtype=np.float64) * step

    @classmethod
    def from_json(cls, path: str | Path) -> ProfiledCostModel:
        return cls.from_dict(read_profile(path), source=Path(path).name)

    @classmethod
    def from_dict(cls, doc: Any, source: str = "<dict>") -> ProfiledCostModel:
        def bad(field: str, why: str) -> CostModelError:
            return CostModelError(f"profile {source}: field {field!r} {why}")

        def number(field: str, v: Any, positive: bool) -> None:
            """`v` must be a JSON number (no bool) from 0 (excluded if `positive`) to the cap."""
            ok = not isinstance(v, bool) and isinstance(v, int | float) and 0 <= v <= PROFILE_MAX_VALUE
            if not ok or (positive and v <= 0):  # (NaN fails; an int of any size compares)
                least = "a positive" if positive else "a non-negative"
                shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:37] + "..."
                raise bad(field, f"={shown} must be {least} number up to {PROFILE_MAX_VALUE:g}")

        if not isinstance(doc, dict) or doc.get("format") != "simctl-profile/1":
            raise bad("format", "must be 'simctl-profile/1'")
        tp = doc.get("tp")
        if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
            raise bad("tp", f"={tp!r} must be a positive integer")
        cap = doc.get("kv_capacity_tokens")
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
            raise bad("kv_capacity_tokens", f"={cap!r} must be a positive integer")
        number("kv_capacity_tokens", cap, True)
        rows = doc.get("measurements")
        if not isinstance(rows, list) or not rows:
            raise bad("measurements", "must be a non-empty list")
        grouped: dict[str, list[list[float]]] = {}
        for i, row in enumerate(rows):
            kind = row.get("kind") if isinstance(row, dict) else None
            if not isinstance(kind, str) or not (kind in _BASE_KINDS or kind.startswith("draft:")):
                raise bad(
                    f"measurements[{i}].kind", f"={kind!r} must be decode, verify, prefill or draft:<drafter>"
                )
            vals = [row.get(f) for f in _FIELDS]
            for f, v in zip(_FIELDS, vals, strict=True):
                number(f"measurements[{i}].{f}", v, f in ("time_s", "num_seqs"))
            b, n, ctx, gamma, t = (float(v) for v in vals)
            if kind.startswith("draft:"):
                if gamma < 1:
                    raise bad(f"measurements[{i}].gamma", f"={vals[3]!r} must be >= 1 for drafts")
                n, t = b, t / gamma
            grouped.setdefault(kind, []).append([1.0, b, n, ctx, t, gamma])
        try:
            coefficients = {k: _fit_affine(np.array(v)[:, :5]) for k, v in grouped.items()}
        except (np.linalg.LinAlgError, ValueError, RuntimeError) as exc:  # (nnls failing to converge)
            raise bad("measurements", f"cannot be fitted ({exc})") from None
        if "decode" not in coefficients:
            raise bad("measurements", "needs at least one 'decode' row")
        weight = doc.get("weight_bytes_per_gpu")
        if weight is None:
            try:
                weight = get_model(str(doc.get("model"))).weight_bytes() / tp
            except ValueError:
                raise bad("weight_bytes_per_gpu", "is required for a model outside the catalogue") from None
        else:
            number("weight_bytes_per_gpu", weight, True)
        meta = {k: doc.get(k) for k in ("backend", "model", "device", "tp")}
        return cls(
            coefficients,
            cap,
            float(weight),
            meta | {"source": source},
            {k: np.array(v) for k, v in grouped.items()},
        )


def load_cost_model(
    model: ModelSpec | str,
    cluster: ClusterSpec,
    profile_path: str | Path | None = None,
    params: RooflineParams = DEFAULT_PARAMS,
) -> CostModel:
    """A measured profile when one is given (checked against model and TP), else roofline:
    the DP-attention + EP one for a cluster of `dp` > 1 workers."""
    spec = get_model(model) if isinstance(model, str) else model
    if profile_path is None:
        if cluster.dp > 1:
            return DPAttentionRoofline(
                spec,
                cluster.gpu,
                cluster.dp,
                params,
                cluster.gpu_mem_util,
                cluster.weights,
                spans_nodes=cluster.spans_nodes,
            )
        return RooflineCostModel(spec, cluster.gpu, cluster.tp, params, cluster.gpu_mem_util, cluster.weights)
    return profile_cost_model(read_profile(profile_path), Path(profile_path).name, spec, cluster)


def read_profile(path: str | Path) -> Any:
    """A profile file's parsed JSON (checked by `profile_cost_model`); CostModelError naming
    the file when it cannot be read."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except RecursionError:
        raise CostModelError(f"profile {path.name}: cannot read: JSON nested too deeply") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CostModelError(f"profile {path.name}: cannot read: {exc}") from None


def profile_cost_model(doc: Any, name: str, model: ModelSpec, cluster: ClusterSpec) -> ProfiledCostModel:
    """The measured profile of parsed JSON `doc` (named `name` in messages), checked against
    the model and TP it prices: a sweep sends the document to its tasks, which need not see
    the file."""
    prof = ProfiledCostModel.from_dict(doc, source=name)
    check_profile(prof, name, model, cluster)
    return prof


def check_profile(prof: ProfiledCostModel, name: str, model: ModelSpec, cluster: ClusterSpec) -> None:
    """CostModelError where profile `prof` (named `name`) was not measured for `model` on
    the cluster's workers (their TP; data-parallel workers are not profiled)."""
    if cluster.dp > 1:
        raise CostModelError(
            f"profile {name}: measured on tp={prof.meta.get('tp')} workers, but the cluster runs "
            f"dp{cluster.dp} data-parallel attention workers; drop --profile or use a tp cluster"
        )
    if prof.meta.get("tp") != cluster.tp:
        raise CostModelError(
            f"profile {name}: field 'tp'={prof.meta.get('tp')} but the cluster runs tp={cluster.tp}"
        )
    try:
        same = get_model(str(prof.meta.get("model"))).same_architecture(model)
    except ValueError:
        same = True  # uncatalogued model: trust the caller
    if not same:
        raise CostModelError(
            f"profile {name}: field 'model'={prof.meta.get('model')!r} but the run simulates {model.name}"
        )
