"""The README's two first-screen commands stay runnable: the main job names a bundled trace
and registered policies and writes a report, and CI runs exactly the test command."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from click.testing import CliRunner

from simctl.policies.registry import REGISTRY

ROOT = Path(__file__).resolve().parents[1]


def _blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def _replay_args() -> list[str]:
    main = _blocks()[0].strip()
    assert main.startswith("python3 -m venv .venv && .venv/bin/pip install --no-compile -e . && ")
    args = shlex.split(main.split("&&")[-1])
    assert args[:2] == [".venv/bin/simctl", "replay"]
    return args[2:]


def test_main_job_names_a_bundled_trace_and_registered_policies() -> None:
    args = _replay_args()
    assert (ROOT / args[0]).is_file()
    policies = [args[i + 1] for i, a in enumerate(args) if a == "--policy"]
    assert policies[0] == "verl" and "composite" in policies
    # each paper's full policy, so a newcomer sees the papers' designs first
    assert {"speactor", "seer", "tlt", "rhymerl", "efficientrollout"} <= set(policies)
    assert all(p in REGISTRY for p in policies)
    assert "--report" in args


def test_main_job_arguments_parse() -> None:
    """Every option of the command line exists (parsed by the real command, not run)."""
    from simctl.cli import main

    result = CliRunner().invoke(main, ["replay", *_replay_args(), "--help"])
    assert result.exit_code == 0, result.output


def test_ci_runs_exactly_the_test_command() -> None:
    assert _blocks()[1].strip() == "bash tests/run.sh"
    ci = (ROOT / ".ci/run").read_text().strip().splitlines()
    assert ci[-1] == "bash tests/run.sh"


def test_readme_sweep_example_is_a_valid_spec(tmp_path: Path) -> None:
    """The sweep spec the README shows passes every check: 2 clusters x 2 models x 2 batch
    limits x 2 seeds x 4 policy points."""
    from simctl.sweep_spec import load_spec

    (example,) = re.findall(r"```toml\n(\[sweep\].*?)```", (ROOT / "README.md").read_text(), re.S)
    (tmp_path / "traces").symlink_to(ROOT / "traces", target_is_directory=True)
    path = tmp_path / "sweep.toml"
    path.write_text(example)
    points = load_spec(path).points
    assert len(points) == 64
    assert {p.max_num_seqs for p in points} == {16, 256}
    assert {p.model for p in points} == {"", "Qwen3-30B-A3B"}  # "": the trace's own
    assert {p.cluster for p in points} == {"a100x8:tp1", "a100x16:tp1"}  # "trace": the sample's layout
