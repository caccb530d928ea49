"""TLT's Bucketed-Epsilon-Greedy multi-armed bandit (Taming the Long-Tail, arXiv:2511.16665 §5.2,
Alg. 1): picks a speculative-decoding strategy for the current batch size.

Pure and seeded: the same records and seed give the same choices in the simulator and live.

Choices where the paper leaves a detail open:

- An arm with no reward yet is tried before any exploited arm (its median counts as +inf);
  Alg. 1 does not say what Median() of an empty deque is, and without this an arm only
  ever reached by exploration could stay unmeasured for a long time.
- Ties in the exploited median go to the first strategy in the order given.
- epsilon and the window w are not published: 0.1 and 16 are our defaults.
"""

from __future__ import annotations

import random
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Strategy:
    """One arm: (Draft_Depth, topK, Tokens_to_Verify) of TLT's tree drafting (Fig. 9)."""

    depth: int
    topk: int
    verify: int

    def __post_init__(self) -> None:
        if self.depth < 1 or self.topk < 1 or self.verify < 1:
            raise ValueError(f"strategy fields must be positive: {self}")


def reward(accept_lens_sum: float, batch_size: int, elapsed_s: float) -> tuple[float, float]:
    """Alg. 1 lines 8-9: mean tokens per request per step (accepted + the bonus token) and
    the reward a_bar * batch / elapsed (tokens per second of the step)."""
    a_bar = accept_lens_sum / batch_size + 1.0
    return a_bar * batch_size / elapsed_s, a_bar


class BegMab:
    """Strategies grouped by Tokens_to_Verify (descending), group i serving batch sizes
    [t_i, t_{i+1} - 1] (the last one [t_m, inf)): small batches verify more tokens."""

    def __init__(
        self,
        strategies: Sequence[Strategy],
        thresholds: Sequence[int],
        epsilon: float = 0.1,
        window: int = 16,
        seed: int = 0,
    ) -> None:
        verifies = sorted({s.verify for s in strategies}, reverse=True)
        if len(thresholds) != len(verifies):
            raise ValueError(
                f"{len(verifies)} Tokens_to_Verify groups {verifies} need as many batch thresholds, "
                f"got {list(thresholds)}"
            )
        if list(thresholds) != sorted(set(thresholds)) or thresholds[0] < 1:
            raise ValueError(f"batch thresholds must be increasing positive integers, got {list(thresholds)}")
        if not 0.0 <= epsilon <= 1.0 or window < 1:
            raise ValueError(f"need 0 <= epsilon <= 1 and window >= 1, got {epsilon}, {window}")
        self.strategies = tuple(strategies)
        self.thresholds = tuple(int(t) for t in thresholds)
        self.groups = tuple(tuple(s for s in self.strategies if s.verify == v) for v in verifies)
        self.epsilon = float(epsilon)
        self.window = int(window)
        self.rewards: dict[Strategy, deque[float]] = {s: deque(maxlen=window) for s in self.strategies}
        self.accept_lens: dict[Strategy, deque[float]] = {s: deque(maxlen=window) for s in self.strategies}
        self._rng = random.Random(seed)

    def candidates(self, batch_size: int) -> tuple[Strategy, ...]:
        """Alg. 1 line 12: the group whose bucket holds the batch size (below t_1: the first)."""
        i = 0
        for j, t in enumerate(self.thresholds):
            if batch_size >= t:
                i = j
        return self.groups[i]

    def record(self, strategy: Strategy, reward_value: float, accept_len: float) -> None:
        """Alg. 1 line 10."""
        self.rewards[strategy].append(float(reward_value))
        self.accept_lens[strategy].append(float(accept_len))

    def median_reward(self, strategy: Strategy) -> float:
        r = self.rewards[strategy]
        return statistics.median(r) if r else float("inf")

    def select(self, batch_size: int) -> Strategy:
        """Alg. 1 lines 11-19."""
        v = self.candidates(batch_size)
        if len(v) == 1:
            return v[0]
        if self._rng.random() < self.epsilon:
            return v[self._rng.randrange(len(v))]
        return max(v, key=self.median_reward)


# TLT §6.3: topK is fixed (Table 1: efficiency is flat in topK; 8 is its best). Depths and
# Tokens_to_Verify follow Fig. 13 (depth up to ~12) and Table 4 (Qwen-32B TP4 H100, depth
# 10, topK 8): best verify count 64 at batch 1, 48 at batch 2-4, 16 from batch 8 on. We add
# a 32-token group for batch 5-7 (between Table 4's rows) and three depths per group so the
# bandit has a choice in every bucket.
DEFAULT_TOPK = 8
DEFAULT_GROUPS: tuple[tuple[int, tuple[int, ...]], ...] = (
    (64, (8, 10, 12)),
    (48, (6, 8, 10)),
    (32, (4, 6, 8)),
    (16, (3, 4, 6)),
)
DEFAULT_THRESHOLDS: tuple[int, ...] = (1, 2, 5, 8)


def default_strategies(topk: int = DEFAULT_TOPK) -> list[Strategy]:
    return [Strategy(depth=d, topk=topk, verify=v) for v, depths in DEFAULT_GROUPS for d in depths]
