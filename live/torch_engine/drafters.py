"""Draft proposers. None of them can change what the engine emits (verification is by exact
match against position-seeded samples); they only change how many target forwards it takes.

Every drafter satisfies `Drafter.propose`. A drafter may also offer `propose_batch`, which the
engine prefers so that model drafters run one batched forward per draft position instead of
one forward per request.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import torch
from numpy.lib.stride_tricks import sliding_window_view

from simctl.live.torch_engine.kv_cache import KVBuffer
from simctl.live.torch_engine.ragged_forward import output_head, ragged_forward

DraftItem = tuple[list[int], list[list[int]], int]
"""(request_tokens, group_tokens, k) — the arguments of one `propose` call."""


@runtime_checkable
class Drafter(Protocol):
    """Proposes up to `k` tokens to follow `request_tokens` (prompt + output so far).

    `group_tokens` holds the prompt + output of the request's group siblings (other samples of
    the same prompt), for drafters that learn from them; the lists belong to the engine and
    must not be mutated. Returning fewer than `k` tokens (or none) is always allowed.
    """

    def propose(self, request_tokens: list[int], group_tokens: list[list[int]], k: int) -> list[int]: ...


def propose_many(drafter: Drafter, items: Sequence[DraftItem]) -> list[list[int]]:
    """Use the drafter's batched entry point when it has one, else call `propose` per item."""
    batched = getattr(drafter, "propose_batch", None)
    if batched is not None:
        return batched(items)
    return [drafter.propose(tokens, group, k) for tokens, group, k in items]


class NgramDrafter:
    """Prompt lookup: find the most recent earlier occurrence of the request's last n tokens
    (n from `max_n` down to `min_n`) in its own prompt + output, propose what followed.

    Most recent rather than first, because in RL rollouts the recent context (a loop, a
    repeated formula) predicts the continuation better than the prompt's first mention.
    """

    def __init__(self, min_n: int = 1, max_n: int = 4) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got {min_n}, {max_n}")
        self.min_n = min_n
        self.max_n = max_n

    def propose(self, request_tokens: list[int], group_tokens: list[list[int]], k: int) -> list[int]:
        del group_tokens  # prompt lookup only looks at the request itself
        if k <= 0:
            return []
        seq = np.asarray(request_tokens, dtype=np.int64)
        for n in range(min(self.max_n, len(seq) - 1), self.min_n - 1, -1):
            # Windows over seq[:-1] start at s <= len - 1 - n, so each match has at least one
            # continuation token and the suffix itself is excluded.
            windows = sliding_window_view(seq[:-1], n)
            hits = np.flatnonzero((windows == seq[-n:]).all(axis=1))
            if hits.size:
                start = int(hits[-1]) + n
                return seq[start : start + k].tolist()
        return []


class SuffixDrafter:
    """Longest suffix match over the request's own tokens and its group siblings' tokens;
    the draft follows the most frequent continuation among all occurrences of that suffix
    (SuffixDecoding-style, but a linear scan instead of a suffix tree: fine at test and
    moderate scale, O(corpus * depth) per call).

    Siblings matter in GRPO-style rollouts: samples of one prompt share long spans, so a
    sibling that is ahead often has already written what this request is about to write.
    """

    def __init__(self, max_depth: int = 32, min_match: int = 1) -> None:
        if max_depth < 1 or not 1 <= min_match <= max_depth:
            raise ValueError(f"need 1 <= min_match <= max_depth, got {min_match}, {max_depth}")
        self.max_depth = max_depth
        self.min_match = min_match

    def _occurrences(self, seq: np.ndarray, own: np.ndarray) -> tuple[int, np.ndarray]:
        """Longest d such that seq[j-d:j] == own[-d:] for some j < len(seq); returns d and the
        continuation indices j achieving it."""
        cand = np.arange(1, len(seq), dtype=np.int64)
        depth = 0
        for m in range(1, min(self.max_depth, len(own)) + 1):
            ok = cand >= m
            ok[ok] = seq[cand[ok] - m] == own[-m]
            if not ok.any():
                break
            cand, depth = cand[ok], m
        return depth, cand

    def propose(self, request_tokens: list[int], group_tokens: list[list[int]], k: int) -> list[int]:
        if k <= 0 or not request_tokens:
            return []
        own = np.asarray(request_tokens, dtype=np.int64)
        seqs = [own, *(np.asarray(g, dtype=np.int64) for g in group_tokens)]
        found = [self._occurrences(s, own) for s in seqs]
        best = max(d for d, _ in found)
        if best < self.min_match:
            return []
        occ = [(s, j) for s, (d, j) in zip(seqs, found, strict=True) if d == best and j.size]
        draft: list[int] = []
        for _ in range(k):
            counts: Counter[int] = Counter()
            for s, j in occ:
                counts.update(s[j[j < len(s)]].tolist())
            if not counts:
                break
            tok = counts.most_common(1)[0][0]
            draft.append(tok)
            occ = [(s, _follow(s, j, tok)) for s, j in occ]
        return draft


def _follow(seq: np.ndarray, idx: np.ndarray, tok: int) -> np.ndarray:
    """Advance the occurrences whose next token is `tok`; drop the others and exhausted ones."""
    idx = idx[idx < len(seq)]
    return idx[seq[idx] == tok] + 1


@dataclass
class _DraftCacheEntry:
    tokens: np.ndarray
    kv: KVBuffer


class ModelDrafter:
    """Greedy drafts from a (smaller or quantised) causal LM sharing the target's vocabulary.

    Keeps per-sequence KV caches in an LRU keyed by token prefix instead of by request id (the
    protocol does not pass one): each call reuses the entry with the longest common prefix,
    which also rolls back rejected drafts for free and lets siblings share a prompt prefill.
    `propose_batch` runs one batched forward per draft position across requests.
    """

    def __init__(self, model: torch.nn.Module, *, max_entries: int = 256) -> None:
        self.model = model.eval()
        self.max_entries = max_entries
        self.vocab_size = int(output_head(model).weight.shape[0])
        self._entries: OrderedDict[int, _DraftCacheEntry] = OrderedDict()
        self._next_id = 0

    def reset(self) -> None:
        """Drop all cached prefixes (frees their KV memory)."""
        self._entries.clear()

    def propose(self, request_tokens: list[int], group_tokens: list[list[int]], k: int) -> list[int]:
        return self.propose_batch([(request_tokens, group_tokens, k)])[0]

    def _claim(self, tokens: np.ndarray, claimed: set[int]) -> tuple[int, int]:
        """Pick the cache entry sharing the longest prefix with `tokens` and rewind it; returns
        (entry id, number of cached tokens usable). An entry already claimed in this batch is
        cloned, never shared, since each request will extend its own copy."""
        best_id, best_len = -1, 0
        for eid, entry in self._entries.items():
            m = min(len(entry.tokens), len(tokens), entry.kv.length)
            if m <= best_len or entry.tokens[0] != tokens[0]:
                continue
            diff = np.flatnonzero(entry.tokens[:m] != tokens[:m])
            common = int(diff[0]) if diff.size else m
            if common > best_len:
                best_id, best_len = eid, common
        # At least the last token must be fed to get the next-token logits.
        usable = min(best_len, len(tokens) - 1)
        if best_id < 0 or usable == 0:
            kv = KVBuffer()
            usable = 0
        elif best_id in claimed:
            kv = self._entries[best_id].kv.clone(usable)
        else:
            kv = self._entries.pop(best_id).kv
            kv.truncate(usable)
        eid = self._next_id
        self._next_id += 1
        self._entries[eid] = _DraftCacheEntry(tokens[:usable], kv)
        claimed.add(eid)
        return eid, usable

    def propose_batch(self, items: Sequence[DraftItem]) -> list[list[int]]:
        drafts: list[list[int]] = [[] for _ in items]
        active = [i for i, (tokens, _, k) in enumerate(items) if k > 0 and tokens]
        if not active:
            return drafts
        claimed: set[int] = set()
        ids: dict[int, int] = {}
        pending: dict[int, list[int]] = {}
        for i in active:
            tokens = np.asarray(items[i][0], dtype=np.int64)
            if tokens.min() < 0 or tokens.max() >= self.vocab_size:
                raise ValueError(f"token id outside the drafter's vocabulary ({self.vocab_size})")
            ids[i], usable = self._claim(tokens, claimed)
            pending[i] = tokens[usable:].tolist()
        step = 0
        while active:
            entries = [self._entries[ids[i]] for i in active]
            queries = [pending[i] for i in active]
            logits, new_kv = ragged_forward(
                self.model,
                [e.kv for e in entries],
                queries,
                [[len(q) - 1] for q in queries],
            )
            next_tokens = logits.argmax(dim=-1).tolist()
            for row, (i, e, q, tok) in enumerate(zip(active, entries, queries, next_tokens, strict=True)):
                e.kv.append(new_kv[:, :, row, :, : len(q)])
                e.tokens = np.concatenate([e.tokens, np.asarray(q, dtype=np.int64)])
                drafts[i].append(int(tok))
                pending[i] = [int(tok)]
            step += 1
            active = [i for i in active if items[i][2] > step]
        while len(self._entries) > max(self.max_entries, len(items)):
            self._entries.popitem(last=False)
        return drafts
