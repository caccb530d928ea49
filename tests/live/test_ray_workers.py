"""Workers as Ray actors (live/ray_workers.py): the same executor over remote engines
decides and generates exactly what it does over in-process ones."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from simctl.live.executor import TORCH_CAPABILITIES, ExecutorConfig, LiveExecutor, WorkerCrashed  # noqa: E402
from simctl.live.ray_workers import RayBackend, RayUnavailable  # noqa: E402
from simctl.live.workload import from_trace  # noqa: E402
from simctl.policies.registry import make_policy  # noqa: E402
from simctl.traces.io import write_trace  # noqa: E402
from simctl.traces.schema import TraceMeta  # noqa: E402
from tests.factories import LinearCost  # noqa: E402
from tests.live.test_executor import INFO, KV, ScriptedEngine, _frame  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


class Broken(ScriptedEngine):
    def step(self):
        raise RuntimeError("engine died\nsecond line")


class Scripted:
    """An in-process backend of scripted engines (what a factory builds in each actor)."""

    def __init__(self, engine: type = ScriptedEngine) -> None:
        self.engine = engine

    def engines(self, n: int, policy=None) -> list:
        return [self.engine() for _ in range(n)]


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ray") / "t.parquet"
    write_trace(path, _frame(steps=2), TraceMeta(model="qwen2.5-7b", group_size=4, preset="test", seed=0))
    return path


@pytest.fixture(scope="module")
def cluster():
    # workers import this test package: give them the repository on their path
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}},
    )
    yield
    ray.shutdown()


def _run(engines, workload, policy: str):
    ex = LiveExecutor(
        make_policy(policy),
        engines,
        workload,
        INFO,
        config=ExecutorConfig(kv_capacity_tokens=KV),
        cost_model=LinearCost(),
        capabilities=TORCH_CAPABILITIES,
    )
    ex.run()
    return ex


def _outcome(ex: LiveExecutor) -> list[list[tuple]]:
    return [[(r.worker, r.tokens, r.finish_reason, r.drafted) for r in rec.requests] for rec in ex.records]


def test_remote_workers_decide_and_generate_like_local_ones(cluster, trace_path: Path) -> None:
    """Placement and speculation do not depend on timings under n-gram speculation, so
    local and remote runs must agree request by request."""
    policy = "ngram"
    workload = from_trace(trace_path, vocab=256)
    local = _run([ScriptedEngine() for _ in range(2)], workload, policy)
    backend = RayBackend(factory=Scripted, capabilities=TORCH_CAPABILITIES)
    remote = _run(backend.engines(2), workload, policy)
    backend.shutdown_actors()
    assert _outcome(local) == _outcome(remote)
    assert {r.worker for rec in remote.records for r in rec.requests} == {0, 1}
    assert sum(len(r.tokens) for r in remote.requests) > 0
    # each iteration is charged the time the actor measured around its own step
    assert all(it[2] > 0 for rec in remote.records for it in rec.iterations)


def test_a_crashing_remote_worker_is_one_clear_error(cluster, trace_path: Path) -> None:
    workload = from_trace(trace_path, vocab=256)
    backend = RayBackend(factory=functools.partial(Scripted, Broken), capabilities=TORCH_CAPABILITIES)
    with pytest.raises(WorkerCrashed, match=r"^worker 0 crashed at step 0: RuntimeError: engine died$"):
        _run(backend.engines(1), workload, "verl")
    backend.shutdown_actors()


def test_a_cluster_too_small_for_the_workers_is_refused(cluster) -> None:
    backend = RayBackend(factory=Scripted, capabilities=TORCH_CAPABILITIES, resources={"num_gpus": 1})
    with pytest.raises(RayUnavailable, match="ray cluster has 0 GPU, 2 workers need 2"):
        backend.engines(2)


def test_no_ray_is_one_line(monkeypatch) -> None:
    import builtins

    real = builtins.__import__

    def no_ray(name, *a, **kw):
        if name == "ray":
            raise ImportError("no ray")
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    from simctl.live.ray_workers import require_ray

    with pytest.raises(RayUnavailable, match="pip install"):
        require_ray()


def test_simctl_live_ray_records_what_an_in_process_run_records(cluster, tmp_path: Path) -> None:
    """`simctl live --ray`: each worker's torch engine (a random tiny model, loaded in its
    actor from the same seed) generates the same tokens as in-process engines."""
    import torch
    from click.testing import CliRunner

    from simctl.live.cli import live_cmd
    from simctl.traces.io import read_trace

    args = [
        "--model",
        "random:tiny",
        "--prompts-per-step",
        "3",
        "--group-size",
        "2",
        "--max-tokens",
        "12",
        "--policy",
        "verl",
        "--workers",
        "2",
    ]
    previous = torch.get_num_threads()
    try:
        local = CliRunner().invoke(live_cmd, [*args, "--record", str(tmp_path / "local.parquet")])
        remote = CliRunner().invoke(live_cmd, [*args, "--ray", "--record", str(tmp_path / "ray.parquet")])
    finally:
        torch.set_num_threads(previous)
    assert local.exit_code == 0, local.output
    assert remote.exit_code == 0, remote.output
    a, b = read_trace(tmp_path / "local.parquet"), read_trace(tmp_path / "ray.parquet")
    assert a.df["response_len"].tolist() == b.df["response_len"].tolist()
    tokens = [a.lists["response_tokens"].to_pylist(), b.lists["response_tokens"].to_pylist()]
    assert tokens[0] == tokens[1] and sum(map(len, tokens[0])) > 0


def test_ray_actors_loop_side_by_side_and_survive_a_lost_actor(cluster, trace_path: Path) -> None:
    """The concurrent runtime over two Ray actors: every request finishes exactly once with
    its budget's tokens, reports arrive from both actors, and an actor killed mid-step
    (`--fail-worker 1@T`) becomes a WorkerLost whose requests finish on the other one."""
    from simctl.live.concurrent import ConcurrentExecutor
    from simctl.live.ray_workers import RayRuntime
    from simctl.policies.contract import RequestFinished, WorkerLost
    from simctl.testing import Spy
    from simctl.traces.cli_options import WorkerFault
    from tests.live.loop_fakes import SlowBackend

    workload = from_trace(trace_path, vocab=256)
    for faults in ([], [WorkerFault(1, 0.05)]):
        spy = Spy(make_policy("verl"))
        runtime = RayRuntime(SlowBackend(step_s=0.01), 2, None)
        ex = ConcurrentExecutor(
            spy,
            runtime,
            workload,
            INFO,
            config=ExecutorConfig(kv_capacity_tokens=KV),
            cost_model=LinearCost(),
            faults=faults,
        )
        try:
            ex.run()
        finally:
            runtime.close()
        for rec, step in zip(ex.records, workload.steps, strict=True):
            assert [r.generated for r in rec.requests[: rec.n_requests]] == [q.budget for q in step.requests]
        finished = [e for e, _ in spy.log if isinstance(e, RequestFinished)]
        assert len(finished) == workload.num_requests
        lost = [e for e, _ in spy.log if isinstance(e, WorkerLost)]
        if faults:
            assert [e.worker for e in lost] == [1] and ex.losses.entries[0]["cause"] == "injected"
            assert all(row[0] == 0 for row in ex.records[1].iterations)
        else:
            assert not lost
            assert {row[0] for row in ex.records[0].iterations} == {0, 1}
