"""Builders for small traces, cost models and replays (keyword defaults, no I/O)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from simctl.sim.cluster import parse_cluster
from simctl.sim.cost_model import RooflineCostModel
from simctl.sim.engine import EngineConfig
from simctl.sim.models import get_model
from simctl.sim.replay import ReplaySetup, replay
from simctl.testing import LinearCost
from simctl.traces.io import Trace
from simctl.traces.schema import TraceMeta

__all__ = ["LinearCost", "make_frame", "make_setup", "make_trace", "random_lengths", "run_one"]


def make_frame(
    lengths: np.ndarray | list[int],
    group_size: int = 4,
    step: int = 0,
    prompt_len: int = 128,
    max_tokens: int | None = None,
    accept: dict[str, float | np.ndarray] | None = None,
) -> pd.DataFrame:
    lengths = np.asarray(lengths, dtype=np.int64)
    n = len(lengths)
    assert n % group_size == 0, "lengths must fill whole groups"
    mx = int(max_tokens or lengths.max())
    df = pd.DataFrame(
        {
            "step": np.full(n, step, np.int32),
            "prompt_id": np.repeat(np.arange(n // group_size), group_size).astype(np.int64),
            "sample": np.tile(np.arange(group_size), n // group_size).astype(np.int32),
            "prompt_len": np.full(n, prompt_len, np.int32),
            "response_len": lengths.astype(np.int32),
            "max_tokens": np.full(n, mx, np.int32),
            "finish_reason": np.where(lengths >= mx, "length", "stop"),
        }
    )
    for method, value in (accept or {}).items():
        df[f"accept_{method}"] = np.broadcast_to(np.asarray(value, np.float32), (n,)).copy()
    return df


def make_trace(
    frames: list[pd.DataFrame] | pd.DataFrame, group_size: int = 4, model: str = "qwen2.5-7b"
) -> Trace:
    df = pd.concat(frames, ignore_index=True) if isinstance(frames, list) else frames
    return Trace(df=df, meta=TraceMeta(model=model, group_size=group_size, preset="test", seed=0))


def random_lengths(seed: int, n: int, lo: int = 20, hi: int = 1500) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(np.exp(rng.uniform(np.log(lo), np.log(hi), n)), lo, hi).astype(np.int64)


def make_setup(
    trace: Trace,
    cluster: str = "h100x16",
    cost=None,
    seed: int = 0,
    per_iteration: bool = False,
    max_num_seqs: int = 256,
) -> ReplaySetup:
    spec = parse_cluster(cluster)
    model = get_model(trace.meta.model)
    return ReplaySetup(
        trace=trace,
        cluster=spec,
        model=model,
        cost=cost if cost is not None else RooflineCostModel(model, spec.gpu, spec.tp),
        steps=trace.steps,
        seed=seed,
        engine=EngineConfig(max_num_seqs=max_num_seqs, per_iteration=per_iteration),
    )


def run_one(trace: Trace, policy: str = "verl", **kw):
    setup = make_setup(trace, **kw)
    return replay(setup, [policy])[policy]
