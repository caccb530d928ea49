"""The run directory has one definition (traces/run_format.py): a simulated and a live run
write identical table schemas and the same required run.json fields, the reader refuses a
table that is not in the format in one line, and still reads version-1 directories."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from simctl.cli import main
from simctl.policies.registry import make_policy
from simctl.reports.errors import Notes
from simctl.reports.load import load_study
from simctl.traces.run_format import (
    FORMAT_VERSION,
    ITERATIONS,
    RUN_TABLES,
    TABLES,
    RunFormatError,
    missing_fields,
    params_entry,
    read_run_doc,
    read_table_info,
    write_run_dir,
)

SAMPLE = Path(__file__).parents[1] / "traces" / "samples" / "efficientrollout-qwen7b-8k-6steps.parquet"
NGRAM = "ngram:gamma=3"  # a policy's name is its spec
POLICIES = ("verl", NGRAM)
TINY = ["--model", "random:tiny", "--prompts-per-step", "3", "--group-size", "2", "--max-tokens", "16"]


def _invoke(args: list[str]) -> None:
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sim") / "run"
    policies = [a for p in POLICIES for a in ("--policy", p)]
    _invoke(["replay", str(SAMPLE), "--steps", "0:2", "--cluster", "h100x8", *policies, "--out", str(out)])
    return out


@pytest.fixture(scope="module")
def live_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    out = tmp_path_factory.mktemp("live") / "run"
    policies = [a for p in POLICIES for a in ("--policy", p)]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _invoke(
            [
                "live",
                *TINY,
                "--backend",
                "torch",
                "--workers",
                "2",
                "--steps",
                "2",
                *policies,
                "--out",
                str(out),
            ]
        )
    finally:
        torch.set_num_threads(threads)
    return out


def _schema(path: Path) -> list[tuple[str, pa.DataType]]:
    return [(f.name, f.type) for f in pq.read_schema(path)]


def test_sim_and_live_tables_have_identical_schemas(sim_run: Path, live_run: Path) -> None:
    for name in RUN_TABLES:
        spec = TABLES[name]
        sim, live = _schema(sim_run / spec.file), _schema(live_run / spec.file)
        assert sim == live, name
        assert sim == [(f.name, f.type) for f in spec.schema], name
    assert _schema(live_run / ITERATIONS.file) == [(f.name, f.type) for f in ITERATIONS.schema]
    assert not (sim_run / ITERATIONS.file).exists()  # only an engine has iterations
    # the live executor records no Fastest-of-N replicas in its timeline: null, not 0
    assert pq.read_table(live_run / "timeline.parquet")["replicas"].null_count > 0


def test_sim_and_live_run_json_carry_the_required_fields(sim_run: Path, live_run: Path) -> None:
    docs = [json.loads((d / "run.json").read_text()) for d in (sim_run, live_run)]
    for doc, source in zip(docs, ("sim", "live"), strict=True):
        assert missing_fields(doc) == [], source
        assert doc["format_version"] == FORMAT_VERSION
        assert doc["provenance"]["source"] == source
        assert set(doc["policies"]) == set(POLICIES)
    sim, live = docs
    assert set(sim) - {"approximated"} <= set(live)
    assert set(sim["policies"]["verl"]) <= set(live["policies"]["verl"])


def test_run_json_records_resolved_policy_params(sim_run: Path, live_run: Path) -> None:
    want = json.loads(json.dumps(params_entry(make_policy(NGRAM).params())))
    assert '"gamma": 3' in json.dumps(want)  # resolved: the override, next to the defaults
    for run in (sim_run, live_run):
        assert json.loads((run / "run.json").read_text())["policies"][NGRAM]["params"] == want


def _copy(run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run, tmp_path / "copy"))


def test_reader_reads_what_the_writer_wrote(sim_run: Path) -> None:
    read = read_run_doc(sim_run)
    assert read.version == FORMAT_VERSION
    for name in RUN_TABLES:
        info = read_table_info(sim_run, name, read.version)
        assert info.num_rows > 0


def test_missing_column_is_a_one_line_error(sim_run: Path, tmp_path: Path) -> None:
    run = _copy(sim_run, tmp_path)
    table = pq.read_table(run / "requests.parquet")
    pq.write_table(table.drop_columns(["finish_s"]), run / "requests.parquet")
    with pytest.raises(RunFormatError) as exc:
        read_table_info(run, "requests", FORMAT_VERSION)
    msg = str(exc.value)
    assert "\n" not in msg
    assert "requests.parquet" in msg and "'finish_s'" in msg and "expected double" in msg and "missing" in msg


def test_a_file_that_is_no_run_table_is_described_by_what_it_lacks(sim_run: Path, tmp_path: Path) -> None:
    """A requests.parquet of other columns (and so no run id) was reported as part of
    another run; it is a file in the wrong format, and the columns it lacks say so."""
    import pyarrow as pa

    run = _copy(sim_run, tmp_path)
    pq.write_table(pa.table({"x": [1, 2]}), run / "requests.parquet")
    doc = json.loads((run / "run.json").read_text())
    with pytest.raises(RunFormatError) as exc:
        read_table_info(run, "requests", FORMAT_VERSION, doc.get("run_id") or "some-run")
    assert "parts of different runs" not in str(exc.value) and "'finish_s'" in str(exc.value)


def test_wrong_dtype_is_a_one_line_error(sim_run: Path, tmp_path: Path) -> None:
    run = _copy(sim_run, tmp_path)
    table = pq.read_table(run / "timeline.parquet")
    i = table.schema.get_field_index("worker")
    table = table.set_column(i, pa.field("worker", pa.int64()), table.column(i).cast(pa.int64()))
    pq.write_table(table, run / "timeline.parquet")
    with pytest.raises(RunFormatError) as exc:
        read_table_info(run, "timeline", FORMAT_VERSION)
    msg = str(exc.value)
    assert "\n" not in msg
    assert "timeline.parquet" in msg and "'worker'" in msg and "expected int32, found int64" in msg
    # the report leaves that table out with the same line, and renders the rest
    notes = Notes()
    study = load_study([run], notes)
    assert not study.runs[0].has("timeline") and study.runs[0].has("requests")
    assert any("expected int32, found int64" in w for w in notes.warnings)


def _as_version_1(run: Path) -> None:
    """What the writers produced before run_format: no format_version, live's timeline
    without `replicas`, int64 workers and roles steps, an empty table without columns."""
    doc = json.loads((run / "run.json").read_text())
    del doc["format_version"]
    (run / "run.json").write_text(json.dumps(doc))
    tl = pd.read_parquet(run / "timeline.parquet").drop(columns=["replicas"])
    tl.astype({"worker": "int64"}).to_parquet(run / "timeline.parquet", index=False)
    roles = pd.read_parquet(run / "roles.parquet")
    roles.astype({"worker": "int64", "step": "int64"}).to_parquet(run / "roles.parquet", index=False)
    pd.DataFrame().to_parquet(run / "requests.parquet", index=False)


def test_version_1_directory_is_read_as_before(sim_run: Path, tmp_path: Path) -> None:
    run = _copy(sim_run, tmp_path)
    _as_version_1(run)
    read = read_run_doc(run)
    assert read.version == 1
    assert read_table_info(run, "timeline", 1).num_rows > 0
    assert read_table_info(run, "requests", 1).num_rows == 0  # empty: not checked, as before
    notes = Notes()
    study = load_study([run], notes)
    assert study.runs[0].has("timeline") and study.runs[0].has("roles")
    assert any("requests.parquet has no rows" in w for w in notes.warnings)
    # version 1 still needs the columns the report reads
    pd.read_parquet(run / "timeline.parquet").drop(columns=["t1_s"]).to_parquet(run / "timeline.parquet")
    with pytest.raises(RunFormatError, match=r"timeline\.parquet: column 't1_s': expected double"):
        read_table_info(run, "timeline", 1)


def test_newer_format_version_is_refused(sim_run: Path, tmp_path: Path) -> None:
    run = _copy(sim_run, tmp_path)
    doc = json.loads((run / "run.json").read_text())
    doc["format_version"] = FORMAT_VERSION + 1
    (run / "run.json").write_text(json.dumps(doc))
    with pytest.raises(RunFormatError, match="format_version 3 is not one this simctl reads"):
        read_run_doc(run)


def test_writer_refuses_what_is_not_the_format(sim_run: Path, tmp_path: Path) -> None:
    doc = json.loads((sim_run / "run.json").read_text())
    frames = {name: [pd.read_parquet(sim_run / TABLES[name].file)] for name in RUN_TABLES}
    bad = {**frames, "roles": [frames["roles"][0].drop(columns=["role"])]}
    with pytest.raises(ValueError, match=r"roles\.parquet: frame has extra columns \[\], lacks \['role'\]"):
        write_run_dir(tmp_path / "a", doc, bad)
    lacking = {**doc, "provenance": {k: v for k, v in doc["provenance"].items() if k != "model"}}
    with pytest.raises(ValueError, match=r"lacks provenance\.model"):
        write_run_dir(tmp_path / "b", lacking, frames)
    assert not (tmp_path / "a" / "run.json").exists() and not (tmp_path / "b").exists()
    # the same frames, written again, give the same schemas
    write_run_dir(tmp_path / "c", doc, frames)
    for name in RUN_TABLES:
        assert _schema(tmp_path / "c" / TABLES[name].file) == _schema(sim_run / TABLES[name].file)


def test_params_entry_takes_a_mapping_or_a_dataclass() -> None:
    @dataclasses.dataclass(frozen=True)
    class Params:
        gamma: int = 4
        method: str = "ngram"

    assert params_entry(Params(gamma=3)) == {"gamma": 3, "method": "ngram"}
    assert params_entry({"gamma": 3}) == {"gamma": 3}
    with pytest.raises(TypeError, match="mapping or a dataclass"):
        params_entry(3)


def test_run_id_is_by_value_whatever_the_arrow_layout() -> None:
    """The same values in one chunk, in several, or as a slice of a larger array give one
    id; another value gives another."""
    from simctl.traces.run_format import run_id

    doc = {"format_version": 2, "trace": "t", "cluster": "c", "seed": 0}
    whole = pa.table({"a": pa.array([1, 2, None, 4]), "b": pa.array(["x", None, "yy", "z"])})
    pieces = pa.concat_tables([whole.slice(0, 1), whole.slice(1, 2), whole.slice(3)])
    wider = pa.table({"a": pa.array([9, 1, 2, None, 4]), "b": pa.array(["q", "x", None, "yy", "z"])}).slice(1)
    assert pieces.column("a").num_chunks == 3
    ids = {run_id(doc, {"requests": t}) for t in (whole, pieces, wider)}
    assert len(ids) == 1
    other = pa.table({"a": pa.array([1, 2, None, 5]), "b": pa.array(["x", None, "yy", "z"])})
    assert run_id(doc, {"requests": other}) not in ids


def test_a_single_file_output_never_replaces_a_file_of_a_run_directory(sim_run: Path) -> None:
    """`--chrome-trace r2/run.json` (or `--json`) replaced another run's run.json; the names
    refused are exactly the run directory's own files."""
    from simctl.traces.outputs import RUN_DIR_FILES, OutputPathError, check_output_file
    from simctl.traces.run_format import RUN_JSON, TABLES

    assert {RUN_JSON, *(t.file for t in TABLES.values())} == RUN_DIR_FILES
    for name in ("run.json", "timeline.parquet"):
        with pytest.raises(OutputPathError, match="is part of the run directory"):
            check_output_file(sim_run / name, what="--chrome-trace file", kind="json")
    check_output_file(sim_run.parent / "elsewhere.json", what="--json file", kind="json")
    # a --json file named run.json in a plain folder is replaced as before
    plain = sim_run.parent / "plain"
    plain.mkdir(exist_ok=True)
    (plain / "run.json").write_text("{}")
    check_output_file(plain / "run.json", what="--json file", kind="json")
