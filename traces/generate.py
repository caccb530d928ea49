"""Calibrated synthetic rollout traces: one call turns a named preset into a trace.

Production traces are not public, so the generator reproduces the shape the papers publish
(traces.presets cites every number). Each random component draws from its own PCG64 stream
seeded by (seed, component), so switching tokens or position buckets on never changes the
scalar columns, and the same arguments always give the same bytes.

Length model (natural log of the response length)
    log L = mu(s) + d[e, u] + eps + X
    mu(s)   = log(len_median0) + g * H * (1 - exp(-s / H)): the median grows by g per step at
              first (papers: responses lengthen as RL proceeds) and saturates over H steps so
              long traces stay below the budget;
    d[e, u] ~ N(0, icc * sigma^2): prompt difficulty, shared by the whole group (Seer Fig. 4);
              across epochs an AR(1) with correlation epoch_rho, so length ranks persist
              (RhymeRL §6.1, Fig. 9, Table 2);
    eps     ~ N(0, (1 - icc) * sigma^2): per-response noise;
    X       ~ Exponential(runaway_log_mean) for a fraction runaway_prob of responses, else 0:
              degenerate loops that run to the budget (the extra right tail).
    L = min(ceil(exp(log L)), max_tokens), at least 1; finish_reason is "length" exactly
    when L == max_tokens. icc is the intra-class correlation of log length before clipping;
    the measured ICC after clipping is a little lower.

Acceptance model (every method in schema.KNOWN_METHODS, so any policy runs on any preset)
    logit m_i = logit(m) + c + len_slope * z_i + w_g, a_i ~ Beta(kappa m_i, kappa (1 - m_i))
    m is the preset's batch mean (history: a floor in epoch 0, rising per epoch after),
    z_i the response's standardised log length within its step (n-gram drafts worse on the
    long tail, SpecActor §5.2), w_g a per-group predictability shared by all methods, and c
    a constant solved so the trace-level mean equals m. The step mean is therefore stable
    across steps (SpecActor Fig. 10) while single requests vary widely (SpecActor Fig. 7).
    Optional `accept_<method>_buckets` (traces with scale <= 0.05 or tokens=True) split a
    response into 512-token buckets: a_i + pos_slope * (log2(1 + centre/512) - its
    token-weighted mean), clipped to [0, 1], so the token-weighted bucket mean is a_i
    (up to clipping) and the shape follows the method (EAGLE decays with depth,
    EfficientRollout Table 8; suffix/n-gram rise with context).

Rewards: 0/1 correctness with P(correct) falling with prompt difficulty and with a
response's own excess length, rising slowly over steps; clipped responses score 0.

Tokens (tokens=True): each prompt owns a pool of 16-token phrases (ids hashed from seed,
prompt, phrase and version) ordered by Zipf popularity. A response is a sequence of 16-token
segments, each either a pool phrase (with probability = its accept_suffix value), a phrase
from a small pool common to all prompts (15% of the rest: notation and syntax, TLT §5.3) or
fresh random ids; a pool segment continues to the next phrase of the pool with probability 0.7,
so siblings share long identical runs (Seer Table 2) and a response repeats its own phrases
(n-gram). Between epochs 20% of a prompt's phrases are rewritten, so responses to the same
prompt in the next epoch reuse most phrases (RhymeRL Fig. 6).

Targets every preset meets (tests/traces/test_presets_stats.py checks them, 100 steps)
    heavy tail: p99 / p50 > 2, mean > median;
    clip share within preset.clip_target (a few % for SpecActor/Seer/RhymeRL, ~1% TLT,
    ~0.1% EfficientRollout);
    within-group ICC of log length within 0.08 of preset.icc (0.6; RhymeRL 0.85);
    the step mean of log length grows: 25-step block means strictly increase, slope
    0.4-1.1x growth_per_step (clipping and saturation flatten it);
    RhymeRL: Spearman of per-prompt median length between consecutive epochs 0.90-0.99
    (Fig. 9 / Table 2: ranks persist; ~0.955 here);
    acceptance: std over steps of the step mean < 0.02, per-request std > 0.05 where the
    mean is in (0.1, 0.9), corr(log length, accept_ngram) < -0.1;
    tokens: 4-gram match rate against siblings (and, for RhymeRL, against the previous
    epoch's responses to the prompt) well above the rate against other prompts.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from simctl.traces.hashing import GOLDEN, splitmix64
from simctl.traces.io import write_trace
from simctl.traces.layouts import layout_for
from simctl.traces.limits import fits_in_memory
from simctl.traces.presets import (
    ACCEPT_BUCKET_TOKENS,
    METHOD_SHAPES,
    PROMPT_ACCEPT_SIGMA,
    Preset,
    get_preset,
)
from simctl.traces.schema import FINISH_REASONS, KNOWN_METHODS, TraceMeta, accept_column, bucket_column

GENERATOR_VERSION = 1
MAX_TOKEN_IDS = 50_000_000  # tokens=True refuses traces above this (memory ~ 4 bytes per id)
# The most distinct prompts --steps-per-epoch may ask for (each epoch shuffles them all; real
# RL prompt sets hold thousands to tens of thousands: DAPO-Math-17K, RhymeRL's 8K set).
MAX_PROMPT_SET = 10_000_000
BUCKET_SCALE_LIMIT = 0.05  # position buckets are emitted only for small traces (or tokens)

# Rewards (all assumed: the papers show reward curves but no per-response model).
REWARD_STEP_GAIN = 0.003  # logit per step
REWARD_DIFFICULTY = 1.0  # logit per prompt-difficulty SD
REWARD_EXCESS_LEN = 0.5  # logit per SD of a response's own length noise

# Tokens (assumed shapes; see the module docstring).
VOCAB = 32_000
SEGMENT = 16
CONTINUE_PROB = 0.7
ZIPF_EXPONENT = 1.1
EPOCH_DRIFT = 0.2
GLOBAL_SHARE = 0.15  # of non-pool segments: phrases common to all prompts (notation, syntax)
GLOBAL_POOL = 1024
POOL_MIN, POOL_MAX = 32, 4096
TOKEN_CHUNK = 1 << 22  # ids built per chunk, bounding temporary memory
# Peak memory per generated request while building a trace: measured 200 B/row on a
# 40-step dapo-32b-20k trace (655,360 rows; 630 B/row at one step, where fixed costs
# dominate). Doubled for the Parquet write; a trace whose estimate exceeds half of this
# machine's memory is refused before any work.
PEAK_BYTES_PER_ROW = 400

# Independent random streams, one per component.
_LAYOUT, _LENGTH, _REWARD, _ACCEPT, _TOKENS = range(5)
_SALT_PHRASE, _SALT_PROMPT, _SALT_DRIFT = 101, 102, 103


def _rng(seed: int, stream: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64([seed, stream]))


@dataclass
class _Layout:
    """Which prompt and sample each row is; rows sorted by (step, prompt_id, sample)."""

    step: np.ndarray
    prompt: np.ndarray
    sample: np.ndarray
    epoch: np.ndarray
    group: np.ndarray  # (step, prompt) group index of each row
    prompts_per_step: int
    universe: int  # number of distinct prompts (prompt ids 0..universe-1)
    epochs: int


def prompts_per_step(p: Preset, scale: float) -> int:
    """The preset's prompts per step at `scale` (at least one; group size unchanged)."""
    return max(1, round(p.prompts_per_step * scale))


def _layout(p: Preset, steps: int, scale: float, rng: np.random.Generator) -> _Layout:
    """Prompts per step; with epochs, each epoch is a fresh shuffle of the same prompt set."""
    n = prompts_per_step(p, scale)
    g = p.group_size
    if p.steps_per_epoch:
        spe = p.steps_per_epoch
        universe, epochs = n * spe, math.ceil(steps / spe)
        perms = np.stack([rng.permutation(universe) for _ in range(epochs)])
        s = np.arange(steps)
        idx = (s % spe)[:, None] * n + np.arange(n)[None, :]
        per_step = np.sort(perms[(s // spe)[:, None], idx], axis=1)
        step_epoch = (s // spe).astype(np.int32)
    else:
        universe, epochs = n * steps, 1
        per_step = np.arange(universe, dtype=np.int64).reshape(steps, n)
        step_epoch = np.zeros(steps, dtype=np.int32)
    step = np.repeat(np.arange(steps, dtype=np.int32), n * g)
    return _Layout(
        step=step,
        prompt=np.repeat(per_step.ravel().astype(np.int64), g),
        sample=np.tile(np.arange(g, dtype=np.int32), steps * n),
        epoch=step_epoch[step],
        group=np.repeat(np.arange(steps * n, dtype=np.int64), g),
        prompts_per_step=n,
        universe=universe,
        epochs=epochs,
    )


@dataclass
class _Lengths:
    response_len: np.ndarray
    clipped: np.ndarray
    prompt_len: np.ndarray
    difficulty: np.ndarray  # per row, in SDs of the prompt distribution
    noise: np.ndarray  # per row, in SDs of the response noise


def median_at(p: Preset, step: np.ndarray | int) -> np.ndarray:
    """Median response length (before clipping) at a step: the growth curve of the model."""
    h = p.growth_horizon
    return p.len_median0 * np.exp(p.growth_per_step * h * (1.0 - np.exp(-np.asarray(step) / h)))


def _lengths(p: Preset, lay: _Layout, rng: np.random.Generator) -> _Lengths:
    sig_p = p.len_sigma * math.sqrt(p.icc)
    sig_e = p.len_sigma * math.sqrt(1.0 - p.icc)
    d = np.empty((lay.epochs, lay.universe))
    d[0] = rng.standard_normal(lay.universe)
    for e in range(1, lay.epochs):
        d[e] = p.epoch_rho * d[e - 1] + math.sqrt(1.0 - p.epoch_rho**2) * rng.standard_normal(lay.universe)
    plen = np.ceil(rng.lognormal(math.log(p.prompt_len_median), p.prompt_len_sigma, lay.universe))
    plen = np.clip(plen, 8, 32_768).astype(np.int32)
    rows = len(lay.step)
    eps = rng.standard_normal(rows)
    runaway = rng.random(rows) < p.runaway_prob
    excursion = np.where(runaway, rng.exponential(p.runaway_log_mean, rows), 0.0)
    diff = d[lay.epoch, lay.prompt]
    log_len = np.log(median_at(p, lay.step)) + sig_p * diff + sig_e * eps + excursion
    length = np.ceil(np.exp(np.minimum(log_len, 40.0)))
    length = np.clip(length, 1, p.max_tokens).astype(np.int32)
    return _Lengths(
        response_len=length,
        clipped=length == p.max_tokens,
        prompt_len=plen[lay.prompt],
        difficulty=diff,
        noise=eps,
    )


def _rewards(p: Preset, lay: _Layout, ln: _Lengths, rng: np.random.Generator) -> np.ndarray:
    logit = (
        p.reward_base
        + REWARD_STEP_GAIN * lay.step
        - REWARD_DIFFICULTY * ln.difficulty
        - REWARD_EXCESS_LEN * ln.noise
    )
    correct = rng.random(len(logit)) < 1.0 / (1.0 + np.exp(-logit))
    return np.where(ln.clipped, 0.0, correct).astype(np.float32)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _logit(m: np.ndarray | float) -> np.ndarray:
    m = np.clip(m, 1e-4, 1 - 1e-4)
    return np.log(m) - np.log1p(-m)


def _standardised_log_len(lay: _Layout, length: np.ndarray) -> np.ndarray:
    """z-score of log length within its step (the batch a policy sees together)."""
    x = np.log(length.astype(np.float64))
    n = np.bincount(lay.step)
    mean = np.bincount(lay.step, x) / n
    var = np.bincount(lay.step, (x - mean[lay.step]) ** 2) / n
    return (x - mean[lay.step]) / np.sqrt(np.maximum(var[lay.step], 1e-12))


def _calibrate(base: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Per distinct target mean m, the offset c with mean(sigmoid(base + c)) == m (Newton)."""
    out = base.copy()
    for m in np.unique(target):
        sel = target == m
        x, c = base[sel], 0.0
        for _ in range(20):
            s = _sigmoid(x + c)
            c -= (s.mean() - m) / max((s * (1 - s)).mean(), 1e-9)
        out[sel] = x + c
    return out


def _method_targets(p: Preset, method: str, lay: _Layout) -> np.ndarray:
    if method == "history":
        per_epoch = np.array([p.history_accept(e) for e in range(lay.epochs)])
        return per_epoch[lay.epoch]
    return np.full(len(lay.step), p.accept[method])


def _acceptance(p: Preset, lay: _Layout, ln: _Lengths, rng: np.random.Generator) -> dict[str, np.ndarray]:
    z = _standardised_log_len(lay, ln.response_len)
    w = rng.normal(0.0, PROMPT_ACCEPT_SIGMA, int(lay.group[-1]) + 1)[lay.group]
    out = {}
    for method in KNOWN_METHODS:
        shape = METHOD_SHAPES[method]
        target = _method_targets(p, method, lay)
        mi = _sigmoid(_calibrate(_logit(target) + shape.len_slope * z + w, target))
        a = rng.beta(np.maximum(mi * shape.kappa, 1e-6), np.maximum((1 - mi) * shape.kappa, 1e-6))
        out[method] = np.clip(a, 0.0, 1.0).astype(np.float32)
    return out


def _row_positions(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets, row of each element, index within its row) for ragged rows of `lengths`."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    row = np.repeat(np.arange(len(lengths)), lengths)
    within = np.arange(offsets[-1]) - offsets[:-1][row]
    return offsets, row, within


def _buckets(length: np.ndarray, accept: dict[str, np.ndarray]) -> dict[str, pa.Array]:
    size = ACCEPT_BUCKET_TOKENS
    nb = -(-length.astype(np.int64) // size)
    offsets, row, k = _row_positions(nb)
    width = np.minimum(size, length[row] - k * size).astype(np.float64)
    f = np.log2(1.0 + (k * size + width / 2.0) / size)
    fmean = np.bincount(row, width * f, minlength=len(length)) / length
    rel = f - fmean[row]
    out = {}
    for method, a in accept.items():
        slope = METHOD_SHAPES[method].pos_slope
        vals = np.clip(a[row] + slope * rel, 0.0, 1.0).astype(np.float32)
        out[bucket_column(method)] = pa.ListArray.from_arrays(
            pa.array(offsets.astype(np.int32)), pa.array(vals)
        )
    return out


# --- tokens -------------------------------------------------------------------------------------


def _hash(key: int, *parts: np.ndarray) -> np.ndarray:
    """Deterministic id for a tuple of integer arrays, so shared phrases need no table."""
    h = np.full(np.shape(parts[0]), np.uint64(key), dtype=np.uint64)
    for part in parts:
        h = splitmix64(h ^ (np.asarray(part).astype(np.uint64) * GOLDEN))
    return h


def _seed_key(seed: int, salt: int) -> int:
    return int(np.random.SeedSequence([seed, salt]).generate_state(1, np.uint64)[0])


def pool_size(p: Preset) -> int:
    """Phrases per prompt: about two median responses' worth of 16-token phrases."""
    return int(np.clip(round(2 * p.len_median0 / SEGMENT), POOL_MIN, POOL_MAX))


def _zipf(m: int) -> np.ndarray:
    w = 1.0 / np.arange(1, m + 1) ** ZIPF_EXPONENT
    return w / w.sum()


def _phrase_version(key: int, prompt: np.ndarray, phrase: np.ndarray, epoch: np.ndarray) -> np.ndarray:
    """How many times a phrase was rewritten up to `epoch` (EPOCH_DRIFT chance per epoch)."""
    version = np.zeros(len(prompt), dtype=np.int64)
    for e in range(1, int(epoch.max(initial=0)) + 1):
        h = _hash(key, prompt, phrase, np.full(len(prompt), e))
        version += (epoch >= e) & ((h % np.uint64(10_000)) < np.uint64(int(EPOCH_DRIFT * 10_000)))
    return version


def _response_chunk(
    p: Preset,
    keys: tuple[int, int],
    rows: np.ndarray,
    lay: _Layout,
    length: np.ndarray,
    pool_share: np.ndarray,
    rng: np.random.Generator,
) -> np.ndarray:
    """Token ids of `rows` (concatenated): pool phrases and fresh ids per 16-token segment."""
    m = pool_size(p)
    nseg = -(-length[rows].astype(np.int64) // SEGMENT)
    _, seg_row, seg_k = _row_positions(nseg)
    n = len(seg_row)
    is_pool = rng.random(n) < pool_share[rows][seg_row]
    start = rng.choice(m, size=n, p=_zipf(m))
    cont = rng.random(n) < CONTINUE_PROB
    prev_pool = np.concatenate(([False], is_pool[:-1])) & (seg_k > 0)
    jump = ~(cont & prev_pool)
    idx = np.arange(n)
    last = np.maximum.accumulate(np.where(jump, idx, 0))
    phrase = (start[last] + (idx - last)) % m
    prompt = lay.prompt[rows][seg_row]
    version = _phrase_version(keys[1], prompt, phrase, lay.epoch[rows][seg_row])
    is_global = ~is_pool & (rng.random(n) < GLOBAL_SHARE)
    common = rng.choice(GLOBAL_POOL, size=n, p=_zipf(GLOBAL_POOL))
    # Global phrases use prompt id -1 and version 0, so every prompt shares them.
    prompt = np.where(is_global, -1, prompt)
    phrase = np.where(is_global, common, phrase)
    version = np.where(is_global, 0, version)
    seg_len = np.minimum(SEGMENT, length[rows][seg_row] - seg_k * SEGMENT)
    _, tok_seg, offset = _row_positions(seg_len)
    phrased = _hash(keys[0], prompt[tok_seg], phrase[tok_seg], version[tok_seg], offset) % np.uint64(VOCAB)
    fresh = rng.integers(0, VOCAB, len(tok_seg), dtype=np.int64)
    return np.where((is_pool | is_global)[tok_seg], phrased.astype(np.int64), fresh).astype(np.int32)


def _chunks(length: np.ndarray) -> list[np.ndarray]:
    """Row ranges whose total length stays near TOKEN_CHUNK."""
    ends = np.cumsum(length.astype(np.int64))
    cuts = np.searchsorted(ends, np.arange(TOKEN_CHUNK, ends[-1] if len(ends) else 0, TOKEN_CHUNK))
    bounds = np.unique(np.concatenate(([0], cuts + 1, [len(length)])).clip(0, len(length)))
    return [np.arange(a, b) for a, b in itertools.pairwise(bounds)]


def _list_array(length: np.ndarray, parts: list[np.ndarray]) -> pa.Array:
    offsets = np.zeros(len(length) + 1, dtype=np.int64)
    np.cumsum(length, out=offsets[1:])
    values = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values, type=pa.int32()))


def _tokens(
    p: Preset, seed: int, lay: _Layout, ln: _Lengths, suffix_accept: np.ndarray
) -> dict[str, pa.Array]:
    total = int(ln.response_len.sum(dtype=np.int64) + ln.prompt_len.sum(dtype=np.int64))
    if total > MAX_TOKEN_IDS:
        raise ValueError(
            f"tokens=True would generate {total:,} token ids (limit {MAX_TOKEN_IDS:,}); "
            f"pass a smaller --scale (about {MAX_TOKEN_IDS / total:.2g} of this one or less) or fewer steps"
        )
    rng = _rng(seed, _TOKENS)
    keys = (_seed_key(seed, _SALT_PHRASE), _seed_key(seed, _SALT_DRIFT))
    share = np.clip(suffix_accept.astype(np.float64), 0.05, 0.95)
    resp = [_response_chunk(p, keys, r, lay, ln.response_len, share, rng) for r in _chunks(ln.response_len)]
    pkey = _seed_key(seed, _SALT_PROMPT)
    prompt_parts = []
    for r in _chunks(ln.prompt_len):
        _, row, k = _row_positions(ln.prompt_len[r].astype(np.int64))
        prompt_parts.append((_hash(pkey, lay.prompt[r][row], k) % np.uint64(VOCAB)).astype(np.int32))
    return {
        "prompt_tokens": _list_array(ln.prompt_len, prompt_parts),
        "response_tokens": _list_array(ln.response_len, resp),
    }


# --- public API -----------------------------------------------------------------------------------


def _check_args(steps: int, seed: int, scale: float) -> None:
    if not isinstance(steps, int | np.integer) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    if not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if not (0.0 < scale <= 1.0):
        raise ValueError(f"scale must be in (0, 1], got {scale!r}")


def check_size(p: Preset, steps: int, scale: float, memory_bytes: int | None = None) -> int:
    """Refuse, before any work, a trace that cannot fit in memory; returns its row count."""
    rows = int(steps) * prompts_per_step(p, scale) * p.group_size
    need = rows * PEAK_BYTES_PER_ROW
    fits, have = fits_in_memory(need, memory_bytes)
    if not fits:
        raise ValueError(
            f"{steps} steps of {p.name} at scale {scale:g} are {rows:,} requests, about "
            f"{need / 1e9:,.1f} GB to generate; this machine has {have / 1e9:,.1f} GB: "
            "use fewer --steps or a smaller --scale"
        )
    return rows


def _meta(p: Preset, steps: int, seed: int, scale: float, lay: _Layout, buckets: bool) -> TraceMeta:
    return TraceMeta(
        model=p.model,
        hardware=p.hardware,
        temperature=p.temperature,
        group_size=p.group_size,
        preset=p.name,
        seed=int(seed),
        source="generated",
        accept_bucket_tokens=ACCEPT_BUCKET_TOKENS if buckets else None,
        cluster=layout_for(p.name, scale),
        # No reward/train/sync seconds: the simulator models them from the work
        # (sim/step_time.py); the preset's shares stay documentation of the paper.
        notes={
            "generator": f"traces.generate v{GENERATOR_VERSION}",
            "paper": p.paper,
            "algorithm": p.algorithm,
            "scale": scale,
            "steps": steps,
            "prompts_per_step": lay.prompts_per_step,
            "steps_per_epoch": p.steps_per_epoch,
            "history_epoch0": "accept_history in epoch 0 is a floor, not a measurement: "
            "disable history drafting while epoch == 0",
        },
    )


def generate_trace(
    preset: str | Preset,
    steps: int,
    seed: int,
    scale: float = 1.0,
    tokens: bool = False,
    buckets: bool | None = None,
    steps_per_epoch: int | None = None,
) -> tuple[pd.DataFrame, TraceMeta, dict[str, pa.Array]]:
    """(scalar columns, provenance, list columns) of a synthetic trace.

    `preset`: a preset's name, or a Preset (a registered one with an assumed parameter
    changed: the sensitivity sweeps of sim/sensitivity.py).
    `scale` in (0, 1] multiplies the prompts per step (at least one; group size unchanged).
    List columns hold the position buckets and, with tokens=True, the token ids; pass them
    as `lists=` to traces.io.write_trace. `buckets`: write the position buckets (None:
    for small traces and token traces only, since a full-scale step's buckets are a few
    million values; a replay draws each verify iteration at its position's bucket).
    `steps_per_epoch`: steps per pass over the prompt set, replacing the preset's (None
    keeps it; a preset without epochs never repeats a prompt). A short trace needs a small
    value to reach the later epochs, where the prompts come back: history drafting and
    length-history scheduling (RhymeRL) act only there.
    """
    p = get_preset(preset) if isinstance(preset, str) else preset
    _check_args(steps, seed, scale)
    if steps_per_epoch is not None:
        if isinstance(steps_per_epoch, bool) or not isinstance(steps_per_epoch, int) or steps_per_epoch < 1:
            raise ValueError(f"steps_per_epoch must be an integer >= 1, got {steps_per_epoch!r}")
        prompts = prompts_per_step(p, scale) * steps_per_epoch
        if prompts > MAX_PROMPT_SET:  # (each epoch shuffles the whole set)
            raise ValueError(
                f"steps_per_epoch {steps_per_epoch} makes a prompt set of {prompts:,} prompts, more than "
                f"{MAX_PROMPT_SET:,}: pass a smaller --steps-per-epoch"
            )
        p = replace(p, steps_per_epoch=steps_per_epoch)
    check_size(p, steps, scale)
    lay = _layout(p, int(steps), scale, _rng(seed, _LAYOUT))
    ln = _lengths(p, lay, _rng(seed, _LENGTH))
    reward = _rewards(p, lay, ln, _rng(seed, _REWARD))
    accept = _acceptance(p, lay, ln, _rng(seed, _ACCEPT))
    with_buckets = (tokens or scale <= BUCKET_SCALE_LIMIT) if buckets is None else bool(buckets)
    lists: dict[str, pa.Array] = {}
    if tokens:
        lists.update(_tokens(p, seed, lay, ln, accept["suffix"]))
    if with_buckets:
        lists.update(_buckets(ln.response_len, accept))
    df = pd.DataFrame(
        {
            "step": lay.step,
            "prompt_id": lay.prompt,
            "sample": lay.sample,
            "epoch": lay.epoch,
            "prompt_len": ln.prompt_len,
            "response_len": ln.response_len,
            "max_tokens": np.full(len(lay.step), p.max_tokens, dtype=np.int32),
            "finish_reason": pd.Categorical.from_codes(
                ln.clipped.astype(np.int8), categories=list(FINISH_REASONS)
            ),
            "reward": reward,
            **{accept_column(m): a for m, a in accept.items()},
        }
    )
    return df, _meta(p, int(steps), seed, scale, lay, with_buckets), lists


def write_generated(
    path: str | Path,
    preset: str,
    steps: int,
    seed: int,
    scale: float = 1.0,
    tokens: bool = False,
    buckets: bool | None = None,
    steps_per_epoch: int | None = None,
) -> Path:
    """Generate and write atomically; the file's metadata names the preset, seed and scale
    (and the steps per epoch it used)."""
    df, meta, lists = generate_trace(
        preset, steps, seed, scale=scale, tokens=tokens, buckets=buckets, steps_per_epoch=steps_per_epoch
    )
    return write_trace(path, df, meta, lists=lists)
