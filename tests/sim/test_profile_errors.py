"""Profiles that cannot price a run: one line naming the profile (was a ValueError
traceback from inside SimPy for a speculative policy on a profile without draft rows)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from simctl.cli import main

SAMPLE = (
    Path(__file__).resolve().parents[2] / "traces" / "samples" / "efficientrollout-qwen7b-8k-6steps.parquet"
)


def _profile(tmp_path: Path, text: str | None = None) -> Path:
    rows = [
        {
            "kind": k,
            "num_seqs": b,
            "new_tokens": b,
            "context_tokens": b * c,
            "gamma": 0,
            "time_s": 0.01 + 1e-4 * b,
        }
        for k in ("decode", "prefill")
        for b in (1, 8, 64)
        for c in (128, 4096)
    ]
    doc = {
        "format": "simctl-profile/1",
        "backend": "synthetic",
        "model": "qwen2.5-7b",
        "device": "test",
        "tp": 1,
    }
    path = tmp_path / "p.json"
    path.write_text(
        text if text is not None else json.dumps({**doc, "kv_capacity_tokens": 100_000, "measurements": rows})
    )
    return path


def _replay(profile: Path, policy: str):
    args = ["replay", str(SAMPLE), "--steps", "0", "--cluster", "a100x8:tp1", "--profile", str(profile)]
    return CliRunner().invoke(main, [*args, "--policy", policy])


@pytest.mark.parametrize(
    ("policy", "kind"), [("ngram", "draft:ngram"), ("spec-coupled", "draft:model:qwen2.5-0.5b")]
)
def test_profile_without_the_policys_drafter(tmp_path: Path, policy: str, kind: str) -> None:
    result = _replay(_profile(tmp_path), policy)
    assert result.exit_code == 1
    assert result.output.splitlines()[0] == (
        f"Error: profile p.json: no '{kind}' measurements (has: none); "
        "calibrate the drafter the policy uses or drop --profile"
    )


def test_the_same_profile_prices_plain_decoding(tmp_path: Path) -> None:
    assert _replay(_profile(tmp_path), "verl").exit_code == 0


def test_deeply_nested_profile(tmp_path: Path) -> None:
    result = _replay(_profile(tmp_path, '{"format": ' + "[" * 5000 + "]" * 5000 + "}"), "verl")
    assert result.exit_code == 1
    assert result.output.strip() == "Error: profile p.json: cannot read: JSON nested too deeply"


def test_declared_drafter_missing_is_refused_before_the_run(tmp_path: Path) -> None:
    """A policy that declares its drafting methods (RhymeRL drafts from history) is checked
    against the profile before the replay starts: one line, and no run directory."""
    trace = SAMPLE.parent / "rhymerl-math-14b-16k-tokens.parquet"
    doc = json.loads(_profile(tmp_path).read_text())
    profile = tmp_path / "p.json"
    profile.write_text(json.dumps({**doc, "model": "Qwen3-14B"}))  # the sample's model
    out = tmp_path / "run"
    args = ["replay", str(trace), "--cluster", "h100x8:tp1", "--profile", str(profile), "--out", str(out)]
    result = CliRunner().invoke(main, [*args, "--policy", "rhymerl"])
    assert result.exit_code == 1
    assert result.output.strip() == (
        "Error: profile p.json: no 'draft:history' measurements (has: none); "
        "calibrate the drafter the policy uses or drop --profile"
    )
    assert not out.exists()
    from simctl.sim.cost_model import ProfiledCostModel
    from simctl.sim.replay import profile_gap
    from simctl.traces.plugins import make_policy

    prof = ProfiledCostModel.from_json(profile)
    assert profile_gap(make_policy("verl"), frozenset({"history"}), prof) is None
    assert profile_gap(make_policy("rhymerl"), frozenset(), prof) is None  # nothing offered to draft with
