"""Tree drafting (TLT): acceptance boost of alternative branches and its verification cost."""

from __future__ import annotations

import numpy as np
import pytest

from simctl.policies.contract import SpecConfig
from simctl.sim.acceptance import expected_tokens, tree_acceptance
from simctl.traces.presets import EAGLE_ACCEPT_TLT, EAGLE_ACCEPT_TLT_TREE
from tests.factories import make_frame, make_trace
from tests.sim.test_speculation_modes import OneWorkerSpec, _run


def _tree(p: float, depth: int, topk: int, verify: int) -> float:
    return float(tree_acceptance(np.array([p]), np.array([depth]), np.array([topk]), np.array([verify]))[0])


def test_tree_reduces_to_chain_and_grows_with_width_and_budget() -> None:
    assert _tree(0.6, 8, 1, 64) == pytest.approx(0.6)
    assert _tree(0.6, 8, 8, 8) == pytest.approx(0.6)  # budget covers only the chain
    widths = [_tree(0.6, 8, k, 64) for k in (1, 2, 4, 8)]
    assert widths == sorted(widths) and widths[-1] > 0.8
    assert _tree(0.6, 8, 8, 64) == _tree(0.6, 8, 16, 64)  # limited by verify // depth


def test_calibration_points() -> None:
    # TLT Table 1: accept length ~8.6 at depth 12, topK 8, 64 tokens to verify
    p = _tree(0.65, 12, 8, 64)
    assert float(expected_tokens(np.array([p]), np.array([12]))[0]) == pytest.approx(8.6, abs=0.4)
    # the static tree calculation: chain 0.665 gives Table 6's midpoint per tree level at
    # depth 10, topK 8, 32 tokens; the preset's chain value is higher because the policy
    # realises less than that (traces/presets.py, calibration point tlt-t6-accept-length)
    assert _tree(0.665, 10, 8, 32) == pytest.approx(EAGLE_ACCEPT_TLT_TREE, abs=0.01)
    assert EAGLE_ACCEPT_TLT > 0.665


def test_tree_accepts_more_per_iteration_but_costs_more_to_verify() -> None:
    trace = make_trace(make_frame(np.full(64, 1500), accept={"eagle": 0.6}), model="qwen2.5-32b")
    chain = _run(OneWorkerSpec(SpecConfig("eagle", gamma=8)), trace, cluster="h100x8")
    tree = _run(
        OneWorkerSpec(SpecConfig("eagle", gamma=8, topk=8, verify_tokens=48)), trace, cluster="h100x8"
    )
    assert tree.steps[0].mean_accept_len > chain.steps[0].mean_accept_len + 1.0
    # per iteration the tree verifies 48 + 1 tokens per sequence instead of 8 + 1
    it_chain = chain.steps[0].rollout_makespan_s / chain.timeline[0]["iterations"].sum()
    it_tree = tree.steps[0].rollout_makespan_s / tree.timeline[0]["iterations"].sum()
    assert it_tree > it_chain
