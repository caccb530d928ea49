"""End-to-end RL step time = rollout makespan + the phases after it.

Reward, training and weight sync come from the trace metadata when it has them. When it
does not, a documented model fills in: training (policy forward+backward = 6 N FLOPs per
token, plus old-policy and reference log-prob forwards = 2 x 2 N) over the whole cluster
at a model FLOPs utilisation of 35% (typical of Megatron/FSDP RL trainers), reward by a
rule-based verifier (negligible), and weight sync of the BF16 weights over NVLink/RDMA.
Overlap (RLHFuse): GPU-seconds that workers spent in the trainer role during rollout are
work already done, so only the remainder follows the makespan.
"""

from __future__ import annotations

from dataclasses import dataclass

from simctl.traces.schema import StepTiming

TRAIN_FLOPS_PER_PARAM_TOKEN = 6.0 + 4.0
TRAIN_MFU = 0.35


@dataclass(frozen=True)
class PostRollout:
    reward_s: float
    train_s: float
    weight_sync_s: float
    source: str  # "trace" or "model"


def post_rollout_time(
    timing: StepTiming,
    tokens: int,
    active_params: float,
    weight_bytes: float,
    total_gpus: int,
    gpu_flops: float,
    sync_bw_Bps: float,
) -> PostRollout:
    if timing.train_s is not None:
        return PostRollout(
            reward_s=timing.reward_s or 0.0,
            train_s=timing.train_s,
            weight_sync_s=timing.weight_sync_s or 0.0,
            source="trace",
        )
    train = TRAIN_FLOPS_PER_PARAM_TOKEN * active_params * tokens / (total_gpus * gpu_flops * TRAIN_MFU)
    return PostRollout(reward_s=0.0, train_s=train, weight_sync_s=weight_bytes / sync_bw_Bps, source="model")


def step_time(makespan: float, post: PostRollout, lent_gpu_s: float, total_gpus: int) -> float:
    """Makespan, then reward + training less what trainer-role GPUs did during rollout."""
    remaining = max(0.0, post.reward_s + post.train_s - lent_gpu_s / max(total_gpus, 1))
    return makespan + remaining + post.weight_sync_s
