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
    spec_rows: np.ndarray | None  # bool mask of rows decoded speculatively (None: plain decode)
    gamma: np.ndarray | None
    kv_tokens: int
    spec_gamma_mean: float
    # Speculative plans: every row speculates (`spec_rows` all True), known when planned
    # so that applying a stretch need not check the mask again.
    every_row_speculates: bool = False
    # Speculative plans: per row and iteration, its tokens since the block began capped at
    # its dispatch end (`remaining`); uint16 where that fits (every worker holds a plan).
    progress: np.ndarray | None = None
    # Iterations (1-based, increasing, last = iterations) after which a request ends: the
    # worker stops there to report it. Plain decoding plans several finishes at once.
    stops: np.ndarray | None = None
    decoupled_rows: np.ndarray | None = None  # bool mask of decoupled rows (they sit out iterations)
    # Decoupled rows (in row order), per iteration: whether the row was verified in it.
    verified: np.ndarray | None = None
    # Speculative plans: the 0-based column in which each row reaches its dispatch end
    # (`iterations` if it does not within the block); a row takes part up to that column.
    finish: np.ndarray | None = None
    # Speculative plans: `finish + 1`, the iterations each row takes part in if the block
    # runs to its end (set by the planner; each applied stretch reads it).
    last: np.ndarray | None = None
    probe: ModelProbe | None = None  # rows drawn from the grouped-drafter model (drift check)
    # Where the priced time went, so the timeline can split a segment's busy time without
    # estimating it afterwards (reports/breakdown.py). Seconds of iteration 0 that are the
    # prefill of first-admitted prompts and the recompute of context whose KV was lost
    # (preemption, re-dispatch without KV): one prefill pass priced on their tokens together,
    # shared in proportion to those tokens.
    prefill_s: float = 0.0
    recompute_s: float = 0.0
    # Speculative plans: cumulative drafting seconds at the end of each iteration (drafting
    # on the worker's own GPUs, plus waiting for a decoupled drafter slower than
    # verification); the rest of an iteration is verification. None: plain decoding.
    draft_cum_s: np.ndarray | None = None
    # Speculative plans: rows prefilled in iteration 0 (None: none). That iteration gives
    # them their first token and verifies no draft, so it is not one of their verify
    # iterations (sim.spec_planner `SpecPlanner.plan`).
    fresh: np.ndarray | None = None

    @property
    def iterations(self) -> int:
        return len(self.cum_s)

    def phase_seconds(self, pos: int, done: int) -> tuple[float, float, float]:
        """(prefill, recompute, draft) seconds of iterations [pos, done) of the plan: the
        prefill pass only where the stretch holds iteration 0."""
        first = pos == 0 and done > 0
        prefill = self.prefill_s if first else 0.0
        recompute = self.recompute_s if first else 0.0
        draft = 0.0
        if self.draft_cum_s is not None and done > pos:
            draft = float(self.draft_cum_s[done - 1] - (self.draft_cum_s[pos - 1] if pos else 0.0))
        return prefill, recompute, draft

    def speculative_stretch(
        self, done: int, pos: int
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray]:
        """Of a speculative plan's rows over iterations [pos, done): (progress at `done`,
        progress at `pos` (None at 0: nothing yet), tokens gained, iterations taken part in:
        up to the row's finish column; decoupled rows verified only where they emitted)."""
        assert self.progress is not None and self.finish is not None
        progress = self.progress[:, done - 1].astype(np.int64)
        last = self.last if self.last is not None else self.finish + 1
        prev: np.ndarray | None
        if pos:
            prev = self.progress[:, pos - 1].astype(np.int64)
            gained = progress - prev
            iters = np.minimum(done, last) - np.minimum(pos, last)
        else:  # minus 0 (finish columns are >= 0, so min(0, last) is 0)
            prev, gained = None, progress
            iters = np.minimum(done, last)
        if self.decoupled_rows is not None:
            assert self.verified is not None
            dec = self.decoupled_rows
            cols = np.arange(pos, done)
            iters[dec] = (self.verified[:, pos:done] & (cols < last[dec, None])).sum(axis=1)
        if self.fresh is not None and pos == 0:  # (the stretch holds their prefill pass)
            iters = iters - self.fresh
        return progress, prev, gained, iters
