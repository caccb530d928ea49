"""Seer's scheduler holds requests in its global queue and hands a worker no more than the
worker's engine runs at once: the engine's max_num_seqs unless `max_seqs` is given (a
sweep or `replay --max-num-seqs` changes the engine's limit, and the scheduler follows)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simctl.replay_cmd import build_setup
from simctl.sim.replay import run_policy

SAMPLE = Path(__file__).resolve().parents[2] / "traces/samples/efficientrollout-qwen7b-8k-6steps.parquet"


def _makespan(limit: int, policy: str) -> float:
    setup = build_setup(SAMPLE, "a100x8:tp1", None, None, "0:1", 0, False, limit)
    return run_policy(setup, policy).steps[0].rollout_makespan_s


@pytest.mark.parametrize("policy", ["seer", "composite"])
def test_scheduler_follows_the_engines_batch_limit(policy: str) -> None:
    follows = _makespan(4, policy)
    assert follows == _makespan(4, f"{policy}:max_seqs=4")
    # handed up to 256 requests, a 4-sequence worker queues them where Seer cannot reorder
    assert follows != _makespan(4, f"{policy}:max_seqs=256")
    # at the engine's default the limit is 256 either way (results as before the default moved)
    assert _makespan(256, policy) == _makespan(256, f"{policy}:max_seqs=256")


def test_seer_params_say_the_limit_follows_the_engine() -> None:
    from simctl.traces.plugins import make_policy

    assert make_policy("seer").params()["max_seqs"] == 0
    assert make_policy("seer:max_seqs=8").params()["max_seqs"] == 8
