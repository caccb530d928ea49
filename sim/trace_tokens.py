"""A trace's token ids as the exact drafter replays read them (sim.token_replay).

`ngram_keys` hashes every n-gram context of a sequence once, so the drafters match
contexts by comparing 64-bit keys (a false match needs a 64-bit collision).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simctl.policies.suffix_tree import DraftRule
from simctl.sim.state import StepState
from simctl.traces.hashing import GOLDEN, splitmix64
from simctl.traces.io import Trace


def ngram_keys(seq: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """keys[i, p] = 64-bit hash of the context seq[p - n : p] for n = hi - i (longest order
    first), defined for p >= n (0 elsewhere); shape (hi - lo + 1, len(seq) + 1).

    Equal n-grams hash equally wherever they occur, so sequences share one table."""
    t = np.asarray(seq, dtype=np.int64).astype(np.uint64) * GOLDEN
    m = len(t) + 1
    h = np.zeros(m, np.uint64)
    out = np.zeros((hi - lo + 1, m), np.uint64)
    with np.errstate(over="ignore"):
        for n in range(1, hi + 1):
            ext = np.zeros(m, np.uint64)
            if n < m:
                ext[n:] = t[: m - n]  # token n places before each position
            h = splitmix64(h ^ ext ^ np.uint64(n))
            if n >= lo:
                out[hi - n] = np.where(np.arange(m) >= n, h, np.uint64(0))
    return out


class TraceTokens:
    """Token ids of a whole trace, sliced per row (the history drafter reads other steps)."""

    def __init__(self, trace: Trace) -> None:
        self.resp_vals, self.resp_off = trace.token_arrays("response_tokens")
        if "prompt_tokens" in trace.lists:
            self.prompt_vals, self.prompt_off = trace.token_arrays("prompt_tokens")
        else:
            self.prompt_vals, self.prompt_off = np.zeros(0, np.int32), np.zeros(len(trace.df) + 1, np.int64)
        df = trace.df
        self.reward = df["reward"].to_numpy(np.float64) if "reward" in df.columns else np.zeros(len(df))
        epoch = df["epoch"].to_numpy(np.int64) if "epoch" in df.columns else np.zeros(len(df), np.int64)
        self.epoch = epoch
        self.prompt_id = df["prompt_id"].to_numpy(np.int64)
        self._by_prompt_epoch: dict[tuple[int, int], np.ndarray] | None = None

    def response(self, row: int) -> np.ndarray:
        return self.resp_vals[self.resp_off[row] : self.resp_off[row + 1]]

    def prompt(self, row: int) -> np.ndarray:
        return self.prompt_vals[self.prompt_off[row] : self.prompt_off[row + 1]]

    def rows_of(self, prompt_id: int, epoch: int) -> np.ndarray:
        """Trace rows of a prompt's group in one epoch (the history drafter's references)."""
        if self._by_prompt_epoch is None:
            order = np.lexsort((self.epoch, self.prompt_id))
            keys = np.stack([self.prompt_id[order], self.epoch[order]], axis=1)
            cut = np.flatnonzero(np.any(np.diff(keys, axis=0) != 0, axis=1)) + 1
            self._by_prompt_epoch = {
                (int(keys[a, 0]), int(keys[a, 1])): order[a:b]
                for a, b in zip(np.r_[0, cut], np.r_[cut, len(order)], strict=True)
            }
        return self._by_prompt_epoch.get((prompt_id, epoch), np.zeros(0, np.int64))


@dataclass
class TokenSequence:
    """A request's tokens as the drafter sees them: prompt tail + response, and hashes."""

    seq: np.ndarray
    offset: int  # index in `seq` of response position 0
    keys: np.ndarray  # ngram_keys(seq)


class StepTokens:
    """One step's rows mapped to their trace rows' tokens; sequences cached per request
    (a Fastest-of-N replica row reads its request's)."""

    def __init__(self, state: StepState, trace_rows: np.ndarray, trace: TraceTokens | None) -> None:
        self.state = state
        self.rows = np.asarray(trace_rows, dtype=np.int64)  # trace row of each step row
        self.trace = trace  # None: the trace has no token ids
        self._seqs: dict[int, TokenSequence] = {}

    def origin(self, rid: int) -> int:
        return int(self.state.origin[rid])

    def end(self, rid: int) -> int:
        """Position where this dispatch ends (chunk limit or the response's end)."""
        return int(min(self.state.dispatch_end[rid], self.state.target_len[rid]))

    def sequence(self, rid: int, rule: DraftRule) -> TokenSequence:
        origin = self.origin(rid)
        seq = self._seqs.get(origin)
        if seq is None:
            assert self.trace is not None
            row = int(self.rows[origin])
            prompt = self.trace.prompt(row)[-rule.max_match :]
            arr = np.concatenate([prompt, self.trace.response(row)]).astype(np.int64)
            keys = ngram_keys(arr, rule.min_match, rule.max_match)
            seq = self._seqs[origin] = TokenSequence(arr, len(prompt), keys)
        return seq
