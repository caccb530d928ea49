"""TLT's BEG-MAB: Alg. 1 reward, bucketing by batch size, convergence on a stationary bandit."""

from __future__ import annotations

import random

import pytest

from simctl.policies.beg_mab import DEFAULT_THRESHOLDS, BegMab, Strategy, default_strategies, reward


def test_reward_is_alg1_lines_8_9() -> None:
    # two requests accepted 6 drafts in total in a 0.5 s step: a_bar = 6/2 + 1 = 4 tokens,
    # reward = 4 * 2 / 0.5 = 16 tokens/s
    assert reward(6.0, 2, 0.5) == pytest.approx((16.0, 4.0))


def test_buckets_map_small_batches_to_more_verified_tokens() -> None:
    mab = BegMab(default_strategies(), DEFAULT_THRESHOLDS)
    verify = {b: {s.verify for s in mab.candidates(b)} for b in (1, 2, 4, 5, 7, 8, 31, 500)}
    assert verify == {1: {64}, 2: {48}, 4: {48}, 5: {32}, 7: {32}, 8: {16}, 31: {16}, 500: {16}}


def test_single_candidate_bucket_is_fixed() -> None:
    a, b = Strategy(10, 8, 64), Strategy(4, 8, 16)
    mab = BegMab([a, b], thresholds=[1, 8], epsilon=1.0)
    assert {mab.select(1) for _ in range(20)} == {a}
    assert {mab.select(9) for _ in range(20)} == {b}


def test_thresholds_must_match_groups() -> None:
    with pytest.raises(ValueError):
        BegMab(default_strategies(), thresholds=[1, 8])


def test_untried_arms_are_tried_first_then_the_best_median_is_exploited() -> None:
    arms = [Strategy(d, 8, 16) for d in (3, 4, 6)]
    mab = BegMab(arms, thresholds=[1], epsilon=0.0)
    tried = []
    for r in (1.0, 3.0, 2.0):
        s = mab.select(10)
        tried.append(s)
        mab.record(s, r, 2.0)
    assert tried == arms
    assert mab.select(10) == arms[1]


def test_converges_to_the_best_arm_on_a_stationary_bandit() -> None:
    arms = [Strategy(d, 8, 16) for d in (3, 4, 6, 8)]
    means = {arms[0]: 1.0, arms[1]: 1.3, arms[2]: 1.6, arms[3]: 1.45}
    env = random.Random(1)
    mab = BegMab(arms, thresholds=[1], epsilon=0.1, window=16, seed=7)
    picks = []
    for _ in range(600):
        s = mab.select(12)
        picks.append(s)
        mab.record(s, env.gauss(means[s], 0.25), 3.0)
    late = picks[-300:]
    assert max(arms, key=mab.median_reward) == arms[2]
    # 1 - epsilon exploits, plus epsilon / 4 of the exploration lands on the best arm too
    assert late.count(arms[2]) / len(late) > 0.85
