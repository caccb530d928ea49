"""Model-free drafting over reference token sequences: a depth-limited, weighted suffix tree.

Seer's grouped drafter (one tree per prompt group over all its responses as they are
generated) and RhymeRL's HistoSpec (one tree per prompt over the previous epoch's responses,
branches weighted by reward) are the same structure with different references and
weights, so both use `SuffixTree` with a `DraftRule` (`policies/draft_rule.py`) naming the
differences.

The tree indexes every suffix of every reference sequence down to depth `max_match + 1`:
a node is a context string c of `min_match`..`max_match` tokens, its children the tokens
that followed c somewhere, each with the summed weight of those occurrences (count, or the
responses' rewards: RhymeRL §5.3 "a parent node's priority is the sum of its children's").

Drafting (`draft`) anchors on the longest suffix of the context (at most `max_match`
tokens, at least `min_match`: RhymeRL's "prefix 7, falling back to 3") that is a node, and
takes the highest-weight child (ties: smaller token id). It then re-anchors on the context
extended by that token for the next one. A full suffix tree would instead keep walking
below the matched node; re-anchoring bounds the conditioning context to `max_match`
tokens, which is the deliberate deviation that lets the simulator replay the drafter
exactly over recorded tokens with array operations (sim/token_replay.py). Multi-path
drafting (Seer §5: top-k branching) takes the k highest-weight children at the anchor and
continues each path greedily.

Pure Python (no numpy): the live executor can draft with it directly.

>>> t = SuffixTree(min_match=2, max_match=3)
>>> t.extend(0, [5, 6, 7, 8, 5, 6, 7, 9, 5, 6, 7, 8])
>>> t.draft([1, 5, 6], depth=3)
[[7, 8, 5]]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

# (re-exported: the simulator's replay and the policies name the rules from here)
from simctl.policies.draft_rule import Aimd as Aimd
from simctl.policies.draft_rule import DraftRule as DraftRule

Context = tuple[int, ...]


# The tie-breaker that keeps reward weights ordered by frequency among equal rewards.
REWARD_COUNT_EPS = 1e-3
# The n-gram (prompt lookup) drafter's match lengths, shared by the live engine's drafter
# and the simulator's exact replay of it.
NGRAM_MIN_MATCH = 2
NGRAM_MAX_MATCH = 4


def occurrence_weight(rule: DraftRule, reward: float | None) -> float:
    """Weight one occurrence adds to its branch."""
    if rule.weight == "reward":
        return float(reward or 0.0) + REWARD_COUNT_EPS
    return 1.0


def ranked(children: Mapping[int, float]) -> list[int]:
    """Child tokens best first: higher weight, then smaller token id (deterministic)."""
    return sorted(children, key=lambda t: (-children[t], t))


class SuffixTree:
    """Weighted suffix tree of bounded depth over reference sequences, appended incrementally."""

    def __init__(self, min_match: int = 3, max_match: int = 7) -> None:
        assert 1 <= min_match <= max_match
        self.min_match = min_match
        self.max_match = max_match
        self.nodes: dict[Context, dict[int, float]] = {}
        self._seqs: dict[object, list[int]] = {}
        self._counted: dict[object, int] = {}

    @classmethod
    def for_rule(cls, rule: DraftRule) -> SuffixTree:
        return cls(rule.min_match, rule.max_match)

    def extend(
        self, seq: object, tokens: Iterable[int], weight: float = 1.0, context: Sequence[int] = ()
    ) -> None:
        """Append `tokens` to reference sequence `seq` (created on first use with `context`
        as left context that is matched across but never counted as a next token, e.g. the
        prompt shared by a group)."""
        if seq not in self._seqs:
            self._seqs[seq] = list(context[-self.max_match :]) if context else []
            self._counted[seq] = len(self._seqs[seq])
        buf = self._seqs[seq]
        buf.extend(int(t) for t in tokens)
        lo, hi = self.min_match, self.max_match
        for e in range(self._counted[seq], len(buf)):
            tok = buf[e]
            for n in range(lo, min(hi, e) + 1):
                kids = self.nodes.setdefault(tuple(buf[e - n : e]), {})
                kids[tok] = kids.get(tok, 0.0) + weight
        self._counted[seq] = len(buf)

    def length(self, seq: object) -> int:
        """Tokens of `seq` indexed so far (left context included)."""
        return len(self._seqs.get(seq, ()))

    def anchor(self, context: Sequence[int]) -> dict[int, float] | None:
        """Children of the longest suffix of `context` that is a node, or None."""
        top = min(self.max_match, len(context))
        for n in range(top, self.min_match - 1, -1):
            kids = self.nodes.get(tuple(context[len(context) - n :]))
            if kids:
                return kids
        return None

    def draft(self, context: Sequence[int], depth: int, paths: int = 1) -> list[list[int]]:
        """Up to `paths` drafts of at most `depth` tokens each (empty list: no match)."""
        kids = self.anchor(context)
        if kids is None or depth < 1:
            return []
        out = []
        for first in ranked(kids)[:paths]:
            path = [first]
            ctx = [*context[-self.max_match :], first]
            while len(path) < depth:
                nxt = self.anchor(ctx)
                if nxt is None:
                    break
                tok = ranked(nxt)[0]
                path.append(tok)
                ctx = [*ctx, tok][-self.max_match :]
            out.append(path)
        return out


def accepted_length(paths: Sequence[Sequence[int]], actual: Sequence[int]) -> int:
    """Tokens accepted by exact-match verification of multi-path drafts against the tokens
    the target actually produces next (the longest agreeing prefix over the paths).

    >>> accepted_length([[1, 2, 3], [1, 4]], [1, 2, 9])
    2
    """
    best = 0
    for path in paths:
        n = 0
        for a, b in zip(path, actual, strict=False):
            if a != b:
                break
            n += 1
        best = max(best, n)
    return best
