"""Trace validation: every problem becomes one line naming file, column, row and value.

The simulator trusts a validated trace completely (no defensive checks on the hot path),
so everything a replay relies on is checked here, vectorised.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from simctl.traces.io import Trace, TraceError, open_parquet, read_meta, read_trace
from simctl.traces.schema import (
    ACCEPT_PREFIX,
    BUCKET_SUFFIX,
    FILL_PREFIX,
    FINISH_REASONS,
    HIT_PREFIX,
    REQUIRED_COLUMNS,
    SCHEMA_VERSION,
    StepTiming,
    TraceMeta,
    column_type,
)

MAX_ROWS_SHOWN = 3
#: Step and epoch numbers must fit the schema's int32 columns and the simulator's arrays.
MAX_STEP = 2**31 - 1


def _type_ok(actual: pa.DataType, expected: pa.DataType) -> bool:
    """Same kind of value (integer width and float precision may differ)."""
    if pa.types.is_integer(expected):
        return pa.types.is_integer(actual)
    if pa.types.is_floating(expected):
        return pa.types.is_floating(actual)
    if pa.types.is_string(expected):
        return (
            pa.types.is_string(actual)
            or pa.types.is_large_string(actual)
            or (pa.types.is_dictionary(actual) and pa.types.is_string(actual.value_type))
        )
    if pa.types.is_list(expected):
        return (pa.types.is_list(actual) or pa.types.is_large_list(actual)) and _type_ok(
            actual.value_type, expected.value_type
        )
    return actual.equals(expected)


def _rows(mask: np.ndarray, values: np.ndarray | pd.Series) -> str:
    idx = np.flatnonzero(mask)
    vals = np.asarray(values)
    shown = ", ".join(f"row {i} = {_plain(vals[i])!r}" for i in idx[:MAX_ROWS_SHOWN])
    more = f" (and {len(idx) - MAX_ROWS_SHOWN} more rows)" if len(idx) > MAX_ROWS_SHOWN else ""
    return shown + more


def _plain(v: object) -> object:
    return v.item() if isinstance(v, np.generic) else v


def _more(n: int) -> str:
    return f" (and {n} more rows)" if n > 0 else ""


def check_schema(schema: pa.Schema) -> Iterator[str]:
    names = set(schema.names)
    for col in REQUIRED_COLUMNS:
        if col.name not in names:
            yield f"missing required column '{col.name}' ({col.meaning})"
    for f in schema:
        expected = column_type(f.name)
        if expected is not None and not _type_ok(f.type, expected):
            yield f"column '{f.name}': wrong type {f.type}, expected {expected}"


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _check_timing(where: str, timing: object) -> Iterator[str]:
    if not isinstance(timing, StepTiming):
        yield f"metadata {where}: not an object of reward_s/train_s/weight_sync_s"
        return
    for f in fields(StepTiming):
        v = getattr(timing, f.name)
        if v is not None and not (_is_number(v) and v >= 0):
            yield f"metadata {where}.{f.name}: {v!r} is not a finite number of seconds >= 0"


def check_meta(meta: TraceMeta) -> Iterator[str]:
    """The metadata fields a replay relies on: types, ranges, finite numbers."""
    if not isinstance(meta.model, str) or not meta.model.strip():
        yield f"metadata model: {meta.model!r} is not a model name"
    if meta.model_config is not None and not isinstance(meta.model_config, dict):
        yield f"metadata model_config: {type(meta.model_config).__name__} is not a JSON object"
    if not isinstance(meta.hardware, str):
        yield f"metadata hardware: {meta.hardware!r} is not a string"
    if not (_is_number(meta.temperature) and meta.temperature >= 0):
        yield f"metadata temperature: {meta.temperature!r} is not a finite number >= 0"
    if not (_is_int(meta.group_size) and meta.group_size >= 1):
        yield f"metadata group_size: {meta.group_size!r} is not an integer >= 1"
    if meta.seed is not None and not _is_int(meta.seed):
        yield f"metadata seed: {meta.seed!r} is not an integer"
    if meta.accept_bucket_tokens is not None and not (
        _is_int(meta.accept_bucket_tokens) and meta.accept_bucket_tokens >= 1
    ):
        yield f"metadata accept_bucket_tokens: {meta.accept_bucket_tokens!r} is not an integer >= 1"
    yield from _check_timing("timing", meta.timing)
    if not isinstance(meta.step_timing, dict):
        yield "metadata step_timing: not an object keyed by step"
        return
    for step, timing in meta.step_timing.items():
        yield from _check_timing(f"step_timing[{step}]", timing)


def check_rows(trace: Trace) -> Iterator[str]:
    """Row-level checks; assumes check_schema found nothing."""
    df = trace.df
    for name in [c.name for c in REQUIRED_COLUMNS]:
        nulls = df[name].isna().to_numpy()
        if nulls.any():
            yield f"column '{name}': {int(nulls.sum())} null values, first at row {int(np.argmax(nulls))}"
            return
    for name in ("prompt_len", "response_len", "max_tokens"):
        bad = df[name].to_numpy() <= 0
        if bad.any():
            yield f"column '{name}': lengths must be >= 1: {_rows(bad, df[name])}"
    resp, mx = df["response_len"].to_numpy(), df["max_tokens"].to_numpy()
    over = resp > mx
    if over.any():
        yield f"column 'response_len': exceeds max_tokens: {_rows(over, resp)} (max_tokens {mx[over][0]})"
    reason = df["finish_reason"].astype(str).to_numpy()
    unknown = ~np.isin(reason, FINISH_REASONS)
    if unknown.any():
        yield f"column 'finish_reason': must be one of {FINISH_REASONS}: {_rows(unknown, reason)}"
    clipped_early = (reason == "length") & (resp < mx)
    if clipped_early.any():
        yield (
            f"column 'finish_reason': 'length' but response_len < max_tokens: {_rows(clipped_early, resp)}"
        )
    for name in ("step", "sample"):
        neg = df[name].to_numpy() < 0
        if neg.any():
            yield f"column '{name}': must be >= 0: {_rows(neg, df[name])}"
    huge = df["step"].to_numpy() > MAX_STEP
    if huge.any():
        yield f"column 'step': must be <= {MAX_STEP}: {_rows(huge, df['step'])}"
    yield from _check_epochs(df)
    if "reward" in df.columns:
        bad = ~np.isfinite(df["reward"].to_numpy(dtype=np.float64))
        if bad.any():
            yield f"column 'reward': must be a finite number: {_rows(bad, df['reward'])}"
    yield from _check_groups(df, trace.meta.group_size)
    yield from _check_acceptance(trace)
    yield from _check_tokens(trace)


def _check_epochs(df: pd.DataFrame) -> Iterator[str]:
    """SCHEMA.md: `epoch` is constant within a step."""
    if "epoch" not in df.columns:
        return
    if df["epoch"].isna().any():
        yield f"column 'epoch': {int(df['epoch'].isna().sum())} null values"
        return
    per_step = df.groupby("step", sort=True)["epoch"].nunique()
    mixed = per_step[per_step > 1]
    if len(mixed):
        step = mixed.index[0]
        seen = sorted(df.loc[df["step"] == step, "epoch"].unique().tolist())[:MAX_ROWS_SHOWN]
        yield (
            f"column 'epoch': must be constant within a step: step {step} has epochs {seen}"
            + ("" if len(mixed) == 1 else f" ({len(mixed)} steps differ)")
        )


def _check_groups(df: pd.DataFrame, meta_group_size: int) -> Iterator[str]:
    key = df[["step", "prompt_id", "sample"]]
    dup = key.duplicated(keep="first").to_numpy()
    if dup.any():
        i = int(np.argmax(dup))
        yield (
            f"duplicate (step, prompt_id, sample) = ({df['step'].iat[i]}, {df['prompt_id'].iat[i]}, "
            f"{df['sample'].iat[i]}) at row {i}" + _more(int(dup.sum()) - 1)
        )
        return
    sizes = df.groupby(["step", "prompt_id"], sort=False).size()
    expected = meta_group_size if meta_group_size and meta_group_size > 0 else int(sizes.mode().iat[0])
    odd = sizes[sizes != expected]
    if len(odd) == len(sizes) and sizes.nunique() == 1:
        yield f"metadata group_size={expected} but every group has {int(sizes.iat[0])} responses"
    elif len(odd):
        (step, pid), n = odd.index[0], int(odd.iat[0])
        yield (
            f"unequal group sizes: group (step {step}, prompt_id {pid}) has {n} responses, "
            f"expected {expected} ({len(odd)} groups differ)"
        )
    distinct = sizes.unique()
    over = df["sample"].to_numpy() >= sizes.max()
    if len(distinct) == 1 and over.any():
        yield f"column 'sample': index >= group size {int(sizes.max())}: {_rows(over, df['sample'])}"


def _check_acceptance(trace: Trace) -> Iterator[str]:
    for name in trace.df.columns:
        if not name.startswith((ACCEPT_PREFIX, FILL_PREFIX, HIT_PREFIX)):
            continue
        v = trace.df[name].to_numpy(dtype=np.float64)
        bad = ~((v >= 0.0) & (v <= 1.0))  # NaN fails too
        if bad.any():
            yield f"column '{name}': must be a fraction in [0, 1]: {_rows(bad, v)}"
    yield from _check_drafted_nothing(trace)
    for name, arr in trace.lists.items():
        if not (name.startswith(ACCEPT_PREFIX) and name.endswith(BUCKET_SUFFIX)):
            continue
        if trace.meta.accept_bucket_tokens is None:
            yield f"column '{name}': bucket acceptance without metadata accept_bucket_tokens (its width)"
        flat = arr.values.to_numpy(zero_copy_only=False).astype(np.float64)
        bad = ~((flat >= 0.0) & (flat <= 1.0))
        if bad.any():
            row = int(np.searchsorted(arr.offsets.to_numpy(), np.flatnonzero(bad)[0], side="right") - 1)
            yield f"column '{name}': bucket acceptance must be in [0, 1]: row {row} has {flat[bad][0]!r}"


def _check_drafted_nothing(trace: Trace) -> Iterator[str]:
    """`accept_<m>` is the acceptance fitted to the tokens each verification yielded, the
    iterations without a draft included (live/acceptance.py), so a row whose drafter filled
    no slot (`draft_fill_<m>` 0) or drafted in no iteration (`draft_hit_<m>` 0) accepted
    nothing: an acceptance above 0 there contradicts it (replayed, the drafts the trace says
    never existed would be accepted at the price of none)."""
    df = trace.df
    for name in df.columns:
        if not name.startswith((FILL_PREFIX, HIT_PREFIX)):
            continue
        method = name.removeprefix(FILL_PREFIX).removeprefix(HIT_PREFIX)
        accept = f"{ACCEPT_PREFIX}{method}"
        if accept not in df.columns:
            continue
        a = df[accept].to_numpy(dtype=np.float64)
        bad = (df[name].to_numpy(dtype=np.float64) == 0.0) & (a > 0.0)
        if bad.any():
            yield f"column '{accept}': above 0 where '{name}' is 0 (nothing drafted): {_rows(bad, a)}"


def _check_tokens(trace: Trace) -> Iterator[str]:
    expected = {"response_tokens": "response_len", "prompt_tokens": "prompt_len"}
    for name, length_col in expected.items():
        if name not in trace.lists:
            continue
        arr = trace.lists[name]
        if arr.null_count:
            yield f"column '{name}': {arr.null_count} null lists"
            continue
        lens = np.diff(arr.offsets.to_numpy(zero_copy_only=False))
        want = trace.df[length_col].to_numpy()
        bad = lens != want
        if bad.any():
            i = int(np.argmax(bad))
            yield (
                f"column '{name}': list length != {length_col}: row {i} has {lens[i]} tokens, "
                f"{length_col} = {want[i]}" + _more(int(bad.sum()) - 1)
            )
        if len(arr.values) and arr.values.null_count:
            yield f"column '{name}': {arr.values.null_count} null token ids"
        elif len(arr.values):
            ids = arr.values.to_numpy(zero_copy_only=False)
            if (ids < 0).any():
                i = int(np.searchsorted(arr.offsets.to_numpy(), int(np.argmax(ids < 0)), side="right") - 1)
                yield f"column '{name}': token ids must be >= 0: row {i} has {int(ids[ids < 0][0])}"


def check_file(path: str | Path) -> tuple[list[str], Trace | None]:
    """(problems, trace): the trace is loaded once and returned when it could be read."""
    path = Path(path)
    try:
        pf = open_parquet(path)
        meta = read_meta(pf, path)
    except TraceError as exc:
        return [str(exc)], None
    if meta.schema_version != SCHEMA_VERSION:
        return [
            f"{path}: unknown schema version {meta.schema_version!r} (this simctl reads {SCHEMA_VERSION})"
        ], None
    problems = list(check_meta(meta)) + list(check_schema(pf.schema_arrow))
    if problems:
        return [f"{path}: {p}" for p in problems], None
    try:
        trace = read_trace(path)
    except TraceError as exc:
        return [str(exc)], None
    if len(trace.df) == 0:
        return [f"{path}: trace has no rows"], trace
    return [f"{path}: {p}" for p in check_rows(trace)], trace


def validate_file(path: str | Path) -> list[str]:
    """All problems in the file, each a one-line message prefixed with the path."""
    return check_file(path)[0]


def load_valid_trace(path: str | Path) -> Trace:
    """Read a trace or raise TraceError with every problem (one per line)."""
    problems, trace = check_file(path)
    if problems or trace is None:
        raise TraceError("\n".join(problems))
    return trace
