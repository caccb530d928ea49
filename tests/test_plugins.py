"""Plug-in policies: a policy in a file or a module outside the package, and one installed
through the `simctl.policies` entry point of tests/plugin_pkg (tests/run.sh installs it);
the guide's example (docs/examples/shortest_first.py) in the simulator, through the
conformance helper and in a sweep; one-line errors for every way a spec can be wrong."""

from __future__ import annotations

import json
import os
import re
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from click.testing import CliRunner

import simctl
from simctl.cli import main
from simctl.policies.contract import Action, Assign, ClusterView, Event, Policy, StepStarted
from simctl.policies.params import PolicySpecError
from simctl.sweep_runner import run_sweep
from simctl.sweep_spec import SweepSpecError, spec_from_data
from simctl.testing import ConformanceError, check_conformance
from simctl.traces.plugins import make_policy

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = str(ROOT / "traces/samples/efficientrollout-qwen7b-8k-6steps.parquet")
EXAMPLE = "docs/examples/shortest_first.py:ShortestFirst"
ENTRY = "round-robin-example"
BASE = ["replay", SAMPLE, "--cluster", "a100x8:tp1", "--steps", "0:2"]


@pytest.fixture(autouse=True)
def _at_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the example is named by its path from the repository root


def _cli(args: list[str]) -> tuple[int, str]:
    res = CliRunner().invoke(main, args)
    return res.exit_code, res.output


def test_example_runs_in_the_simulator_from_its_file(tmp_path: Path) -> None:
    out = tmp_path / "run"
    code, output = _cli([*BASE, "--policy", "verl", "--policy", EXAMPLE, "--out", str(out)])
    assert code == 0, output
    doc = json.loads((out / "run.json").read_text())
    entry = doc["policies"]["shortest-first"]
    assert entry["params"] == {"default_len": 512, "prioritize": True}
    assert [s["step"] for s in entry["steps"]] == [0, 1]
    assert all(s["rollout_makespan_s"] > 0 for s in entry["steps"])
    import pandas as pd

    req = pd.read_parquet(out / "requests.parquet")
    mine = req[req["policy"] == "shortest-first"]
    assert mine["finish_s"].notna().all()
    assert sorted(mine["worker"].unique()) == list(range(8))  # least-loaded: every worker used


def test_example_parameters_name_the_run() -> None:
    policy = make_policy(f"{EXAMPLE}:default_len=64,prioritize=no")
    assert policy.name == "shortest-first:default_len=64,prioritize=no"
    assert policy.params() == {"default_len": 64, "prioritize": False}


def test_example_conforms_in_both_executors() -> None:
    result = check_conformance(EXAMPLE)
    assert result.policy == "shortest-first"
    assert result.steps == [0, 1] and result.actions == [24, 24]


def test_conformance_helper_reports_a_policy_that_reads_the_executor() -> None:
    class ExecutorSensitive(Policy):
        name = "executor-sensitive"

        def on_event(self, event: Event, view: ClusterView) -> list[Action]:
            if not isinstance(event, StepStarted):
                return []
            w = 0 if type(view).__module__.startswith("simctl.sim") else 1
            return [Assign(r, w) for r in event.requests]

    with pytest.raises(ConformanceError, match=r"executor-sensitive: step 0: .*first difference"):
        check_conformance(ExecutorSensitive, steps=1)


def test_guide_shows_the_example_file_verbatim() -> None:
    guide = (ROOT / "docs/writing-a-policy.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", guide, re.S)
    assert (ROOT / "docs/examples/shortest_first.py").read_text() in blocks


def test_module_plugin_matches_the_builtin_it_wraps() -> None:
    trace = simctl.load_trace(SAMPLE)
    result = simctl.replay(
        trace, ["verl", "simctl.policies.placement:StaticGroupPlacement"], cluster="a100x8:tp1", steps="0:2"
    )
    steps = result.steps.set_index(["policy", "step"])["rollout_makespan_s"]
    assert steps["static-group"].tolist() == steps["verl"].tolist()


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("missing_dir/nope.py:Cls", ["no such file", "nope.py"]),
        ("no_such_pkg.policies:Cls", ["no module named 'no_such_pkg'"]),
        ("docs/examples/shortest_first.py:Nope", ["has no class 'Nope'"]),
        ("docs/examples/shortest_first.py:ShortestFirstParams", ["is not a Policy subclass"]),
        ("docs/examples/shortest_first.py", ["expected module.path:Class or file.py:Class"]),
        (f"{EXAMPLE}:default_len=0", ["default_len='0' is out of range", "integer 1..1000000"]),
        (f"{EXAMPLE}:colour=red", ["unknown parameter colour", "default_len, prioritize"]),
        ("json:loads", ["loads is not a Policy subclass"]),
        ("simctl.policies.registry:REGISTRY", ["a dict object is not a Policy subclass"]),
        ("tests/plugin_pkg/odd_objects.py:RAISES", ["a _ReprRaises object is not a Policy subclass"]),
        (
            "tests/plugin_pkg/odd_objects.py:LOOKUP_RAISES",
            ["a _LookupRaises object is not a Policy subclass"],
        ),
        ("tests/plugin_pkg/odd_objects.py:MULTI_LINE", ["a _MultiLine object is not a Policy subclass"]),
    ],
)
def test_plugin_errors_are_one_line_naming_the_spec(spec: str, words: list[str]) -> None:
    code, output = _cli([*BASE, "--policy", spec])
    assert code == 1
    lines = output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: policy {spec!r}"), output
    for w in words:
        assert w in lines[0]


def test_a_file_whose_import_raises_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad_policy.py"
    bad.write_text("import math\nraise RuntimeError('broken on purpose\\nsecond line')\n")
    code, output = _cli([*BASE, "--policy", f"{bad}:Cls"])
    assert code == 1
    assert (
        output.strip() == f"Error: policy '{bad}:Cls': loading {bad} raised RuntimeError: broken on purpose"
    )
    bad.write_text("import sys\nsys.exit(4)\n")  # (exits simctl silently with 4, if let through)
    code, output = _cli([*BASE, "--policy", f"{bad}:Cls"])
    assert (code, output.strip()) == (1, f"Error: policy '{bad}:Cls': loading {bad} raised SystemExit: 4")


def test_live_refuses_a_bad_plugin_before_loading_anything() -> None:
    code, output = _cli(["live", "--model", "no-such-model", "--policy", "docs/examples/nope.py:X"])
    assert code == 1 and "no such file" in output and len(output.strip().splitlines()) == 1


# ------------------------------------------------------------------- entry points


def _installed() -> bool:
    return any(ep.name == ENTRY for ep in entry_points(group="simctl.policies"))


@pytest.fixture
def entry_point() -> None:
    if not _installed():
        if os.environ.get("CI") == "true":
            pytest.fail("tests/plugin_pkg is not installed (tests/run.sh installs it)")
        pytest.skip("pip install -e tests/plugin_pkg to run the entry-point tests")


def test_entry_point_policy_is_listed(entry_point: None) -> None:
    code, output = _cli(["policies"])
    assert code == 0
    (line,) = [x for x in output.splitlines() if x.startswith(ENTRY)]
    assert "Round-robin placement" in line and "[simctl-plugin-example]" in line
    code, output = _cli(["policies", ENTRY])
    assert code == 0 and "offset (int, default 0)" in output


def test_entry_point_policy_runs_by_name(entry_point: None) -> None:
    code, output = _cli([*BASE, "--policy", "verl", "--policy", f"{ENTRY}:offset=3"])
    assert code == 0, output
    assert f"{ENTRY}:offset=3" in output
    result = simctl.replay(SAMPLE, [f"{ENTRY}:offset=3"], cluster="a100x8:tp1", steps=0)
    req = result.requests
    assert (req["worker"] == (req["request"] + 3) % 8).all()
    with pytest.raises(PolicySpecError, match=r"offset='-1' is out of range"):
        make_policy(f"{ENTRY}:offset=-1")


# ------------------------------------------------------------------------ sweeps

SWEEP = {"sweep": {"traces": [SAMPLE], "steps": "0:1", "clusters": ["a100x8:tp1"]}}


def test_sweep_runs_a_plugin_named_on_the_command_line(tmp_path: Path) -> None:
    raw = {**SWEEP, "policies": {"shortest-first": {"default_len": [128, 512]}}}
    spec = spec_from_data(raw, tmp_path / "s.toml", plugins=[EXAMPLE])
    specs = sorted(p.policy_spec for p in spec.points)
    assert specs == ["shortest-first:default_len=128", "shortest-first:default_len=512"]
    example = str(ROOT / "docs/examples/shortest_first.py")
    assert all(p.task_spec.startswith(f"{example}:ShortestFirst:default_len=") for p in spec.points)
    spec.points = spec.points[:1]
    result = run_sweep(spec, tmp_path / "out", workers=1, use_ray=False)
    assert result.ran == 1


def test_sweep_spec_never_names_code(tmp_path: Path) -> None:
    raw = {**SWEEP, "policies": {EXAMPLE: {}}}
    with pytest.raises(SweepSpecError, match="names policies, never code"):
        spec_from_data(raw, tmp_path / "s.toml")
    with pytest.raises(SweepSpecError, match=r"unknown policy; known: .*verl"):
        spec_from_data({**SWEEP, "policies": {"shortest-first": {}}}, tmp_path / "s.toml")


def test_example_runs_live_from_its_file(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from simctl.live.cli import live_cmd

    out = tmp_path / "run"
    args = ["--model", "random:tiny", "--prompts-per-step", "2", "--group-size", "2", "--max-tokens", "8"]
    res = CliRunner().invoke(live_cmd, [*args, "--workers", "2", "--policy", EXAMPLE, "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "run.json").read_text())
    assert list(doc["policies"]) == ["shortest-first"]
    assert doc["policies"]["shortest-first"]["params"] == {"default_len": 512, "prioritize": True}


# ------------------------------------------------------------- a plug-in that raises

RAISING = """
from simctl.policies.contract import Assign, Policy, RequestFinished, StepStarted


class Boom(Policy):
    name = "boom"
    tick_iterations = 8

    def on_event(self, event, view):
        if isinstance(event, StepStarted):
            return [Assign(request=r, worker=0) for r in event.requests]
        if isinstance(event, RequestFinished):
            raise KeyError("no such request in my table")
        return []


class Grumpy(Boom):
    name = "grumpy"

    def on_event(self, event, view):
        return [Assign(request=r, worker=0) for r in event.requests] if isinstance(event, StepStarted) else []

    def wants_ticks(self, worker, view):
        return {}[worker]


class Quitter(Boom):
    name = "quitter"

    def on_event(self, event, view):
        if isinstance(event, RequestFinished):
            raise SystemExit(3)  # (a plug-in's sys.exit is its error, not simctl's exit)
        return super().on_event(event, view)
"""


@pytest.mark.parametrize(
    ("cls", "asked", "error"),
    [
        ("Boom", r"on_event\(RequestFinished at t=\d+\.\d{3} s\)", KeyError),
        ("Grumpy", r"wants_ticks\(worker 0\)", KeyError),
        ("Quitter", r"on_event\(RequestFinished at t=\d+\.\d{3} s\)", SystemExit),
    ],
)
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_plugin_that_raises_is_named_not_called_a_simctl_bug(
    tmp_path: Path, cls: str, asked: str, error: type[BaseException], jobs: str
) -> None:
    """The one-line error of a plug-in raising names the policy, its file and class, what it
    was asked and the error; --debug shows the plug-in's own traceback. Before, it said
    "internal error ... this is a bug in simctl"."""
    path = tmp_path / "mine.py"
    path.write_text(RAISING)
    args = [*BASE, "--policy", f"{path}:{cls}", "--policy", "verl", "--jobs", jobs]
    args += ["--out", str(tmp_path / "o")]
    code, output = _cli(args)
    assert code == 1 and "bug in simctl" not in output
    (line,) = output.strip().splitlines()
    assert re.fullmatch(
        rf"Error: policy '{cls.lower()}' \({re.escape(str(path))}:{cls}\) "
        rf"raised {error.__name__}: .* in {asked}; "
        r"rerun with --debug for the traceback",
        line,
    ), line
    assert not (tmp_path / "o").exists()  # all or nothing
    res = CliRunner().invoke(main, ["--debug", *BASE, "--policy", f"{path}:{cls}"])
    assert isinstance(res.exception, simctl.policies.contract.PolicyRaised)
    causes, exc = [], res.exception  # (SimPy re-raises a process's error with it as the cause)
    while exc is not None:
        causes.append(exc)
        exc = exc.__cause__
    assert isinstance(causes[-1], error)  # the plug-in's own traceback


def test_a_builtin_policy_that_raises_is_still_a_simctl_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    from simctl.policies.placement import StaticGroupPlacement

    def broken(self, event, view):
        raise KeyError("oops")

    monkeypatch.setattr(StaticGroupPlacement, "on_event", broken)
    code, output = _cli([*BASE, "--policy", "verl"])
    assert code == 1 and "internal error (KeyError)" in output and "bug in simctl" in output


def test_a_plugin_that_raises_live_is_named_too(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    path = tmp_path / "mine.py"
    path.write_text(RAISING)
    args = ["live", "--model", "random:tiny", "--prompts-per-step", "2", "--group-size", "2"]
    args += ["--max-tokens", "8", "--workers", "2", "--policy", f"{path}:Boom", "--out", str(tmp_path / "o")]
    code, output = _cli(args)
    assert code == 1 and "bug in simctl" not in output, output
    (line,) = output.strip().splitlines()
    assert (
        line.startswith(f"Error: policy 'boom' ({path}:Boom) raised KeyError: ")
        and "on_event(RequestFinished" in line
    )
    assert not (tmp_path / "o").exists()
