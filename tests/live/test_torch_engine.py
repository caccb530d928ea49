"""Tests of the torch-native engine: losslessness of every speculative mode, batch
independence, counters, stopping/abort, sampling and W4 quantisation.

All on a tiny random Llama on CPU in fp32. Reference outputs ("plain decoding") come from the
same engine with no drafter, and are themselves checked against a naive full-recompute HF loop.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers is imported: no hub access

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from simctl.live.torch_engine import (  # noqa: E402
    Drafter,
    KVBuffer,
    ModelDrafter,
    NgramDrafter,
    SamplingParams,
    SuffixDrafter,
    TorchEngine,
    gumbel_noise,
    quantize_w4_rtn,
    qwen2_5_7b_config,
    ragged_forward,
    random_model,
    request_key,
    rtn_quantize,
    run_to_completion,
    sample_tokens,
    tiny_llama_config,
)

MAX_TOKENS = 24
TEMPERATURES = (0.0, 1.0)
FAST = settings(max_examples=8, deadline=None, derandomize=True, database=None)


def make_prompt(seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    return rng.integers(3, 256, size=int(rng.integers(3, 12))).tolist()


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    """Tiny ops gain nothing from intra-op threads, and OpenMP spin-waiting makes them
    several times slower when the 2 cores are shared with other test processes."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def target() -> torch.nn.Module:
    return random_model("tiny-llama", seed=0)


@pytest.fixture(scope="module")
def engine(target: torch.nn.Module) -> TorchEngine:
    return TorchEngine(target, max_batch=16)


@pytest.fixture(scope="module")
def drafters(target: torch.nn.Module) -> dict[str, Drafter]:
    small = tiny_llama_config(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1)
    return {
        "ngram": NgramDrafter(1, 3),
        "suffix": SuffixDrafter(),
        "small_model": ModelDrafter(random_model(small, seed=7)),
        "w4_self": ModelDrafter(quantize_w4_rtn(target)),
        "unrelated": ModelDrafter(random_model("tiny-llama", seed=1)),
    }


@pytest.fixture(scope="module")
def plain(engine: TorchEngine):
    """Memoised plain decoding: (request_id, prompt seed, sampling seed, temperature) -> ids."""
    memo: dict[tuple, list[int]] = {}

    def run(rid: str, prompt_seed: int, seed: int, temperature: float) -> list[int]:
        key = (rid, prompt_seed, seed, temperature)
        if key not in memo:
            engine.add_request(rid, make_prompt(prompt_seed), MAX_TOKENS, seed, (), temperature=temperature)
            memo[key] = run_to_completion(engine)[rid].token_ids
        return memo[key]

    return run


# -- plain decoding is right -----------------------------------------------------------------


@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_plain_decoding_matches_naive_full_recompute(
    engine: TorchEngine, target: torch.nn.Module, plain, temperature: float
) -> None:
    """The engine's cached, batched path equals recomputing the full sequence each token."""
    rid, prompt = "naive", make_prompt(5)
    tokens = list(prompt)
    key = request_key(11, rid)
    with torch.no_grad():
        for _ in range(MAX_TOKENS):
            logits = target(torch.tensor([tokens])).logits[0, -1:]
            params = [SamplingParams(temperature)]
            tokens.append(int(sample_tokens(logits, [key], [len(tokens)], params)[0]))
    assert plain(rid, 5, 11, temperature) == tokens[len(prompt) :]


def test_ragged_forward_matches_unpadded_forward(target: torch.nn.Module) -> None:
    """Rows with different cache lengths and query counts give the logits of an unbatched
    forward over each full sequence (padding and explicit positions are transparent)."""
    seqs = [make_prompt(s) + make_prompt(s + 100) for s in range(3)]
    split = [2, len(seqs[1]) - 1, 5]  # cached prefix lengths
    buffers = []
    for seq, n in zip(seqs, split, strict=True):
        buf = KVBuffer()
        _, kv = ragged_forward(target, [buf], [seq[:n]], [[n - 1]])
        buf.append(kv[:, :, 0])
        buffers.append(buf)
    queries = [seq[n:] for seq, n in zip(seqs, split, strict=True)]
    rows = [list(range(len(q))) for q in queries]
    logits, _ = ragged_forward(target, buffers, queries, rows)
    with torch.no_grad():
        expected = torch.cat(
            [target(torch.tensor([s])).logits[0, n:] for s, n in zip(seqs, split, strict=True)]
        )
    torch.testing.assert_close(logits, expected, atol=1e-4, rtol=1e-4)


# -- (1) lossless --------------------------------------------------------------------------


@FAST
@given(
    seed=st.integers(0, 2**31 - 1),
    gamma=st.integers(1, 6),
    temperature=st.sampled_from(TEMPERATURES),
    name=st.sampled_from(["ngram", "small_model", "w4_self", "unrelated"]),
)
def test_lossless_single_drafter(
    engine: TorchEngine, drafters, plain, seed: int, gamma: int, temperature: float, name: str
) -> None:
    rid = f"single-{seed % 5}"
    engine.add_request(
        rid,
        make_prompt(seed % 5),
        MAX_TOKENS,
        seed,
        (),
        drafters[name],
        gamma,
        temperature=temperature,
    )
    res = run_to_completion(engine)[rid]
    assert res.token_ids == plain(rid, seed % 5, seed, temperature)


@pytest.mark.parametrize("temperature", TEMPERATURES)
@pytest.mark.parametrize("seed", [0, 1])
def test_lossless_suffix_with_group_siblings(
    engine: TorchEngine, drafters, plain, temperature: float, seed: int
) -> None:
    """Three samples of one prompt in one group; the suffix drafter reads the siblings.
    The last sibling starts three steps late, so it can draft from siblings that are ahead
    (at T=0 all siblings decode the same text, so it must accept at least their lead)."""
    rids = [f"grp{seed}-{i}" for i in range(3)]
    expected = {rid: plain(rid, 3, seed, temperature) for rid in rids}
    out: dict[str, list[int]] = {rid: [] for rid in rids}
    accepted: dict[str, int] = dict.fromkeys(rids, 0)
    for step in range(100):
        if step in (0, 3):
            for rid in rids[:2] if step == 0 else rids[2:]:
                engine.add_request(
                    rid,
                    make_prompt(3),
                    MAX_TOKENS,
                    seed,
                    (),
                    drafters["suffix"],
                    4,
                    temperature=temperature,
                    group_id=("g", seed),
                )
        for delta in engine.step():
            out[str(delta.request_id)].extend(delta.new_token_ids)
            accepted[str(delta.request_id)] += delta.num_accepted
        if not engine.has_unfinished():
            break
    assert out == expected
    if temperature == 0.0:
        assert accepted[rids[2]] >= 3  # at least the lead the siblings had


@FAST
@given(
    seed=st.integers(0, 2**31 - 1),
    gammas=st.lists(st.integers(0, 5), min_size=4, max_size=4),
    temperature=st.sampled_from(TEMPERATURES),
)
def test_lossless_mixed_gammas_in_one_batch(
    engine: TorchEngine, drafters, plain, seed: int, gammas: list[int], temperature: float
) -> None:
    names = ["ngram", "small_model", "w4_self", "unrelated"]
    rids = [f"mixed-{i}" for i in range(4)]
    for i, (rid, name, gamma) in enumerate(zip(rids, names, gammas, strict=True)):
        engine.add_request(
            rid,
            make_prompt(i),
            MAX_TOKENS,
            seed,
            (),
            drafters[name] if gamma else None,
            gamma,
            temperature=temperature,
        )
    results = run_to_completion(engine)
    for i, rid in enumerate(rids):
        assert results[rid].token_ids == plain(rid, i, seed, temperature)


@FAST
@given(
    seed=st.integers(0, 2**31 - 1),
    schedule=st.lists(
        st.tuples(st.sampled_from(["ngram", "w4_self", "small_model", None]), st.integers(1, 5)),
        min_size=3,
        max_size=12,
    ),
    temperature=st.sampled_from(TEMPERATURES),
)
def test_lossless_gamma_changed_mid_generation(
    engine: TorchEngine, drafters, plain, seed: int, schedule, temperature: float
) -> None:
    rid = "switch"
    engine.add_request(rid, make_prompt(4), MAX_TOKENS, seed, (), temperature=temperature)
    out: list[int] = []
    step = 0
    while engine.has_unfinished():
        name, gamma = schedule[step % len(schedule)]
        engine.set_speculation(rid, drafters[name] if name else None, gamma if name else 0)
        for delta in engine.step():
            out.extend(delta.new_token_ids)
        step += 1
    assert out == plain(rid, 4, seed, temperature)


def test_lossless_tiny_qwen2() -> None:
    """The Qwen2 path (QKV biases) works the same way."""
    model = random_model("tiny-qwen2", seed=3)
    eng = TorchEngine(model)
    drafter = ModelDrafter(quantize_w4_rtn(model))
    outs = []
    for gamma in (0, 3):
        eng.add_request("q", [5, 6, 7], 16, 9, (), drafter if gamma else None, gamma)
        outs.append(run_to_completion(eng)["q"].token_ids)
    assert outs[0] == outs[1]


# -- (2) batch independence ----------------------------------------------------------------


@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_batch_independence(engine: TorchEngine, drafters, plain, temperature: float) -> None:
    """A request's output alone equals its output among others that have different prompt
    lengths, drafters, and join mid-flight (mixing prefill with decode)."""
    seed = 21
    engine.add_request("bi-0", make_prompt(0), MAX_TOKENS, seed, (), temperature=temperature)
    engine.add_request(
        "bi-1",
        make_prompt(1),
        MAX_TOKENS,
        seed,
        (),
        drafters["w4_self"],
        3,
        temperature=temperature,
    )
    out: dict[str, list[int]] = {"bi-0": [], "bi-1": [], "bi-2": []}
    for step in range(200):
        if step == 3:
            engine.add_request(
                "bi-2",
                make_prompt(2),
                MAX_TOKENS,
                seed,
                (),
                drafters["ngram"],
                2,
                temperature=temperature,
            )
        for delta in engine.step():
            out[str(delta.request_id)].extend(delta.new_token_ids)
        if not engine.has_unfinished():
            break
    for i in range(3):
        assert out[f"bi-{i}"] == plain(f"bi-{i}", i, seed, temperature)


def test_batch_limit_queues_requests(engine: TorchEngine, plain) -> None:
    """More requests than max_batch: the excess waits, and nothing changes in the output."""
    small = TorchEngine(engine.model, max_batch=2)
    for i in range(3):
        small.add_request(f"bi-{i}", make_prompt(i), MAX_TOKENS, 21, (), temperature=1.0)
    first = small.step()
    assert [d.request_id for d in first] == ["bi-0", "bi-1"]
    results = run_to_completion(small)
    assert results["bi-0"].token_ids == plain("bi-0", 0, 21, 1.0)[1:]
    assert results["bi-2"].token_ids == plain("bi-2", 2, 21, 1.0)


# -- (3) counters --------------------------------------------------------------------------


def test_counters_consistent_and_w4_beats_unrelated(engine: TorchEngine, drafters) -> None:
    rates: dict[str, list[float]] = {"w4_self": [], "unrelated": []}
    for temperature in TEMPERATURES:
        for name in rates:
            for i in range(4):
                rid = f"cnt-{name}-{i}"
                engine.add_request(
                    rid,
                    make_prompt(30 + i),
                    MAX_TOKENS,
                    i,
                    (),
                    drafters[name],
                    4,
                    temperature=temperature,
                )
            deltas = []
            while engine.has_unfinished():
                step_deltas = engine.step()
                deltas.extend(step_deltas)
                stats = engine.last_step
                assert stats is not None
                assert stats.num_drafted == sum(d.num_drafted for d in step_deltas)
                assert stats.num_accepted == sum(d.num_accepted for d in step_deltas)
            for d in deltas:
                assert 0 <= d.num_accepted <= d.num_drafted <= 4
                assert len(d.new_token_ids) <= d.num_accepted + 1
                # Emitted tokens = accepted drafts + one target sample, unless the run stopped.
                assert d.finished or len(d.new_token_ids) == d.num_accepted + 1
            drafted = sum(d.num_drafted for d in deltas)
            accepted = sum(d.num_accepted for d in deltas)
            assert drafted > 0
            rates[name].append(accepted / drafted)
    assert np.mean(rates["w4_self"]) > np.mean(rates["unrelated"]) + 0.2


def test_no_drafts_beyond_max_tokens(engine: TorchEngine, drafters) -> None:
    engine.add_request("cap", [9, 9, 9, 9], 3, 0, (), drafters["ngram"], 8, temperature=0.0)
    deltas = []
    while engine.has_unfinished():
        deltas.extend(engine.step())
    for d in deltas:
        assert d.num_drafted <= 2  # at most max_tokens - output - 1
    assert sum(len(d.new_token_ids) for d in deltas) == 3


# -- (4) abort and stopping ------------------------------------------------------------------


def test_abort(engine: TorchEngine, plain) -> None:
    expected = {f"ab-{i}": plain(f"ab-{i}", i, 5, 1.0) for i in (0, 2)}
    for i in range(3):
        engine.add_request(f"ab-{i}", make_prompt(i), MAX_TOKENS, 5, (), temperature=1.0)
    engine.step()
    engine.step()
    assert engine.abort("ab-1") is True
    assert engine.abort("ab-1") is False
    assert engine.abort("never-added") is False
    assert engine.num_unfinished == 2
    out = {rid: ref[:2] for rid, ref in expected.items()}
    while engine.has_unfinished():
        for delta in engine.step():
            assert delta.request_id != "ab-1"
            out[str(delta.request_id)].extend(delta.new_token_ids)
    assert out == expected  # aborting a neighbour does not perturb the others
    engine.add_request("ab-1", make_prompt(1), 4, 5, ())  # the id is reusable
    assert engine.abort("ab-1") is True
    assert not engine.has_unfinished()


@pytest.mark.parametrize("gamma", [0, 4])
def test_max_tokens_and_stop_tokens(engine: TorchEngine, drafters, plain, gamma: int) -> None:
    reference = plain("stop", 6, 2, 0.0)
    drafter = drafters["w4_self"] if gamma else None
    engine.add_request("stop", make_prompt(6), 7, 2, (), drafter, gamma, temperature=0.0)
    res = run_to_completion(engine)["stop"]
    assert res.token_ids == reference[:7]
    assert res.finish_reason == "length"

    stop_tok = reference[10]
    cut = reference.index(stop_tok) + 1
    engine.add_request("stop", make_prompt(6), MAX_TOKENS, 2, (stop_tok,), drafter, gamma, temperature=0.0)
    res = run_to_completion(engine)["stop"]
    assert res.token_ids == reference[:cut]
    assert res.finish_reason == "stop"


def test_default_stop_is_eos(engine: TorchEngine) -> None:
    eos = engine.eos_token_ids[0]
    engine.add_request(
        "eos", [eos, 7, eos, 7, eos, 7], 50, 0, drafter=NgramDrafter(), gamma=3, temperature=0.0, top_k=1
    )
    res = run_to_completion(engine)["eos"]
    assert res.finish_reason in ("stop", "length")
    assert (eos in res.token_ids) == (res.finish_reason == "stop")
    if res.finish_reason == "stop":
        assert res.token_ids[-1] == eos and res.token_ids.count(eos) == 1


def test_rejects_bad_requests(engine: TorchEngine) -> None:
    with pytest.raises(ValueError):
        engine.add_request("bad", [], 4, 0)
    with pytest.raises(ValueError):
        engine.add_request("bad", [1, 2], 4, 0, gamma=2)  # gamma without drafter
    with pytest.raises(ValueError):
        engine.add_request("bad", [1, 999], 4, 0)
    assert not engine.has_unfinished()


# -- sampling and drafters ---------------------------------------------------------------


def test_sampling_is_row_independent_and_matches_softmax() -> None:
    torch.manual_seed(0)
    logits = torch.randn(6, 8)
    keys = [request_key(1, f"r{i}") for i in range(6)]
    positions = [3, 3, 4, 100, 7, 7]
    params = [SamplingParams(1.0)] * 3 + [
        SamplingParams(0.0),
        SamplingParams(0.7, top_k=2),
        SamplingParams(1.0, top_p=0.5),
    ]
    full = sample_tokens(logits, keys, positions, params)
    perm = [5, 2, 0, 4, 1, 3]
    shuffled = sample_tokens(
        logits[perm], [keys[i] for i in perm], [positions[i] for i in perm], [params[i] for i in perm]
    )
    assert shuffled.tolist() == full[perm].tolist()
    for i in range(6):  # alone == in a batch
        assert (
            sample_tokens(logits[i : i + 1], keys[i : i + 1], positions[i : i + 1], params[i : i + 1]).item()
            == full[i].item()
        )
    assert full[3].item() == logits[3].argmax().item()
    assert full[4].item() in logits[4].topk(2).indices.tolist()

    # Frequencies over positions follow softmax(logits / T).
    row = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    n = 4000
    draws = sample_tokens(row.expand(n, -1), [keys[0]] * n, list(range(n)), [SamplingParams(1.0)] * n)
    freq = torch.bincount(draws, minlength=4).double() / n
    torch.testing.assert_close(freq, torch.softmax(row[0].double(), 0), atol=0.03, rtol=0)


def test_sampling_in_row_blocks_changes_no_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows are sampled in blocks (bounded temporaries, cost linear in rows): the same draws
    as one block of all rows."""
    from simctl.live.torch_engine import sampling

    torch.manual_seed(1)
    n = 3 * sampling.ROW_BLOCK + 2
    logits = torch.randn(n, 50)
    keys = [request_key(2, i % 5) for i in range(n)]
    positions = list(range(10, 10 + n))
    params = [SamplingParams(1.0), SamplingParams(0.0), SamplingParams(0.8, top_p=0.9)] * n
    blocked = sample_tokens(logits, keys, positions, params[:n])
    monkeypatch.setattr(sampling, "ROW_BLOCK", 10 * n)
    assert sample_tokens(logits, keys, positions, params[:n]).tolist() == blocked.tolist()


def test_gumbel_noise_depends_only_on_key_position_token() -> None:
    a = gumbel_noise([1, 2, 1], [5, 5, 6], 16, "cpu")
    b = gumbel_noise([1], [5], 32, "cpu")
    torch.testing.assert_close(a[0], b[0, :16])
    assert not torch.equal(a[0], a[1]) and not torch.equal(a[0], a[2])
    assert torch.isfinite(a).all()


def test_ngram_and_suffix_drafters() -> None:
    ngram = NgramDrafter(1, 3)
    assert ngram.propose([1, 2, 3, 4, 9, 9, 2, 3], [], 3) == [4, 9, 9]
    assert ngram.propose([1, 2, 3], [], 3) == []
    assert ngram.propose([5, 5, 5], [], 0) == []
    suffix = SuffixDrafter()
    mine = [1, 2, 3, 4]
    sibling_ahead = [1, 2, 3, 4, 7, 8, 9]
    assert suffix.propose(mine, [sibling_ahead], 3) == [7, 8, 9]
    # Most frequent continuation wins among equally long matches.
    siblings = [[3, 4, 5, 6], [3, 4, 5, 6], [3, 4, 8]]
    assert suffix.propose([3, 4], siblings, 2) == [5, 6]


def test_model_drafter_cache_reuse_equals_fresh(target: torch.nn.Module) -> None:
    """The prefix-keyed KV cache (reuse, rollback, clone for siblings) changes nothing."""
    model = quantize_w4_rtn(target)
    cached = ModelDrafter(model, max_entries=4)
    prompt = make_prompt(8)
    seqs = [prompt, [*prompt, 4, 5], [*prompt, 4, 6, 7], [*prompt, 4, 5, 9, 9, 1], prompt]
    for seq in seqs:
        assert cached.propose(seq, [], 4) == ModelDrafter(model).propose(seq, [], 4)
    batch = [([*prompt, 1], [], 3), ([*prompt, 1, 2], [], 2), (prompt, [], 0)]
    fresh = [ModelDrafter(model).propose(*item) for item in batch]
    assert cached.propose_batch(batch) == fresh


# -- (5) W4 RTN ------------------------------------------------------------------------------


def test_rtn_error_bounded_by_half_scale() -> None:
    torch.manual_seed(0)
    weight = torch.randn(16, 300) * torch.logspace(-3, 1, 300)  # ragged last group, wide range
    weight[3, :128] = 0.0  # an all-zero group must not divide by zero
    deq, scales = rtn_quantize(weight, bits=4, group_size=128)
    assert deq.shape == weight.shape and scales.shape == (16, 3)
    per_elem = scales.repeat_interleave(128, dim=1)[:, :300]
    assert ((deq - weight).abs() <= per_elem / 2 * (1 + 1e-6)).all()
    assert (deq[3, :128] == 0).all()
    codes = torch.round(deq / per_elem)
    assert codes.min() >= -8 and codes.max() <= 7


def test_quantize_w4_rtn_copies_and_quantizes_linears(target: torch.nn.Module) -> None:
    before = {k: v.clone() for k, v in target.state_dict().items()}
    q = quantize_w4_rtn(target)
    for k, v in target.state_dict().items():
        assert torch.equal(v, before[k])  # original untouched
    qs = q.state_dict()
    assert torch.equal(qs["lm_head.weight"], before["lm_head.weight"])
    assert torch.equal(qs["model.embed_tokens.weight"], before["model.embed_tokens.weight"])
    w = before["model.layers.0.mlp.down_proj.weight"]
    assert not torch.equal(qs["model.layers.0.mlp.down_proj.weight"], w)
    torch.testing.assert_close(qs["model.layers.0.mlp.down_proj.weight"], rtn_quantize(w)[0])


# -- models ----------------------------------------------------------------------------------


def test_random_model_is_seeded_and_configs_are_real() -> None:
    a, b = random_model("tiny-llama", 4), random_model("tiny-llama", 4)
    for (ka, va), (_, vb) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(va, vb), ka
    cfg = qwen2_5_7b_config()
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_key_value_heads) == (3584, 28, 4)
    assert cfg.vocab_size == 152064
    with pytest.raises(ValueError):
        random_model("no-such-config")
