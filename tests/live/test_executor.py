"""Live executor: conformance with the simulator, event semantics, losslessness of every
speculative policy on the torch engine, chunk/migration continuation, recording round-trip.

Conformance runs each registered policy on the simulator and on the live executor over a
scripted fake engine (no torch) with the same trace, model info, capabilities and cost
model, and compares the actions decided at StepStarted.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"

import itertools

import numpy as np
import pytest

from simctl.live.executor import ExecutorConfig, LiveError, LiveExecutor
from simctl.live.recorder import LiveRun, write_recording
from simctl.live.workload import Workload, from_trace
from simctl.policies.contract import (
    SPEC_OFF,
    SPEC_PLAIN,
    Action,
    Assign,
    ChunkFinished,
    ClusterView,
    CopyCancelled,
    Defer,
    Event,
    LaunchReplica,
    Migrate,
    ModelInfo,
    Policy,
    RequestFinished,
    Role,
    SetRole,
    SetSpec,
    SpecConfig,
    StepFinished,
    StepStarted,
    Tick,
    WorkerIdle,
)
from simctl.policies.registry import REGISTRY, make_policy
from simctl.testing import ScriptedEngine, Spy, check_conformance
from simctl.traces.io import write_trace
from simctl.traces.schema import KNOWN_METHODS, TraceMeta
from simctl.traces.validate import validate_file
from tests.factories import LinearCost, make_frame

KV = 10**9
INFO = ModelInfo(model="Qwen2.5-7B", gpu="H100-SXM-80GB", tp=1, group_size=4, temperature=1.0)


def _frame(steps: int = 1, n_groups: int = 6):
    frames = []
    rng = np.random.default_rng(0)
    for s in range(steps):
        lengths = rng.integers(5, 60, size=n_groups * 4)
        accept = {m: 0.6 for m in KNOWN_METHODS}
        f = make_frame(lengths, group_size=4, step=s, prompt_len=16, max_tokens=64, accept=accept)
        f["epoch"] = np.int32(s)
        frames.append(f)
    import pandas as pd

    return pd.concat(frames, ignore_index=True)


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("conf") / "t.parquet"
    write_trace(path, _frame(steps=2), TraceMeta(model="qwen2.5-7b", group_size=4, preset="test", seed=0))
    return path


def _live(policy: Policy, workload: Workload, workers: int = 3, **kw) -> LiveExecutor:
    ex = LiveExecutor(
        policy,
        [ScriptedEngine() for _ in range(workers)],
        workload,
        INFO,
        config=ExecutorConfig(kv_capacity_tokens=KV),
        cost_model=LinearCost(),
        **kw,
    )
    ex.run()
    return ex


POLICIES = sorted(REGISTRY)


@pytest.mark.parametrize("name", POLICIES)
def test_conformance_step_started(name: str, trace_file: Path) -> None:
    """Same trace, info, capabilities and cost model: same decisions at step start
    (simctl.testing.check_conformance, the helper users run on their own policies)."""
    result = check_conformance(name, trace=trace_file, steps=1)
    assert result.steps == [0] and result.actions[0] >= 24  # every request placed


@pytest.mark.parametrize("name", POLICIES)
def test_every_policy_runs_live_two_steps(name: str, trace_file: Path) -> None:
    workload = from_trace(trace_file, vocab=256)
    spy = Spy(make_policy(name))
    ex = _live(spy, workload, workers=2)
    assert len(ex.records) == 2
    for rec, step in zip(ex.records, workload.steps, strict=True):
        assert [r.generated for r in rec.requests[: rec.n_requests]] == [q.budget for q in step.requests]
        assert rec.makespan_s > 0
    finished = [e for e, _ in spy.log if isinstance(e, RequestFinished)]
    assert len(finished) == workload.num_requests
    assert sum(isinstance(e, StepFinished) for e, _ in spy.log) == 2


def test_event_semantics(trace_file: Path) -> None:
    """Events in time order (up to one iteration: each worker's events are stamped at the end
    of its iteration, and the next iteration goes to the earliest clock); WorkerIdle once per
    worker per step (but not after the last request); Tick every k iterations."""

    class Ticking(Policy):
        name = "ticking"
        tick_iterations = 5

        def on_event(self, event: Event, view: ClusterView) -> list[Action]:
            if isinstance(event, StepStarted):
                return [Assign(r, r % 2) for r in event.requests]
            return []

    workload = from_trace(trace_file, vocab=256, steps=[0])
    spy = Spy(Ticking())
    ex = _live(spy, workload, workers=3)
    events = [e for e, _ in spy.log]
    times = [e.time_s for e in events if not isinstance(e, StepFinished | WorkerIdle)]
    inversions = [a - b for a, b in itertools.pairwise(times) if b < a]
    assert max(inversions, default=0.0) < 0.05
    idle = [e.worker for e in events if isinstance(e, WorkerIdle)]
    last = [e for e in events if isinstance(e, RequestFinished)][-1].worker
    assert sorted(idle) == sorted({0, 1, 2} - {last})  # as the simulator: none once all are done
    assert idle[0] == 2  # never assigned: reported at step start
    ticks = [e for e in events if isinstance(e, Tick)]
    assert ticks and all(t.iteration % 5 == 0 for t in ticks)
    assert ex.approximated == {}


class ChunkAndMigrate(Policy):
    """Chunks of 5 tokens, re-dispatched to the next worker; one running request migrated."""

    name = "chunk-migrate"
    tick_iterations = 3

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.migrated = False

    def on_event(self, event: Event, view: ClusterView) -> list[Action]:
        if isinstance(event, StepStarted):
            self.migrated = False
            return [Assign(r, r % self.workers, max_tokens=5) for r in event.requests]
        if isinstance(event, ChunkFinished):
            return [Assign(event.request, (event.worker + 1) % self.workers, max_tokens=5)]
        if isinstance(event, Tick) and not self.migrated:
            for rid in view.step_requests():
                r = view.request(rid)
                if r.state == "running" and r.worker == event.worker:
                    self.migrated = True
                    return [Migrate(rid, (event.worker + 1) % self.workers, transfer_kv=False)]
        return []


def test_chunks_and_migration_continue_the_stream(trace_file: Path) -> None:
    workload = from_trace(trace_file, vocab=256, steps=[0])
    ex = _live(ChunkAndMigrate(2), workload, workers=2)
    rec = ex.records[0]
    assert rec.counters["chunks"] > 0 and rec.counters["migrations"] == 1
    for r in rec.requests:
        p = r.prompt_len
        assert r.tokens == [(p + i) % 97 for i in range(r.budget)]
        assert r.dispatches == -(-r.budget // 5)


def test_approximated_actions_are_counted(trace_file: Path) -> None:
    class Lending(Policy):
        name = "lending"

        def on_event(self, event: Event, view: ClusterView) -> list[Action]:
            if isinstance(event, StepStarted):
                return [Assign(r, 0) for r in event.requests]
            if isinstance(event, WorkerIdle):
                return [SetRole(event.worker, Role.TRAINER)]
            return []

    ex = _live(Lending(), from_trace(trace_file, vocab=256, steps=[0]), workers=2)
    assert sum(ex.approximated.values()) == 1
    assert "SetRole(trainer)" in next(iter(ex.approximated))


class FastestOfN(Policy):
    """Everything on worker 0; request 0 also raced on worker 1 with speculation."""

    name = "fastest-of-n"

    def on_event(self, event: Event, view: ClusterView) -> list[Action]:
        if isinstance(event, StepStarted):
            return [Assign(r, 0) for r in event.requests] + [
                LaunchReplica(0, 1, SpecConfig(method="ngram", gamma=2))
            ]
        return []


def test_fastest_of_n_replicas(trace_file: Path) -> None:
    spy = Spy(FastestOfN())
    ex = _live(spy, from_trace(trace_file, vocab=256, steps=[0]), workers=2)
    rec = ex.records[0]
    finished = [e.request for e, _ in spy.log if isinstance(e, RequestFinished)]
    assert sorted(finished) == list(range(rec.n_requests))
    assert rec.counters["replicas"] == 1 and rec.counters["cancelled"] == 1
    assert rec.counters["replica_wins"] == 1  # the speculating copy emits 2 tokens per step
    first = rec.requests[0]
    assert first.worker == 1 and first.tokens == [(first.prompt_len + i) % 97 for i in range(first.budget)]
    assert ex.approximated == {}
    # the losing copy is announced, after the request's finish, as in the simulator
    events = [e for e, _ in spy.log if isinstance(e, RequestFinished | CopyCancelled)]
    lost = [e for e in events if isinstance(e, CopyCancelled)]
    assert [(e.request, e.worker, e.winner) for e in lost] == [(0, 0, 1)]
    assert events.index(lost[0]) == 1 + next(i for i, e in enumerate(events) if e.request == 0)


class PlainOnSpeculatingWorker(Policy):
    """Every request on worker 0, which speculates; request 1 is told SPEC_PLAIN, request
    2 SPEC_PLAIN then SPEC_OFF (back to the worker's)."""

    name = "plain-override"

    def on_event(self, event: Event, view: ClusterView) -> list[Action]:
        if isinstance(event, StepStarted):
            self.methods = view.draft_methods
            return [
                SetSpec(SpecConfig(method="ngram", gamma=2), worker=0),
                *[Assign(r, 0) for r in event.requests],
                SetSpec(SPEC_PLAIN, request=1),
                SetSpec(SPEC_PLAIN, request=2),
                SetSpec(SPEC_OFF, request=2),
            ]
        return []


def test_plain_override_and_draft_methods(trace_file: Path) -> None:
    policy = PlainOnSpeculatingWorker()
    ex = _live(
        policy,
        from_trace(trace_file, vocab=256, steps=[0]),
        workers=1,
        draft_methods=frozenset({"ngram", "suffix"}),
    )
    reqs = ex.records[0].requests
    assert reqs[1].spec_iters == 0 and reqs[1].drafted == 0
    assert reqs[0].spec_iters > 0 and reqs[2].spec_iters > 0
    assert policy.methods == frozenset({"ngram", "suffix"})


def test_iteration_records_are_what_the_cost_model_prices(trace_file: Path) -> None:
    """One row per engine iteration: batch, query tokens (batch + drafted), context and the
    prompt tokens admitted since the previous iteration, as the simulator prices them."""
    import pandas as pd

    from simctl.live.executor import ITERATION_COLUMNS

    workload = from_trace(trace_file, vocab=256, steps=[0])
    for name, gamma in (("verl", 0), ("ngram", 4)):
        ex = _live(make_policy(name), workload, workers=2)
        rec = ex.records[0]
        it = pd.DataFrame(rec.iterations, columns=ITERATION_COLUMNS)
        assert len(it) == sum(seg[3] for seg in rec.segments)
        assert it["engine_s"].sum() == pytest.approx(rec.engine_s)
        assert (it["engine_cpu_s"] >= 0).all()
        assert (it["new_tokens"] == it["batch"] + it["drafted"]).all()
        # no chunks or migration: every request prefilled its prompt once, in its first iteration
        reqs = rec.requests[: rec.n_requests]
        assert it["prefill_tokens"].sum() == sum(r.prompt_len for r in reqs)
        for w in (0, 1):
            mine = it[it["worker"] == w]
            first = mine.iloc[0]
            assert first["prefill_tokens"] == sum(r.prompt_len for r in reqs if r.worker == w)
            assert first["context_tokens"] == first["prefill_tokens"]
            assert (mine["t0_s"].diff().dropna() > 0).all()
        # the scripted engine drafts gamma tokens for every speculating request
        assert (it["speculating"] == (it["batch"] if gamma else 0)).all()
        assert (it["drafted"] == gamma * it["batch"]).all()
        assert (it["drafting"] == (it["batch"] if gamma else 0)).all()
        assert set(it["gamma"]) == {gamma} and set(it["method"]) == {"ngram" if gamma else ""}
        if gamma:
            for r in reqs:
                m = r.by_method["ngram"]
                assert m.hits == m.iterations == r.spec_iters > 0


def test_policy_that_places_nothing_fails(trace_file: Path) -> None:
    class Lazy(Policy):
        name = "lazy"

        def on_event(self, event: Event, view: ClusterView) -> list[Action]:
            return []

    with pytest.raises(LiveError, match="placed no request"):
        _live(Lazy(), from_trace(trace_file, vocab=256, steps=[0]))


def test_bad_actions_are_refused_live_as_in_the_simulator(trace_file: Path) -> None:
    """The live executor checks a policy's answer as the simulator does
    (policies/action_checks.py): -1 is not the step's last request."""

    class NegativeDefer(Policy):
        name = "negdefer"

        def on_event(self, event: Event, view: ClusterView) -> list[Action]:
            if isinstance(event, StepStarted):
                return [Assign(r, 0) for r in event.requests[:-1]] + [Defer(-1)]
            return []

    with pytest.raises(LiveError, match=r"^policy 'negdefer': Defer\(request=-1\): request -1 is not one of"):
        _live(NegativeDefer(), from_trace(trace_file, vocab=256, steps=[0]))


# ------------------------------------------------------------------------- torch engine


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    torch = pytest.importorskip("torch")
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def tiny():
    pytest.importorskip("transformers")
    from simctl.live.models import load_model

    return load_model("random:tiny", seed=0)


def _torch_runs(tiny, specs: Sequence[str], workers: int = 2, temperature: float = 1.0) -> list[LiveRun]:
    from simctl.live.session import run_policies
    from simctl.live.torch_backend import TorchBackend
    from simctl.live.workload import Prompt, from_prompts

    prompts = [Prompt("a" * (20 + 9 * i)) for i in range(3)]
    workload = from_prompts(
        prompts, None, tiny.vocab_size, group_size=2, max_tokens=24, steps=1, prompts_per_step=None
    )
    backend = TorchBackend(tiny, seed=3, temperature=temperature, stop_on_eos=True, max_num_seqs=8)
    info = ModelInfo(model="tiny", gpu="cpu", tp=1, group_size=2, temperature=temperature)
    runs, error = run_policies(
        specs,
        backend,
        workload,
        info,
        workers=workers,
        config=ExecutorConfig(max_num_seqs=8),
        cost_model=LinearCost(),
    )
    assert error is None
    return runs


def _outputs(run: LiveRun) -> dict[tuple[int, int], list[int]]:
    rec = run.records[0]
    out = {(r.spec_in.prompt_id, r.spec_in.sample): r.tokens for r in rec.requests[: rec.n_requests]}
    for replica in rec.requests[rec.n_requests :]:  # cancelled Fastest-of-N copies: a prefix
        full = out[(replica.spec_in.prompt_id, replica.spec_in.sample)]
        assert replica.tokens == full[: len(replica.tokens)]
    return out


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_speculative_policies_are_lossless_live(tiny, temperature: float) -> None:
    specs = [
        "verl",
        "ngram",
        "spec-coupled",
        "quantized-selfspec:gamma=3",
        "ngram:gamma=2",
        "seer",
        "tlt",
        "speactor",
    ]
    runs = _torch_runs(tiny, specs, temperature=temperature)
    reference = _outputs(runs[0])
    assert all(len(t) > 0 for t in reference.values())
    for run in runs[1:]:
        assert _outputs(run) == reference, run.name
    drafted = {r.name for r in runs if any(q.drafted for q in r.records[0].requests)}
    assert {"ngram", "spec-coupled", "quantized-selfspec:gamma=3", "ngram:gamma=2"} <= drafted
    # spec-coupled asks for draft_small; the torch backend says it used the W4 self-drafter.
    assert any("draft_small" in k for k in runs[2].approximated)


def test_recording_round_trip(tiny, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from simctl.replay_cmd import replay_cmd

    runs = _torch_runs(tiny, ["verl", "ngram"])
    from simctl.live.workload import Prompt, from_prompts

    workload = from_prompts(
        [Prompt("a" * (20 + 9 * i)) for i in range(3)],
        None,
        tiny.vocab_size,
        group_size=2,
        max_tokens=24,
        steps=1,
        prompts_per_step=None,
    )
    path = write_recording(
        tmp_path / "rec.parquet",
        runs,
        workload,
        {"model": "Qwen2.5-0.5B", "hardware": "cpu", "temperature": 1.0, "seed": 3},
    )
    assert validate_file(path) == []
    from simctl.traces.io import read_trace

    trace = read_trace(path)
    assert trace.meta.source == "live"
    assert {"accept_ngram", "accept_suffix", "worker", "finish_s", "first_token_s"} <= set(trace.df.columns)
    assert trace.has_tokens()
    assert (trace.df["accept_ngram"].between(0, 1)).all()
    for m in ("ngram", "suffix"):  # recorded (ngram ran) or replayed offline (suffix did not)
        hit, fill = trace.df[f"draft_hit_{m}"], trace.df[f"draft_fill_{m}"]
        assert hit.between(0, 1).all() and fill.between(0, 1).all()
        assert (fill <= hit + 1e-6).all()  # a slot is filled only in an iteration that drafted
    rec = runs[1].records[0]
    hits = {(r.spec_in.prompt_id, r.spec_in.sample): r.by_method["ngram"] for r in rec.requests}
    for pid, sample, hit in trace.df[["prompt_id", "sample", "draft_hit_ngram"]].itertuples(index=False):
        m = hits[(pid, sample)]
        assert hit == pytest.approx(m.hits / m.iterations)
    res = CliRunner().invoke(
        replay_cmd,
        [
            str(path),
            "--cluster",
            "h100x2:tp1",
            "--policy",
            "verl",
            "--policy",
            "ngram",
            "--out",
            str(tmp_path / "sim"),
        ],
    )
    assert res.exit_code == 0, res.output
    assert (tmp_path / "sim" / "run.json").is_file()
