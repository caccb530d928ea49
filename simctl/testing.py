"""Testing a policy against both executors: `check_conformance` for users' own policies.

The same policy object must decide the same way in the simulator and live
(`policies/contract.py`). `check_conformance(policy, trace=...)` runs a policy (a spec
string such as `"ngram:gamma=4"` or `"my_policies.py:Mine"`, or a `Policy` subclass) in
the simulator and on the live executor over a scripted fake engine (no torch, no model:
one token per iteration, two when speculating) on a tiny workload, with the same trace,
model info, capabilities and cost model, and compares what the policy decided at the start
of every step: the requests it was told of and the actions it returned. It raises
`ConformanceError` (an AssertionError, so pytest shows it) naming the first difference,
and returns a `Conformance` summary otherwise::

    from simctl.testing import check_conformance

    def test_my_policy_conforms():
        check_conformance("docs/examples/shortest_first.py:ShortestFirst")

Later events differ between the executors by design (the fake engine's timings are not
the simulator's), so only step-start decisions are compared; a policy that learns from
finish times may legitimately decide differently from its second step on (`steps=1`).
The repository's own conformance test (tests/live/test_executor.py) runs every built-in
policy through this helper.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simctl.live.backend import Delta, StepTiming
from simctl.live.capabilities import TORCH_CAPABILITIES
from simctl.live.executor import ExecutorConfig, LiveExecutor
from simctl.live.workload import Workload, from_trace
from simctl.policies.contract import (
    Action,
    ClusterView,
    Event,
    ModelInfo,
    Policy,
    PromptHistory,
    SpecConfig,
    StepStarted,
)
from simctl.sim.engine import EngineConfig, StepSimulation
from simctl.sim.state import StepState
from simctl.traces.io import Trace, write_trace
from simctl.traces.plugins import class_family, make_policy
from simctl.traces.schema import KNOWN_METHODS, TraceMeta
from simctl.traces.validate import load_valid_trace

__all__ = [
    "Conformance",
    "ConformanceError",
    "LinearCost",
    "ScriptedEngine",
    "Spy",
    "check_conformance",
    "tiny_trace",
]

KV_TOKENS = 10**9
VOCAB = 256


class ConformanceError(AssertionError):
    """The simulator and the live executor saw the policy decide differently."""


@dataclass
class LinearCost:
    """Affine cost (SpecActor-style D(b)): both executors price iterations with it."""

    kv_capacity_tokens: int = KV_TOKENS
    base_s: float = 0.010
    per_seq_s: float = 1e-5
    per_new_token_s: float = 2e-5
    per_ctx_token_s: float = 1e-8
    draft_s: float = 1e-4
    weight_bytes_per_gpu: float = 1e9

    def iteration_time(self, num_seqs: Any, new_tokens: Any, context_tokens: Any) -> np.ndarray:
        return np.asarray(
            self.base_s
            + self.per_seq_s * np.asarray(num_seqs, float)
            + self.per_new_token_s * np.asarray(new_tokens, float)
            + self.per_ctx_token_s * np.asarray(context_tokens, float),
            dtype=np.float64,
        )

    def prefill_time(self, tokens: Any) -> np.ndarray:
        return np.asarray(self.base_s + self.per_new_token_s * np.asarray(tokens, float))

    def draft_time(self, drafter: Any, num_seqs: Any, context_tokens: Any, gamma: Any) -> np.ndarray:
        return np.asarray(self.draft_s * np.asarray(gamma, float) + 0.0 * np.asarray(context_tokens, float))


class Spy(Policy):
    """Forwards every event to a policy and logs (event, actions)."""

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.name = inner.name
        self.requires = inner.requires
        self.tick_iterations = inner.tick_iterations
        self.log: list[tuple[Event, list[Action]]] = []

    def on_event(self, event: Event, view: ClusterView) -> list[Action]:
        actions = list(self.inner.on_event(event, view))
        self.log.append((event, actions))
        return actions

    @property
    def draft_rules(self) -> Any:
        return self.inner.draft_rules

    @property
    def draft_methods_used(self) -> frozenset[str]:
        return self.inner.draft_methods_used

    def starts(self) -> list[tuple[StepStarted, list[Action]]]:
        """(StepStarted, actions) of every step, in order."""
        return [(e, a) for e, a in self.log if isinstance(e, StepStarted)]


class ScriptedEngine:
    """A fake engine: one token per iteration (two when speculating), token ids a pure
    function of the absolute position, so re-dispatch and migration continue the stream."""

    def __init__(self) -> None:
        self.reqs: dict[int, list[Any]] = {}  # rid -> [prompt_len + generated, remaining, spec]

    def add(
        self,
        request: int,
        key: Any,
        prompt: Sequence[int],
        max_tokens: int,
        spec: SpecConfig,
        group: Any,
        acceptance: Any = None,
    ) -> list[str]:
        self.reqs[request] = [len(prompt), max_tokens, spec]
        return []

    def set_spec(self, request: int, spec: SpecConfig) -> list[str]:
        self.reqs[request][2] = spec
        return []

    def abort(self, request: int) -> None:
        del self.reqs[request]

    def step(self) -> list[Delta]:
        out = []
        for rid, st in list(self.reqs.items()):
            pos, left, spec = st
            n = min(left, 2 if spec.enabled else 1)
            st[0], st[1] = pos + n, left - n
            ended = st[1] == 0
            if ended:
                del self.reqs[rid]
            tokens = [(pos + i) % 97 for i in range(n)]
            out.append(Delta(rid, tokens, ended, False, spec.gamma if spec.enabled else 0, n - 1))
        return out

    @property
    def running(self) -> int:
        return len(self.reqs)

    @property
    def last_timing(self) -> StepTiming:
        return StepTiming()


def tiny_trace(steps: int = 2, groups: int = 6, group_size: int = 4, seed: int = 0) -> Trace:
    """A small valid trace: `groups` prompts of `group_size` samples per step (the same
    prompts each step, one epoch per step), lengths 5..59 drawn from `seed`, prompt
    length 16, budget 64, acceptance 0.6 for every drafting method."""
    rng = np.random.default_rng(seed)
    n = groups * group_size
    frames = []
    for s in range(steps):
        lengths = rng.integers(5, 60, size=n)
        frame = pd.DataFrame(
            {
                "step": np.full(n, s, np.int32),
                "prompt_id": np.repeat(np.arange(groups), group_size).astype(np.int64),
                "sample": np.tile(np.arange(group_size), groups).astype(np.int32),
                "prompt_len": np.full(n, 16, np.int32),
                "response_len": lengths.astype(np.int32),
                "max_tokens": np.full(n, 64, np.int32),
                "finish_reason": np.where(lengths >= 64, "length", "stop"),
                "epoch": np.full(n, s, np.int32),
            }
        )
        for method in KNOWN_METHODS:
            frame[f"accept_{method}"] = np.float32(0.6)
        frames.append(frame)
    meta = TraceMeta(model="qwen2.5-7b", group_size=group_size, preset="test", seed=seed)
    return Trace(df=pd.concat(frames, ignore_index=True), meta=meta)


@dataclass
class Conformance:
    """What `check_conformance` compared: per step, the requests and actions at its start."""

    policy: str
    steps: list[int]
    actions: list[int] = field(default_factory=list)  # actions decided at each step's start


def _factory(policy: str | type[Policy]) -> Any:
    if isinstance(policy, str):
        make_policy(policy)  # a bad spec fails here, once, with its one-line error
        return lambda: make_policy(policy)
    family = class_family(policy, None, getattr(policy, "__name__", repr(policy)))
    return lambda: family.make("")


def _simulate(spy: Spy, trace: Trace, steps: list[int], workers: int, info: ModelInfo) -> None:
    """The policy in the simulator, step by step, with the history the live executor keeps."""
    history: dict[int, PromptHistory] = {}
    for step in steps:
        frame = trace.df[trace.df["step"] == step]
        sim = StepSimulation(
            StepState.from_frame(frame, step),
            spy,
            LinearCost(),
            [(0, 1)] * workers,
            EngineConfig(),
            0,
            view_extras={"info": info, "capabilities": TORCH_CAPABILITIES, "history": history},
        )
        sim.run()
        for pid, g in frame.groupby("prompt_id", sort=False):
            old = history.get(int(pid), PromptHistory())
            history[int(pid)] = PromptHistory(
                lengths=(*old.lengths, tuple(int(x) for x in g["response_len"]))
            )


def _run_live(spy: Spy, workload: Workload, workers: int, info: ModelInfo) -> LiveExecutor:
    ex = LiveExecutor(
        spy,
        [ScriptedEngine() for _ in range(workers)],
        workload,
        info,
        config=ExecutorConfig(kv_capacity_tokens=KV_TOKENS),
        cost_model=LinearCost(),
    )
    ex.run()
    return ex


def _workload(trace: Trace | str | Path | None, steps: list[int] | None) -> tuple[Trace, Workload]:
    if trace is None or isinstance(trace, Trace):
        data = trace if trace is not None else tiny_trace()
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "trace.parquet"
            write_trace(path, data.df, data.meta)
            return load_valid_trace(path), from_trace(path, vocab=VOCAB, steps=steps)
    return load_valid_trace(Path(trace)), from_trace(Path(trace), vocab=VOCAB, steps=steps)


def _difference(a_sim: list[Action], a_live: list[Action]) -> str:
    first = next((i for i, (x, y) in enumerate(zip(a_sim, a_live, strict=False)) if x != y), None)
    where = "" if first is None else f"; first difference: {a_sim[first]} simulated, {a_live[first]} live"
    return f"{len(a_sim)} actions simulated, {len(a_live)} live{where}"


def check_conformance(
    policy: str | type[Policy],
    trace: Trace | str | Path | None = None,
    *,
    steps: int | None = None,
    workers: int = 3,
) -> Conformance:
    """Run `policy` in the simulator and live (fake engine) over `trace` (default
    `tiny_trace()`; a Trace or a trace file: keep it small) and compare its decisions at
    the start of its first `steps` steps (default: all); ConformanceError on a difference
    or a live run that leaves a request unfinished."""
    make = _factory(policy)
    loaded, _ = _workload(trace, None)
    chosen = loaded.steps[:steps] if steps else loaded.steps
    _, workload = _workload(trace, chosen)
    m = loaded.meta
    info = ModelInfo(model=m.model, gpu="H100-SXM-80GB", tp=1, group_size=m.group_size, temperature=1.0)
    sim_spy, live_spy = Spy(make()), Spy(make())
    _simulate(sim_spy, loaded, chosen, workers, info)
    ex = _run_live(live_spy, workload, workers, info)
    result = Conformance(policy=sim_spy.name, steps=chosen)
    sim_starts, live_starts = sim_spy.starts(), live_spy.starts()
    if len(sim_starts) != len(live_starts):
        raise ConformanceError(f"{result.policy}: {len(sim_starts)} steps simulated, {len(live_starts)} live")
    for step, (e_sim, a_sim), (e_live, a_live) in zip(chosen, sim_starts, live_starts, strict=True):
        if e_sim.requests != e_live.requests:
            raise ConformanceError(f"{result.policy}: step {step}: StepStarted lists different requests")
        if a_sim != a_live:
            raise ConformanceError(f"{result.policy}: step {step}: {_difference(a_sim, a_live)}")
        result.actions.append(len(a_sim))
    if ex.unfinished or any(r.generated != r.budget for r in ex.requests[: ex.n_requests]):
        raise ConformanceError(f"{result.policy}: the live run left requests unfinished")
    return result
