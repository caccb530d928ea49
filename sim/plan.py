"""A worker's plan for its next block of decode iterations (see sim.worker)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simctl.sim.acceptance_source import ModelProbe


@dataclass
class Plan:
    ids: np.ndarray  # running requests, admission order
    cum_s: np.ndarray  # cumulative time at the end of each planned iteration
    remaining: np.ndarray  # tokens until each request's dispatch ends
    tokens: np.ndarray | None  # per-request per-iteration tokens (None: plain decode)
    spec_rows: np.ndarray | None  # bool mask of rows decoded speculatively
    gamma: np.ndarray | None
    kv_tokens: int
    spec_gamma_mean: float
    cum: np.ndarray | None = None  # cumulative tokens per row over the block (speculative plans)
    # Iterations (1-based, increasing, last = iterations) after which a request ends: the
    # worker stops there to report it. Plain decoding plans several finishes at once.
    stops: np.ndarray | None = None
    decoupled_rows: np.ndarray | None = None  # bool mask of decoupled rows (they sit out iterations)
    # Speculative plans: the 0-based column in which each row reaches its dispatch end
    # (`iterations` if it does not within the block); a row takes part up to that column.
    finish: np.ndarray | None = None
    probe: ModelProbe | None = None  # rows drawn from the grouped-drafter model (drift check)

    @property
    def iterations(self) -> int:
        return len(self.cum_s)
