"""Structural guarantees of traces.generate: determinism, schema, invariants, tokens."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from simctl.cli import main
from simctl.traces.generate import MAX_PROMPT_SET, MAX_TOKEN_IDS, VOCAB, generate_trace, write_generated
from simctl.traces.io import read_trace
from simctl.traces.presets import ACCEPT_BUCKET_TOKENS, PRESETS, get_preset
from simctl.traces.schema import (
    FINISH_REASONS,
    KNOWN_METHODS,
    StepTiming,
    accept_column,
    bucket_column,
    column_type,
)
from simctl.traces.validate import validate_file

# A small slice of every preset: a few prompts per step, few steps.
SMALL = {name: max(0.002, 4 / p.prompts_per_step) for name, p in PRESETS.items()}


def small(name: str, seed: int = 0, steps: int = 3, tokens: bool = False):
    return generate_trace(name, steps=steps, seed=seed, scale=SMALL[name], tokens=tokens)


def check_invariants(name: str, df: pd.DataFrame, steps: int, scale: float) -> None:
    p = get_preset(name)
    for col in df.columns:
        typ = column_type(col)
        assert typ is not None, col
        if col == "finish_reason":
            assert set(df[col].astype(str)) <= set(FINISH_REASONS)
        else:
            assert df[col].dtype == np.dtype(typ.to_pandas_dtype()), col
    assert {accept_column(m) for m in KNOWN_METHODS} <= set(df.columns)
    length, mx = df["response_len"].to_numpy(), df["max_tokens"].to_numpy()
    assert (length >= 1).all() and (length <= mx).all()
    assert ((df["finish_reason"].astype(str) == "length").to_numpy() == (length == mx)).all()
    key = df[["step", "prompt_id", "sample"]]
    assert not key.duplicated().any()
    assert key.equals(key.sort_values(["step", "prompt_id", "sample"]))
    sizes = df.groupby(["step", "prompt_id"]).size()
    assert (sizes == p.group_size).all()
    n = max(1, round(p.prompts_per_step * scale))
    assert (df.groupby("step")["prompt_id"].nunique() == n).all()
    assert sorted(df["step"].unique()) == list(range(steps))
    assert (df.groupby("step")["epoch"].nunique() == 1).all()
    for m in KNOWN_METHODS:
        a = df[accept_column(m)].to_numpy()
        assert np.isfinite(a).all() and (a >= 0).all() and (a <= 1).all(), m
    assert set(np.unique(df["reward"])) <= {0.0, 1.0}
    assert (df.loc[df["finish_reason"] == "length", "reward"] == 0).all()


@settings(max_examples=6, deadline=None)
@given(name=st.sampled_from(sorted(PRESETS)), seed=st.integers(0, 2**32 - 1))
def test_invariants_over_seeds(name: str, seed: int) -> None:
    df, meta, _ = small(name, seed=seed)
    check_invariants(name, df, 3, SMALL[name])
    assert meta.seed == seed and meta.preset == name


def test_same_seed_same_frame_and_bytes(tmp_path) -> None:
    a, meta_a, lists_a = small("grpo-32b-20k", seed=7, tokens=True)
    b, meta_b, lists_b = small("grpo-32b-20k", seed=7, tokens=True)
    pd.testing.assert_frame_equal(a, b)
    assert meta_a.to_json() == meta_b.to_json()
    assert all(lists_a[k].equals(lists_b[k]) for k in lists_a)
    p1 = write_generated(
        tmp_path / "a.parquet", "grpo-32b-20k", 3, 7, scale=SMALL["grpo-32b-20k"], tokens=True
    )
    p2 = write_generated(
        tmp_path / "b.parquet", "grpo-32b-20k", 3, 7, scale=SMALL["grpo-32b-20k"], tokens=True
    )
    assert p1.read_bytes() == p2.read_bytes()


def test_different_seed_differs() -> None:
    a, _, _ = small("dapo-32b-20k", seed=1)
    b, _, _ = small("dapo-32b-20k", seed=2)
    assert not np.array_equal(a["response_len"], b["response_len"])
    assert not np.array_equal(a["accept_ngram"], b["accept_ngram"])


def test_tokens_do_not_change_scalar_columns() -> None:
    a, _, _ = small("rhymerl-math-14b-16k", seed=3)
    b, _, _ = small("rhymerl-math-14b-16k", seed=3, tokens=True)
    pd.testing.assert_frame_equal(a, b)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_written_file_validates_and_round_trips(tmp_path, name: str) -> None:
    path = write_generated(tmp_path / f"{name}.parquet", name, 2, 0, scale=SMALL[name], tokens=True)
    assert validate_file(path) == []
    trace = read_trace(path)
    df, meta, _ = small(name, steps=2)
    pd.testing.assert_frame_equal(trace.df[df.columns], df, check_categorical=False)
    assert trace.meta.to_json() == meta.to_json()
    assert trace.has_tokens()


def test_token_lists_match_lengths() -> None:
    df, _, lists = small("seer-qwen2vl-72b-40k", tokens=True)
    for col, length in (("response_tokens", "response_len"), ("prompt_tokens", "prompt_len")):
        arr = lists[col]
        assert arr.type == column_type(col)
        assert np.array_equal(np.diff(arr.offsets.to_numpy()), df[length].to_numpy())
        ids = arr.values.to_numpy()
        assert ids.min() >= 0 and ids.max() < VOCAB
    # The same prompt carries the same prompt tokens in every sample of its group.
    off = lists["prompt_tokens"].offsets.to_numpy()
    vals = lists["prompt_tokens"].values.to_numpy()
    first = [i for i in range(len(df)) if df["sample"].iat[i] == 0][:3]
    for i in first:
        assert np.array_equal(vals[off[i] : off[i + 1]], vals[off[i + 1] : off[i + 2]])


def test_buckets_only_for_small_traces() -> None:
    _, meta, lists = generate_trace("efficientrollout-qwen7b-8k", steps=2, seed=0, scale=0.5)
    assert lists == {} and meta.accept_bucket_tokens is None
    _, meta, lists = generate_trace("efficientrollout-qwen7b-8k", steps=2, seed=0, scale=0.05)
    assert meta.accept_bucket_tokens == ACCEPT_BUCKET_TOKENS
    assert set(lists) == {bucket_column(m) for m in KNOWN_METHODS}


def test_buckets_can_be_asked_for_or_left_out_at_any_scale(tmp_path) -> None:
    """`--buckets` writes them for a large trace, `--no-buckets` leaves them out of a small
    one; the scalar columns are the same either way."""
    big, meta, lists = generate_trace("efficientrollout-qwen7b-8k", steps=1, seed=0, scale=0.5, buckets=True)
    assert meta.accept_bucket_tokens == ACCEPT_BUCKET_TOKENS
    assert set(lists) == {bucket_column(m) for m in KNOWN_METHODS}
    plain, _, _ = generate_trace("efficientrollout-qwen7b-8k", steps=1, seed=0, scale=0.5)
    pd.testing.assert_frame_equal(big, plain)
    _, meta, lists = generate_trace("efficientrollout-qwen7b-8k", steps=1, seed=0, scale=0.05, buckets=False)
    assert lists == {} and meta.accept_bucket_tokens is None
    out = tmp_path / "t.parquet"
    args = [
        "trace",
        "gen",
        "--preset",
        "efficientrollout-qwen7b-8k",
        "--scale",
        "0.5",
        "--buckets",
        "-o",
        str(out),
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert read_trace(out).meta.accept_bucket_tokens == ACCEPT_BUCKET_TOKENS


def test_bucket_shape_and_consistency() -> None:
    df, _, lists = small("tlt-qwen32b-32k", steps=4, tokens=True)
    length = df["response_len"].to_numpy()
    for m in KNOWN_METHODS:
        arr = lists[bucket_column(m)]
        assert arr.type == pa.list_(pa.float32())
        nb = np.diff(arr.offsets.to_numpy())
        assert np.array_equal(nb, -(-length // ACCEPT_BUCKET_TOKENS))
        vals = arr.values.to_numpy().astype(np.float64)
        assert ((vals >= 0) & (vals <= 1)).all()
        # Token-weighted bucket mean reproduces the scalar column (clipping aside).
        off = arr.offsets.to_numpy()
        for i in range(0, len(df), 7):
            w = np.minimum(ACCEPT_BUCKET_TOKENS, length[i] - ACCEPT_BUCKET_TOKENS * np.arange(nb[i]))
            got = (vals[off[i] : off[i + 1]] * w).sum() / length[i]
            assert got == pytest.approx(df[accept_column(m)].iat[i], abs=0.03)
    eagle = lists[bucket_column("eagle")]
    off, vals = eagle.offsets.to_numpy(), eagle.values.to_numpy()
    longest = int(np.argmax(length))
    row = vals[off[longest] : off[longest + 1]]
    assert len(row) < 3 or row[0] > row[-1]  # EAGLE degrades with depth


def test_scale_keeps_group_size_and_floors_at_one_prompt() -> None:
    df, meta, _ = generate_trace("dapo-32b-20k", steps=2, seed=0, scale=1e-6)
    assert df.groupby("step")["prompt_id"].nunique().tolist() == [1, 1]
    assert len(df) == 2 * 16 and meta.group_size == 16 and meta.notes["scale"] == 1e-6


def test_meta_provenance() -> None:
    _, meta, _ = small("tlt-qwen32b-32k")
    p = get_preset("tlt-qwen32b-32k")
    assert (meta.preset, meta.seed, meta.source) == ("tlt-qwen32b-32k", 0, "generated")
    assert (meta.model, meta.hardware, meta.temperature, meta.group_size) == ("qwen2.5-32b", "h100", 0.9, 8)
    assert p.timing.step_timing().train_s  # the preset documents the paper's shares ...
    assert meta.timing == StepTiming() and meta.step_timing == {}  # ... but writes no assumed seconds


def test_replay_models_a_generated_traces_phases_but_uses_measured_ones() -> None:
    from simctl.sim.replay import measured_timing

    _, meta, _ = small("tlt-qwen32b-32k")
    meta.timing = StepTiming(reward_s=1.0, train_s=2.0, weight_sync_s=3.0)  # an older generated file
    assert measured_timing(meta, 0) == StepTiming()
    meta.source = "live"
    assert measured_timing(meta, 0) == StepTiming(1.0, 2.0, 3.0)
    # a step's override replaces the fields it gives and keeps the others
    meta.step_timing = {1: StepTiming(reward_s=100.0), 2: StepTiming(train_s=0.0, weight_sync_s=None)}
    assert measured_timing(meta, 1) == StepTiming(100.0, 2.0, 3.0)
    assert measured_timing(meta, 2) == StepTiming(1.0, 0.0, 3.0)
    assert measured_timing(meta, 3) == StepTiming(1.0, 2.0, 3.0)


def test_epochs_repeat_prompts() -> None:
    p = get_preset("rhymerl-math-14b-16k")
    df, _, _ = generate_trace(p.name, steps=p.steps_per_epoch + 2, seed=0, scale=0.02)
    e0 = set(df.loc[df["epoch"] == 0, "prompt_id"])
    e1 = set(df.loc[df["epoch"] == 1, "prompt_id"])
    assert e1 <= e0 and len(e1) > 0
    assert (df.groupby("step")["epoch"].first().diff().fillna(0) >= 0).all()
    # A prompt keeps its prompt length across epochs.
    assert (df.groupby("prompt_id")["prompt_len"].nunique() == 1).all()
    # History acceptance is a floor in epoch 0 and a real value afterwards.
    h = df.groupby("epoch")["accept_history"].mean()
    assert h[0] < 0.1 < 0.5 < h[1]


@settings(max_examples=8, deadline=None)
@given(
    spe=st.integers(1, 4),
    steps=st.integers(1, 7),
    preset=st.sampled_from(["rhymerl-math-14b-16k", "seer-kimi-k2-96k"]),
)
def test_steps_per_epoch_replaces_the_presets(spe: int, steps: int, preset: str) -> None:
    """Step s is in epoch s // spe; every epoch draws from the same spe * n prompts (a preset
    without epochs gets them too), so an epoch after the first repeats only prompts the
    first had; the metadata records the value used."""
    df, meta, _ = generate_trace(preset, steps=steps, seed=0, scale=SMALL[preset], steps_per_epoch=spe)
    check_invariants(preset, df, steps, SMALL[preset])
    epoch = df.groupby("step")["epoch"].first()
    assert epoch.tolist() == [s // spe for s in range(steps)]
    n = df.groupby("step")["prompt_id"].nunique().iloc[0]
    assert set(df["prompt_id"]) <= set(range(spe * n))
    first = set(df.loc[df["epoch"] == 0, "prompt_id"])
    assert set(df.loc[df["epoch"] > 0, "prompt_id"]) <= first
    assert meta.notes["steps_per_epoch"] == spe


def test_one_step_per_epoch_brings_every_prompt_back_with_its_history() -> None:
    """`steps_per_epoch=1`: each step is a new epoch over the same prompts, so a 3-step
    trace has history acceptance from its second step (what the bundled RhymeRL sample
    is generated with); the default keeps the preset's 32 steps per epoch (all epoch 0)."""
    df, _, _ = generate_trace("rhymerl-math-14b-16k", steps=3, seed=0, scale=0.02, steps_per_epoch=1)
    per_step = df.groupby("step")["prompt_id"].apply(frozenset)
    assert per_step[0] == per_step[1] == per_step[2]
    h = df.groupby("epoch")["accept_history"].mean()
    assert h[0] < 0.1 < 0.5 < h[1] <= h[2]
    default, _, _ = generate_trace("rhymerl-math-14b-16k", steps=3, seed=0, scale=0.02)
    assert (default["epoch"] == 0).all()


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bad_steps_per_epoch(bad: object) -> None:
    with pytest.raises(ValueError, match=rf"steps_per_epoch must be an integer >= 1, got {bad!r}"):
        generate_trace("dapo-32b-20k", steps=1, seed=0, scale=0.01, steps_per_epoch=bad)  # type: ignore[arg-type]


def test_a_huge_epoch_is_refused_before_any_work() -> None:
    """A prompt set past MAX_PROMPT_SET (each epoch shuffles all of it) is one line, not a
    shuffle of 10^15 ids."""
    with pytest.raises(ValueError) as info:
        generate_trace("dapo-32b-20k", steps=1, seed=0, scale=0.01, steps_per_epoch=10**15)
    assert str(info.value) == (
        "steps_per_epoch 1000000000000000 makes a prompt set of 10,000,000,000,000,000 prompts, "
        "more than 10,000,000: pass a smaller --steps-per-epoch"
    )
    df, _, _ = generate_trace(
        "dapo-32b-20k", steps=1, seed=0, scale=0.01, steps_per_epoch=MAX_PROMPT_SET // 10
    )
    assert len(df) > 0


def test_steps_per_epoch_from_the_cli(tmp_path) -> None:
    out = tmp_path / "t.parquet"
    base = [
        "trace",
        "gen",
        "--preset",
        "rhymerl-math-14b-16k",
        "--steps",
        "2",
        "--scale",
        "0.02",
        "-o",
        str(out),
    ]
    result = CliRunner().invoke(main, [*base, "--steps-per-epoch", "1"])
    assert result.exit_code == 0, result.output
    assert read_trace(out).df.groupby("step")["epoch"].first().tolist() == [0, 1]
    result = CliRunner().invoke(main, [*base, "--steps-per-epoch", "0"])
    assert result.exit_code == 2
    assert "Invalid value for '--steps-per-epoch': 0 is not in the range x>=1." in result.output


def test_fresh_prompts_without_epochs() -> None:
    df, _, _ = small("seer-kimi-k2-96k", steps=3)
    assert (df["epoch"] == 0).all()
    per_step = df.groupby("step")["prompt_id"].apply(frozenset)
    assert len(frozenset().union(*per_step)) == sum(len(s) for s in per_step)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"preset": "nope", "steps": 1, "seed": 0}, "unknown preset 'nope'; known: dapo-32b-20k"),
        ({"preset": "dapo-32b-20k", "steps": 0, "seed": 0}, "steps"),
        ({"preset": "dapo-32b-20k", "steps": 1, "seed": -1}, "seed"),
        ({"preset": "dapo-32b-20k", "steps": 1, "seed": 0, "scale": 0.0}, "scale"),
        ({"preset": "dapo-32b-20k", "steps": 1, "seed": 0, "scale": 1.5}, "scale"),
    ],
)
def test_bad_arguments(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        generate_trace(**kwargs)


def test_token_size_guard() -> None:
    with pytest.raises(ValueError, match=r"smaller --scale"):
        generate_trace("seer-kimi-k2-96k", steps=2, seed=0, scale=1.0, tokens=True)
    assert MAX_TOKEN_IDS == 50_000_000
