"""Every validation error the schema promises: one line naming column/row/value, exit 1,
never a traceback; and round-trips of valid traces."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from simctl.cli import main
from simctl.traces.io import read_trace, write_trace
from simctl.traces.schema import METADATA_KEY, TraceMeta
from simctl.traces.validate import validate_file
from tests.factories import make_frame


def _write(tmp_path: Path, df: pd.DataFrame, lists=None, meta: TraceMeta | None = None) -> Path:
    return write_trace(tmp_path / "t.parquet", df, meta or TraceMeta(group_size=4), lists)


def _good() -> pd.DataFrame:
    return make_frame([10, 20, 30, 40, 5, 6, 7, 40], group_size=4, max_tokens=40, accept={"ngram": 0.5})


def _cli(*args: str):
    return CliRunner().invoke(main, list(args))


def test_valid_trace_round_trips_all_columns(tmp_path: Path) -> None:
    df = _good()
    df["reward"] = np.float32(1.0)
    tokens = pa.array([list(range(n)) for n in df["response_len"]], type=pa.list_(pa.int32()))
    meta = TraceMeta(group_size=4, preset="x", seed=3, model="qwen2.5-7b")
    path = _write(tmp_path, df, {"response_tokens": tokens}, meta)
    assert validate_file(path) == []
    back = read_trace(path)
    pd.testing.assert_frame_equal(
        back.df.drop(columns="finish_reason"), df.drop(columns="finish_reason"), check_dtype=False
    )
    assert back.meta == meta
    values, offsets = back.token_arrays("response_tokens")
    assert list(values[offsets[1] : offsets[2]]) == list(range(20))
    result = _cli("trace", "validate", str(path))
    assert result.exit_code == 0 and "valid" in result.output


def _problems(tmp_path: Path, df: pd.DataFrame, **kw) -> list[str]:
    problems = validate_file(_write(tmp_path, df, **kw))
    assert problems, "expected a validation problem"
    assert all("\n" not in p for p in problems)
    return problems


def test_missing_column(tmp_path: Path) -> None:
    (p,) = _problems(tmp_path, _good().drop(columns="max_tokens"))
    assert "missing required column 'max_tokens'" in p


def test_wrong_type(tmp_path: Path) -> None:
    df = _good()
    df["prompt_len"] = df["prompt_len"].astype(str)
    table = pa.Table.from_pandas(df, preserve_index=False)
    table = table.replace_schema_metadata({METADATA_KEY: TraceMeta(group_size=4).to_json().encode()})
    path = tmp_path / "typed.parquet"
    pq.write_table(table, path)
    (p,) = validate_file(path)
    assert "column 'prompt_len': wrong type" in p and "string, expected int32" in p


@pytest.mark.parametrize("col", ["prompt_len", "response_len"])
def test_zero_or_negative_length(tmp_path: Path, col: str) -> None:
    df = _good()
    df.loc[2, col] = 0 if col == "response_len" else -5
    problems = _problems(tmp_path, df)
    assert any(f"column '{col}'" in p and "row 2" in p for p in problems)


def test_response_longer_than_budget(tmp_path: Path) -> None:
    df = _good()
    df.loc[5, "response_len"] = 41
    problems = _problems(tmp_path, df)
    assert any("exceeds max_tokens" in p and "row 5 = 41" in p for p in problems)


def test_finish_reason_inconsistent(tmp_path: Path) -> None:
    df = _good()
    df.loc[0, "finish_reason"] = "length"  # 10 tokens of 40
    problems = _problems(tmp_path, df)
    assert any("'length' but response_len < max_tokens" in p and "row 0" in p for p in problems)
    df = _good()
    df.loc[1, "finish_reason"] = "abort"
    assert any("must be one of" in p and "'abort'" in p for p in _problems(tmp_path, df))


def test_duplicate_key(tmp_path: Path) -> None:
    df = _good()
    df.loc[1, "sample"] = 0
    problems = _problems(tmp_path, df)
    assert any("duplicate (step, prompt_id, sample) = (0, 0, 0) at row 1" in p for p in problems)


def test_unequal_group_sizes(tmp_path: Path) -> None:
    df = _good().iloc[:-1]
    problems = _problems(tmp_path, df)
    assert any("unequal group sizes" in p and "prompt_id 1" in p and "3 responses" in p for p in problems)


@pytest.mark.parametrize("bad", [1.5, -0.1, float("nan")])
def test_acceptance_out_of_range(tmp_path: Path, bad: float) -> None:
    df = _good()
    df.loc[3, "accept_ngram"] = bad
    problems = _problems(tmp_path, df)
    assert any("column 'accept_ngram'" in p and "row 3" in p for p in problems)


@pytest.mark.parametrize("column", ["draft_hit_ngram", "draft_fill_ngram"])
def test_acceptance_where_nothing_was_drafted_is_refused(tmp_path: Path, column: str) -> None:
    """`accept_<m>` is fitted to what each verification yielded, iterations without a draft
    included: a row that drafted nothing (hit or fill 0) accepted nothing. Replayed, its
    acceptance gave speed-ups from drafts the trace says never existed."""
    df = _good()
    df[column] = 1.0
    df.loc[[2, 5], column] = 0.0
    df.loc[5, "accept_ngram"] = 0.0  # (no draft and nothing accepted: consistent)
    problems = _problems(tmp_path, df)
    assert [p.split(": ", 1)[1] for p in problems] == [
        f"column 'accept_ngram': above 0 where '{column}' is 0 (nothing drafted): row 2 = 0.5"
    ]


def test_bucket_acceptance_needs_its_width(tmp_path: Path) -> None:
    df = _good()
    buckets = pa.array([[0.5, 0.4]] * len(df), type=pa.list_(pa.float32()))
    problems = _problems(tmp_path, df, lists={"accept_ngram_buckets": buckets})
    assert [p.split(": ", 1)[1] for p in problems] == [
        "column 'accept_ngram_buckets': bucket acceptance without metadata accept_bucket_tokens (its width)"
    ]
    path = _write(
        tmp_path, df, {"accept_ngram_buckets": buckets}, TraceMeta(group_size=4, accept_bucket_tokens=16)
    )
    assert validate_file(path) == []


def test_token_list_length_mismatch(tmp_path: Path) -> None:
    df = _good()
    lens = df["response_len"].to_numpy().copy()
    lens[4] -= 1
    tokens = pa.array([[1] * n for n in lens], type=pa.list_(pa.int32()))
    problems = _problems(tmp_path, df, lists={"response_tokens": tokens})
    assert any("column 'response_tokens'" in p and "row 4 has 4 tokens" in p for p in problems)


def test_unknown_schema_version(tmp_path: Path) -> None:
    (p,) = _problems(tmp_path, _good(), meta=TraceMeta(schema_version=99, group_size=4))
    assert "unknown schema version 99" in p


def test_not_parquet_and_truncated(tmp_path: Path) -> None:
    junk = tmp_path / "junk.parquet"
    junk.write_text("step,prompt_id\n1,2\n")
    (p,) = validate_file(junk)
    assert "not a readable Parquet file" in p and str(junk) in p
    good = _write(tmp_path, _good())
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    (p,) = validate_file(cut)
    assert "not a readable Parquet file" in p
    (p,) = validate_file(tmp_path / "absent.parquet")
    assert "no such file" in p
    dangling, loop = tmp_path / "dangling.parquet", tmp_path / "loop.parquet"
    dangling.symlink_to(tmp_path / "gone.parquet")
    loop.symlink_to(loop)
    for link in (dangling, loop):
        (p,) = validate_file(link)
        assert p == f"{link}: symbolic link to a missing file, or a loop of links"


def test_parquet_without_simctl_metadata(tmp_path: Path) -> None:
    path = tmp_path / "plain.parquet"
    pq.write_table(pa.Table.from_pandas(_good()), path)
    (p,) = validate_file(path)
    assert METADATA_KEY.decode() in p


def test_cli_reports_each_problem_on_its_own_line_and_exits_nonzero(tmp_path: Path) -> None:
    df = _good()
    df.loc[0, "response_len"] = 0
    df.loc[3, "accept_ngram"] = 2.0
    path = _write(tmp_path, df)
    result = _cli("trace", "validate", str(path))
    assert result.exit_code == 1
    lines = [ln for ln in result.output.splitlines() if ln]
    assert len(lines) >= 2 and all(ln.startswith(str(path)) for ln in lines)
    assert "Traceback" not in result.output


def test_inspect_prints_summary_and_writes_plot(tmp_path: Path) -> None:
    path = _write(tmp_path, _good())
    png = tmp_path / "len.png"
    result = _cli("trace", "inspect", str(path), "--plot", str(png))
    assert result.exit_code == 0, result.output
    assert "p99" in result.output and "clip_frac" in result.output and "acc_ngram" in result.output
    assert png.stat().st_size > 5000 and png.read_bytes()[:4] == b"\x89PNG"


def test_inspect_shows_each_steps_epoch() -> None:
    """The RhymeRL sample's steps are epochs 0, 1, 2 (history drafting acts from the
    second); a trace without the column has no epoch column."""
    from simctl.traces.inspect import step_summary

    rh = read_trace(Path(__file__).parents[2] / "traces/samples/rhymerl-math-14b-16k-tokens.parquet")
    summary = step_summary(rh)
    assert summary.columns[:2].tolist() == ["step", "epoch"]
    assert summary["epoch"].tolist() == [0, 1, 2]
    no_epoch = dataclasses.replace(rh, df=rh.df.drop(columns=["epoch"]))
    assert "epoch" not in step_summary(no_epoch).columns


def test_inspect_numbers(tmp_path: Path) -> None:
    from simctl.traces.inspect import step_summary, top_decile_token_share

    trace = read_trace(_write(tmp_path, _good()))
    row = step_summary(trace).iloc[0]
    assert row["requests"] == 8 and row["groups"] == 2 and row["group_size"] == 4
    assert row["max"] == 40 and row["clip_frac"] == pytest.approx(2 / 8)
    assert row["acc_ngram"] == pytest.approx(0.5)
    assert top_decile_token_share(np.array([1] * 9 + [91])) == pytest.approx(0.91)


def test_metadata_json_is_plain(tmp_path: Path) -> None:
    path = _write(tmp_path, _good(), meta=TraceMeta(group_size=4, preset="p", seed=5))
    raw = pq.ParquetFile(path).schema_arrow.metadata[METADATA_KEY]
    d = json.loads(raw)
    assert d["preset"] == "p" and d["seed"] == 5 and d["schema_version"] == 1


def test_schema_page_documents_every_column() -> None:
    from simctl.traces.schema import KNOWN_METHODS, OPTIONAL_COLUMNS, REQUIRED_COLUMNS

    text = (Path(__file__).parents[2] / "traces" / "SCHEMA.md").read_text()
    for col in REQUIRED_COLUMNS + OPTIONAL_COLUMNS:
        assert f"| `{col.name}` | {col.type} | {col.unit} |" in text, col.name
    for method in KNOWN_METHODS:
        assert f"| `{method}` |" in text


SAMPLES = sorted((Path(__file__).parents[2] / "traces" / "samples").glob("*.parquet"))


def test_bundled_samples_exist_and_are_small() -> None:
    assert len(SAMPLES) >= 3
    assert sum(p.stat().st_size for p in SAMPLES) < 8 * 2**20
    assert any(read_trace(p).has_tokens() for p in SAMPLES)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_bundled_samples_are_valid_and_say_how_they_were_made(path: Path) -> None:
    assert validate_file(path) == []
    meta = read_trace(path).meta
    assert meta.preset and meta.seed is not None and meta.source == "generated"
    assert meta.preset in path.name


def test_inspect_shows_acceptance_by_response_position(tmp_path: Path) -> None:
    """Token-weighted bucket values over doubling position ranges, per method with buckets;
    a trace without buckets prints no such table."""
    from simctl.traces.inspect import position_summary

    df = make_frame([8, 3, 5, 2], accept={"ngram": 0.5})
    buckets = pa.array([[1.0, 0.5], [0.2], [0.8, 0.0], [0.4]], pa.list_(pa.float32()))
    meta = TraceMeta(group_size=4, accept_bucket_tokens=4)
    path = _write(tmp_path, df, lists={"accept_ngram_buckets": buckets}, meta=meta)
    got = position_summary(read_trace(path))
    assert got is not None and list(got.columns) == ["method", "0-4", "4-8"]
    row = got.iloc[0]
    # [0, 4): 4 tokens at 1.0, 3 at 0.2, 4 at 0.8, 2 at 0.4; [4, 8): 4 at 0.5, 1 at 0.0
    assert row["method"] == "ngram"
    assert row["0-4"] == pytest.approx((4 * 1.0 + 3 * 0.2 + 4 * 0.8 + 2 * 0.4) / 13, rel=1e-6)
    assert row["4-8"] == pytest.approx(4 * 0.5 / 5, rel=1e-6)
    result = _cli("trace", "inspect", str(path))
    assert result.exit_code == 0, result.output
    assert "acceptance by response position" in result.output and "4-8" in result.output
    (tmp_path / "plain").mkdir()
    plain = _write(tmp_path / "plain", _good())
    assert position_summary(read_trace(plain)) is None
    assert "by response position" not in _cli("trace", "inspect", str(plain)).output
