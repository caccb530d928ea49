"""TLT parts: elastic activation threshold, BEG-MAB retuning from request counters, the spot
trainer's idle-worker promotion and GPU-second booking, and the simulator-side drafter model."""

from __future__ import annotations

import math

import pytest

from simctl.policies.contract import (
    SPEC_OFF,
    RequestFinished,
    Role,
    SetRole,
    SetSpec,
    SpecConfig,
    StepStarted,
    Tick,
    WorkerIdle,
)
from simctl.policies.tlt import DrafterLedger, SpotTrainer, TltSpeculation, elastic_active
from simctl.sim.drafter_training import (
    DrafterTrainingParams,
    eagle_acceptance_scale,
    eagle_acceptance_scale_history,
)
from tests.policies.fakes import FakeView


def test_elastic_threshold_is_strict() -> None:
    assert not elastic_active(32, 32)
    assert elastic_active(31, 32)
    assert elastic_active(1, 32)
    assert not elastic_active(0, 32)  # nothing left: nothing to speculate


def _start(pol, view: FakeView, step: int = 0, requests: tuple[int, ...] = ()) -> list:
    return list(pol.on_event(StepStarted(time_s=0.0, step=step, epoch=0, requests=requests), view))


def test_activation_below_threshold_uses_ngram_until_a_drafter_is_trained() -> None:
    view = FakeView.make(2)
    pol = TltSpeculation(DrafterLedger(), threshold=32)
    assert _start(pol, view) == [SetSpec(spec=SPEC_OFF, worker=0), SetSpec(spec=SPEC_OFF, worker=1)]
    view.set_worker(0, running=20, waiting=12)  # 32 left: not yet
    assert pol.on_event(Tick(time_s=1.0, worker=0, iteration=16), view) == []
    view.set_worker(0, running=20, waiting=11)
    ngram = [SetSpec(spec=SpecConfig(method="ngram", gamma=8), worker=0)]
    assert pol.on_event(Tick(time_s=2.0, worker=0, iteration=32), view) == ngram
    assert pol.on_event(Tick(time_s=3.0, worker=0, iteration=48), view) == []  # stays on, no MAB
    assert pol.on_event(Tick(time_s=3.0, worker=1, iteration=48), view) == []  # worker 1 is empty


def test_global_scope_counts_the_whole_step() -> None:
    view = FakeView.make(2)
    pol = TltSpeculation(DrafterLedger(), threshold=32, scope="global")
    _start(pol, view)
    view.set_worker(0, running=5)
    view.unfinished = 40
    assert pol.on_event(Tick(time_s=1.0, worker=0, iteration=16), view) == []
    view.unfinished = 31
    out = pol.on_event(Tick(time_s=2.0, worker=0, iteration=32), view)
    assert [a.worker for a in out] == [0, 1]


def test_trained_drafter_is_retuned_by_the_bandit_from_request_counters() -> None:
    view = FakeView.make(1)
    view.add_request(0, worker=0)
    view.add_request(1, worker=0)
    view.set_worker(0, running=2, kv_used_tokens=200)
    pol = TltSpeculation(DrafterLedger(pretrained=True), epsilon=0.0)
    _start(pol, view, requests=(0, 1))
    out = pol.on_event(Tick(time_s=1.0, worker=0, iteration=16), view)
    first = pol.mab_of(0).candidates(2)[0]  # untried arms first, in order: depth 6 of the 48-token group
    assert out == [
        SetSpec(
            spec=SpecConfig(method="eagle", gamma=first.depth, topk=8, verify_tokens=first.verify), worker=0
        )
    ]
    # 16 iterations: request 0 drafted 16 * 6 and accepted 40, request 1 accepted 24
    view.add_request(0, worker=0, drafted_tokens=96, accepted_tokens=40, verify_iterations=16)
    view.add_request(1, worker=0, drafted_tokens=96, accepted_tokens=24, verify_iterations=16)
    pol.on_event(Tick(time_s=2.0, worker=0, iteration=32), view)
    a_bar = 1 + 64 / 32
    t_pred = (0.010 + 1e-4 * 2 * 48) + 0.002 * 6  # verify 48 tokens per request + 6 draft steps
    assert list(pol.mab_of(0).accept_lens[first]) == [pytest.approx(a_bar)]
    assert list(pol.mab_of(0).rewards[first]) == [pytest.approx(a_bar * 2 / t_pred)]


def test_spot_trainer_promotes_idle_workers_above_threshold_and_books_gpu_seconds() -> None:
    ledger = DrafterLedger()
    view = FakeView.make(4, gpus=4)
    st = SpotTrainer(ledger, idle_threshold=1)
    _start(st, view)
    view.unfinished = 10
    assert st.on_event(WorkerIdle(time_s=10.0, worker=2), view) == []  # one idle: not above 1
    assert st.on_event(WorkerIdle(time_s=12.0, worker=0), view) == [
        SetRole(worker=2, role=Role.SPOT_TRAINER),
        SetRole(worker=0, role=Role.SPOT_TRAINER),
    ]
    assert st.on_event(WorkerIdle(time_s=15.0, worker=3), view) == [SetRole(worker=3, role=Role.SPOT_TRAINER)]
    view.unfinished = 0
    st.on_event(RequestFinished(time_s=20.0, request=0, worker=1, length=5), view)
    assert ledger.spot_gpu_s == pytest.approx(4 * (8 + 8 + 5))
    assert ledger.trained and ledger.steps_with_training == 1


def test_idle_at_the_very_end_is_not_promoted() -> None:
    view = FakeView.make(2)
    st = SpotTrainer(DrafterLedger(), idle_threshold=0)
    _start(st, view)
    view.unfinished = 0
    assert st.on_event(WorkerIdle(time_s=5.0, worker=0), view) == []


# ---------------------------------------------------------------- simulator-side dynamics


def test_drafter_scale_calibration_points() -> None:
    p = DrafterTrainingParams()
    assert eagle_acceptance_scale(0.0, 0, p) == 1.0  # warm-started drafter, first step
    # never retrained: drifts to Table 6's stale level (p 0.801 / 0.889)
    assert eagle_acceptance_scale(0.0, 2000, p) == pytest.approx(0.801 / 0.889, abs=0.005)
    # ten updates without training cost under 2% of per-token acceptance (§6.4)
    assert 0.98 < eagle_acceptance_scale(0.0, 10, p) < 0.99
    # a never-trained drafter stays at Table 8's untrained level
    untrained = DrafterTrainingParams(initial_error=1.0)
    assert eagle_acceptance_scale(0.0, 50, untrained) == pytest.approx(0.41)
    assert eagle_acceptance_scale_history([600.0], untrained) > 0.99  # one spot window fixes it


def test_drafter_scale_training_keeps_up_with_drift_and_total_matches_even_history() -> None:
    p = DrafterTrainingParams()
    trained = eagle_acceptance_scale(100.0 * 50, 50, p)
    stale = eagle_acceptance_scale(0.0, 50, p)
    assert stale < trained <= 1.0
    assert 1.0 - trained == pytest.approx((1 - p.untrained_scale) * p.drift * p.stale_error, rel=0.05)
    assert eagle_acceptance_scale(300.0, 3, p) == eagle_acceptance_scale_history([100.0] * 3, p)
    e = [eagle_acceptance_scale(g, 20, p) for g in (0.0, 10.0, 100.0, 1000.0)]
    assert e == sorted(e) and all(math.isfinite(x) for x in e)


def test_a_request_migrated_onto_a_worker_counts_in_that_workers_reward() -> None:
    """The bandit's reward for a worker is read from the requests on it now
    (`view.worker_requests`), so a request that migrated there counts there."""
    view = FakeView.make(2)
    view.add_request(0, worker=0)
    view.add_request(1, worker=1)
    view.set_worker(0, running=1, kv_used_tokens=100)
    view.set_worker(1, running=1, kv_used_tokens=100)
    pol = TltSpeculation(DrafterLedger(pretrained=True), epsilon=0.0)
    _start(pol, view, requests=(0, 1))
    assert pol.on_event(Tick(time_s=1.0, worker=0, iteration=16), view)  # both active now
    assert pol.on_event(Tick(time_s=1.0, worker=1, iteration=16), view)
    chosen = pol._strategy[1]
    # request 0 moved to worker 1 and drafted there alongside request 1
    view.add_request(0, worker=1, drafted_tokens=96, accepted_tokens=40, verify_iterations=16)
    view.add_request(1, worker=1, drafted_tokens=96, accepted_tokens=24, verify_iterations=16)
    view.set_worker(0, running=0, kv_used_tokens=0)
    view.set_worker(1, running=2, kv_used_tokens=200)
    pol.on_event(Tick(time_s=2.0, worker=1, iteration=32), view)
    # both requests' 64 accepted tokens over 32 verify iterations (request 1 alone: 2.5)
    assert list(pol.mab_of(1).accept_lens[chosen]) == [pytest.approx(1 + 64 / 32)]
    assert len(pol.mab_of(1).rewards[chosen]) == 1 and pol.mab_of(1).rewards[chosen][0] > 0


def _reward_worker(pol: TltSpeculation, view: FakeView, worker: int, accepted: int, t: float) -> None:
    """One Tick interval of `worker`'s one request: 16 verifications, `accepted` tokens."""
    view.add_request(worker, worker=worker, drafted_tokens=96, accepted_tokens=accepted, verify_iterations=16)
    pol.on_event(Tick(time_s=t, worker=worker, iteration=32), view)


@pytest.mark.parametrize("bandit", ["worker", "shared"])
def test_each_engine_has_its_own_bandit_unless_shared(bandit: str) -> None:
    """TLT's BEG-MAB sits in each engine's Adaptive SD Manager (§4, Fig. 6): by default a
    worker's rewards train only its own bandit; bandit="shared" pools them in one."""
    view = FakeView.make(2)
    for w in (0, 1):
        view.add_request(w, worker=w)
        view.set_worker(w, running=1, kv_used_tokens=100)
    pol = TltSpeculation(DrafterLedger(pretrained=True), epsilon=0.0, bandit=bandit)  # type: ignore[arg-type]
    _start(pol, view, requests=(0, 1))
    for w in (0, 1):
        assert pol.on_event(Tick(time_s=1.0, worker=w, iteration=16), view)  # active, first arm
    arm = pol._strategy[0]
    assert pol._strategy[1] == arm  # nothing tried yet: the first arm, either way
    _reward_worker(pol, view, 1, 48, 2.0)  # worker 1 reports a reward for it
    own0, own1 = pol.mab_of(0), pol.mab_of(1)
    # worker 0 ticks with nothing new of its own (no reward recorded) and chooses again
    again = pol.on_event(Tick(time_s=3.0, worker=0, iteration=32), view)
    if bandit == "worker":
        assert own0 is not own1 and own0 is pol.mab_of(0)  # created once, kept
        assert not own0.rewards[arm] and len(own1.rewards[arm]) == 1
        assert again == [] and pol._strategy[0] == arm  # its own bandit has still tried nothing
    else:
        assert own0 is own1 is pol.mab and len(own0.rewards[arm]) == 1
        assert again and pol._strategy[0] != arm  # worker 1's reward made the arm a tried one


def test_engine_bandits_are_seeded_apart_and_reproducibly() -> None:
    pol = TltSpeculation(DrafterLedger(pretrained=True), seed=3)
    again = TltSpeculation(DrafterLedger(pretrained=True), seed=3)
    draws = [[pol.mab_of(w)._rng.random() for _ in range(4)] for w in (0, 1)]
    assert draws[0] != draws[1]
    assert [[again.mab_of(w)._rng.random() for _ in range(4)] for w in (0, 1)] == draws
    with pytest.raises(ValueError, match="bandit"):
        TltSpeculation(DrafterLedger(), bandit="cluster")  # type: ignore[arg-type]
