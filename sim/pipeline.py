"""Seconds of an RL training pipeline over replayed steps: rollout, reward, training and
weight sync, one step off-policy (History Rhymes, arXiv:2508.18588, §2: veRL and RhymeRL
both run at off-policyness 1). Used by `simctl reproduce` and the scheduling bench, so that
both price a step's pipeline the same way."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from simctl.sim.replay import PolicyRun, ReplaySetup
from simctl.sim.step_time import post_rollout_time


def worker_ends(run: PolicyRun, index: int, workers: int) -> np.ndarray:
    """Per worker: when its last request of the step finished (all start at 0)."""
    req = run.requests[index].dropna(subset=["finish_s"])
    out = np.zeros(workers)
    last = req.groupby("worker")["finish_s"].max()
    out[last.index.to_numpy(dtype=int)] = last.to_numpy()
    return out


def pipeline_seconds(run: PolicyRun, setup: ReplaySetup, measured: Sequence[int], per_worker: bool) -> float:
    """Seconds of the one-step off-policy pipeline over the measured steps (RhymeRL §2: veRL
    runs it at off-policyness 1, as RhymeRL does): rollout of step i needs the weights
    trained on step i-2; training of step i starts when its rollout has finished everywhere
    plus reward, and the previous training is done. Pipelined policies' workers start the
    next step as soon as they finish theirs (RhymeRL §4.2); others wait at a barrier.
    Reward, training and sync seconds are the trace's (sim/step_time.py)."""
    workers = setup.cluster.num_workers
    end = np.zeros(workers)
    train_end: list[float] = []
    index = {m.step: i for i, m in enumerate(run.steps)}
    for i, step in enumerate(sorted(measured)):
        frame = setup.trace.df[setup.trace.df["step"] == step]
        post = post_rollout_time(
            setup.trace.meta.timing_for(step),
            tokens=int(frame["response_len"].sum() + frame["prompt_len"].sum()),
            active_params=float(setup.model.active_param_count()),
            weight_bytes=float(setup.model.weight_bytes()),
            total_gpus=setup.cluster.total_gpus,
            gpu_flops=setup.cluster.gpu.bf16_flops,
            sync_bw_Bps=setup.cluster.gpu.rdma_bw,
        )
        ready = train_end[i - 2] if i >= 2 else 0.0
        d = worker_ends(run, index[step], workers)
        start = np.maximum(end, ready) if per_worker else np.full(workers, max(end.max(), ready))
        end = start + d
        prev = train_end[-1] if train_end else 0.0
        train_end.append(max(float(end.max()) + post.reward_s, prev) + post.train_s + post.weight_sync_s)
    return train_end[-1] if train_end else 0.0
