"""Exact replay of the history drafter (RhymeRL HistoSpec) over a trace's token ids.

The reference is the prompt's responses in the previous epoch, weighted by reward, and is
fixed for the step, so the drafter's verdict at every position of a response (does the
anchored top-1 child equal the recorded token?) is computed once per request with array
operations; each verify iteration then only reads those arrays. The draft window is fixed
(SpecConfig.gamma) or AIMD (RhymeRL §5.4), whose state is kept per request across the
simulator's fast-forward blocks (sim.draft_ledger).
"""

from __future__ import annotations

import numpy as np

from simctl.policies.suffix_tree import REWARD_COUNT_EPS, DraftRule
from simctl.sim.draft_ledger import DraftLedger
from simctl.sim.trace_tokens import StepTokens, ngram_keys


class HistoryReplay:
    def __init__(self, tokens: StepTokens, ledger: DraftLedger) -> None:
        self.tokens = tokens
        self.ledger = ledger
        self._hist: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # prompt -> (keys, best token)
        self._static: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # request -> (run, anchor)

    def draft(
        self,
        rule: DraftRule,
        rids: np.ndarray,
        gamma: np.ndarray,
        iterations: int,
        first_plain: np.ndarray | None = None,
    ) -> np.ndarray:
        """Exact history drafting, one verify iteration at a time over all rows: the
        verdicts are static, so each iteration only gathers from them. `first_plain`: rows
        whose first iteration is their prefill pass (one token, nothing drafted)."""
        n = len(rids)
        pos = self.tokens.state.generated[rids].astype(np.int64)
        end = np.array([self.tokens.end(int(r)) for r in rids.tolist()], np.int64)
        aimd = rule.aimd
        if aimd is not None:
            w = np.array([self.ledger.stats_of(int(r)).window or aimd.start for r in rids.tolist()], np.int64)
        else:
            w = gamma.copy()
        runs, anchors, offs = [], [], [0]
        for r in rids.tolist():
            run, anchor = self.static_verdicts(rule, r)
            runs.append(run)
            anchors.append(anchor)
            offs.append(offs[-1] + len(run))
        run_flat, anchor_flat = np.concatenate(runs), np.concatenate(anchors)
        base = np.asarray(offs[:-1], np.int64)
        last = np.asarray(offs[1:], np.int64) - 1
        out = np.ones((n, iterations), np.int16)
        pos_after = np.zeros((n, iterations), np.int64)
        drafted = np.zeros((n, iterations), np.int64)
        accepted = np.zeros((n, iterations), np.int64)
        win_after = np.zeros((n, iterations), np.int64)
        used = 0
        for it in range(iterations):
            live = pos < end
            if not live.any():
                break
            used = it + 1
            at = np.minimum(base + pos, last)
            has = anchor_flat[at] & live
            if it == 0 and first_plain is not None:
                has &= ~first_plain
            acc = np.where(has, np.minimum(run_flat[at], w), 0)
            # a draft that stops agreeing goes on to the full window unless the tree has no
            # continuation where the agreement stopped (checked on the recorded tokens)
            d = np.where(has, np.where((acc == w) | anchor_flat[np.minimum(at + acc, last)], w, acc), 0)
            out[:, it] = acc + 1
            drafted[:, it] = d
            accepted[:, it] = acc
            if aimd is not None:
                w = np.where(
                    has & (acc == d),
                    np.minimum(w + aimd.step, aimd.maximum),
                    np.where(acc < d, aimd.start, w),
                )
            pos += np.where(live, acc + 1, 0)
            pos_after[:, it] = pos
            win_after[:, it] = w
        for j, r in enumerate(rids.tolist()):
            k = min(int(np.searchsorted(pos_after[j, :used], end[j], side="left")) + 1, used)
            self.ledger.remember(
                r,
                int(self.tokens.state.generated[r]),
                pos_after[j, :k],
                drafted[j, :k],
                accepted[j, :k],
                win_after[j, :k],
            )
        return out

    def static_verdicts(self, rule: DraftRule, rid: int) -> tuple[np.ndarray, np.ndarray]:
        """For every response position p (and p = L): the run of consecutive positions from
        p whose anchored top-1 history token equals the recorded one, and whether any
        history context matches at p (capped run: 255)."""
        origin = self.tokens.origin(rid)
        hit = self._static.get(origin)
        if hit is not None:
            return hit
        seq = self.tokens.sequence(rid, rule)
        ukeys, best = self._table(rule, origin)
        cols = seq.keys[:, seq.offset :]  # positions 0..L (context ends before position p)
        length = cols.shape[1] - 1
        anchor = np.zeros(length + 1, bool)
        top = np.full(length + 1, -1, np.int64)
        if len(ukeys):
            for order in range(cols.shape[0]):  # longest context first
                k = cols[order]
                idx = np.minimum(np.searchsorted(ukeys, k), len(ukeys) - 1)
                found = (ukeys[idx] == k) & (k != 0) & ~anchor
                top[found] = best[idx[found]]
                anchor |= found
        actual = np.full(length + 1, -2, np.int64)
        actual[:length] = seq.seq[seq.offset :]
        ok = anchor & (top == actual)
        # run[p] = distance to the first position >= p that is not a hit
        idx = np.arange(length + 1)
        nxt = np.where(ok, length + 1, idx)
        nxt = np.minimum.accumulate(nxt[::-1])[::-1]
        run = np.minimum(nxt - idx, 255).astype(np.int64)
        self._static[origin] = (run, anchor)
        return run, anchor

    def _table(self, rule: DraftRule, origin: int) -> tuple[np.ndarray, np.ndarray]:
        """Sorted context keys of the prompt's previous-epoch responses and each context's
        highest-weight next token (weight desc, token id asc)."""
        st = self.tokens.state
        pid = int(st.prompt_id[origin])
        cached = self._hist.get(pid)
        if cached is not None:
            return cached
        trace = self.tokens.trace
        assert trace is not None
        refs = trace.rows_of(pid, st.epoch - 1) if st.epoch > 0 else np.zeros(0, np.int64)
        keys, toks, wts = [], [], []
        for row in refs.tolist():
            prompt = trace.prompt(row)[-rule.max_match :]
            arr = np.concatenate([prompt, trace.response(row)]).astype(np.int64)
            kk = ngram_keys(arr, rule.min_match, rule.max_match)[:, len(prompt) : len(arr)]
            nxt = arr[len(prompt) :]
            weight = (float(trace.reward[row]) + REWARD_COUNT_EPS) if rule.weight == "reward" else 1.0
            for level in range(kk.shape[0]):
                valid = kk[level] != 0
                keys.append(kk[level][valid])
                toks.append(nxt[valid])
                wts.append(np.full(int(valid.sum()), weight))
        if not keys:
            self._hist[pid] = (np.zeros(0, np.uint64), np.zeros(0, np.int64))
            return self._hist[pid]
        k, t, w = np.concatenate(keys), np.concatenate(toks), np.concatenate(wts)
        order = np.lexsort((t, k))
        k, t, w = k[order], t[order], w[order]
        new = np.r_[True, (k[1:] != k[:-1]) | (t[1:] != t[:-1])]
        starts = np.flatnonzero(new)
        k, t, w = k[starts], t[starts], np.add.reduceat(w, starts)
        order = np.lexsort((t, -np.round(w, 9), k))
        k, t = k[order], t[order]
        first = np.r_[True, k[1:] != k[:-1]]
        self._hist[pid] = (k[first], t[first])
        return self._hist[pid]
