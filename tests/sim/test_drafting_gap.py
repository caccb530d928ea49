"""Policies that can only speculate with methods a run cannot offer are refused, not run
silently as plain decoding (rhymerl, histospec-only and composite on a trace without
acceptance columns used to report verl's numbers)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from simctl.cli import main
from simctl.policies.registry import make_policy
from simctl.traces.io import write_trace
from simctl.traces.schema import TraceMeta
from tests.factories import make_frame


def _trace(tmp_path: Path, accept: dict[str, float] | None) -> Path:
    df = make_frame([10, 20, 30, 40, 50, 60, 70, 80], group_size=4, accept=accept)
    return write_trace(tmp_path / "t.parquet", df, TraceMeta(model="qwen2.5-7b", group_size=4))


@pytest.mark.parametrize(
    ("policy", "methods"),
    [
        ("rhymerl", "history"),
        ("histospec-only", "history"),
        ("composite", "draft_small, eagle, history, suffix"),
    ],
)
def test_refused_without_acceptance(tmp_path: Path, policy: str, methods: str) -> None:
    result = CliRunner().invoke(
        main, ["replay", str(_trace(tmp_path, None)), "--policy", policy, "--cluster", "h100x8"]
    )
    assert result.exit_code == 1
    assert f"policy '{policy}' drafts only with {methods}, and this run offers none" in result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize("policy", ["rhymerl", "composite", "verl", "seer-divided"])
def test_runs_when_one_method_is_offered(tmp_path: Path, policy: str) -> None:
    trace = _trace(tmp_path, {"history": 0.5, "suffix": 0.4})
    result = CliRunner().invoke(main, ["replay", str(trace), "--policy", policy, "--cluster", "h100x8"])
    assert result.exit_code == 0, result.output


def test_composed_policies_union_their_parts_methods() -> None:
    assert make_policy("rhymerl").draft_methods_used == frozenset({"history"})
    assert make_policy("composite:methods=suffix/history").draft_methods_used == frozenset(
        {"suffix", "history"}
    )
    assert make_policy("verl").draft_methods_used == frozenset()
