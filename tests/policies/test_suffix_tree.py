"""The suffix-tree drafter against a brute-force matcher, its weights, and AIMD windows."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simctl.policies.suffix_tree import (
    Aimd,
    DraftRule,
    SuffixTree,
    accepted_length,
    occurrence_weight,
    ranked,
)


def brute_children(refs: list[tuple[list[int], float]], context: list[int], lo: int, hi: int) -> dict:
    """Children of the longest suffix of `context` (lo..hi tokens) followed by a token in
    some reference: a plain scan of every reference position."""
    for n in range(min(hi, len(context)), lo - 1, -1):
        pat = context[len(context) - n :]
        kids: dict[int, float] = {}
        for seq, w in refs:
            for e in range(n, len(seq)):
                if seq[e - n : e] == pat:
                    kids[seq[e]] = kids.get(seq[e], 0.0) + w
        if kids:
            return kids
    return {}


def brute_draft(refs, context, depth, paths, lo, hi) -> list[list[int]]:
    kids = brute_children(refs, context, lo, hi)
    out = []
    for first in sorted(kids, key=lambda t: (-kids[t], t))[:paths]:
        path = [first]
        while len(path) < depth:
            nxt = brute_children(refs, list(context) + path, lo, hi)
            if not nxt:
                break
            path.append(min(nxt, key=lambda t: (-nxt[t], t)))
        out.append(path)
    return out


def repetitive(rng: random.Random, n: int, vocab: int) -> list[int]:
    """Phrases that recur with edits: the kind of text grouped drafting feeds on."""
    phrases = [[rng.randrange(vocab) for _ in range(rng.randint(3, 8))] for _ in range(4)]
    out: list[int] = []
    while len(out) < n:
        p = list(rng.choice(phrases))
        if rng.random() < 0.3:
            p[rng.randrange(len(p))] = rng.randrange(vocab)
        out.extend(p)
    return out[:n]


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    vocab=st.sampled_from([3, 6, 50]),
    kind=st.sampled_from(["random", "repetitive"]),
    lo_hi=st.sampled_from([(1, 3), (2, 4), (3, 7)]),
    paths=st.integers(1, 4),
)
def test_drafts_equal_brute_force(
    seed: int, vocab: int, kind: str, lo_hi: tuple[int, int], paths: int
) -> None:
    rng = random.Random(seed)
    lo, hi = lo_hi
    make = (
        (lambda n: [rng.randrange(vocab) for _ in range(n)])
        if kind == "random"
        else (lambda n: repetitive(rng, n, vocab))
    )
    refs = [(make(rng.randint(0, 60)), float(rng.choice([1, 2, 0.5]))) for _ in range(3)]
    tree = SuffixTree(lo, hi)
    for i, (seq, w) in enumerate(refs):
        # appended in pieces, as a growing response is
        cut = rng.randint(0, len(seq))
        tree.extend(i, seq[:cut], weight=w)
        tree.extend(i, seq[cut:], weight=w)
    for _ in range(10):
        context = make(rng.randint(0, 12))
        assert tree.draft(context, depth=6, paths=paths) == brute_draft(refs, context, 6, paths, lo, hi)


def test_left_context_is_matched_but_not_counted() -> None:
    tree = SuffixTree(min_match=2, max_match=2)
    tree.extend("a", [3, 4], context=[1, 2])
    # contexts spanning the prompt count ([1,2] -> 3, [2,3] -> 4); the prompt's own don't
    assert tree.nodes == {(1, 2): {3: 1.0}, (2, 3): {4: 1.0}}
    assert tree.draft([9, 1, 2], depth=3) == [[3, 4]]


def test_longest_match_wins_over_more_frequent_short_match() -> None:
    tree = SuffixTree(min_match=1, max_match=3)
    tree.extend(0, [1, 2, 3, 7])  # (1,2,3) -> 7 once
    tree.extend(1, [9, 3, 8, 5, 3, 8, 6, 3, 8])  # (3,) -> 8 three times
    assert tree.draft([1, 2, 3], depth=1) == [[7]]
    assert tree.draft([4, 4, 3], depth=1) == [[8]]


def test_reward_weights_pick_the_branch_with_the_highest_reward_sum() -> None:
    """RhymeRL §5.3: a branch's priority is the sum of its responses' rewards."""
    rule = DraftRule(source="history", min_match=2, max_match=2, weight="reward")
    tree = SuffixTree.for_rule(rule)
    tree.extend("wrong1", [1, 2, 5], weight=occurrence_weight(rule, 0.0))
    tree.extend("wrong2", [1, 2, 5], weight=occurrence_weight(rule, 0.0))
    tree.extend("right", [1, 2, 6], weight=occurrence_weight(rule, 1.0))
    assert tree.draft([1, 2], depth=1) == [[6]]  # one rewarded branch beats two unrewarded
    count = SuffixTree(2, 2)
    for name, seq in (("wrong1", [1, 2, 5]), ("wrong2", [1, 2, 5]), ("right", [1, 2, 6])):
        count.extend(name, seq)
    assert count.draft([1, 2], depth=1) == [[5]]  # by frequency instead
    # all-zero rewards still rank by frequency (the count tie-breaker)
    zero = SuffixTree(2, 2)
    for name, seq in (("a", [1, 2, 5]), ("b", [1, 2, 5]), ("c", [1, 2, 6])):
        zero.extend(name, seq, weight=occurrence_weight(rule, 0.0))
    assert zero.draft([1, 2], depth=1) == [[5]]


def test_ranked_breaks_ties_by_token_id_and_multipath_accepts_best_path() -> None:
    assert ranked({5: 1.0, 3: 1.0, 9: 2.0}) == [9, 3, 5]
    tree = SuffixTree(1, 1)
    tree.extend(0, [1, 2, 3, 1, 4, 5, 1, 2])
    paths = tree.draft([1], depth=2, paths=2)
    assert paths == [[2, 3], [4, 5]]
    assert accepted_length(paths, [4, 5, 0]) == 2
    assert accepted_length(paths, [2, 9]) == 1
    assert accepted_length([], [1]) == 0


def test_aimd_window_grows_by_two_to_the_cap_and_resets_on_any_rejection() -> None:
    """RhymeRL §5.4: start 2, +2 on a fully accepted draft up to 32, reset to 2."""
    a = Aimd()
    w, seen = a.start, []
    for _ in range(20):
        w = a.next(w, accepted=w, drafted=w)
        seen.append(w)
    assert seen[:5] == [4, 6, 8, 10, 12] and max(seen) == 32 and seen[-1] == 32
    assert a.next(32, accepted=31, drafted=32) == 2
    assert a.next(8, accepted=0, drafted=8) == 2
    assert a.next(8, accepted=0, drafted=0) == 8  # nothing drafted: nothing to learn
    assert a.next(8, accepted=3, drafted=3) == 10  # a short draft fully accepted still grows


def test_rule_rejects_inverted_match_lengths() -> None:
    with pytest.raises(AssertionError):
        DraftRule(source="group", min_match=5, max_match=3)
