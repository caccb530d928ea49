"""A plain table of responses: CSV, JSON Lines or Parquet, one row per response.

For rollouts from any framework without an importer of its own: export one row per
response with the columns below (or map your own names with `--column NAME=SOURCE`).

| column | required | meaning |
|---|---|---|
| `step` | yes | RL step |
| `prompt_id` | yes | prompt (group) id, an integer, stable across steps |
| `sample` | yes | index of the response in its group |
| `prompt_len`, `response_len` | yes | tokens |
| `max_tokens` | no | generation budget (else `--max-tokens`) |
| `finish_reason` | no | 'stop' or 'length' (else 'length' exactly at the budget) |
| `reward`, `epoch` | no | as in the trace schema |
| `response_tokens`, `prompt_tokens` | no | token ids: a list, or its JSON text in a CSV |

Prompt ids are kept as given; sample indices are renumbered 0..G-1 in their order.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from simctl.traces.importers.common import (
    MAX_COUNT,
    DumpError,
    FormatFacts,
    ImportOptions,
    RowSet,
    as_token_ids,
    find_files,
    show_value,
)

UPSTREAM = "simctl table (docs/importing-traces.md)"
REQUIRED = ("step", "prompt_id", "sample", "prompt_len", "response_len")
INTEGERS = (*REQUIRED, "max_tokens", "epoch")
OPTIONAL = ("max_tokens", "finish_reason", "reward", "epoch", "response_tokens", "prompt_tokens")
SUFFIXES = (".csv", ".jsonl", ".parquet")


def _load(path: Path) -> pd.DataFrame:
    try:
        if path.suffix.lower() == ".csv":
            return pd.read_csv(path)
        if path.suffix.lower() == ".parquet":
            return pq.read_table(path).to_pandas()
        return pd.read_json(path, lines=True)
    except pd.errors.EmptyDataError:
        raise DumpError(f"{path}: no records (empty file)") from None
    except (ValueError, pa.ArrowException, UnicodeDecodeError, pd.errors.ParserError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise DumpError(f"{path}: not a readable {path.suffix[1:]} table ({first[:120]})") from None


def _select(df: pd.DataFrame, path: Path, mapping: dict[str, str]) -> pd.DataFrame:
    """The schema's columns under their schema names (mapped ones from their own)."""
    out = {}
    for name in (*REQUIRED, *OPTIONAL):
        source = mapping.get(name, name)
        if source in df.columns:
            out[name] = df[source]
        elif name in REQUIRED or name in mapping:
            via = f" (for '{name}', from --column)" if name in mapping else ""
            raise DumpError(f"{path}: column '{source}'{via} missing")
    if not len(df):
        raise DumpError(f"{path}: no records (empty file)")
    return pd.DataFrame(out)


def _integers(df: pd.DataFrame, path: Path) -> pd.DataFrame:
    for name in INTEGERS:
        if name not in df.columns:
            continue
        values = pd.to_numeric(df[name], errors="coerce").astype("float64")
        v = values.to_numpy()
        with np.errstate(invalid="ignore"):
            # (NaN and infinity, fractions, and counts past MAX_COUNT, which wrap in int64)
            bad = values.isna().to_numpy() | (v != np.round(v)) | ~(np.abs(v) <= MAX_COUNT)
        if name in ("max_tokens", "epoch"):
            bad &= df[name].notna().to_numpy()
        if bad.any():
            i = int(np.argmax(bad))
            shown = show_value(df[name].iloc[i])
            raise DumpError(
                f"{path} row {i + 1}: column '{name}' is {shown}, expected an integer of at most 2**53"
            )
        df[name] = values
    if "reward" in df.columns:
        reward = pd.to_numeric(df["reward"], errors="coerce")
        bad = ~np.isfinite(reward.to_numpy(np.float64))
        if bad.any():
            i = int(np.argmax(bad))
            shown = show_value(df["reward"].iloc[i])
            raise DumpError(f"{path} row {i + 1}: column 'reward' is {shown}, expected a number")
        df["reward"] = reward
    return df


def _ids(value: Any, name: str, where: str) -> list[int]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise DumpError(f"{where}: column '{name}' is not a JSON list of token ids") from None
    if isinstance(value, np.ndarray):
        value = value.tolist()
    return as_token_ids(value, name, where)


def _truncated(value: Any, where: str) -> bool:
    if value not in ("stop", "length"):
        raise DumpError(f"{where}: column 'finish_reason' is {value!r}, expected 'stop' or 'length'")
    return bool(value == "length")


def _add_file(rows: RowSet, df: pd.DataFrame, path: Path) -> None:
    dup = df.duplicated(["step", "prompt_id", "sample"]).to_numpy()
    if dup.any():
        i = int(np.argmax(dup))
        raise DumpError(f"{path} row {i + 1}: duplicate (step, prompt_id, sample)")
    for i, r in enumerate(df.itertuples(index=False)):
        where = f"{path} row {i + 1}"
        d = r._asdict()
        rows.add(
            where,
            step=int(d["step"]),
            group=int(d["prompt_id"]),
            prompt=int(d["prompt_id"]),
            order=int(d["sample"]),
            prompt_len=int(d["prompt_len"]),
            response_len=int(d["response_len"]),
            truncated=_truncated(d["finish_reason"], where) if "finish_reason" in d else None,
            budget=int(d["max_tokens"]) if pd.notna(d.get("max_tokens", np.nan)) else None,
            reward=float(d["reward"]) if "reward" in d else None,
            epoch=int(d["epoch"]) if pd.notna(d.get("epoch", np.nan)) else None,
        )
        for name, store, length in (
            ("response_tokens", rows.response_tokens, "response_len"),
            ("prompt_tokens", rows.prompt_tokens, "prompt_len"),
        ):
            if store is None:
                continue
            ids = _ids(d[name], name, where)
            if len(ids) != int(d[length]):
                raise DumpError(f"{where}: column '{name}' has {len(ids)} ids, {length} is {int(d[length])}")
            store.append(ids)


def read(paths: tuple[Path, ...], opts: ImportOptions) -> tuple[RowSet, FormatFacts]:
    unknown = sorted(set(opts.columns) - {*REQUIRED, *OPTIONAL})
    if unknown:
        known = ", ".join(REQUIRED + OPTIONAL)
        raise DumpError(f"--column {unknown[0]}=...: '{unknown[0]}' is not a trace column ({known})")
    files = find_files(paths, lambda p: p.suffix.lower() in SUFFIXES, "tables (.csv, .jsonl, .parquet)")
    rows = RowSet(files=files, explicit_ids=True)
    frames = [(path, _integers(_select(_load(path), path, opts.columns), path)) for path in files]
    for name in ("response_tokens", "prompt_tokens"):
        have = [name in df.columns for _, df in frames]
        if all(have):
            setattr(rows, name, [])
        elif any(have):
            raise DumpError(f"{frames[have.index(False)][0]}: column '{name}' missing (other files have it)")
    for path, df in frames:
        _add_file(rows, df, path)
    return rows, FormatFacts()
