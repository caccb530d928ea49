"""What every importer shares: the options, the rows a dump yields, and the one step that
turns them into a schema-v1 trace (groups, sample indices, budgets, truncation, metadata).

Dumps differ in what they record; the trace schema asks for the same columns from all of
them. Each format module (one per framework) reads its files into a :class:`RowSet`,
recording what its format has (token ids, lengths, truncation, group ids) and leaving the
rest unknown; :func:`build_trace` then fills the gaps the same way for every format, from
the options the user gave (`--max-tokens`, `--group-size`, `--steps-per-epoch`) or by
refusing in one line that names the option to pass. Nothing is written until the result
has passed the same checks `simctl trace validate` runs.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from simctl.traces.io import Trace
from simctl.traces.schema import TraceMeta
from simctl.traces.validate import check_meta, check_rows

#: Largest prompt id (prompt ids are int64; hashes are folded into 63 bits to stay >= 0).
_ID_MASK = (1 << 63) - 1


class DumpError(ValueError):
    """A dump that cannot be imported; the message is one line naming file, line and field."""


@dataclass(frozen=True)
class ImportOptions:
    """The options every importer takes (`simctl trace import --help` says each one)."""

    model: str
    max_tokens: int | None = None
    group_size: int | None = None
    tokenizer: Path | None = None
    steps_per_epoch: int | None = None
    temperature: float | None = None
    hardware: str = "unknown"
    # slime only: the key that picks a reward out of a dict reward (slime's --reward-key)
    reward_key: str | None = None
    # AReaL only: the dump is of a multi-turn workflow with at most this many turns
    max_turns: int | None = None
    # table format only: schema column -> column of the file
    columns: dict[str, str] = field(default_factory=dict)
    # verl and ROLL: the chat template the run rendered prompts with, where not the
    # tokenizer's own, and the arguments it gave apply_chat_template
    chat_template: Path | None = None
    template_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class FormatFacts:
    """What a dump says about the whole run (None where it does not say)."""

    max_tokens: int | None = None
    group_size: int | None = None
    temperature: float | None = None


def stable_id(key: object) -> int:
    """A 63-bit id for a prompt key (text, token ids or a number), the same in every run and
    every Python process (unlike `hash`), so a prompt keeps its id across steps and epochs.

    >>> stable_id("What is 2+2?") == stable_id("What is 2+2?") != stable_id("What is 2+3?")
    True
    """
    if isinstance(key, str):
        data = b"s" + key.encode("utf-8", "surrogatepass")
    elif isinstance(key, tuple | list | np.ndarray):
        data = b"t" + np.asarray(key, dtype=np.int64).tobytes()
    else:
        data = b"r" + repr(key).encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") & _ID_MASK


@dataclass
class RowSet:
    """The responses read from a dump, one entry per response, in file order.

    `group` identifies the GRPO group within its step (the format's own group id, or the
    prompt itself where the format has none); `prompt` is hashed into `prompt_id` (stable
    across steps); `order` sorts responses within a group. `truncated` is True/False where
    the format records why generation ended and None where it does not; `budget` is a
    per-response generation budget where the format records one."""

    files: list[Path] = field(default_factory=list)
    where: list[str] = field(default_factory=list)  # "file line N", for messages
    step: list[int] = field(default_factory=list)
    group: list[int] = field(default_factory=list)
    prompt: list[int] = field(default_factory=list)
    order: list[int] = field(default_factory=list)
    prompt_len: list[int] = field(default_factory=list)
    response_len: list[int] = field(default_factory=list)
    truncated: list[bool | None] = field(default_factory=list)
    budget: list[int | None] = field(default_factory=list)
    reward: list[float | None] = field(default_factory=list)
    epoch: list[int | None] = field(default_factory=list)
    response_tokens: list[list[int]] | None = None
    prompt_tokens: list[list[int]] | None = None
    # prompt ids given by the dump (table format): used as they are, never re-hashed
    explicit_ids: bool = False
    notes: dict[str, Any] = field(default_factory=dict)

    def add(
        self,
        where: str,
        *,
        step: int,
        group: object,
        prompt: object,
        order: int,
        prompt_len: int,
        response_len: int,
        truncated: bool | None = None,
        budget: int | None = None,
        reward: float | None = None,
        epoch: int | None = None,
    ) -> None:
        """One response; lengths are checked here so the message names its line."""
        for name, value in (("prompt length", prompt_len), ("response length", response_len)):
            if value < 1:
                raise DumpError(f"{where}: {name} {value} must be >= 1")
        if step < 0:
            raise DumpError(f"{where}: step {step} must be >= 0")
        self.where.append(where)
        self.step.append(step)
        self.group.append(group if self.explicit_ids and isinstance(group, int) else stable_id(group))
        self.prompt.append(prompt if self.explicit_ids and isinstance(prompt, int) else stable_id(prompt))
        self.order.append(order)
        self.prompt_len.append(prompt_len)
        self.response_len.append(response_len)
        self.truncated.append(truncated)
        self.budget.append(budget)
        self.reward.append(reward)
        self.epoch.append(epoch)

    def keep_tokens(self, name: str, ids: list[list[int]], lengths: list[int]) -> None:
        """Token ids encoded again from a dump's text become column `name` (prompt_tokens,
        response_tokens) only where every row's ids have its recorded length: ids of another
        count would contradict the lengths. The notes count the rows that agree
        (`<name>_matching_rows`)."""
        agree = sum(len(x) == n for x, n in zip(ids, lengths, strict=True))
        self.notes[f"{name}_matching_rows"] = agree
        setattr(self, name, ids if agree == len(ids) else None)

    def count(self, note: str) -> None:
        """One more of what `note` counts in the import's notes (a sample left out, a reward
        that is not a number, ...)."""
        self.notes[note] = self.notes.get(note, 0) + 1

    def note_counts(self, note: str, counts: Mapping[int, int]) -> None:
        """`counts` (how many responses had each number of turns, ...) in the notes, by
        that number in order (JSON keys are text)."""
        self.notes[note] = {str(n): counts[n] for n in sorted(counts)}

    def __len__(self) -> int:
        return len(self.step)


# --- reading dump files -------------------------------------------------------------------


def find_files(paths: tuple[Path, ...], accept: Callable[[Path], bool], what: str) -> list[Path]:
    """The dump files named by PATH arguments: files as given, directories searched (all
    depths) for names `accept` takes. A directory holding none is refused in one line."""
    out: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and accept(p))
            if not found:
                raise DumpError(f"{path}: no {what} in this directory")
            out.extend(found)
        elif path.is_file():
            out.append(path)
        else:
            raise DumpError(f"{path}: no such file or directory")
    return list(dict.fromkeys(out))


def json_lines(path: Path, empty: RowSet | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of each non-blank line; one-line errors for text that is not
    UTF-8, not JSON, or not an object. A file without any record is refused, unless the
    format's writer makes such files (`empty`: the rows whose notes count them)."""
    seen = False
    try:
        # (utf-8-sig: a byte-order mark an editor saved at the start is not the JSON's)
        with path.open(encoding="utf-8-sig") as f:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DumpError(f"{path} line {number}: not JSON ({exc.msg})") from None
                except RecursionError:
                    raise DumpError(f"{path} line {number}: JSON nested too deeply") from None
                except ValueError as exc:  # (an integer of thousands of digits)
                    raise DumpError(f"{path} line {number}: not JSON ({str(exc)[:80]})") from None
                if not isinstance(obj, dict):
                    raise DumpError(f"{path} line {number}: expected a JSON object, got {type(obj).__name__}")
                seen = True
                yield number, obj
    except UnicodeDecodeError as exc:
        with path.open("rb") as f:
            gzipped = f.read(2) == b"\x1f\x8b"
        if gzipped:  # (no writer compresses its dumps, but a user archiving them may)
            raise DumpError(f"{path}: gzip-compressed; decompress it first (gunzip)") from None
        raise DumpError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not seen:
        if empty is None:
            raise DumpError(f"{path}: no records (empty file)")
        empty.count("empty_files")


def get(obj: dict[str, Any], key: str, where: str) -> Any:
    """A required field; a missing one is refused with the field's name."""
    if key not in obj:
        raise DumpError(f"{where}: field '{key}' missing")
    return obj[key]


#: The largest count a dump's field may hold: lengths, steps and ids past it are typos or
#: damage, and would wrap around in the trace's int64 columns.
MAX_COUNT = 2**53


def as_int(value: Any, key: str, where: str) -> int:
    """An integer field (JSON numbers that are whole count; booleans, text, NaN, infinity
    and numbers past MAX_COUNT do not)."""
    whole = (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and -MAX_COUNT <= value <= MAX_COUNT  # (NaN fails here, before int() sees it)
        and value == int(value)
    )
    if not whole:
        raise DumpError(
            f"{where}: field '{key}' is {show_value(value)}, expected an integer of at most 2**53"
        )
    return int(value)


def as_float(value: Any, key: str, where: str) -> float:
    """A finite number field."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not np.isfinite(value):
        raise DumpError(f"{where}: field '{key}' is {show_value(value)}, expected a finite number")
    return float(value)


def as_reward(value: Any, key: str, where: str, rows: RowSet) -> float | None:
    """A reward: a number. One that is not finite (a reward function's NaN, which
    `json.dumps` writes as NaN) is unknown: counted in the notes (`rewards_not_finite`), and
    the trace then has no reward column (the schema's rewards are finite numbers). The
    lengths, which are what a replay needs, are still imported."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DumpError(f"{where}: field '{key}' is {show_value(value)}, expected a number")
    if not math.isfinite(value):
        rows.count("rewards_not_finite")
        return None
    return float(value)


def as_text(value: Any, key: str, where: str) -> str:
    if not isinstance(value, str):
        raise DumpError(f"{where}: field '{key}' is {show_value(value)}, expected text")
    return value


def as_token_ids(value: Any, key: str, where: str) -> list[int]:
    """A list of token ids (integers >= 0)."""
    if not isinstance(value, list):
        raise DumpError(f"{where}: field '{key}' is {show_value(value)}, expected a list of token ids")
    for i, tok in enumerate(value):
        if isinstance(tok, bool) or not isinstance(tok, int) or not 0 <= tok < 2**31:
            raise DumpError(f"{where}: field '{key}'[{i}] is {show_value(tok)}, expected a token id >= 0")
    return value


def runs_of_ones(mask: list[int]) -> list[tuple[int, int]]:
    """(start, end) of each run of 1s in a 0/1 loss mask: the generated turns of a multi-turn
    response (the environment's tokens between them are 0; an empty observation would join
    two turns into one).

    >>> runs_of_ones([0, 1, 1, 0, 0, 1])
    [(1, 3), (5, 6)]
    """
    runs: list[tuple[int, int]] = []
    start: int | None = None
    for i, m in enumerate([*mask, 0]):
        if m == 1 and start is None:
            start = i
        elif m != 1 and start is not None:
            runs.append((start, i))
            start = None
    return runs


def turn_budget(turns: list[int], per_turn: int | None, where: str) -> int | None:
    """The budget of a multi-turn response whose dump marks its turns: --max-tokens (the
    budget of one turn) for each, and each must fit it; None for one turn (or without
    --max-tokens), whose budget is found as for any dump."""
    if len(turns) == 1 or per_turn is None:
        return None
    for i, n in enumerate(turns, start=1):
        if n > per_turn:
            raise DumpError(
                f"{where}: turn {i} of {len(turns)} generated {n} tokens, above --max-tokens {per_turn} "
                "(the budget of a turn)"
            )
    return len(turns) * per_turn


def show_value(value: Any) -> str:
    """A value as a message shows it: Python's repr (a numpy scalar as its Python value),
    cut to 40 characters."""
    text = repr(value.item() if isinstance(value, np.generic) else value)
    return text if len(text) <= 40 else text[:37] + "..."


# --- rows to trace ------------------------------------------------------------------------


@dataclass
class Imported:
    """An imported trace before writing: the frame, its token lists and metadata."""

    df: pd.DataFrame
    lists: dict[str, pa.Array]
    meta: TraceMeta
    dropped_rows: int


def _group_size(sizes: pd.Series, opts: ImportOptions, facts: FormatFacts, fmt: str) -> int:
    """--group-size, else the dump's own, else the most common size, where every group's
    size is a multiple of it (a prompt drawn twice in a step heads a group of twice the
    size). The smallest size is not taken for it: one group short of responses (a writer
    dropping empty ones) would then cut every full group into pieces, silently; differing
    sizes that are not multiples of the common one are refused instead."""
    if opts.group_size is not None:
        return opts.group_size
    if facts.group_size is not None:
        return facts.group_size
    counts = sizes.value_counts()
    common = int(counts.index[counts.to_numpy() == counts.max()].max())  # (a tie: the larger)
    if (sizes % common == 0).all():
        return common
    shown = ", ".join(str(s) for s in sorted(sizes.unique())[:5])
    raise DumpError(
        f"{fmt} dump: groups have different sizes ({shown}; most have {common}); pass --group-size G"
    )


def _assign_groups(df: pd.DataFrame, size: int, explicit: bool) -> pd.DataFrame:
    """sample = position in the group; a group of k*G responses (the same prompt drawn k
    times in one step) becomes k groups; a trailing partial group is dropped."""
    df = df.sort_values(["step", "group", "order", "row"], kind="stable")
    pos = df.groupby(["step", "group"], sort=False).cumcount().to_numpy()
    df = df.assign(sample=pos % size, chunk=pos // size)
    full = df.groupby(["step", "group", "chunk"], sort=False)["sample"].transform("size") == size
    df = df[full.to_numpy()]
    if explicit:
        many = df[df["chunk"] > 0]
        if len(many):
            r = many.iloc[0]
            raise DumpError(
                f"{r['where']}: group (step {r['step']}, prompt_id {r['prompt']}) has more than "
                f"--group-size {size} responses"
            )
        return df.assign(prompt_id=df["prompt"])
    # One prompt may head several groups in a step (drawn twice, or in two tasks): the first
    # keeps the prompt's id, the others get ids derived from it and their rank.
    heads = df.drop_duplicates(["step", "group", "chunk"])[["step", "group", "chunk", "prompt"]]
    heads = heads.assign(rank=heads.groupby(["step", "prompt"], sort=False).cumcount())
    heads = heads.rename(columns={"prompt": "head"})
    df = df.merge(heads, on=["step", "group", "chunk"], how="left", sort=False)
    ids = [p if k == 0 else stable_id(f"{p}:{k}") for p, k in zip(df["head"], df["rank"], strict=True)]
    return df.assign(prompt_id=np.asarray(ids, dtype=np.int64))


def _budgets(df: pd.DataFrame, opts: ImportOptions, facts: FormatFacts, fmt: str) -> pd.DataFrame:
    """max_tokens and finish_reason: a response the dump marks truncated ended at its budget
    (a shorter one hit another limit, e.g. the context length, which was its budget); one
    with unknown ending is 'length' exactly when it reached the budget."""
    default = opts.max_tokens if opts.max_tokens is not None else facts.max_tokens
    budget = df["budget"].astype("float64")
    if default is not None:
        budget = budget.fillna(float(default))
    if budget.isna().any():
        where = df["where"].iloc[int(np.argmax(budget.isna().to_numpy()))]
        raise DumpError(
            f"{where}: {fmt} dumps do not record the generation budget; pass --max-tokens N "
            "(the rollout's max response length)"
        )
    mx = budget.to_numpy(np.int64)
    resp = df["response_len"].to_numpy(np.int64)
    trunc = df["truncated"].to_numpy(object)
    over = resp > mx
    if over.any():
        i = int(np.argmax(over))
        raise DumpError(
            f"{df['where'].iloc[i]}: response length {resp[i]} exceeds the budget {mx[i]} "
            "(--max-tokens or the dump's own"
            + ("; a multi-turn workflow's dump: --max-turns N)" if fmt == "areal" else ")")
        )
    marked = np.asarray([t is True for t in trunc])
    mx = np.where(marked, np.minimum(mx, resp), mx)
    unknown = np.asarray([t is None for t in trunc])
    length = marked | (unknown & (resp == mx))
    return df.assign(max_tokens=mx, finish_reason=np.where(length, "length", "stop"))


def _epochs(df: pd.DataFrame, opts: ImportOptions) -> pd.Series | None:
    """The dump's epochs, else (step - first step) // --steps-per-epoch, else none."""
    if df["epoch"].notna().all():
        return df["epoch"].astype(np.int64)
    if opts.steps_per_epoch is not None:
        return (df["step"] - df["step"].min()) // opts.steps_per_epoch
    return None


def _token_lists(rows: RowSet, order: np.ndarray) -> dict[str, pa.Array]:
    lists: dict[str, pa.Array] = {}
    for name, values in (("response_tokens", rows.response_tokens), ("prompt_tokens", rows.prompt_tokens)):
        if values is not None:
            lists[name] = pa.array([values[i] for i in order], type=pa.list_(pa.int32()))
    return lists


def build_trace(rows: RowSet, opts: ImportOptions, facts: FormatFacts, fmt: str, upstream: str) -> Imported:
    """Rows -> a checked trace: groups, sample indices, budgets, epochs and metadata."""
    if not len(rows):
        raise DumpError(f"{fmt} dump: no responses in {', '.join(str(f) for f in rows.files)}")
    raw = pd.DataFrame(
        {
            "row": np.arange(len(rows)),
            "where": rows.where,
            "step": np.asarray(rows.step, dtype=np.int64),
            "group": np.asarray(rows.group, dtype=np.int64),
            "prompt": np.asarray(rows.prompt, dtype=np.int64),
            "order": np.asarray(rows.order, dtype=np.int64),
            "prompt_len": np.asarray(rows.prompt_len, dtype=np.int64),
            "response_len": np.asarray(rows.response_len, dtype=np.int64),
            "truncated": pd.Series(rows.truncated, dtype=object),
            "budget": pd.Series(rows.budget, dtype="Float64"),
            "reward": pd.Series(rows.reward, dtype="Float64"),
            "epoch": pd.Series(rows.epoch, dtype="Int64"),
        }
    )
    size = _group_size(raw.groupby(["step", "group"]).size(), opts, facts, fmt)
    df = _assign_groups(raw, size, rows.explicit_ids)
    if df.empty:
        raise DumpError(f"{fmt} dump: no group has --group-size {size} responses")
    df = _budgets(df, opts, facts, fmt).sort_values(["step", "prompt_id", "sample"], kind="stable")
    out = pd.DataFrame(
        {
            "step": df["step"].to_numpy(np.int32),
            "prompt_id": df["prompt_id"].to_numpy(np.int64),
            "sample": df["sample"].to_numpy(np.int32),
            "prompt_len": df["prompt_len"].to_numpy(np.int32),
            "response_len": df["response_len"].to_numpy(np.int32),
            "max_tokens": df["max_tokens"].to_numpy(np.int32),
            "finish_reason": df["finish_reason"].to_numpy(object),
        }
    )
    epoch = _epochs(df, opts)
    if epoch is not None:
        out["epoch"] = epoch.to_numpy(np.int32)
    if df["reward"].notna().all():
        out["reward"] = df["reward"].to_numpy(np.float32)
    meta = _meta(rows, opts, facts, fmt, upstream, size, dropped=len(raw) - len(df))
    imported = Imported(out, _token_lists(rows, df["row"].to_numpy()), meta, len(raw) - len(df))
    _check(imported, fmt)
    return imported


def _meta(
    rows: RowSet, opts: ImportOptions, facts: FormatFacts, fmt: str, upstream: str, size: int, dropped: int
) -> TraceMeta:
    temperature = opts.temperature if opts.temperature is not None else facts.temperature
    notes: dict[str, Any] = {
        "import": {
            "format": fmt,
            "files": [str(f) for f in rows.files],
            "upstream": upstream,
            "tokenizer": str(opts.tokenizer) if opts.tokenizer else None,
            "dropped_rows": dropped,
            **rows.notes,
        }
    }
    return TraceMeta(
        model=opts.model,
        hardware=opts.hardware,
        temperature=1.0 if temperature is None else temperature,
        group_size=size,
        source="converted",
        notes=notes,
    )


def _check(imported: Imported, fmt: str) -> None:
    """The checks `trace validate` runs, before anything is written."""
    trace = Trace(df=imported.df, meta=imported.meta, lists=imported.lists)
    problems = list(check_meta(imported.meta)) + list(check_rows(trace))
    if problems:
        raise DumpError(f"{fmt} dump does not make a valid trace: {problems[0]}")
