"""Hostile inputs through the real CLI (in-process): malformed traces, cluster files,
profiles and `--policy` strings.

Whatever hypothesis generates, a command either succeeds or fails cleanly: exit status 1
(or click's 2 for usage), no traceback, no "internal error" (the top-level handler's word
for an exception simctl did not raise on purpose), at most three lines, and nothing
written where the output was asked to go. Examples are derandomized so CI sees the same
ones every run; each test keeps its example count small (the whole file runs in well under
a minute on two cores).
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simctl.cli import main
from simctl.policies.registry import REGISTRY
from simctl.traces.schema import METADATA_KEY, REQUIRED_COLUMNS, TraceMeta
from tests.factories import make_frame

FUZZ = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
REQUIRED = [c.name for c in REQUIRED_COLUMNS]
INT_COLUMNS = ["step", "prompt_id", "sample", "prompt_len", "response_len", "max_tokens"]
OLD = '{"old": true}'


def base_frame() -> pd.DataFrame:
    frames = [
        make_frame([8, 16, 24, 32, 5, 9, 40, 12], group_size=4, step=s, max_tokens=40, accept={"ngram": 0.5})
        for s in range(2)
    ]
    return pd.concat(frames, ignore_index=True)


def base_meta() -> dict[str, Any]:
    return json.loads(TraceMeta(model="qwen2.5-7b", group_size=4, preset="fuzz", seed=0).to_json())


def write_raw(path: Path, df: pd.DataFrame, meta: dict[str, Any] | str) -> Path:
    """Write whatever we were given: no schema coercion, metadata as raw JSON text."""
    table = pa.Table.from_pandas(df, preserve_index=False)
    text = meta if isinstance(meta, str) else json.dumps(meta)
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: text.encode()}), path)
    return path


def assert_clean_failure(result: Result, *untouched: Path) -> None:
    out = result.output
    assert result.exit_code in (1, 2), f"exit {result.exit_code}: {out}"
    assert "Traceback" not in out, out
    assert "internal error" not in out, out
    lines = [line for line in out.strip().splitlines() if line.strip()]
    assert 1 <= len(lines) <= 3, out
    for path in untouched:
        if path.is_dir():
            assert (path / "run.json").read_text() == OLD
        else:
            assert not path.exists() or path.read_text() == OLD


def old_run_dir(tmp_path: Path) -> Path:
    out = tmp_path / "run"
    out.mkdir(exist_ok=True)
    (out / "run.json").write_text(OLD)
    return out


def replay(trace: Path, tmp_path: Path, *extra: str) -> tuple[Result, Path, Path]:
    out, js = old_run_dir(tmp_path), tmp_path / "m.json"
    js.unlink(missing_ok=True)
    args = ["replay", str(trace), "--cluster", "h100x8", "--out", str(out), "--json", str(js), *extra]
    return CliRunner().invoke(main, args), out, js


# ----------------------------------------------------------------------------- traces


def _frame_mutation(draw: st.DrawFn, df: pd.DataFrame) -> pd.DataFrame:
    kind = draw(
        st.sampled_from(["drop", "strings", "nan", "negative", "over_budget", "accept", "dup", "reason"])
    )
    row = draw(st.integers(0, len(df) - 1))
    df = df.copy()
    if kind == "drop":
        df = df.drop(columns=draw(st.sampled_from(REQUIRED)))
    elif kind == "strings":
        col = draw(st.sampled_from(INT_COLUMNS))
        df[col] = df[col].astype(str) + draw(st.sampled_from(["", "x", " tokens"]))
        if df[col].str.fullmatch(r"\d+").all():
            df[col] = "n/a"
    elif kind == "nan":
        col = draw(st.sampled_from(INT_COLUMNS))
        df[col] = df[col].astype("float64")
        df.loc[row, col] = math.nan
    elif kind == "negative":
        col = draw(st.sampled_from(["prompt_len", "response_len", "max_tokens", "step", "sample"]))
        df.loc[row, col] = -draw(st.integers(1, 2**31 - 1))
    elif kind == "over_budget":
        df.loc[row, "response_len"] = df.loc[row, "max_tokens"] + draw(st.integers(1, 10**6))
    elif kind == "accept":
        df["accept_ngram"] = df["accept_ngram"].astype("float64")
        df.loc[row, "accept_ngram"] = draw(st.sampled_from([math.nan, -0.1, 1.5, math.inf]))
    elif kind == "dup":
        df = pd.concat([df, df.iloc[[row]]], ignore_index=True)
    else:
        df["finish_reason"] = df["finish_reason"].astype(str)
        df.loc[row, "finish_reason"] = draw(st.sampled_from(["", "eos", "LENGTH", "abort?"]))
    return df


BAD_META_VALUES = {
    "group_size": ["4", 0, -1, None, True, 1.5, [4]],
    "model": [None, "", 3, "no-such-model-xyz"],
    "temperature": [-1, "hot", None],
    "timing": [{"reward_s": "x"}, {"train_s": -1}, {"weight_sync_s": 1e400}, "fast", [1]],
    "schema_version": [0, 99, "1", None],
    "seed": [1.5, "s"],
    "step_timing": [{"0": {"reward_s": -3}}, [1, 2], {"x": {}}],
}


@st.composite
def malformed_trace(draw: st.DrawFn) -> tuple[pd.DataFrame, dict[str, Any] | str]:
    df, meta = base_frame(), base_meta()
    if draw(st.booleans()):
        return _frame_mutation(draw, df), meta
    kind = draw(st.sampled_from(["field", "not_json", "not_object"]))
    if kind == "field":
        key = draw(st.sampled_from(sorted(BAD_META_VALUES)))
        meta[key] = draw(st.sampled_from(BAD_META_VALUES[key]))
        return df, meta
    if kind == "not_json":
        return df, draw(st.sampled_from(["{", "", "nul", '{"model": }']))
    return df, draw(st.sampled_from(["[]", "3", '"text"', "null"]))


@FUZZ
@given(case=malformed_trace())
def test_malformed_trace_is_refused_cleanly(tmp_path: Path, case: tuple[pd.DataFrame, Any]) -> None:
    df, meta = case
    trace = write_raw(tmp_path / "t.parquet", df, meta)
    result = CliRunner().invoke(main, ["trace", "validate", str(trace)])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    result, out, js = replay(trace, tmp_path, "--policy", "verl")
    assert_clean_failure(result, out, js)


def test_not_a_parquet_file(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    trace.write_bytes(b"PAR1" + bytes(range(256)) * 4)
    result, out, js = replay(trace, tmp_path, "--policy", "verl")
    assert_clean_failure(result, out, js)


# ---------------------------------------------------------------------------- --policy


@pytest.fixture(scope="module")
def good_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_raw(tmp_path_factory.mktemp("good") / "t.parquet", base_frame(), base_meta())


@pytest.mark.parametrize("command", [["replay"], ["trace", "inspect"]])
def test_a_trace_with_several_problems_is_refused_in_one_line(tmp_path: Path, command: list[str]) -> None:
    """The first problem and a count of the others (`trace validate` lists them): replay
    and inspect printed one line per problem."""
    bad = write_raw(tmp_path / "bad.parquet", base_frame().drop(columns=["step", "prompt_len"]), base_meta())
    result = CliRunner().invoke(main, [*command, str(bad)])
    (line,) = result.output.strip().splitlines()
    assert result.exit_code == 1 and "missing required column 'step'" in line, result.output
    assert line.endswith("(and 1 more problem: simctl trace validate lists them)"), line


BAD_VALUES = ["abc", "1.7", "-1", "0", "nan", "inf", "maybe", "", "1e999"]
_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)


@st.composite
def policy_spec(draw: st.DrawFn) -> str:
    name = draw(st.one_of(st.sampled_from(sorted(REGISTRY)), _TEXT))
    if draw(st.booleans()):
        return name + draw(_TEXT)
    items = [
        draw(st.one_of(st.sampled_from(["gamma", "chunk_tokens", "pretrained", "methods", "foo"]), _TEXT))
        + draw(st.sampled_from(["=", "", "=="]))
        + draw(
            st.one_of(st.sampled_from(["abc", "1.7", "-1", "0", "nan", "inf", "maybe", "", "1e999"]), _TEXT)
        )
        for _ in range(draw(st.integers(1, 3)))
    ]
    return name + ":" + ",".join(items)


@FUZZ
@given(spec=policy_spec())
def test_bad_policy_strings(tmp_path: Path, good_trace: Path, spec: str) -> None:
    result, out, js = replay(good_trace, tmp_path, "--policy", spec, "--steps", "0")
    if result.exit_code == 0:  # a valid spec: it ran and wrote its outputs
        assert js.exists()
        return
    assert_clean_failure(result, out, js)


# --------------------------------------------------------------------------- clusters

_NUMBER = st.one_of(
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, 3, 8, 1e308, -0.0]),
)
_VALUE = st.one_of(_NUMBER, st.booleans(), _TEXT, st.lists(st.integers(), max_size=2))
CLUSTER_KEYS = [
    *("nodes", "gpus_per_node", "gpu", "tp", "dp", "weights", "gpu_mem_util", "nvlink_gbps", "rdma_gbps"),
    *("gpu_name", "hbm_gb", "hbm_tbps", "bf16_tflops", "fp8_tflops", "pcie_gbps"),
    *("allreduce_us", "per_seq_us"),
    "bogus",
]


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v == math.inf else "-inf" if v == -math.inf else repr(v))
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(str(x) for x in v) + "]"
    return str(v)


@FUZZ
@given(data=st.dictionaries(st.sampled_from(CLUSTER_KEYS), _VALUE, max_size=6))
def test_hostile_cluster_files(tmp_path: Path, good_trace: Path, data: dict[str, Any]) -> None:
    base = {"nodes": 1, "gpus_per_node": 8, "gpu": "h100", "tp": 4}
    merged = {**base, **data}
    path = tmp_path / "c.toml"
    path.write_text("".join(f"{k} = {toml_value(v)}\n" for k, v in merged.items()))
    out, js = old_run_dir(tmp_path), tmp_path / "m.json"
    js.unlink(missing_ok=True)
    args = ["replay", str(good_trace), "--cluster", str(path), "--out", str(out), "--json", str(js)]
    result = CliRunner().invoke(main, [*args, "--policy", "verl", "--steps", "0"])
    if result.exit_code == 0:
        doc = json.loads(js.read_text())
        assert math.isfinite(doc["policies"]["verl"]["steps"][0]["rollout_makespan_s"])
        return
    assert_clean_failure(result, out, js)


# --------------------------------------------------------------------------- profiles


def good_profile() -> dict[str, Any]:
    rows = [
        {"kind": kind, "num_seqs": b, "new_tokens": b, "context_tokens": b * ctx, "gamma": 0, "time_s": t}
        for kind, t in (("decode", 0.01), ("prefill", 0.02))
        for b in (1, 8, 64)
        for ctx in (128, 4096)
    ]
    return {
        "format": "simctl-profile/1",
        "backend": "synthetic",
        "model": "qwen2.5-7b",
        "device": "test",
        "tp": 1,
        "kv_capacity_tokens": 100_000,
        "measurements": rows,
    }


@st.composite
def hostile_profile(draw: st.DrawFn) -> str:
    doc = good_profile()
    kind = draw(st.sampled_from(["top", "row", "every row", "text", "deep"]))
    huge = st.sampled_from([10**400, 2**64, 1e308])  # (past a float, past int64, whose square is inf)
    if kind == "top":
        key = draw(st.sampled_from([*sorted(doc), "weight_bytes_per_gpu"]))
        doc[key] = draw(st.one_of(_VALUE, huge))
    elif kind == "row":
        row = doc["measurements"][draw(st.integers(0, len(doc["measurements"]) - 1))]
        key = draw(st.sampled_from(sorted(row)))
        row[key] = draw(st.one_of(_VALUE, st.none(), huge))
    elif kind == "every row":  # (one bad value in every row reaches the fit)
        key = draw(st.sampled_from(sorted(doc["measurements"][0])))
        value = draw(st.one_of(_NUMBER, huge))
        for row in doc["measurements"]:
            row[key] = value
    elif kind == "text":
        return draw(st.sampled_from(["", "{", "[]", "null", '{"format": 1}']))
    else:
        return '{"format": ' + "[" * 5_000 + "]" * 5_000 + "}"
    return json.dumps(doc)


def _every_row(field: str, value: Any) -> dict[str, Any]:
    doc = good_profile()
    for row in doc["measurements"]:
        row[field] = value
    return doc


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({**good_profile(), "weight_bytes_per_gpu": [1]}, "weight_bytes_per_gpu"),
        ({**good_profile(), "weight_bytes_per_gpu": "abc"}, "weight_bytes_per_gpu"),
        ({**good_profile(), "weight_bytes_per_gpu": math.nan}, "weight_bytes_per_gpu"),
        ({**good_profile(), "weight_bytes_per_gpu": -1e12}, "weight_bytes_per_gpu"),
        ({**good_profile(), "kv_capacity_tokens": 10**30}, "kv_capacity_tokens"),
        (_every_row("num_seqs", 10**400), "measurements[0].num_seqs"),
        (_every_row("time_s", 1e308), "measurements[0].time_s"),
        (_every_row("num_seqs", 0), "measurements[0].num_seqs"),
    ],
    ids=[
        "weight-list",
        "weight-text",
        "weight-nan",
        "weight-negative",
        "kv-huge",
        "int-past-float",
        "square-overflows",
        "no-sequences",
    ],
)
def test_profile_numbers_out_of_range_fail_in_one_line(
    tmp_path: Path, good_trace: Path, doc: dict[str, Any], field: str
) -> None:
    """Numbers a profile cannot hold (past a float, squares past one, not numbers, no
    sequences measured) are refused naming the field, not crashed on in the fit."""
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    result, out, js = replay(good_trace, tmp_path, "--profile", str(path), "--policy", "verl", "--steps", "0")
    assert_clean_failure(result, out, js)
    assert f"profile p.json: field '{field}' =" in result.output and len(result.output) < 300, result.output


@FUZZ
@given(text=hostile_profile())
def test_hostile_profiles(tmp_path: Path, good_trace: Path, text: str) -> None:
    path = tmp_path / "p.json"
    path.write_text(text)
    result, out, js = replay(good_trace, tmp_path, "--profile", str(path), "--policy", "verl", "--steps", "0")
    if result.exit_code == 0:
        assert js.exists()
        return
    assert_clean_failure(result, out, js)


@FUZZ
@given(text=hostile_profile())
def test_hostile_profiles_in_a_sweep_spec(tmp_path: Path, good_trace: Path, text: str) -> None:
    """A sweep's `profile` is checked as replay's --profile is: accepted, or one
    SweepSpecError line naming the key."""
    from simctl.sweep_spec import SweepSpecError, spec_from_data

    (tmp_path / "p.json").write_text(text)
    raw = {"sweep": {"traces": [str(good_trace)], "clusters": ["a100x8:tp1"], "profile": "p.json"}}
    try:
        spec = spec_from_data({**raw, "policies": {"verl": {}}}, tmp_path / "sweep.toml")
    except SweepSpecError as exc:
        message = str(exc)
        assert "\n" not in message, message
        assert "sweep.profile = 'p.json'" in message or "sweep.clusters = 'a100x8:tp1'" in message, message
    else:
        assert spec.points[0].profile_doc == json.loads(text)


# ------------------------------------------------------------------------ output paths


@pytest.mark.parametrize("where", ["input", "parent_is_file", "plot_ext", "not_utf8"])
def test_bad_output_paths_are_refused_before_simulating(tmp_path: Path, good_trace: Path, where: str) -> None:
    trace = tmp_path / "t.parquet"
    trace.write_bytes(good_trace.read_bytes())
    before = trace.read_bytes()
    if where == "input":
        args = ["--json", str(trace)]
    elif where == "not_utf8":
        args = ["--json", str(tmp_path) + "/" + os.fsdecode(b"m\xff.json")]
    elif where == "parent_is_file":
        (tmp_path / "file").write_text("x")
        args = ["--out", str(tmp_path / "file" / "run")]
    else:
        plot = tmp_path / "p.xyz"
        result = CliRunner().invoke(main, ["trace", "inspect", str(trace), "--plot", str(plot)])
        assert_clean_failure(result)
        assert "unknown --plot figure type '.xyz'" in result.output and not plot.exists()
        return
    result = CliRunner().invoke(main, ["replay", str(trace), "--policy", "verl", *args])
    assert_clean_failure(result)
    assert trace.read_bytes() == before


# ------------------------------------------------------------------- run directories


@pytest.fixture(scope="module")
def good_run(tmp_path_factory: pytest.TempPathFactory, good_trace: Path) -> Path:
    out = tmp_path_factory.mktemp("run") / "run"
    args = ["replay", str(good_trace), "--cluster", "h100x8", "--out", str(out)]
    result = CliRunner().invoke(main, [*args, "--policy", "verl", "--policy", "ngram"])
    assert result.exit_code == 0, result.output
    return out


_JSON_VALUE = st.one_of(
    st.none(), st.booleans(), _NUMBER, _TEXT, st.lists(st.integers(), max_size=2), st.just({})
)


@st.composite
def damaged_run(draw: st.DrawFn) -> tuple[str, Any]:
    kind = draw(st.sampled_from(["delete", "truncate", "garbage", "doc_top", "doc_policy", "doc_step"]))
    if kind in ("delete", "truncate", "garbage"):
        return kind, draw(
            st.sampled_from(["run.json", "requests.parquet", "timeline.parquet", "roles.parquet"])
        )
    if kind == "doc_top":
        key = draw(st.sampled_from(["format_version", "policies", "provenance", "run_id", "seed", "cluster"]))
        return kind, (key, draw(_JSON_VALUE))
    if kind == "doc_policy":
        key = draw(st.sampled_from(["steps", "params", "mean_rollout_makespan_s", "counters"]))
        return kind, (key, draw(_JSON_VALUE))
    key = draw(st.sampled_from(["step", "rollout_makespan_s", "step_time_s", "gpu_idle_fraction"]))
    return kind, (key, draw(_JSON_VALUE))


@FUZZ
@given(damage=damaged_run())
def test_damaged_run_directories(tmp_path: Path, good_run: Path, damage: tuple[str, Any]) -> None:
    run, rep = tmp_path / "run", tmp_path / "rep"
    shutil.rmtree(run, ignore_errors=True)
    shutil.rmtree(rep, ignore_errors=True)
    run.mkdir()
    for p in good_run.iterdir():
        (run / p.name).write_bytes(p.read_bytes())
    kind, what = damage
    if kind == "delete":
        (run / what).unlink()
    elif kind == "truncate":
        data = (run / what).read_bytes()
        (run / what).write_bytes(data[: len(data) // 2])
    elif kind == "garbage":
        (run / what).write_bytes(b"\x00\xff" * 64)
    else:
        doc = json.loads((run / "run.json").read_text())
        key, value = what
        if kind == "doc_top":
            doc[key] = value
        elif kind == "doc_policy":
            doc["policies"]["verl"][key] = value
        else:
            doc["policies"]["verl"]["steps"][0][key] = value
        (run / "run.json").write_text(json.dumps(doc))
    result = CliRunner().invoke(main, ["report", str(run), "-o", str(rep)])
    if result.exit_code == 0:
        assert (rep / "index.html").is_file()
        return
    assert_clean_failure(result)
    assert not rep.exists() or not any(rep.iterdir())


@pytest.mark.parametrize(
    ("args", "victim_bytes"),
    [
        (["replay", "{trace}", "--policy", "verl", "--json", "{victim}"], b"PAR1 not json"),
        (["reproduce", "tlt", "--quick", "--json", "{victim}"], b"PAR1 a trace"),
        (["trace", "gen", "--preset", "dapo-32b-20k", "--scale", "0.01", "-o", "{victim}"], b"my notes"),
        (["replay", "{trace}", "--policy", "verl", "--chrome-trace", "{victim}"], b"\x89PNG"),
    ],
)
def test_outputs_never_overwrite_a_file_of_another_kind(
    tmp_path: Path, good_trace: Path, args: list[str], victim_bytes: bytes
) -> None:
    """A mistyped --json/-o must not destroy a trace or a note (reproduce --json once
    overwrote a bundled sample)."""
    victim = tmp_path / "victim.bin"
    victim.write_bytes(victim_bytes)
    argv = [a.format(trace=good_trace, victim=victim) for a in args]
    result = CliRunner().invoke(main, argv)
    assert_clean_failure(result)
    assert "exists and is not a" in result.output
    assert victim.read_bytes() == victim_bytes
