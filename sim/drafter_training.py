"""Ground truth for TLT's adaptive drafter: how well an EAGLE drafter matches the evolving
target, given how much spot training it received (Taming the Long-Tail, arXiv:2511.16665 §4, §6.4).

The trace's ``accept_eagle`` column is the per-token acceptance of a drafter *aligned* with
the step's target. The executor multiplies it by :func:`eagle_acceptance_scale`, which
tracks a misalignment ``e`` in [0, 1] (0 = aligned, 1 = a drafter never trained on this
target's rollouts) through the run:

    per RL step j = 0 .. k-1:
        e <- e * exp(-g_j / recovery_gpu_s)          spot training during step j's rollout
        e <- e + drift * (stale_error - e)  (if e < stale_error)   policy update after step j
    scale_k = 1 - (1 - untrained_scale) * e

Training during step j's tail lands at the stage transition, so it serves step j + 1 on;
the policy update after step j opens a small dip that the next training closes (Fig. 15).
A drafter that is never trained drifts from ``initial_error`` up to ``stale_error`` and
stays there; one that was never trained at all (e = 1) stays at ``untrained_scale``.

Calibration (accept lengths converted to per-token acceptance at draft depth 10, the
depth of TLT Table 4 and of the trace presets, with the simulator's i.i.d. model):

- untrained_scale 0.41: Table 8, EAGLE for Qwen2.5-7B before training accepts 1.57 tokens,
  after training 6.53 -> p 0.363 / 0.889.
- stale_error 0.17: Table 6, the drafter aligned with the base model accepts 4.59 on the
  RL-trained target vs 6.53 for the adaptive one -> p 0.801 / 0.889 = 0.901, i.e. a
  scale of 0.901 = 1 - 0.59 * 0.17. Fig. 16's steeper decay with draft position for the
  stale drafter is not modelled (one scalar per step).
- drift 0.02 per policy update (assumed): §6.4 "performing [training] once every 10 steps
  is sufficient to maintain accuracy" -> ten updates without training cost ~1.8% of
  per-token acceptance (~6% of accept length at p 0.85, depth 10); after ~200 steps a
  never retrained drafter is 98% of the way to Table 6's stale level.
- recovery_gpu_s 30 (assumed): Fig. 15 "rapidly recovered within a few subsequent
  drafter training iterations"; one iteration of a one-layer drafter on a TP group is a
  few GPU-seconds, so one e-fold of misalignment costs ~30 GPU-s and any spot window of
  the long tail (minutes on several GPUs) closes the dip.
- initial_error 0 (assumed): the drafter was warm-up trained on the initial target before
  RL (§6.1, OpenThoughts2 warm-up; Fig. 15 starts after warm-up). A policy that does not
  trust it simply drafts with n-gram until it has trained (TLT §5.3).

Note the TLT preset sets ``accept_eagle`` so that the `tlt` policy realises the *midpoint* of
Table 6 (5.56 tokens), not the aligned 6.53 (traces/presets.py EAGLE_ACCEPT_TLT); scale 1
therefore means "as the trace says".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class DrafterTrainingParams:
    untrained_scale: float = 0.41
    stale_error: float = 0.17
    drift: float = 0.02
    recovery_gpu_s: float = 30.0
    initial_error: float = 0.0

    def __post_init__(self) -> None:
        for name in ("untrained_scale", "stale_error", "drift", "initial_error"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"drafter training: {name}={v} must be in [0, 1]")
        if self.recovery_gpu_s <= 0:
            raise ValueError(f"drafter training: recovery_gpu_s={self.recovery_gpu_s} must be > 0")


DEFAULT_DRAFTER_PARAMS = DrafterTrainingParams()


def misalignment(train_gpu_s_per_step: Sequence[float], params: DrafterTrainingParams) -> float:
    """e after the given steps (entry j: spot-training GPU-seconds during step j)."""
    e = params.initial_error
    for g in train_gpu_s_per_step:
        e *= math.exp(-max(0.0, float(g)) / params.recovery_gpu_s)
        if e < params.stale_error:
            e += params.drift * (params.stale_error - e)
    return e


def scale_from_error(e: float, params: DrafterTrainingParams) -> float:
    return 1.0 - (1.0 - params.untrained_scale) * e


def eagle_acceptance_scale_history(
    train_gpu_s_per_step: Sequence[float], params: DrafterTrainingParams = DEFAULT_DRAFTER_PARAMS
) -> float:
    """Multiplier on accept_eagle for the step after those listed (exact history)."""
    return scale_from_error(misalignment(train_gpu_s_per_step, params), params)


def eagle_acceptance_scale(
    spot_train_gpu_s_total: float,
    step_index: int,
    params: DrafterTrainingParams = DEFAULT_DRAFTER_PARAMS,
) -> float:
    """Multiplier on accept_eagle for step `step_index` (0 = first step of the run) when
    `spot_train_gpu_s_total` GPU-seconds of spot training happened in steps before it,
    assumed spread evenly over those steps. Prefer the `_history` form when per-step
    totals are at hand: training bunched in early steps is worth less than this assumes."""
    k = max(0, int(step_index))
    per_step = spot_train_gpu_s_total / k if k else 0.0
    return eagle_acceptance_scale_history([per_step] * k, params)
