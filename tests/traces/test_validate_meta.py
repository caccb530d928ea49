"""Trace metadata is validated like the rows: a bad field is one line naming it and its value,
and `trace validate` exits 1 (before, these passed validation and crashed `replay` later)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from simctl.cli import main
from simctl.traces.io import write_trace
from simctl.traces.schema import METADATA_KEY, TraceMeta
from simctl.traces.validate import MAX_STEP, validate_file
from tests.factories import make_frame


def _trace(tmp_path: Path, **meta_changes: object) -> Path:
    """A valid trace whose metadata JSON then gets `meta_changes` written over it raw
    (so values of any JSON type reach the reader, as in a hand-edited file)."""
    df = make_frame([10, 20, 30, 40], group_size=4, max_tokens=40)
    path = write_trace(tmp_path / "t.parquet", df, TraceMeta(group_size=4, model="qwen2.5-7b"))
    table = pq.read_table(path)
    meta = json.loads(table.schema.metadata[METADATA_KEY])
    for key, value in meta_changes.items():
        target = meta
        *parents, leaf = key.split(".")
        for p in parents:
            target = target.setdefault(p, {})
        target[leaf] = value
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: json.dumps(meta).encode()}), path)
    return path


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"group_size": "4"}, "group_size"),
        ({"group_size": 0}, "group_size"),
        ({"group_size": -2}, "group_size"),
        ({"group_size": True}, "group_size"),
        ({"model": None}, "model"),
        ({"model": ""}, "model"),
        ({"temperature": -1}, "temperature"),
        ({"timing.reward_s": "fast"}, "timing.reward_s"),
        ({"timing.train_s": -5.0}, "timing.train_s"),
        ({"timing.weight_sync_s": 1e400}, "timing.weight_sync_s"),
        ({"seed": 1.5}, "seed"),
        ({"accept_bucket_tokens": 0}, "accept_bucket_tokens"),
    ],
)
def test_bad_metadata_field_is_one_line_naming_it(tmp_path: Path, change: dict, field: str) -> None:
    path = _trace(tmp_path, **change)
    problems = validate_file(path)
    assert problems, f"{change} passed validation"
    assert all("\n" not in p for p in problems)
    assert any(f"metadata {field}:" in p and str(path) in p for p in problems), problems
    result = CliRunner().invoke(main, ["trace", "validate", str(path)])
    assert result.exit_code == 1
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"notes": "x"}, "field 'notes' is not a JSON object"),
        ({"timing": [1]}, "field 'timing' is not a JSON object"),
        ({"step_timing": {"1": 5}}, "field 'step_timing.1' is not a JSON object"),
        ({"timing.bogus_s": 1.0}, "field 'timing' has unknown key 'bogus_s'"),
    ],
)
def test_metadata_tables_of_another_shape_name_the_field(tmp_path: Path, change: dict, words: str) -> None:
    """A metadata table that is not one (or has a key the reader does not know) is named,
    not reported as Python's "'str' object has no attribute 'update'"."""
    path = _trace(tmp_path, **change)
    (problem,) = validate_file(path)
    assert words in problem and str(path) in problem, problem


def test_nan_timing_is_refused(tmp_path: Path) -> None:
    # json.dumps writes NaN as a bare token, which json.loads reads back as float('nan')
    problems = validate_file(_trace(tmp_path, **{"timing.reward_s": float("nan")}))
    assert any("metadata timing.reward_s: nan" in p for p in problems)


def test_deeply_nested_metadata_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "deep.parquet"
    good = _trace(tmp_path)
    table = pq.read_table(good)
    raw = '{"notes": ' + "[" * 100_000 + "]" * 100_000 + "}"
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: raw.encode()}), path)
    (problem,) = validate_file(path)
    assert "nested too deeply" in problem and "\n" not in problem


def test_epoch_varying_inside_a_step_is_refused(tmp_path: Path) -> None:
    df = make_frame([10, 20, 30, 40], group_size=4, max_tokens=40)
    df["epoch"] = [0, 0, 1, 1]
    df["epoch"] = df["epoch"].astype("int32")
    path = write_trace(tmp_path / "t.parquet", df, TraceMeta(group_size=4))
    (problem,) = validate_file(path)
    assert "column 'epoch': must be constant within a step: step 0 has epochs [0, 1]" in problem


def test_step_beyond_int32_is_refused(tmp_path: Path) -> None:
    """The schema accepts a wider integer column, so a step past int32 can reach the reader."""
    path = _trace(tmp_path)
    table = pq.read_table(path)
    i = table.schema.get_field_index("step")
    wide = pa.array([MAX_STEP + 1] * table.num_rows, type=pa.int64())
    pq.write_table(table.set_column(i, pa.field("step", pa.int64()), wide), path)
    problems = validate_file(path)
    assert any(f"column 'step': must be <= {MAX_STEP}" in p for p in problems), problems


def test_valid_metadata_passes(tmp_path: Path) -> None:
    assert validate_file(_trace(tmp_path, **{"timing.reward_s": 12.5, "seed": 3})) == []


def test_negative_token_ids_and_non_finite_rewards_are_refused(tmp_path: Path) -> None:
    df = make_frame([3, 3, 3, 3], group_size=4, max_tokens=40)
    tokens = pa.array([[1, -2, 3]] * 4, type=pa.list_(pa.int32()))
    path = write_trace(tmp_path / "t.parquet", df, TraceMeta(group_size=4), {"response_tokens": tokens})
    assert any("token ids must be >= 0: row 0 has -2" in p for p in validate_file(path))
    df["reward"] = [1.0, float("nan"), 0.0, float("inf")]
    path = write_trace(tmp_path / "r.parquet", df, TraceMeta(group_size=4))
    (problem,) = validate_file(path)
    assert "column 'reward': must be a finite number: row 1 = nan, row 3 = inf" in problem


@pytest.mark.parametrize(
    ("cluster", "words"),
    [
        ("zz9000", "cluster spec 'zz9000': expected NAMExCOUNT"),
        ("h100x8:tp3", "tp3 does not divide gpus_per_node=8"),
        ("missing.toml", "cluster file missing.toml: cannot read: No such file or directory"),
        ("a" * 100_000, "cluster spec 'aaaa"),
    ],
)
def test_a_recorded_cluster_that_replay_cannot_read_fails_validation(
    tmp_path: Path, cluster: str, words: str
) -> None:
    """`trace validate` said 'valid' to a trace whose metadata cluster replay refuses
    (without --cluster); the parser lives in sim/, handed in by the composition root. The
    message stays one line of reasonable length whatever the metadata held."""
    path = _trace(tmp_path, cluster=cluster)
    result = CliRunner().invoke(main, ["trace", "validate", str(path)])
    assert result.exit_code == 1, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"{path}: metadata 'cluster' does not parse: ") and words in line, line
    assert len(line) < 300
    good = _trace(tmp_path, cluster="h100x16:tp2")
    assert CliRunner().invoke(main, ["trace", "validate", str(good)]).exit_code == 0
