"""`simctl trace annotate` (live/annotate.py): a draft model's exact-match acceptance over a
trace's recorded tokens equals a brute-force check that runs the drafter on every prefix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from simctl.cli import main
from simctl.live.annotate import _batches, annotate_trace
from simctl.live.models import load_model
from simctl.live.workload import trace_prompt_ids
from simctl.traces.io import Trace, write_trace
from simctl.traces.schema import TraceMeta
from simctl.traces.validate import load_valid_trace

torch = pytest.importorskip("torch")

GROUP = 2
VOCAB = 256  # random:tiny's


@pytest.fixture(scope="module")
def drafter():
    torch.set_num_threads(1)
    return load_model("random:tiny", seed=0).model


def _greedy(model, ids: list[int]) -> int:
    with torch.inference_mode():
        return int(model(torch.tensor([ids])).logits[0, -1].argmax())


def _responses(model, prompts: list[list[int]], seed: int) -> list[list[int]]:
    """Each token the drafter's own greedy choice with probability 0.6, else random: so
    acceptance is neither 0 nor 1 and a wrong position shifts the answer."""
    rng = np.random.default_rng(seed)
    out = []
    for prompt in prompts:
        seq: list[int] = []
        for _ in range(int(rng.integers(5, 40))):
            own = rng.random() < 0.6
            seq.append(_greedy(model, prompt + seq) if own else int(rng.integers(0, VOCAB)))
        out.append(seq)
    return out


def _trace(model, *, with_prompts: bool, requests: int = 6, seed: int = 0) -> Trace:
    rng = np.random.default_rng(seed + 100)
    plens = [int(rng.integers(3, 12)) for _ in range(requests // GROUP) for _ in range(GROUP)]
    df = pd.DataFrame(
        {
            "step": 0,
            "prompt_id": np.repeat(np.arange(requests // GROUP), GROUP) + 7,
            "sample": np.tile(np.arange(GROUP), requests // GROUP),
            "prompt_len": plens,
        }
    )
    probe = Trace(df, TraceMeta(model="qwen2.5-7b", group_size=GROUP))
    if with_prompts:
        prompts = [rng.integers(0, VOCAB, p).tolist() for p in plens]
    else:  # what annotate and a live run use without recorded prompts
        prompts = [list(trace_prompt_ids(probe, i, p, VOCAB)) for i, p in enumerate(plens)]
    resps = _responses(model, prompts, seed)
    df["response_len"] = [len(r) for r in resps]
    df["max_tokens"] = 64
    df["finish_reason"] = "stop"
    lists = {"response_tokens": pa.array(resps, type=pa.list_(pa.int32()))}
    if with_prompts:
        lists["prompt_tokens"] = pa.array(prompts, type=pa.list_(pa.int32()))
    meta = TraceMeta(model="qwen2.5-7b", group_size=GROUP, preset="test", seed=seed, accept_bucket_tokens=8)
    return Trace(df, meta, lists)


def _brute_force(model, trace: Trace) -> list[np.ndarray]:
    """Per request and position: run the drafter on prompt + recorded prefix, compare."""
    rv, ro = trace.token_arrays("response_tokens")
    out = []
    for i in range(len(trace.df)):
        plen = int(trace.df["prompt_len"].iat[i])
        if "prompt_tokens" in trace.lists:
            pv, po = trace.token_arrays("prompt_tokens")
            prompt = pv[po[i] : po[i + 1]].tolist()
        else:
            prompt = list(trace_prompt_ids(trace, i, plen, VOCAB))
        resp = rv[ro[i] : ro[i + 1]].tolist()
        out.append(np.array([_greedy(model, prompt + resp[:k]) == resp[k] for k in range(len(resp))]))
    return out


@pytest.mark.parametrize("with_prompts", [True, False])
def test_annotation_matches_a_brute_force_per_token_check(drafter, with_prompts: bool) -> None:
    trace = _trace(drafter, with_prompts=with_prompts)
    got, summary = annotate_trace(trace, drafter, drafter="random:tiny", method="draft_small")
    want = _brute_force(drafter, trace)
    means = np.array([w.mean() for w in want], np.float32)
    np.testing.assert_array_equal(got.df["accept_draft_small"].to_numpy(), means)
    assert 0.2 < means.mean() < 0.95  # the check can tell right from wrong
    buckets = got.lists["accept_draft_small_buckets"].to_pylist()
    for w, b in zip(want, buckets, strict=True):
        expected = [np.float32(w[a : a + 8].mean()) for a in range(0, len(w), 8)]
        assert np.array_equal(np.asarray(b, np.float32), np.asarray(expected, np.float32))
    assert summary.positions == sum(len(w) for w in want)
    assert summary.accepted == sum(int(w.sum()) for w in want)


def test_buckets_are_consistent_with_the_mean(drafter) -> None:
    trace = _trace(drafter, with_prompts=True, requests=8, seed=3)
    got, _ = annotate_trace(trace, drafter, drafter="random:tiny", bucket_tokens=8)
    lens = got.df["response_len"].to_numpy()
    for n, mean, b in zip(
        lens, got.df["accept_draft_small"], got.lists["accept_draft_small_buckets"].to_pylist(), strict=True
    ):
        sizes = [min(8, n - a) for a in range(0, n, 8)]
        assert len(b) == len(sizes)
        assert np.dot(b, sizes) / n == pytest.approx(mean, abs=1e-6)


def test_deterministic_and_independent_of_batching(drafter) -> None:
    trace = _trace(drafter, with_prompts=True, requests=8, seed=5)
    a, _ = annotate_trace(trace, drafter, drafter="random:tiny")
    b, _ = annotate_trace(trace, drafter, drafter="random:tiny")
    c, _ = annotate_trace(trace, drafter, drafter="random:tiny", batch_tokens=1)  # one request per pass
    for other in (b, c):
        assert a.df.equals(other.df)
        assert a.lists["accept_draft_small_buckets"].equals(other.lists["accept_draft_small_buckets"])


@settings(max_examples=50, deadline=None)
@given(lengths=st.lists(st.integers(1, 300), min_size=1, max_size=30), budget=st.integers(1, 2000))
def test_batches_cover_every_request_once_within_the_budget(lengths: list[int], budget: int) -> None:
    batches = list(_batches(lengths, budget))
    assert sorted(j for b in batches for j in b) == list(range(len(lengths)))
    for b in batches:
        assert len(b) == 1 or max(lengths[j] for j in b) * len(b) <= budget


def test_cli_writes_a_valid_trace_that_replays_the_method(drafter, tmp_path: Path) -> None:
    trace = _trace(drafter, with_prompts=True)
    src = write_trace(tmp_path / "t.parquet", trace.df, trace.meta, lists=trace.lists)
    out = tmp_path / "a.parquet"
    res = CliRunner().invoke(
        main, ["trace", "annotate", str(src), "--drafter", "random:tiny", "--method", "eagle", "-o", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert "accept_eagle from random:tiny over 6 requests" in res.output
    got = load_valid_trace(out)
    assert got.meta.notes["annotate_eagle"]["drafter"] == "random:tiny"
    assert got.meta.accept_bucket_tokens == 8
    want = np.array([w.mean() for w in _brute_force(drafter, trace)], np.float32)
    np.testing.assert_array_equal(got.df["accept_eagle"].to_numpy(), want)
    res = CliRunner().invoke(
        main, ["replay", str(out), "--policy", "spec-coupled:method=eagle", "--cluster", "h100x2"]
    )
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--method", "ngram"], "Invalid value for '--method': 'ngram': a model-free method"),
        (["--method", "Bad-Name"], "Invalid value for '--method': 'Bad-Name': not a method name"),
        (["--method", ""], "Invalid value for '--method': '': not a method name"),
        (["--drafter", "random:nope"], "unknown random model 'random:nope'"),
        (["--bucket-tokens", "0"], "--bucket-tokens"),
    ],
)
def test_bad_input_is_one_line(drafter, tmp_path: Path, args: list[str], expected: str) -> None:
    trace = _trace(drafter, with_prompts=True, requests=2)
    src = write_trace(tmp_path / "t.parquet", trace.df, trace.meta, lists=trace.lists)
    base = ["trace", "annotate", str(src), "--drafter", "random:tiny", "-o", str(tmp_path / "o.parquet")]
    res = CliRunner().invoke(main, base + args)
    # a bad option is a usage error (2); a model that cannot be loaded is the input's (1)
    assert res.exit_code == (1 if args[0] == "--drafter" else 2), res.output
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert expected in lines[-1] and "Traceback" not in res.output
    assert not (tmp_path / "o.parquet").exists()


def test_trace_without_tokens_is_refused(tmp_path: Path) -> None:
    df = pd.DataFrame(
        {
            "step": 0,
            "prompt_id": [1, 1],
            "sample": [0, 1],
            "prompt_len": 4,
            "response_len": 5,
            "max_tokens": 8,
        }
    ).assign(finish_reason="stop")
    src = write_trace(tmp_path / "t.parquet", df, TraceMeta(model="qwen2.5-7b", group_size=2))
    res = CliRunner().invoke(
        main, ["trace", "annotate", str(src), "--drafter", "random:tiny", "-o", str(tmp_path / "o.parquet")]
    )
    assert res.exit_code == 1
    assert res.output.strip() == f"Error: {src}: no response_tokens column; annotate needs recorded token ids"


def test_without_torch_it_names_the_extra(tmp_path: Path) -> None:
    src = tmp_path / "t.parquet"
    src.write_bytes(b"")
    out = tmp_path / "o.parquet"
    code = (
        "import sys\nfor n in ('torch', 'transformers'):\n    sys.modules[n] = None\n"
        "from simctl.cli import main\n"
        f"main(['trace', 'annotate', {str(src)!r}, '--drafter', 'smollm2', '-o', {str(out)!r}])\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert res.returncode == 1, res.stderr
    assert (
        res.stderr.strip()
        == "Error: simctl trace annotate needs torch and transformers: pip install 'simctl[torch]'"
    )
    assert not out.exists()
