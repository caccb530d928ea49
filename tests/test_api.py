"""The Python API (simctl/api.py): `simctl.load_trace`, `simctl.replay` -> Result with
pandas frames, `Result.report`; the README's worked example runs as written; the same
numbers as `simctl replay`; one-line errors; `import simctl` stays light."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import simctl
from simctl.cli import main
from simctl.policies.params import PolicySpecError
from simctl.policies.placement import StaticGroupPlacement
from simctl.traces.io import TraceError
from simctl.traces.outputs import OutputPathError

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "traces/samples/efficientrollout-qwen7b-8k-6steps.parquet"


@pytest.fixture(scope="module")
def result() -> simctl.Result:
    trace = simctl.load_trace(SAMPLE)
    return simctl.replay(trace, ["verl", "ngram:gamma=4"], cluster="a100x8:tp1", steps="0:2", seed=0)


def test_readme_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Python API") :]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    (tmp_path / "traces").symlink_to(ROOT / "traces", target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    exec(compile(code.group(1), "README.md", "exec"), {})
    assert (tmp_path / "api_report" / "index.html").is_file()
    assert (tmp_path / "api_report" / "run" / "run.json").is_file()
    assert json.loads((tmp_path / "api_timeline.json").read_text())["traceEvents"]


def test_cluster_defaults_to_the_traces_recorded_layout() -> None:
    """As `simctl replay` without --cluster: the layout the trace records (this sample's
    paper layout, 8 A100s), else h100x512; and the same numbers as naming it."""
    from simctl.sim.cluster import parse_cluster

    trace = simctl.load_trace(SAMPLE)
    assert trace.meta.cluster == "a100x8:tp1"
    default = simctl.replay(trace, "verl", steps=0)
    assert default.setup.cluster == parse_cluster("a100x8:tp1")
    named = simctl.replay(trace, "verl", cluster="a100x8:tp1", steps=0)
    pd.testing.assert_frame_equal(default.steps, named.steps)
    unrecorded = dataclasses.replace(trace, meta=dataclasses.replace(trace.meta, cluster=None))
    assert simctl.replay(unrecorded, "verl", steps=0).setup.cluster == parse_cluster("h100x512")


def test_frames(result: simctl.Result) -> None:
    steps = result.steps
    assert list(steps[["policy", "step"]].itertuples(index=False, name=None)) == [
        ("verl", 0),
        ("verl", 1),
        ("ngram:gamma=4", 0),
        ("ngram:gamma=4", 1),
    ]
    for col in ("rollout_makespan_s", "step_time_s", "throughput_tok_s", "tail_time_s", "gpu_idle_fraction"):
        assert (steps[col] > 0).all(), col
    assert steps["mean_accept_len"].isna().tolist() == [True, True, False, False]
    trace = simctl.load_trace(SAMPLE).df
    per_step = int(trace["step"].isin([0, 1]).sum())
    assert len(result.requests) == 2 * per_step
    assert set(result.timeline["worker"]) == set(range(8))
    # the makespan of a step is its last request's finish
    last = result.requests.groupby(["policy", "step"], sort=False)["finish_s"].max()
    assert last.tolist() == pytest.approx(steps["rollout_makespan_s"].tolist())


def test_same_numbers_as_the_command(result: simctl.Result, tmp_path: Path) -> None:
    out = tmp_path / "m.json"
    args = ["replay", str(SAMPLE), "--cluster", "a100x8:tp1", "--steps", "0:2", "--seed", "0"]
    res = CliRunner().invoke(
        main, [*args, "--policy", "verl", "--policy", "ngram:gamma=4", "--json", str(out)]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    for name, entry in doc["policies"].items():
        mine = result.steps[result.steps["policy"] == name]
        assert [s["rollout_makespan_s"] for s in entry["steps"]] == mine["rollout_makespan_s"].tolist()
        assert entry["params"] == result.doc["policies"][name]["params"]


def test_report_writes_a_run_directory_and_the_page(result: simctl.Result, tmp_path: Path) -> None:
    index = result.report(tmp_path / "rep")
    assert index == tmp_path / "rep" / "index.html" and index.is_file()
    requests = pd.read_parquet(tmp_path / "rep" / "run" / "requests.parquet")
    assert len(requests) == len(result.requests)
    assert result.report(tmp_path / "rep") == index  # a report directory is replaced whole


def test_policies_as_classes_objects_and_step_forms() -> None:
    one = simctl.replay(str(SAMPLE), StaticGroupPlacement, cluster="a100x8:tp1", steps=1)
    both = simctl.replay(SAMPLE, [StaticGroupPlacement(), "verl"], cluster="a100x8:tp1", steps=[0, 1])
    assert one.steps["step"].tolist() == [1]
    by = both.steps.set_index(["policy", "step"])["rollout_makespan_s"]
    assert by["static-group"].tolist() == by["verl"].tolist()
    assert by[("static-group", 1)] == one.steps["rollout_makespan_s"].iloc[0]


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda: simctl.load_trace(ROOT / "README.md"), TraceError, "README.md"),
        (lambda: simctl.replay(SAMPLE, "nope"), PolicySpecError, "unknown policy 'nope'"),
        (lambda: simctl.replay(SAMPLE, "verl", cluster="z9000x3"), ValueError, "z9000x3"),
        (lambda: simctl.replay(SAMPLE, "verl", steps="40:50"), ValueError, "selects no step"),
        (lambda: simctl.replay(SAMPLE, "verl", steps="a:b"), ValueError, "is not N or A:B"),
        # what the command refuses, the API refuses too (steps=True replayed step 1, 0.9 step 0)
        (lambda: simctl.replay(SAMPLE, "verl", steps=True), ValueError, "steps True is not"),
        (lambda: simctl.replay(SAMPLE, "verl", steps=[0.9]), ValueError, "steps [0.9] is not"),
        (lambda: simctl.replay(SAMPLE, "verl", seed=-1), ValueError, "seed -1 is not an integer"),
        (lambda: simctl.replay(SAMPLE, "verl", seed=1.5), ValueError, "seed 1.5 is not an integer"),
        (lambda: simctl.replay(SAMPLE, "verl", max_num_seqs=1.5), ValueError, "max_num_seqs 1.5"),
        (lambda: simctl.replay(SAMPLE, "verl", max_num_seqs=0), ValueError, "max_num_seqs 0"),
        (lambda: simctl.replay(SAMPLE, "verl", model=""), ValueError, "model '' is not a path"),
        (lambda: simctl.replay(None, "verl"), ValueError, "trace None is not a path"),
        (lambda: simctl.replay(SAMPLE, "verl", cluster=8), ValueError, "cluster 8 is not"),
        (lambda: simctl.replay(SAMPLE, []), PolicySpecError, "no policy given"),
        (lambda: simctl.replay(SAMPLE, 5), PolicySpecError, "policies 5 is not a policy"),
        (lambda: simctl.sweep(SWEEP, "never", workers="2"), ValueError, "workers '2' is not an integer"),
        (lambda: simctl.estimate_sweep(SWEEP, workers=0), ValueError, "workers 0 is not an integer"),
        (
            lambda: simctl.estimate_sweep({**SWEEP, "policies": {5: {}}}),
            ValueError,
            "a policy's name must be text",
        ),
        (
            lambda: simctl.sweep(SWEEP, "never", plugins="x.py:C"),
            ValueError,
            "plugins 'x.py:C' is not a list",
        ),
    ],
)
def test_errors_are_one_line(call, error: type[Exception], words: str) -> None:
    with pytest.raises(error) as info:
        call()
    assert words in str(info.value)
    assert len(str(info.value).splitlines()) == 1


def test_import_simctl_stays_light() -> None:
    code = "import sys, simctl; assert 'simctl.api' not in sys.modules and 'pandas' not in sys.modules"
    code += "; assert callable(simctl.replay) and 'simctl.api' in sys.modules; print(sorted(simctl.__all__))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert (
        out.strip() == "['Result', 'Sweep', '__version__', 'estimate_sweep', 'load_trace', 'replay', 'sweep']"
    )


SWEEP = {
    "sweep": {"traces": [str(SAMPLE)], "steps": "0:1", "clusters": ["a100x8:tp1"], "seeds": [0, 1]},
    "policies": {"verl": {}, "ngram": {"gamma": [2, 4]}},
}


def test_sweep_from_a_dict_equals_the_command(tmp_path: Path) -> None:
    """`simctl.sweep` on the spec as a dict gives the command's table (and report), and a
    second call skips every complete point."""
    done = simctl.sweep(SWEEP, tmp_path / "api", workers=1)
    assert (done.ran, done.skipped, done.backend) == (6, 0, "process pool")
    assert done.report == tmp_path / "api" / "report" / "index.html" and done.report.is_file()
    table = done.table
    assert sorted(zip(table["policy"], table["param_gamma"].fillna(0), table["seed"], strict=True)) == [
        ("ngram", 2, 0),
        ("ngram", 2, 1),
        ("ngram", 4, 0),
        ("ngram", 4, 1),
        ("verl", 0, 0),
        ("verl", 0, 1),
    ]
    spec = tmp_path / "spec.toml"
    spec.write_text(
        f'[sweep]\ntraces = ["{SAMPLE}"]\nsteps = "0:1"\nclusters = ["a100x8:tp1"]\nseeds = [0, 1]\n'
        "[policies]\nverl = {}\nngram = { gamma = [2, 4] }\n"
    )
    res = CliRunner().invoke(main, ["sweep", str(spec), "--out", str(tmp_path / "cli"), "--workers", "1"])
    assert res.exit_code == 0, res.output
    cli = pd.read_parquet(tmp_path / "cli" / "sweep.parquet")
    keep = ["point_id", "policy", "seed", "param_gamma", "makespan_s", "throughput_tok_s", "gpu_seconds"]
    pd.testing.assert_frame_equal(done.table[keep].reset_index(drop=True), cli[keep].reset_index(drop=True))
    again = simctl.sweep(SWEEP, tmp_path / "api", workers=1)
    assert (again.ran, again.skipped) == (0, 6)


def test_sweep_spec_errors_are_the_commands() -> None:
    from simctl.sweep_spec import SweepSpecError

    with pytest.raises(SweepSpecError, match=r"policies\.ngram\.gama: unknown parameter"):
        simctl.sweep({**SWEEP, "policies": {"ngram": {"gama": [2]}}}, "unused", workers=1)


def test_estimate_sweep_counts_points_and_complete_ones(tmp_path: Path) -> None:
    """`simctl.estimate_sweep` is the dry run as data: nothing written, complete points
    counted once a sweep has run them."""
    before = simctl.estimate_sweep(SWEEP, tmp_path / "api", workers=2)
    assert (before.points, before.complete, before.workers) == (6, 0, 2) and before.cpu_s > 0
    assert before.wall_s <= before.cpu_s and not (tmp_path / "api").exists()
    simctl.sweep(SWEEP, tmp_path / "api", workers=1)
    after = simctl.estimate_sweep(SWEEP, tmp_path / "api")
    assert after.complete == 6 and after.cpu_s == 0.0


class NamedVerl(StaticGroupPlacement):
    name = "verl"


def test_policies_of_one_name_are_refused_and_one_spec_twice_is_one_run() -> None:
    """Results are kept by name: a plug-in named verl replaced the baseline's numbers with
    its own, and one object listed twice kept only its second run (from the first's state)."""
    with pytest.raises(PolicySpecError, match="'verl' and NamedVerl object are both named 'verl'"):
        simctl.replay(SAMPLE, ["verl", NamedVerl()], cluster="a100x8:tp1", steps=0)
    policy = StaticGroupPlacement()
    with pytest.raises(PolicySpecError, match="listed twice"):
        simctl.replay(SAMPLE, [policy, policy], cluster="a100x8:tp1", steps=0)
    twice = simctl.replay(SAMPLE, ["verl", "verl"], cluster="a100x8:tp1", steps=0)
    assert twice.steps["policy"].tolist() == ["verl"]
    res = CliRunner().invoke(
        main, ["replay", str(SAMPLE), "--policy", "verl", "--policy", "tests.test_api:NamedVerl"]
    )
    (line,) = res.output.strip().splitlines()
    assert res.exit_code == 2 and "'verl' and 'tests.test_api:NamedVerl' are both named 'verl'" in line, line


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda df: df.assign(accept_ngram=5.0), "accept_ngram"),
        (lambda df: df.assign(prompt_len=-100), "prompt_len"),
        (lambda df: df.assign(step=df["step"] + 0.5), "step"),
        (lambda df: df.assign(response_len=df["response_len"].where(df.index > 0)), "response_len"),
        (lambda df: df.drop(columns="max_tokens"), "max_tokens"),
    ],
)
def test_an_in_memory_trace_is_checked_as_a_file_is(edit, words: str) -> None:
    """A notebook's edited `trace.df` went into the replay unchecked: acceptance 5 made
    ngram 3.8x faster, float steps replayed nothing, NaN lengths failed inside simpy."""
    trace = simctl.load_trace(SAMPLE)
    bad = dataclasses.replace(trace, df=edit(trace.df))
    with pytest.raises(TraceError) as info:
        simctl.replay(bad, "ngram:gamma=4", cluster="a100x8:tp1", steps=0)
    assert words in str(info.value) and "in-memory trace" in str(info.value), str(info.value)
    # the trace unedited replays as its file does
    same = simctl.replay(trace, "verl", cluster="a100x8:tp1", steps=0).steps
    pd.testing.assert_frame_equal(same, simctl.replay(SAMPLE, "verl", cluster="a100x8:tp1", steps=0).steps)


def test_a_failed_report_leaves_its_directory_as_it_was(
    result: simctl.Result, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import simctl.reports.build as build

    def broken(*args: object, **kwargs: object) -> Path:
        raise build.ReportError("rendering failed")

    fresh = tmp_path / "fresh"
    monkeypatch.setattr(build, "build_report", broken)
    with pytest.raises(build.ReportError):
        result.report(fresh)
    assert not fresh.exists()  # (the run directory was left behind)
    monkeypatch.undo()
    old = tmp_path / "old"
    result.report(old)
    before = sorted(p.relative_to(old).as_posix() for p in old.rglob("*"))
    stamp = (old / "run" / "run.json").stat().st_mtime_ns
    monkeypatch.setattr(build, "build_report", broken)
    with pytest.raises(build.ReportError):
        result.report(old)
    assert sorted(p.relative_to(old).as_posix() for p in old.rglob("*")) == before
    assert (old / "run" / "run.json").stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == sorted(["fresh", "old"])[1:]  # nothing beside
    with pytest.raises(ValueError, match="baseline 'nope' is not one of the runs"):
        result.report(tmp_path / "b", baseline="nope")


def test_chrome_trace_never_overwrites_the_trace(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    shutil.copy(SAMPLE, trace)
    res = simctl.replay(trace, "verl", cluster="a100x8:tp1", steps=0)
    with pytest.raises(OutputPathError, match="input"):
        res.chrome_trace(trace)
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(OutputPathError):
        res.chrome_trace(tmp_path / "notes.txt")
    assert (tmp_path / "notes.txt").read_text() == "mine" and simctl.load_trace(trace)
    assert res.chrome_trace(tmp_path / "t.json").is_file()


def test_an_edited_plugin_file_is_loaded_again(tmp_path: Path) -> None:
    """A file plug-in was executed once per process: the notebook's edit-and-rerun replayed
    the first version. Now once per content."""
    plugin = tmp_path / "mine.py"
    body = (
        "from simctl.policies.contract import Assign, Policy, StepStarted\n"
        "class Mine(Policy):\n"
        "    name = 'mine'\n"
        "    def on_event(self, event, view):\n"
        "        if isinstance(event, StepStarted):\n"
        "            return [Assign(r, {target}) for r in event.requests]\n"
        "        return []\n"
    )
    plugin.write_text(body.format(target="r % view.num_workers"))
    spread = simctl.replay(SAMPLE, f"{plugin}:Mine", cluster="a100x8:tp1", steps=0).steps
    plugin.write_text(body.format(target="0"))
    one = simctl.replay(SAMPLE, f"{plugin}:Mine", cluster="a100x8:tp1", steps=0).steps
    assert one["rollout_makespan_s"].iloc[0] > 1.5 * spread["rollout_makespan_s"].iloc[0]
