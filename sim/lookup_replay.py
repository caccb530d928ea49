"""Exact replay of prompt lookup (the `ngram` method; live.torch_engine.NgramDrafter) over
a trace's token ids: for each match length, the most recent earlier position with the same
preceding n-gram is precomputed per request with one sort of its n-gram hashes, so each
iteration costs a few lookups and the comparison of the draft with the recorded tokens.
"""

from __future__ import annotations

import numpy as np

from simctl.policies.suffix_tree import DraftRule
from simctl.sim.draft_ledger import DraftLedger
from simctl.sim.trace_tokens import StepTokens, ngram_keys


class LookupReplay:
    def __init__(self, tokens: StepTokens, ledger: DraftLedger) -> None:
        self.tokens = tokens
        self.ledger = ledger
        self._lookups: dict[int, tuple[list[int], int, list[np.ndarray]]] = {}  # request -> lookup table

    def table(self, rule: DraftRule, rid: int) -> tuple[list[int], int, list[np.ndarray]]:
        """(prompt + response tokens, prompt length, prev[n]) for the request: prev[i][p] is
        the most recent p' < p whose preceding n tokens (n = max_match - i) equal those
        before p, or -1; so the drafter at context length L proposes seq[prev[L]:...]."""
        origin = self.tokens.origin(rid)
        hit = self._lookups.get(origin)
        if hit is None:
            trace = self.tokens.trace
            assert trace is not None
            row = int(self.tokens.rows[origin])
            prompt = trace.prompt(row)
            arr = np.concatenate([prompt, trace.response(row)]).astype(np.int64)
            keys = ngram_keys(arr, rule.min_match, rule.max_match)
            prev = []
            for k in keys:
                order = np.argsort(k, kind="stable")  # equal keys stay in position order
                same = np.r_[False, k[order][1:] == k[order][:-1]]
                p = np.full(len(k), -1, np.int64)
                p[order[same]] = order[np.flatnonzero(same) - 1]
                p[k == 0] = -1  # contexts shorter than n
                prev.append(p)
            hit = self._lookups[origin] = (arr.tolist(), len(prompt), prev)
        return hit

    def draft(
        self, rule: DraftRule, rid: int, depth: int, iterations: int, first_plain: bool = False
    ) -> np.ndarray:
        """Step one request iteration by iteration as the engine's prompt-lookup drafter
        would (live.torch_engine.NgramDrafter): no draft past the dispatch's last token,
        nor in the request's prefill pass (`first_plain`: the first iteration is it)."""
        seq, plen, prev = self.table(rule, rid)
        pos0 = int(self.tokens.state.generated[rid])
        end = self.tokens.end(rid)
        out = np.ones(iterations, np.int16)
        pos_after: list[int] = []
        drafted: list[int] = []
        accepted: list[int] = []
        pos = pos0
        for it in range(iterations):
            if pos >= end:
                break
            ctx = plen + pos  # tokens the drafter sees
            k = 0 if first_plain and it == 0 else min(depth, end - pos - 1)
            acc = got = 0
            if k > 0:
                for p in prev:
                    src = int(p[ctx])
                    if src >= 0:
                        got = min(k, ctx - src)
                        while acc < got and seq[src + acc] == seq[ctx + acc]:
                            acc += 1
                        break
            out[it] = acc + 1
            pos += acc + 1
            pos_after.append(pos)
            drafted.append(got)
            accepted.append(acc)
        self.ledger.remember(rid, pos0, pos_after, drafted, accepted, np.zeros(len(pos_after)))
        return out
