"""Reading and writing trace files.

Scalar columns become a pandas DataFrame; token-id list columns stay Arrow arrays and are
exposed as flat (values, offsets) numpy pairs, because millions of per-row Python lists
would cost gigabytes and the simulator only needs slices.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from simctl.traces.atomic import atomic_write
from simctl.traces.schema import METADATA_KEY, TraceMeta, column_type


class TraceError(ValueError):
    """A trace file that cannot be used; the message is one line naming file and field
    (a line per problem where validation found several: `one_line` for a command's error)."""

    def one_line(self) -> str:
        """The first problem, and how many more there are (`simctl trace validate` lists
        every one): a command that cannot use the trace says so in one line."""
        lines = str(self).splitlines() or ["unreadable trace"]
        more = len(lines) - 1
        if not more:
            return lines[0]
        return f"{lines[0]} (and {more} more problem{'s' * (more > 1)}: simctl trace validate lists them)"


@dataclass
class Trace:
    """A loaded trace: scalar columns, token lists (flat), and provenance."""

    df: pd.DataFrame
    meta: TraceMeta
    lists: dict[str, pa.ListArray] = field(default_factory=dict)
    path: Path | None = None

    def token_arrays(self, column: str) -> tuple[np.ndarray, np.ndarray]:
        """(values, offsets) of a list column in row order: row i is values[off[i]:off[i+1]]."""
        return list_arrays(self.lists[column])

    def has_tokens(self) -> bool:
        return "response_tokens" in self.lists

    @property
    def steps(self) -> list[int]:
        return sorted(int(s) for s in self.df["step"].unique())


def write_trace(
    path: str | Path,
    df: pd.DataFrame,
    meta: TraceMeta,
    lists: dict[str, pa.Array | Iterable] | None = None,
) -> Path:
    """Write atomically (temp file + rename) so a crash never leaves a half-written trace."""
    path = Path(path)
    arrays, names = [], []
    for name in df.columns:
        typ = column_type(name)
        arrays.append(pa.array(df[name].to_numpy(), type=typ) if typ else pa.array(df[name]))
        names.append(name)
    for name, values in (lists or {}).items():
        typ = column_type(name) or pa.list_(pa.int32())
        arrays.append(values if isinstance(values, pa.Array) else pa.array(values, type=typ))
        names.append(name)
    table = pa.Table.from_arrays(arrays, names=names)
    table = table.replace_schema_metadata({METADATA_KEY: meta.to_json().encode()})
    atomic_write(path, lambda tmp: pq.write_table(table, tmp, compression="zstd"))
    return path


def open_parquet(path: str | Path) -> pq.ParquetFile:
    """Open a Parquet file, turning every low-level failure into one TraceError line."""
    path = Path(path)
    if not path.exists():
        if path.is_symlink():  # exists() follows the link: say which link is the problem
            raise TraceError(f"{path}: symbolic link to a missing file, or a loop of links")
        raise TraceError(f"{path}: no such file")
    if path.is_dir():
        raise TraceError(f"{path}: is a directory, expected a Parquet trace file")
    try:
        return pq.ParquetFile(path)
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise TraceError(f"{path}: not a readable Parquet file ({first})") from None


def read_meta(pf: pq.ParquetFile, path: str | Path) -> TraceMeta:
    raw = (pf.schema_arrow.metadata or {}).get(METADATA_KEY)
    if raw is None:
        raise TraceError(f"{path}: metadata key '{METADATA_KEY.decode()}' missing (not a simctl trace)")
    try:
        return TraceMeta.from_json(raw.decode())
    except RecursionError:
        raise TraceError(f"{path}: metadata '{METADATA_KEY.decode()}' is nested too deeply") from None
    except (ValueError, TypeError, AttributeError) as exc:
        raise TraceError(f"{path}: metadata '{METADATA_KEY.decode()}' unreadable ({exc})") from None


def read_trace(path: str | Path, columns: list[str] | None = None) -> Trace:
    """Load a trace without validating it (see traces.validate for that)."""
    pf = open_parquet(path)
    meta = read_meta(pf, path)
    try:
        table = pf.read(columns=columns)
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise TraceError(f"{path}: cannot read data ({first})") from None
    scalar, lists = [], {}
    for name in table.column_names:
        col = table.column(name)
        if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
            lists[name] = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
        else:
            scalar.append(name)
    df = table.select(scalar).to_pandas()
    if "finish_reason" in df.columns:
        df["finish_reason"] = df["finish_reason"].astype("category")
    return Trace(df=df, meta=meta, lists=lists, path=Path(path))


def list_arrays(arr: pa.ListArray | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(values, offsets) of a list array: row i is values[off[i]:off[i+1]], offsets from 0
    (a sliced or taken array's start is dropped)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    offsets = arr.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    values = arr.values.to_numpy(zero_copy_only=False)
    base = offsets[0]
    return values[base : offsets[-1]], offsets - base
