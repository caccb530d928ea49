"""Exact replay of model-free drafters (sim/token_replay.py) against the pure drafter
(policies/suffix_tree.py), its wiring into the engine, and the no-token acceptance model."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from simctl.policies.suffix_tree import REWARD_COUNT_EPS, Aimd, DraftRule, SuffixTree, accepted_length
from simctl.sim.state import FINISHED, StepState
from simctl.sim.token_replay import StepReplay, TraceTokens, ngram_keys
from simctl.traces.io import Trace
from simctl.traces.schema import TraceMeta
from tests.factories import LinearCost, run_one

PROMPT = [101, 102, 103, 104, 105]


def mutate(rng: random.Random, seq: list[int], rate: float, vocab: int = 40) -> list[int]:
    return [rng.randrange(vocab) if rng.random() < rate else t for t in seq]


def token_trace(epochs: list[list[list[int]]], rewards: list[list[float]] | None = None) -> Trace:
    """One prompt group per step, step e in epoch e; `epochs[e]` are its responses."""
    rows = []
    for e, group in enumerate(epochs):
        for s, resp in enumerate(group):
            r = rewards[e][s] if rewards else 1.0
            rows.append((e, 0, s, e, len(PROMPT), len(resp), r, resp))
    df = pd.DataFrame(
        rows,
        columns=["step", "prompt_id", "sample", "epoch", "prompt_len", "response_len", "reward", "tokens"],
    )
    df["max_tokens"] = int(df["response_len"].max())
    df["accept_history"] = 0.5  # the engine needs the columns; exact replay ignores them
    df["accept_suffix"] = 0.5
    df["finish_reason"] = np.where(df["response_len"] == df["max_tokens"], "length", "stop")
    lists = {
        "prompt_tokens": pa.array([PROMPT] * len(df), type=pa.list_(pa.int32())),
        "response_tokens": pa.array(df.pop("tokens").tolist(), type=pa.list_(pa.int32())),
    }
    meta = TraceMeta(model="qwen2.5-7b", group_size=len(epochs[0]), preset="test", seed=0)
    return Trace(df=df, meta=meta, lists=lists)


def replay_for(trace: Trace, step: int, rules: dict[str, DraftRule]) -> StepReplay:
    frame = trace.df[trace.df["step"] == step]
    state = StepState.from_frame(frame, step)
    return StepReplay(state, trace.df.index.get_indexer(frame.index), TraceTokens(trace), rules)


def base_responses(seed: int, n: int, length: int) -> tuple[random.Random, list[list[int]]]:
    rng = random.Random(seed)
    phrases = [[rng.randrange(40) for _ in range(rng.randint(4, 9))] for _ in range(6)]
    out = []
    for _ in range(n):
        seq: list[int] = []
        while len(seq) < length:
            seq.extend(rng.choice(phrases) if rng.random() < 0.8 else [rng.randrange(40)])
        out.append(mutate(rng, seq[: rng.randint(length // 2, length)], 0.05))
    return rng, out


def test_ngram_keys_hash_equal_ngrams_equally() -> None:
    seq = np.array([1, 2, 3, 9, 1, 2, 3, 7])
    k = ngram_keys(seq, 2, 3)  # rows: order 3, order 2
    assert k[0, 3] == k[0, 7] and k[1, 3] == k[1, 7]  # (1,2,3) and (2,3) before positions 3 and 7
    assert k[1, 2] != k[1, 3] and k[0, 3] != k[1, 3]
    assert (k[0, :3] == 0).all() and (k[1, :2] == 0).all()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_history_verdicts_equal_drafting_with_the_suffix_tree(seed: int) -> None:
    rng, prev = base_responses(seed, 4, 120)
    cur = [mutate(rng, p, 0.1) for p in prev]
    rewards = [[1.0, 0.0, 1.0, 0.0], [1.0] * 4]
    trace = token_trace([prev, cur], rewards)
    rule = DraftRule(source="history", weight="reward")
    replay = replay_for(trace, 1, {"history": rule})
    tree = SuffixTree.for_rule(rule)
    for i, resp in enumerate(prev):
        tree.extend(i, resp, weight=rewards[0][i] + REWARD_COUNT_EPS, context=PROMPT)
    depth = 40
    for rid, resp in enumerate(cur):
        run, anchor = replay.history.static_verdicts(rule, rid)
        for p in range(len(resp) + 1):
            paths = tree.draft(PROMPT + resp[:p], depth=depth)
            assert bool(paths) == bool(anchor[p])
            assert min(int(run[p]), depth) == accepted_length(paths, resp[p:])


@pytest.mark.parametrize(
    ("seed", "paths", "source"), [(0, 1, "group"), (1, 2, "group"), (2, 4, "group"), (3, 1, "own")]
)
def test_group_replay_equals_drafting_with_the_suffix_tree(seed: int, paths: int, source: str) -> None:
    _, group = base_responses(seed, 4, 150)
    trace = token_trace([group])
    rule = DraftRule(source=source, append_tokens=8)  # type: ignore[arg-type]
    replay = replay_for(trace, 0, {"suffix": rule})
    st = replay.state
    st.generated[:] = [min(g, len(r)) for g, r in zip([40, 17, 3, 0], group, strict=True)]
    rid, depth, iterations = 2, 5, 30
    got = replay._group_exact(rule, rid, depth, paths, iterations)
    # the same drafting with the pure tree: siblings (and the request itself) indexed in
    # whole batches of 8 tokens, the request's newer tokens as it generates them
    tree = SuffixTree.for_rule(rule)
    tree.extend("prompt", PROMPT)
    members = range(len(group)) if source == "group" else [rid]
    for m in members:
        tree.extend(m, group[m][: int(st.generated[m]) // 8 * 8], context=PROMPT)
    resp, pos = group[rid], int(st.generated[rid])
    tree.extend(rid, resp[tree.length(rid) - len(PROMPT) : pos])
    want = []
    while pos < len(resp) and len(want) < iterations:
        acc = accepted_length(tree.draft(PROMPT + resp[:pos], depth=depth, paths=paths), resp[pos:])
        emitted = min(acc + 1, len(resp) - pos)
        tree.extend(rid, resp[pos : pos + emitted])
        want.append(emitted)
        pos += emitted
    assert got[: len(want)].tolist() == want


def test_exact_history_replay_is_the_same_fast_forward_and_per_iteration() -> None:
    rng, prev = base_responses(5, 8, 400)
    cur = [mutate(rng, p, 0.08) for p in prev]
    trace = token_trace([prev, cur])
    ff = run_one(trace, "histospec-only", cluster="h100x2:tp1", cost=LinearCost())
    it = run_one(trace, "histospec-only", cluster="h100x2:tp1", cost=LinearCost(), per_iteration=True)
    assert ff.steps[1].rollout_makespan_s == pytest.approx(it.steps[1].rollout_makespan_s, rel=1e-9)
    for key in ("replay_iterations", "replay_drafted", "replay_accepted"):
        assert ff.counters[key] == it.counters[key] > 0
    req = pd.concat(ff.requests)
    assert req["finish_s"].notna().all()
    assert ff.counters["replay_accepted"] <= ff.counters["replay_drafted"]
    # drafting pays: the second epoch is faster than the same lengths without speculation
    plain = run_one(trace, "verl", cluster="h100x2:tp1", cost=LinearCost())
    assert ff.steps[1].rollout_makespan_s < plain.steps[1].rollout_makespan_s


def test_aimd_window_reaches_its_cap_on_a_response_repeated_exactly() -> None:
    rng = random.Random(3)
    resp = [rng.randrange(10_000) for _ in range(300)]  # no repeats: one history match path
    trace = token_trace([[resp], [resp]])
    rule = DraftRule(source="history", aimd=Aimd(2, 2, 32))
    replay = replay_for(trace, 1, {"history": rule})
    replay.state.generated[0] = 10
    out = replay.history.draft(rule, np.array([0]), np.array([4]), 40)
    plan = replay.ledger.plans[0]
    windows = [2, *plan.window_after.tolist()]
    assert out[0, :5].tolist() == [3, 5, 7, 9, 11]  # every draft accepted, +1 bonus token
    assert windows[:17] == [2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 32]
    assert (plan.accepted == plan.drafted).all()


def test_group_acceptance_model_rises_with_visible_siblings_and_paths() -> None:
    """Without token ids: Seer Table 2, by the references a request can see."""
    lengths = [400] * 8
    df = pd.DataFrame(
        {
            "step": 0,
            "prompt_id": 0,
            "sample": range(8),
            "prompt_len": 10,
            "response_len": lengths,
            "max_tokens": 400,
            "finish_reason": "length",
            "accept_suffix": 0.5,
        }
    )
    state = StepState.from_frame(df, 0)
    replay = StepReplay(state, np.arange(8), None, {"suffix": DraftRule(source="group")})
    rule = replay.rules["suffix"]
    rid, chain = np.array([0]), np.array([0.5])
    state.generated[0] = 200
    alone = replay._group_model(rule, rid, chain, np.array([1]))
    state.generated[1:] = 200  # seven siblings level with it
    level = replay._group_model(rule, rid, chain, np.array([1]))
    state.state[1:] = FINISHED
    wide = replay._group_model(rule, rid, chain, np.array([4]))
    assert alone[0] < level[0] < wide[0]
    own = replay._group_model(DraftRule(source="own"), rid, chain, np.array([1]))
    assert own[0] == pytest.approx(alone[0])


@pytest.mark.parametrize("name", ["seer", "seer-no-group-context", "seer-no-adapt"])
def test_seer_replays_its_grouped_drafter_exactly_on_a_token_trace(name: str) -> None:
    _, group = base_responses(7, 8, 600)
    trace = token_trace([group])
    spec = f"{name}:chunk_tokens=128,tick_iterations=16"
    run = run_one(trace, spec, cluster="h100x2:tp1", cost=LinearCost())
    req = pd.concat(run.requests)
    assert req["finish_s"].notna().all()
    c = run.counters
    assert 0 < c["replay_accepted"] <= c["replay_drafted"]
    assert run.steps[0].mean_accept_len > 1.0


def test_exact_replay_charges_verification_for_what_was_really_drafted() -> None:
    """A history with nothing in common with the responses drafts nothing: exact replay
    charges plain decoding per iteration, not the configured draft length."""
    rng = random.Random(11)
    prev = [[rng.randrange(1000, 2000) for _ in range(300)] for _ in range(4)]
    cur = [[rng.randrange(3000, 4000) for _ in range(300)] for _ in range(4)]
    trace = token_trace([prev, cur])
    cost = LinearCost(per_new_token_s=1e-3, draft_s=0.0)  # verification tokens dominate
    spec = run_one(trace, "histospec-only", cluster="h100x1:tp1", cost=cost)
    plain = run_one(trace, "verl", cluster="h100x1:tp1", cost=cost)
    assert spec.counters["replay_iterations"] > 0 and spec.counters["replay_drafted"] == 0
    assert spec.steps[1].rollout_makespan_s == pytest.approx(plain.steps[1].rollout_makespan_s, rel=1e-9)


def test_model_blocks_go_on_past_fetch_ticks_until_the_acceptance_drifts(monkeypatch) -> None:
    """Without token ids, Seer's grouped SD samples acceptance from Table 2 by visible
    siblings; a block re-plans at a fetch tick only when that acceptance moved by more than
    MODEL_DRIFT. Re-planning at every tick instead gives the same rollout in distribution."""
    import simctl.sim.worker as worker
    from tests.factories import make_frame, make_trace, random_lengths

    lengths = random_lengths(7, 64, lo=200, hi=3000)
    trace = make_trace(make_frame(lengths, group_size=8, accept={"suffix": 0.6}))
    kw = dict(cluster="h100x4:tp1", cost=LinearCost())
    lazy = [run_one(trace, "seer:tick_iterations=16", seed=s, **kw) for s in range(8)]
    monkeypatch.setattr(worker, "MODEL_DRIFT", -1.0)  # every tick re-plans
    eager = [run_one(trace, "seer:tick_iterations=16", seed=s, **kw) for s in range(8)]
    assert sum(r.counters["blocks"] for r in lazy) < 0.7 * sum(r.counters["blocks"] for r in eager)
    mk_lazy = np.mean([r.steps[0].rollout_makespan_s for r in lazy])
    mk_eager = np.mean([r.steps[0].rollout_makespan_s for r in eager])
    assert mk_lazy == pytest.approx(mk_eager, rel=0.02)
    acc_lazy = np.mean([r.steps[0].mean_accept_len for r in lazy])
    acc_eager = np.mean([r.steps[0].mean_accept_len for r in eager])
    assert acc_lazy == pytest.approx(acc_eager, rel=0.02)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_exact_ngram_replay_equals_the_live_prompt_lookup_drafter(seed: int) -> None:
    """The simulator's exact replay of `ngram` drafts what the torch engine's drafter would
    (live.acceptance.replay_model_free runs that drafter): same iterations, drafts, hits."""
    pytest.importorskip("torch")
    from simctl.live.acceptance import replay_model_free
    from simctl.policies.suffix_tree import NGRAM_MAX_MATCH, NGRAM_MIN_MATCH

    _, responses = base_responses(seed, 3, 300)
    trace = token_trace([responses])
    rule = DraftRule(source="lookup", min_match=NGRAM_MIN_MATCH, max_match=NGRAM_MAX_MATCH)
    for rid, resp in enumerate(responses):
        for gamma in (1, 4):
            replay = replay_for(trace, 0, {"ngram": rule})
            out = replay.lookup.draft(rule, rid, gamma, len(resp))
            plan = replay.ledger.plans[rid]
            tokens, iterations, drafted, hits = replay_model_free("ngram", PROMPT, resp, [], gamma)
            assert int(out[: len(plan.pos_after)].sum()) == tokens == len(resp)
            assert len(plan.pos_after) == iterations
            assert int(plan.drafted.sum()) == drafted and int((plan.drafted > 0).sum()) == hits
            assert int(plan.accepted.sum()) == len(resp) - iterations


def test_ngram_policy_replays_exactly_on_a_token_trace() -> None:
    _, responses = base_responses(9, 8, 300)
    trace = token_trace([responses])
    trace.df["accept_ngram"] = 0.5  # the engine needs the column; exact replay ignores it
    run = run_one(trace, "ngram", cluster="h100x2:tp1", cost=LinearCost())
    c = run.counters
    assert c["replay_iterations"] > 0 and 0 < c["replay_accepted"] <= c["replay_drafted"]
    req = pd.concat(run.requests)
    assert int(req["response_len"].sum()) == sum(map(len, responses))
    # the same run again: exact replay has no randomness
    again = run_one(trace, "ngram", cluster="h100x2:tp1", cost=LinearCost(), seed=5)
    assert again.steps[0].rollout_makespan_s == run.steps[0].rollout_makespan_s
