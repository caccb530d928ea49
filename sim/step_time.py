"""End-to-end RL step time = rollout makespan + the phases after it.

Reward, training and weight sync come from the trace metadata where it has them (a live
recording or an imported log measured them), each on its own: a trace that measured reward
and sync but not training has training modelled and keeps its reward and sync. What it
does not have is modelled from the work it does, with one set of constants for every
paper and preset (calibrated in sim/calibration_points.py, "step time" points):

* training: policy forward + backward (6 N FLOPs per token) plus the old-policy and
  reference log-prob forwards (2 x 2 N), over every GPU of the cluster (colocated trainer)
  at a model-FLOPs utilisation TRAIN_MFU fitted to EfficientRollout (Kim, Lee et al.)
  Table 2: veRL (AR), Qwen2.5-7B, 8 A100, step 132.6 s - rollout 82.4 s = 50.2 s outside
  rollout, at the efficientrollout-qwen7b-8k preset's 771,473 tokens per step (prompt +
  response, mean of steps 0-99: the paper's 100-step window). Check: the same work for
  Qwen2.5-14B gives 97.4 s against the table's 221.1 - 126.6 = 94.5 s (+3%);
* reward: 0. Rule-based verifiers cost milliseconds per response, and a reward model
  "overlaps nearly completely with the rollout phase" (Seer, arXiv:2511.14617, Table 1);
* weight sync: the BF16 weights once through one GPU's inter-node link (datasheet).

Overlap (RLHFuse): GPU-seconds that workers spent in the trainer role during rollout are
work already done, so only the remainder follows the makespan.
"""

from __future__ import annotations

from dataclasses import dataclass

from simctl.traces.schema import StepTiming

TRAIN_FLOPS_PER_PARAM_TOKEN = 6.0 + 4.0  # fwd+bwd, plus old-policy and reference forwards
# Fitted (module docstring): 10 * 7.615e9 * 771,473 / (8 * 312e12 * (50.2 - 0.61 s sync)).
TRAIN_MFU = 0.475


@dataclass(frozen=True)
class PostRollout:
    reward_s: float
    train_s: float
    weight_sync_s: float
    source: str  # "trace" (training and sync measured), "model" (both modelled) or "trace+model"


def post_rollout_time(
    timing: StepTiming,
    tokens: int,
    active_params: float,
    weight_bytes: float,
    total_gpus: int,
    gpu_flops: float,
    sync_bw_Bps: float,
) -> PostRollout:
    """The phases after the rollout: each measured one from `timing`, the others modelled
    (reward, which has no model, as 0)."""
    train, sync = timing.train_s, timing.weight_sync_s
    measured = (train is not None) + (sync is not None)
    if train is None:
        train = TRAIN_FLOPS_PER_PARAM_TOKEN * active_params * tokens / (total_gpus * gpu_flops * TRAIN_MFU)
    if sync is None:
        sync = weight_bytes / sync_bw_Bps
    return PostRollout(
        reward_s=timing.reward_s if timing.reward_s is not None else 0.0,
        train_s=train,
        weight_sync_s=sync,
        source=("model", "trace+model", "trace")[measured],
    )


def step_time(makespan: float, post: PostRollout, lent_gpu_s: float, total_gpus: int) -> float:
    """Makespan, then reward + training less what trainer-role GPUs did during rollout."""
    remaining = max(0.0, post.reward_s + post.train_s - lent_gpu_s / max(total_gpus, 1))
    return makespan + remaining + post.weight_sync_s
