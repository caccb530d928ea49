"""Decoupled speculation and Fastest-of-N replicas in the simulator (SpecActor §4)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from simctl.policies.contract import (
    SPEC_OFF,
    SPEC_PLAIN,
    Assign,
    Cancel,
    CopyCancelled,
    LaunchReplica,
    Policy,
    RequestFinished,
    Role,
    SetRole,
    SetSpec,
    SpecConfig,
    StepStarted,
    WorkerIdle,
)
from simctl.sim.acceptance import stall_after_rejection
from simctl.sim.engine import SimError
from simctl.sim.replay import replay
from tests.factories import LinearCost, make_frame, make_setup, make_trace


def test_stall_after_rejection_lays_out_windows() -> None:
    w = np.array([3, 3])
    tokens = np.array([[4, 2, 4, 1, 4], [1, 1, 1, 1, 1]], dtype=np.int16)
    out = stall_after_rejection(tokens, w)
    assert out.tolist() == [[4, 2, 0, 4, 1], [1, 0, 1, 0, 1]]


class OneWorkerSpec(Policy):
    """Everything on worker 0 with one speculation setting; worker 1 may be its drafter."""

    name = "one-worker"

    def __init__(self, spec: SpecConfig, drafter_role: bool = False) -> None:
        self.spec = spec
        self.drafter_role = drafter_role

    def on_event(self, event, view):
        if not isinstance(event, StepStarted):
            return []
        out = [Assign(request=r, worker=0) for r in event.requests]
        out.append(SetSpec(spec=self.spec, worker=0))
        if self.drafter_role:
            out.append(SetRole(worker=1, role=Role.DRAFTER))
        return out


def _run(policy: Policy, trace, cluster: str = "h100x8", seed: int = 0):
    from simctl.policies import registry

    registry.register("test-policy", lambda: policy, "test")
    try:
        return replay(make_setup(trace, cluster=cluster, seed=seed), ["test-policy"])[policy.name]
    finally:
        registry.REGISTRY.pop("test-policy")


def _trace(alpha: float, n: int = 32, length: int = 1500):
    return make_trace(make_frame(np.full(n, length), accept={"draft_small": alpha, "ngram": alpha}))


def test_decoupled_overlaps_drafting_with_verification() -> None:
    trace = _trace(0.9)
    coupled = _run(OneWorkerSpec(SpecConfig("draft_small", gamma=4)), trace)
    decoupled = _run(
        OneWorkerSpec(SpecConfig("draft_small", gamma=4, mode="decoupled", window=4, drafter_worker=1), True),
        trace,
    )
    # high acceptance: the drafter's time hides behind verification
    assert decoupled.steps[0].rollout_makespan_s < 0.95 * coupled.steps[0].rollout_makespan_s
    # the drafter worker is busy drafting, not idle
    assert decoupled.steps[0].gpu_idle_fraction < coupled.steps[0].gpu_idle_fraction + 0.01


def test_decoupled_pays_for_rejections() -> None:
    trace = _trace(0.05)
    coupled = _run(OneWorkerSpec(SpecConfig("ngram", gamma=4)), trace)
    decoupled = _run(
        OneWorkerSpec(SpecConfig("ngram", gamma=4, mode="decoupled", window=4, drafter_worker=1), True), trace
    )
    # nearly every window is rejected: each verification is followed by a stalled iteration
    # tokens per verification are the same; decoupled just needs ~2 iterations per verification
    assert decoupled.steps[0].mean_accept_len == pytest.approx(coupled.steps[0].mean_accept_len, rel=0.05)
    iterations = int(decoupled.timeline[0]["iterations"].sum())
    verifications = int(pd.concat(decoupled.requests)["spec_iters"].max())
    assert iterations > 1.8 * verifications
    assert decoupled.steps[0].rollout_makespan_s > 1.5 * coupled.steps[0].rollout_makespan_s


def test_decoupled_without_drafter_is_an_error() -> None:
    with pytest.raises(SimError, match="drafter_worker"):
        _run(OneWorkerSpec(SpecConfig("ngram", gamma=4, mode="decoupled", window=4)), _trace(0.5))


class FastestOfN(Policy):
    """Worker 0 runs everything with a poor drafter; when worker 1 idles, replicate the
    requests there with a good one."""

    name = "fon-test"

    def __init__(self) -> None:
        self.launched = False
        self.finishes: list[tuple[int, int]] = []
        self.cancelled: list[tuple[int, int, int]] = []
        self.order: list[str] = []

    def on_event(self, event, view):
        if isinstance(event, StepStarted):
            self.launched = False
            return [Assign(request=r, worker=0) for r in event.requests] + [
                SetSpec(spec=SpecConfig("ngram", gamma=4), worker=0)
            ]
        if isinstance(event, RequestFinished):
            self.finishes.append((event.request, event.worker))
            self.order.append(f"finished {event.request}")
        if isinstance(event, CopyCancelled):
            self.cancelled.append((event.request, event.worker, event.winner))
            self.order.append(f"cancelled {event.request}")
        if isinstance(event, WorkerIdle) and event.worker == 1 and not self.launched:
            self.launched = True
            running = [r for r in view.step_requests() if view.request(r).state in ("running", "waiting")]
            return [
                LaunchReplica(request=r, worker=1, spec=SpecConfig("draft_small", gamma=4)) for r in running
            ]
        return []


def test_fastest_of_n_replica_wins_and_the_loser_is_cancelled() -> None:
    df = make_frame(np.full(16, 3000), accept={"ngram": 0.05, "draft_small": 0.95})
    trace = make_trace(df)
    plain = _run(OneWorkerSpec(SpecConfig("ngram", gamma=4)), trace)
    policy = FastestOfN()
    fon = _run(policy, trace)
    assert fon.counters["replicas"] == 16
    assert fon.counters["replica_wins"] == 16
    assert fon.counters["cancelled"] == 16
    # ~4.5 tokens per cycle against ~1: faster by what the 0.5B drafter's steps and its
    # per-cycle cost (RooflineParams.spec_cycle_overhead_s) leave of it
    assert fon.steps[0].rollout_makespan_s < 0.8 * plain.steps[0].rollout_makespan_s
    # each request finishes exactly once, on the replica's worker, with its own length
    assert sorted(r for r, _ in policy.finishes) == list(range(16))
    assert {w for _, w in policy.finishes} == {1}
    req = pd.concat(fon.requests)
    assert len(req) == 16 and (req["replicas"] == 1).all()
    assert fon.steps[0].output_tokens == 16 * 3000
    # every loser is announced once, after its request's finish, naming both workers
    assert sorted(policy.cancelled) == [(r, 0, 1) for r in range(16)]
    for r in range(16):
        assert policy.order.index(f"finished {r}") < policy.order.index(f"cancelled {r}")


class CancelReplica(FastestOfN):
    name = "cancel-test"

    def on_event(self, event, view):
        out = super().on_event(event, view)
        if out and isinstance(out[0], LaunchReplica):
            out.append(Cancel(request=out[0].request, worker=1))
            self.stopped = out[0].request
        return out


def test_cancel_stops_a_replica() -> None:
    df = make_frame(np.full(4, 2000), accept={"ngram": 0.05, "draft_small": 0.95})
    policy = CancelReplica()
    run = _run(policy, make_trace(df))
    assert run.counters["cancelled"] >= 1
    # the policy's own Cancel is not echoed back; the other replicas still race and lose or win
    assert not [c for c in policy.cancelled if c[0] == policy.stopped and c[1] == 1]
    assert len(policy.cancelled) == 3
    assert run.steps[0].output_tokens == 4 * 2000


def test_verification_is_charged_only_for_filled_draft_slots() -> None:
    df = make_frame(np.full(32, 1500), accept={"ngram": 0.3})
    full = _run(OneWorkerSpec(SpecConfig("ngram", gamma=8)), make_trace(df))
    df["draft_fill_ngram"] = np.float32(0.1)
    sparse = _run(OneWorkerSpec(SpecConfig("ngram", gamma=8)), make_trace(df))
    # same acceptance process, cheaper verification iterations
    assert sparse.steps[0].mean_accept_len == pytest.approx(full.steps[0].mean_accept_len, rel=0.05)
    assert sparse.steps[0].rollout_makespan_s < full.steps[0].rollout_makespan_s


class _VerifyStepCost(LinearCost):
    """A verify iteration (more tokens than sequences) costs a fixed extra: nonlinear in
    the tokens verified, so how often nobody drafts matters."""

    extra_s: float = 0.004

    def iteration_time(self, num_seqs, new_tokens, context_tokens):
        b, n = np.asarray(num_seqs, float), np.asarray(new_tokens, float)
        return np.asarray(self.base_s + self.extra_s * (n > b) + 0.0 * np.asarray(context_tokens, float))

    def draft_time(self, drafter, num_seqs, context_tokens, gamma):
        return np.zeros_like(np.asarray(context_tokens, float))


@pytest.mark.parametrize("hit", [None, 0.25, 0.0])
def test_iterations_in_which_nobody_drafted_cost_a_plain_decode(hit: float | None) -> None:
    frame = make_frame([400], group_size=1, accept={"ngram": 0.0})
    if hit is not None:
        frame["draft_hit_ngram"] = hit
        frame["draft_fill_ngram"] = hit  # drafts fill every slot when they exist
    trace = make_trace(frame, group_size=1)
    cost = _VerifyStepCost()
    spec = _run_named("ngram", trace, cost)
    plain = _run_named("verl", trace, cost)
    # the first token comes from the prefill pass, which verifies nothing: 399 verify iterations
    per_iteration = (spec - plain) / 399
    share = 1.0 if hit is None else hit  # iterations that verify drafts
    assert per_iteration == pytest.approx(share * cost.extra_s, rel=1e-6, abs=1e-12)


def _run_named(name: str, trace, cost) -> float:
    run = replay(make_setup(trace, cluster="h100x1:tp1", cost=cost), [name])[name]
    return run.steps[0].rollout_makespan_s


class PlainOverrides(OneWorkerSpec):
    """Worker 0 speculates; even requests are told SPEC_PLAIN, multiples of 3 SPEC_OFF
    (follow the worker: after SPEC_PLAIN on request 0 it hands that one back)."""

    name = "plain-overrides"

    def on_event(self, event, view):
        out = super().on_event(event, view)
        if isinstance(event, StepStarted):
            self.seen = view.draft_methods
            out += [SetSpec(spec=SPEC_PLAIN, request=r) for r in event.requests if r % 2 == 0]
            out.append(SetSpec(spec=SPEC_OFF, request=0))
        return out


def test_plain_override_keeps_a_request_plain_on_a_speculating_worker() -> None:
    policy = PlainOverrides(SpecConfig("ngram", gamma=4))
    run = _run(policy, _trace(0.8, n=16, length=600))
    req = pd.concat(run.requests).set_index("request")
    plain = [r for r in range(16) if r % 2 == 0 and r != 0]
    spec = [r for r in range(16) if r not in plain]
    assert (req.loc[plain, "spec_iters"] == 0).all() and (req.loc[plain, "drafted"] == 0).all()
    assert (req.loc[spec, "spec_iters"] > 0).all()
    assert (req.loc[spec, "accepted"] > 0).all()
    assert int(req["response_len"].sum()) == 16 * 600
    # the trace has acceptance columns for these two methods only
    assert policy.seen == frozenset({"ngram", "draft_small"})
    assert not SPEC_PLAIN.enabled and SPEC_PLAIN.plain and not SPEC_OFF.plain
