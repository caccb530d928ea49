"""Without torch (nor vLLM, nor transformers) the executor, the run drivers and the recorder
import and run over a fake engine; `simctl live` and `simctl calibrate` say in one line
which extra to install.

Each check runs in a subprocess whose first statements make those packages unimportable
(`sys.modules[name] = None`: an import raises ImportError, `find_spec` finds nothing),
as on a machine where they were never installed.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCKED = ("torch", "vllm", "transformers")
PRELUDE = f"import sys\nfor _name in {BLOCKED!r}:\n    sys.modules[_name] = None\n"


def _python(body: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    code = PRELUDE + textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


def test_executor_runs_a_fake_engine_without_torch() -> None:
    """The fake-engine path of tests/live/test_executor.py (ScriptedEngine over a trace's
    workload), every policy layer module it needs, and the recorder's import."""
    res = _python(
        """
        import tempfile
        from pathlib import Path

        import simctl.live.backend_factory
        import simctl.live.cli
        import simctl.live.calibrate
        import simctl.live.recorder
        import simctl.live.session
        from simctl.live.executor import ExecutorConfig, LiveExecutor
        from simctl.live.workload import from_trace
        from simctl.policies.registry import make_policy
        from simctl.traces.io import write_trace
        from simctl.traces.schema import TraceMeta
        from tests.factories import LinearCost
        from tests.live.test_executor import INFO, KV, ScriptedEngine, _frame

        path = Path(tempfile.mkdtemp()) / "t.parquet"
        write_trace(path, _frame(steps=1), TraceMeta(model="qwen2.5-7b", group_size=4, preset="t", seed=0))
        workload = from_trace(path, vocab=256)
        ex = LiveExecutor(
            make_policy("verl"),
            [ScriptedEngine() for _ in range(2)],
            workload,
            INFO,
            config=ExecutorConfig(kv_capacity_tokens=KV),
            cost_model=LinearCost(),
        )
        records = ex.run()
        assert all(r.state == "finished" for r in records[0].requests), "unfinished requests"
        for name in ("torch", "vllm", "transformers"):
            assert sys.modules.get(name) is None, name + " was imported"
        print("ok", len(records[0].requests))
        """
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("ok ")


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return _python(f"from simctl.cli import main\nmain({args!r})\n", cwd=cwd)


def _one_line(res: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in (res.stdout + res.stderr).splitlines() if line.strip()]
    assert len(lines) == 1, res.stdout + res.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["live", "--model", "random:tiny"], "pip install 'simctl[torch]'"),
        (["live", "--backend", "vllm"], "vllm"),
        (["calibrate", "-o", "p.json"], "pip install 'simctl[torch]'"),
        (["calibrate", "--backend", "vllm", "-o", "p.json"], "vllm"),
    ],
)
def test_commands_without_torch_say_what_to_install(args: list[str], expected: str, tmp_path: Path) -> None:
    res = _cli(args, tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    line = _one_line(res)
    assert expected in line and "Traceback" not in line
    assert not (tmp_path / "p.json").exists()
