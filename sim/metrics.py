"""Per-step metrics, each defined once here (the live executor computes the same ones).

- rollout_makespan_s: time from step start until the last request finished.
- tail_time_s: time spent solely on the last 10% of requests to finish (Seer §6.2.2):
  makespan minus the completion time of the request that completes 90% of the step.
- gpu_idle_fraction: idle GPU-seconds over GPU-seconds during rollout; a worker is idle
  when it has nothing running and is not lent to training.
- mean_accept_len: tokens emitted per speculative verify iteration (incl. the bonus token);
  None when nothing was speculated.
- parts: step_time_s split into rollout (the makespan), reward, training and weight sync as
  they follow the rollout; training that trainer-role workers did during the rollout
  (RLHFuse overlap) is not counted again, so the parts add up to step_time_s.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np


def step_parts(
    makespan: float, step_time_s: float, reward_s: float, weight_sync_s: float
) -> tuple[float, float, float]:
    """(reward, train, weight sync) after the rollout, splitting step_time_s = makespan +
    max(0, reward + train - overlap) + weight sync: the overlap shortens training first,
    then reward (as sim.step_time.step_time counts it)."""
    after = max(0.0, step_time_s - makespan - weight_sync_s)
    reward = min(reward_s, after)
    return reward, after - reward, weight_sync_s


@dataclass
class StepMetrics:
    step: int
    rollout_makespan_s: float
    step_time_s: float
    output_tokens: int
    throughput_tok_s: float
    tail_time_s: float
    gpu_idle_fraction: float
    mean_accept_len: float | None
    # `parts` (module docstring): None where the executor does not split the step (live)
    reward_s: float | None = None
    train_s: float | None = None
    weight_sync_s: float | None = None
    post_source: str | None = None  # "trace", "model" or "trace+model" (sim/step_time.py)

    def to_dict(self) -> dict:
        return asdict(self)


def tail_time(finish_s: np.ndarray, makespan: float, fraction: float = 0.1) -> float:
    done = np.sort(finish_s[~np.isnan(finish_s)])
    if len(done) == 0:
        return 0.0
    k = max(0, math.ceil((1.0 - fraction) * len(done)) - 1)
    return float(makespan - done[k])


def idle_fraction(busy_s: np.ndarray, lent_s: np.ndarray, gpus: np.ndarray, makespan: float) -> float:
    """busy/lent: per-worker seconds running requests / in a non-rollout role."""
    if makespan <= 0:
        return 0.0
    idle = np.clip(makespan - busy_s - lent_s, 0.0, None)
    return float((idle * gpus).sum() / (gpus.sum() * makespan))


def accept_len(spec_tokens: np.ndarray, spec_iters: np.ndarray) -> float | None:
    iters = int(spec_iters.sum())
    return float(spec_tokens.sum() / iters) if iters else None
