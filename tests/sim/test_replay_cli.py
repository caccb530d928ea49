"""`simctl replay` from the command line: outputs, the JSON contract, and clean errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from simctl.cli import main
from simctl.traces.io import write_trace
from simctl.traces.schema import TraceMeta
from tests.factories import make_frame, random_lengths

STEP_KEYS = {
    "step",
    "rollout_makespan_s",
    "step_time_s",
    "output_tokens",
    "throughput_tok_s",
    "tail_time_s",
    "gpu_idle_fraction",
    "mean_accept_len",
    "parts",  # the step time split: rollout, reward, train, weight sync (sim/metrics.py)
}


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory) -> Path:
    frames = [
        make_frame(random_lengths(s, 64, hi=2000), step=s, accept={"ngram": 0.4, "draft_small": 0.7})
        for s in range(3)
    ]
    df = pd.concat(frames, ignore_index=True)
    meta = TraceMeta(model="qwen2.5-7b", group_size=4, preset="test", seed=1)
    return write_trace(tmp_path_factory.mktemp("t") / "t.parquet", df, meta)


def _run(*args: str):
    return CliRunner().invoke(main, ["replay", *args])


def test_json_and_run_directory(trace_file: Path, tmp_path: Path) -> None:
    out, js = tmp_path / "run", tmp_path / "m.json"
    r = _run(
        str(trace_file),
        "--policy",
        "verl",
        "--policy",
        "ngram:gamma=3",
        "--cluster",
        "h100x16",
        "--steps",
        "1:3",
        "--json",
        str(js),
        "--out",
        str(out),
    )
    assert r.exit_code == 0, r.output
    assert "verl" in r.output and "ngram:gamma=3" in r.output
    doc = json.loads(js.read_text())
    assert doc["seed"] == 0 and doc["trace"] == str(trace_file) and "h100" in doc["cluster"].lower()
    assert set(doc["policies"]) == {"verl", "ngram:gamma=3"}
    for name, p in doc["policies"].items():
        assert [s["step"] for s in p["steps"]] == [1, 2]
        for s in p["steps"]:
            assert set(s) == STEP_KEYS
            assert s["throughput_tok_s"] == pytest.approx(s["output_tokens"] / s["rollout_makespan_s"])
        assert p["mean_rollout_makespan_s"] == pytest.approx(
            np.mean([s["rollout_makespan_s"] for s in p["steps"]])
        )
        assert p["sim_wall_s"] > 0 and p["events"] > 0
        assert (p["steps"][0]["mean_accept_len"] is None) == (name == "verl")
    assert json.loads((out / "run.json").read_text())["policies"].keys() == doc["policies"].keys()
    req = pd.read_parquet(out / "requests.parquet")
    assert len(req) == 2 * 2 * 64 and req["finish_s"].notna().all()
    tl = pd.read_parquet(out / "timeline.parquet")
    assert {"worker", "t0_s", "t1_s", "batch", "kv_tokens", "gamma_mean", "policy", "step"} <= set(tl.columns)
    assert (tl["t1_s"] >= tl["t0_s"]).all()
    assert (out / "roles.parquet").exists()


def test_veRL_2x_is_a_cluster_flag(trace_file: Path, tmp_path: Path) -> None:
    docs = []
    for cluster in ("h100x8", "h100x16"):
        js = tmp_path / f"{cluster}.json"
        assert _run(str(trace_file), "--cluster", cluster, "--json", str(js)).exit_code == 0
        docs.append(json.loads(js.read_text())["policies"]["verl"]["mean_rollout_makespan_s"])
    assert docs[1] < docs[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "nope"], "unknown policy 'nope'; known:"),
        (["--policy", "ngram:gamma"], "is not key=value"),
        (["--policy", "ngram:bogus=1"], "unknown parameter bogus='1' (known: gamma)"),
        (["--cluster", "h100x7x"], "cluster spec 'h100x7x'"),
        (["--cluster", "tpu4x8"], "tpu4"),
        (["--steps", "7:9"], "selects no step"),
        (["--model", "gpt-9"], "gpt-9"),
    ],
)
def test_bad_input_is_one_clear_line(trace_file: Path, args: list[str], message: str) -> None:
    r = _run(str(trace_file), *args)
    assert r.exit_code != 0
    assert message in r.output, r.output
    assert "Traceback" not in r.output
    assert len([ln for ln in r.output.splitlines() if ln.strip()]) <= 3  # usage line + error


def test_invalid_trace_is_rejected_before_simulating(tmp_path: Path) -> None:
    df = make_frame([10, 20, 30, 40])
    df.loc[1, "response_len"] = 0
    path = write_trace(tmp_path / "bad.parquet", df, TraceMeta(group_size=4))
    r = _run(str(path))
    assert r.exit_code == 1
    assert "column 'response_len'" in r.output and "row 1" in r.output


def test_policy_needing_a_missing_acceptance_column(tmp_path: Path) -> None:
    meta = TraceMeta(group_size=4, model="qwen2.5-7b")
    path = write_trace(tmp_path / "noacc.parquet", make_frame([10, 20, 30, 40]), meta)
    r = _run(str(path), "--policy", "ngram", "--cluster", "h100x8")
    assert r.exit_code == 1
    assert "no acceptance column 'accept_ngram'" in r.output


def test_impossible_cluster_for_the_model(trace_file: Path) -> None:
    r = _run(str(trace_file), "--model", "qwen2.5-72b", "--cluster", "a100x8:tp1")
    assert r.exit_code == 1
    assert "does not fit" in r.output


def test_trace_model_not_in_catalogue_suggests_model_flag(tmp_path: Path) -> None:
    path = write_trace(
        tmp_path / "m.parquet", make_frame([10, 20, 30, 40]), TraceMeta(group_size=4, model="x-1b")
    )
    r = _run(str(path), "--cluster", "h100x8")
    assert r.exit_code == 1
    assert "unknown model 'x-1b'" in r.output and "pass --model NAME" in r.output
    assert _run(str(path), "--cluster", "h100x8", "--model", "qwen2.5-7b").exit_code == 0
