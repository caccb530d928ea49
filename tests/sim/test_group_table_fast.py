"""The exact grouped drafter's bulk form (sim/group_index.py, sim/group_step.py: issue #17's
speed work) against its reference form (sim/group_table.py: dicts keyed by context hashes,
a block stepped token by token), on random token sequences over small vocabularies (so
contexts repeat, children tie and requests repeat themselves): the same table (contexts
seen, children and their counts), the same lookup and rank at every position and own
window, the same block, and the same replay through StepReplay call after call."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simctl.policies.draft_rule import DraftRule
from simctl.sim import group_step
from simctl.sim import kernels as sim_kernels
from simctl.sim.compiled import kernels
from simctl.sim.group_index import GroupIndex, dense_ids
from simctl.sim.group_step import NO_MATCH, BlockWindow, numpy_step_block, step_block
from simctl.sim.group_table import ABSENT, add_many, best, children, lookup, rank, reference_block
from simctl.sim.trace_tokens import TokenSequence, ngram_keys
from tests.factories import LinearCost, run_one
from tests.sim.test_token_replay import PROMPT, base_responses, replay_for, token_trace

# Both forms of a block: numpy's, and the compiled one (sim.kernels; numba is in the
# test extras) through `step_block`, which takes it where numba is installed.
STEPPERS: dict[str, Callable[..., tuple[np.ndarray, ...]]] = {
    "numpy": numpy_step_block,
    "compiled": step_block,
}

# ------------------------------------------------------------------------------ dense_ids
HIGH = 0xF0F0_0000_0000_0000  # values differing only in their low bits share high bits
values = st.lists(
    st.one_of(
        st.integers(0, 2**64 - 1),
        st.integers(0, 40),
        st.integers(0, 7).map(lambda v: HIGH + v),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(values)
def test_dense_ids_equal_unique_and_a_stable_sort(vals: list[int]) -> None:
    arr = np.array(vals, np.uint64)
    ids, order, new, run = dense_ids(arr)
    if not len(arr):
        assert len(ids) == len(order) == len(new) == len(run) == 0
        return
    uniq, inv = np.unique(arr, return_inverse=True)
    assert ids.tolist() == inv.reshape(-1).tolist()
    assert order.tolist() == np.argsort(arr, kind="stable").tolist()
    sv = arr[order]
    assert new.tolist() == [True, *(sv[1:] != sv[:-1]).tolist()]
    assert int(new.sum()) == len(uniq)
    assert run.tolist() == ids[order].tolist()


# ------------------------------------------------------------------------- random groups
@dataclass
class Group:
    lo: int
    hi: int
    seqs: dict[int, TokenSequence]
    index: GroupIndex
    table: dict  # the reference form


def _sequence(prompt: list[int], resp: list[int], lo: int, hi: int) -> TokenSequence:
    """As sim.trace_tokens.StepTokens.sequence builds it."""
    tail = prompt[len(prompt) - hi :] if len(prompt) > hi else prompt
    arr = np.array(tail + resp, np.int64)
    return TokenSequence(arr, len(tail), ngram_keys(arr, lo, hi))


def _group(prompt: list[int], responses: list[list[int]], lo: int, hi: int) -> Group:
    """Both forms with the prompt indexed (as StepReplay._new_group does)."""
    p = np.array(prompt, np.int64)
    keys = np.zeros((hi - lo + 1, 0), np.uint64)
    table: dict = {}
    if len(p) > lo:
        keys = ngram_keys(p, lo, hi)[:, lo : len(p)]
        add_many(table, p[lo:].tolist(), keys.T.tolist())
    seqs = {m: _sequence(prompt, r, lo, hi) for m, r in enumerate(responses)}
    index = GroupIndex(p[lo:] if len(p) > lo else p[:0], keys, seqs)
    return Group(lo, hi, seqs, index, table)


def _append(g: Group, m: int, a: int, b: int) -> None:
    seq = g.seqs[m]
    o = seq.offset
    add_many(g.table, seq.seq[o + a : o + b].tolist(), seq.keys[:, o + a : o + b].T.tolist())
    g.index.append(m, a, b)


@st.composite
def groups(draw: st.DrawFn) -> tuple[Group, list[int]]:
    """A group over a small vocabulary with each member's first visible[m] tokens appended
    in random batches."""
    vocab = draw(st.integers(1, 6))
    tok = st.integers(0, vocab - 1)
    lo = draw(st.integers(1, 3))
    hi = lo + draw(st.integers(0, 3))
    prompt = draw(st.lists(tok, max_size=9))
    responses = draw(st.lists(st.lists(tok, max_size=60), min_size=1, max_size=4))
    g = _group(prompt, responses, lo, hi)
    g.index.wide = draw(st.sampled_from([0, 1, 16]))  # 0: every merged rank in numpy
    visible = []
    for m, r in enumerate(responses):
        cuts = sorted(draw(st.lists(st.integers(0, len(r)), max_size=4)))
        done = 0
        for c in cuts:
            if c > done:
                _append(g, m, done, c)
                done = c
        visible.append(done)
    return g, visible


def _same_table(g: Group) -> None:
    """Every context of the members: seen exactly where the dict holds it, with the same
    children and counts; equal hashes share one id, distinct ones never do."""
    by_key: dict[int, int] = {}
    for m, seq in g.seqs.items():
        keys = seq.keys[:, seq.offset : len(seq.seq)].T.ravel().tolist()
        for k, c in zip(keys, g.index.seqs[m].cid.tolist(), strict=True):
            assert by_key.setdefault(k, c) == c
            if k == 0:
                assert c == g.index.null and not g.index.seen[c]
            elif k in g.table:
                assert g.index.seen[c] and g.index.children(c) == children(g.table[k])
            else:
                assert not g.index.seen[c]
    ids = [c for k, c in by_key.items() if k]
    assert len(set(ids)) == len(ids)


@settings(max_examples=200, deadline=None)
@given(groups())
def test_group_index_holds_the_reference_table(case: tuple[Group, list[int]]) -> None:
    _same_table(case[0])


def _window(g: Group, m: int, visible: int, pos0: int, stop: int) -> tuple[int, list[int], list[list[int]]]:
    """(vis, window tokens, window keys) of member m at pos0, as StepReplay slices them."""
    seq = g.seqs[m]
    vis = min(visible, pos0)
    a, b = seq.offset + vis, seq.offset + stop
    return vis, seq.seq[a:b].tolist(), seq.keys[:, a:b].T.tolist()


@settings(max_examples=200, deadline=None)
@given(groups(), st.data())
def test_every_lookup_and_rank_equal_the_reference(
    case: tuple[Group, list[int]], data: st.DataObject
) -> None:
    """At every window position q and own window end i <= q (both the precomputed ranks
    and the exact own-window path)."""
    g, visible = case
    m = data.draw(st.integers(0, len(g.seqs) - 1))
    length = len(g.seqs[m].seq) - g.seqs[m].offset
    pos0 = data.draw(st.integers(0, length))
    vis, toks, keys = _window(g, m, visible[m], pos0, length)
    i0 = pos0 - vis
    if i0 >= len(toks):
        return
    win = BlockWindow(g.index, g.index.seqs[m], toks, vis, i0)
    for i in range(i0, len(toks)):
        over: dict = {}
        add_many(over, toks[:i], keys[:i])
        for q in range(i, len(toks)):
            kids = lookup(g.table, over, keys[q])
            want = NO_MATCH if kids is None else rank(kids, toks[q])
            assert win.rank(q, i) == want
            if kids is not None:  # the chained check of the reference is rank 0
                assert (best(kids) == toks[q]) == (want == 0)


@settings(max_examples=300, deadline=None)
@given(groups(), st.data())
def test_blocks_equal_the_reference(case: tuple[Group, list[int]], data: st.DataObject) -> None:
    g, visible = case
    m = data.draw(st.integers(0, len(g.seqs) - 1))
    length = len(g.seqs[m].seq) - g.seqs[m].offset
    pos0 = data.draw(st.integers(0, length))
    stop = data.draw(st.integers(pos0, length))
    # a replica row may stand behind what its request made visible (vis = pos0 then)
    vis, toks, keys = _window(g, m, visible[m], pos0, stop)
    depth, paths, iterations = (
        data.draw(st.integers(1, 5)),
        data.draw(st.integers(1, 3)),
        data.draw(st.integers(0, 40)),
    )
    want = reference_block(g.table, toks, keys, pos0 - vis, depth, paths, iterations)
    for form, stepper in STEPPERS.items():
        got = stepper(g.index, g.index.seqs[m], toks, vis, pos0 - vis, depth, paths, iterations)
        emitted, after, drafted, accepted = (x.tolist() for x in got)
        assert emitted == want[0], form
        assert after == [vis + a for a in want[1]], form
        assert drafted == want[2] and accepted == want[3], form


def _random_case(rng: random.Random) -> tuple[Group, list[int], int, int, int]:
    """A random group with random visible prefixes, and a request's (member, pos0, stop)."""
    vocab, lo = rng.choice([1, 2, 3, 4, 12]), rng.randint(1, 2)
    hi = lo + rng.randint(0, 2)
    prompt = [rng.randrange(vocab) for _ in range(rng.randint(0, 5))]
    responses = [[rng.randrange(vocab) for _ in range(rng.randint(0, 30))] for _ in range(rng.randint(1, 3))]
    g = _group(prompt, responses, lo, hi)
    g.index.wide = rng.choice([0, 2, 16])
    visible = []
    for m, r in enumerate(responses):
        visible.append(rng.randint(0, len(r)))
        _append(g, m, 0, visible[-1])
    m = rng.randrange(len(responses))
    pos0 = rng.randint(0, len(responses[m]))
    return g, visible, m, pos0, rng.randint(pos0, len(responses[m]))


@pytest.mark.parametrize("seed", range(4))
def test_blocks_equal_the_reference_on_many_seeded_groups(seed: int) -> None:
    """Hypothesis's examples favour small cases; these favour long accepted runs ending on a
    position whose own occurrences change its rank (the rarer paths of step_block)."""
    rng = random.Random(seed)
    for _ in range(400):
        g, visible, m, pos0, stop = _random_case(rng)
        vis, toks, keys = _window(g, m, visible[m], pos0, stop)
        depth, paths, iterations = rng.randint(1, 5), rng.randint(1, 3), rng.randint(0, 40)
        want = reference_block(g.table, toks, keys, pos0 - vis, depth, paths, iterations)
        for form, stepper in STEPPERS.items():
            got = stepper(g.index, g.index.seqs[m], toks, vis, pos0 - vis, depth, paths, iterations)
            assert [x.tolist() for x in got] == [want[0], [vis + a for a in want[1]], want[2], want[3]], form


# ----------------------------------------------------------------- through StepReplay
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_step_replay_equals_the_reference_call_after_call(data: st.DataObject) -> None:
    """Siblings and the request advance between calls (batched appends of 4 tokens); each
    call's block and ledger plan equal the reference's over a dict table kept alongside."""
    vocab = data.draw(st.integers(2, 6))
    group = data.draw(
        st.lists(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=50), min_size=2, max_size=4)
    )
    source = data.draw(st.sampled_from(["group", "own"]))
    rule = DraftRule(source=source, min_match=2, max_match=3, append_tokens=4)  # type: ignore[arg-type]
    replay = replay_for(token_trace([group]), 0, {"suffix": rule})
    st_ = replay.state
    prompt = np.array(PROMPT, np.int64)
    base: dict = {}
    add_many(base, prompt[2:].tolist(), ngram_keys(prompt, 2, 3)[:, 2 : len(prompt)].T.tolist())
    tables = {key: ({**base}, {}) for key in ([0] if source == "group" else range(len(group)))}
    for _ in range(data.draw(st.integers(1, 12))):
        for m, r in enumerate(group):  # everyone may move on
            st_.generated[m] = min(len(r), int(st_.generated[m]) + data.draw(st.integers(0, 9)))
        rid = data.draw(st.integers(0, len(group) - 1))
        depth, paths, iterations = (
            data.draw(st.integers(1, 4)),
            data.draw(st.integers(1, 2)),
            data.draw(st.integers(1, 20)),
        )
        table, seen = tables[0 if source == "group" else rid]
        members = range(len(group)) if source == "group" else [rid]
        for m in members:
            seq = replay.tokens.sequence(m, rule)
            vis = int(st_.generated[m]) // 4 * 4
            old = seen.get(m, 0)
            a, b = seq.offset + old, seq.offset + vis
            add_many(table, seq.seq[a:b].tolist(), seq.keys[:, a:b].T.tolist())
            seen[m] = max(old, vis)
        pos0 = int(st_.generated[rid])
        seq = replay.tokens.sequence(rid, rule)
        vis = min(seen[rid], pos0)
        stop = seq.offset + min(replay.tokens.end(rid), pos0 + iterations * (depth + 1))
        a = seq.offset + vis
        want = reference_block(
            table,
            seq.seq[a:stop].tolist(),
            seq.keys[:, a:stop].T.tolist(),
            pos0 - vis,
            depth,
            paths,
            iterations,
        )
        got = replay._group_exact(rule, rid, depth, paths, iterations)
        assert got[: len(want[0])].tolist() == want[0] and (got[len(want[0]) :] == 1).all()
        plan = replay.ledger.plans.pop(rid)
        assert plan.pos_after.tolist() == [vis + x for x in want[1]]
        assert plan.drafted.tolist() == want[2] and plan.accepted.tolist() == want[3]
        st_.generated[rid] = (
            int(plan.pos_after[data.draw(st.integers(0, len(want[1]) - 1))]) if want[1] else pos0
        )


# ---------------------------------------------------------------- the compiled form
def test_the_compiled_form_runs_where_numba_is_installed_and_yields_to_the_switch(monkeypatch) -> None:
    """numba is in the test extras: without this, the tests above would compare the numpy
    form with itself. SIMCTL_NO_NUMBA=1 turns the compiled form off (the fallback path)."""
    import numba  # noqa: F401  (the test extras install it)

    assert kernels() is sim_kernels
    assert sim_kernels.ABSENT == ABSENT and sim_kernels.NO_MATCH == NO_MATCH
    monkeypatch.setenv("SIMCTL_NO_NUMBA", "1")
    assert kernels() is None
    monkeypatch.setattr(group_step, "numpy_step_block", lambda *a: ("numpy",))
    assert step_block(*[None] * 8) == ("numpy",)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["seer", "seer-no-group-context"])
def test_a_seer_replay_is_identical_with_and_without_the_compiled_form(monkeypatch, name: str) -> None:
    """The whole replay (every request's finish, the draft counters) is the same whichever
    form steps the blocks: the compiled loop is exact, not an approximation."""
    _, group = base_responses(3, 8, 400)
    trace = token_trace([group, group[::-1]])
    spec = f"{name}:chunk_tokens=64,tick_iterations=8"
    runs = []
    for off in ("0", "1"):
        monkeypatch.setenv("SIMCTL_NO_NUMBA", off)
        runs.append(run_one(trace, spec, cluster="h100x2:tp1", cost=LinearCost()))
    fast, slow = runs
    assert fast.counters == slow.counters and fast.counters.get("replay_drafted", 0) > 0
    assert [s.rollout_makespan_s for s in fast.steps] == [s.rollout_makespan_s for s in slow.steps]
    pd.testing.assert_frame_equal(pd.concat(fast.requests), pd.concat(slow.requests))


def test_an_unusable_numba_falls_back_to_numpy_with_a_warning(monkeypatch) -> None:
    """numba installed but unable to load the kernels (say, no writable cache directory):
    the replay runs the numpy form, and says so once, instead of failing."""
    from simctl.sim import compiled

    def broken(name: str) -> None:
        raise RuntimeError("cannot cache function 'step_block': no locator available")

    monkeypatch.setattr(compiled, "_loaded", [])
    monkeypatch.setattr(compiled.importlib, "import_module", broken)
    monkeypatch.delenv("SIMCTL_NO_NUMBA", raising=False)
    with pytest.warns(RuntimeWarning, match="using numpy: cannot cache"):
        assert kernels() is None
    assert kernels() is None  # (remembered: warned once)


def test_a_draw_brings_each_group_up_to_date_once_with_the_same_replay(monkeypatch) -> None:
    """Within one draw nobody generates, so each group is caught up with its siblings once
    per draw, not once per row: the replay equals one that catches up at every row."""
    from simctl.sim.token_replay import StepReplay

    _, group = base_responses(5, 8, 400)
    trace = token_trace([group, group[::-1]])
    spec = "seer:chunk_tokens=64,tick_iterations=8"
    once = run_one(trace, spec, cluster="h100x2:tp1", cost=LinearCost())
    calls = []
    every_row = StepReplay._group

    def always(self, rule, rid, caught=None):  # type: ignore[no-untyped-def]
        calls.append(caught is not None)
        return every_row(self, rule, rid, None)

    monkeypatch.setattr(StepReplay, "_group", always)
    each = run_one(trace, spec, cluster="h100x2:tp1", cost=LinearCost())
    assert calls and all(calls)  # (the draw passes its set)
    assert once.counters == each.counters and once.counters["replay_drafted"] > 0
    pd.testing.assert_frame_equal(pd.concat(once.requests), pd.concat(each.requests))


@pytest.mark.parametrize("seed", range(3))
def test_blocks_equal_the_reference_on_responses_that_repeat_themselves(seed: int) -> None:
    """A response looping over a few tokens (the long tail's degenerate repetitions) puts
    hundreds of its own occurrences behind one context: the compiled form's sort of them
    switches from insertion to numpy's past 32, and both must still rank as the reference."""
    rng = random.Random(seed)
    loop = [rng.randrange(3) for _ in range(rng.randint(2, 4))]
    responses = [[t if rng.random() > 0.1 else rng.randrange(3) for t in loop * 80] for _ in range(2)]
    g = _group([5, 6, 7], responses, 1, 2)
    _append(g, 1, 0, len(responses[1]) // 2)  # a sibling half indexed; the request none
    vis, toks, keys = _window(g, 0, 0, 0, len(responses[0]))
    for i0, depth in [(0, 4), (150, 3), (len(toks) - 20, 5)]:
        want = reference_block(g.table, toks, keys, i0, depth, 2, 400)
        for form, stepper in STEPPERS.items():
            got = stepper(g.index, g.index.seqs[0], toks, vis, i0, depth, 2, 400)
            assert [x.tolist() for x in got] == [want[0], [vis + a for a in want[1]], want[2], want[3]], form
