"""EfficientRollout: Eq. 3 toggle at its boundary, Alg. 1 gamma schedule, step tau."""

from __future__ import annotations

import pytest

from simctl.policies.contract import SPEC_OFF, RequestFinished, SetSpec, SpecConfig, StepStarted, Tick
from simctl.policies.efficientrollout import (
    DraftLengthController,
    EfficientRolloutSpeculation,
    acceptance_from_tau,
    expected_tau,
    parse_gammas,
    predicted_speedup,
    sd_toggle,
    tau_at_gamma,
)
from tests.policies.fakes import FakeView


def test_predicted_speedup_is_eq1_by_hand() -> None:
    # tau 4, T_p 10 ms, gamma * T_q 20 ms, T_V 12 ms -> 4 * 10 / 32
    assert predicted_speedup(4.0, 0.010, 0.020, 0.012) == pytest.approx(1.25)
    assert predicted_speedup(4.0, 0.010, 0.0, 0.0) == 0.0


def test_toggle_boundary_and_monotone() -> None:
    assert sd_toggle(False, 1.05, 0.05)
    assert not sd_toggle(False, 1.0499999, 0.05)
    assert sd_toggle(True, 0.1, 0.05)  # once on, stays on
    assert sd_toggle(False, 1.0, 0.0)


def _start(policy: EfficientRolloutSpeculation, view: FakeView, step: int = 0) -> list:
    return list(policy.on_event(StepStarted(time_s=0.0, step=step, epoch=0, requests=()), view))


def test_policy_toggles_at_the_roofline_boundary_and_never_back() -> None:
    # FakeView cost: T(b, n) = 10 ms + 0.1 ms * n, draft 2 ms per token; tau_prev = gamma_0 = 5.
    # speedup(B) = 5 (0.01 + 1e-4 B) / (0.02 + 6e-4 B) >= 1.05  <=>  B <= 223.08
    view = FakeView.make(2)
    pol = EfficientRolloutSpeculation(gamma0=5)
    assert _start(pol, view) == [SetSpec(spec=SPEC_OFF, worker=0), SetSpec(spec=SPEC_OFF, worker=1)]
    view.set_worker(0, running=224)
    assert pol.predicted(view, 0) == pytest.approx(5 * 0.0324 / 0.1544)
    assert pol.on_event(Tick(time_s=1.0, worker=0, iteration=64), view) == []
    view.set_worker(0, running=223)
    on = [SetSpec(spec=SpecConfig(method="w4_self", gamma=5), worker=0)]
    assert pol.on_event(Tick(time_s=2.0, worker=0, iteration=128), view) == on
    view.set_worker(0, running=500)  # a larger batch never switches it off again
    assert pol.on_event(Tick(time_s=3.0, worker=0, iteration=192), view) == []
    view.set_worker(1, running=100)  # worker 1 decides on its own batch, at a finish too
    view.add_request(7, worker=1, state="finished")
    assert pol.on_event(RequestFinished(time_s=4.0, request=7, worker=1, length=5), view) == [
        SetSpec(spec=SpecConfig(method="w4_self", gamma=5), worker=1)
    ]
    # next step: off again until the toggle fires (Alg. 1 line 4)
    assert _start(pol, view, step=1)[0] == SetSpec(spec=SPEC_OFF, worker=0)


def test_always_on_variant_sets_spec_at_step_start_and_never_ticks() -> None:
    view = FakeView.make(1)
    pol = EfficientRolloutSpeculation(gamma0=7, toggle=False, adapt=False)
    assert pol.tick_iterations is None
    assert _start(pol, view) == [SetSpec(spec=SpecConfig(method="w4_self", gamma=7), worker=0)]


def test_step_tau_counts_speculative_iterations_of_finished_requests() -> None:
    view = FakeView.make(1)
    pol = EfficientRolloutSpeculation(gamma0=5)
    _start(pol, view)
    done = {"worker": 0, "state": "finished"}
    view.add_request(1, **done, drafted_tokens=50, accepted_tokens=45, verify_iterations=10)
    view.add_request(2, worker=0, state="finished")  # decoded before SD switched on
    # 5 iterations; its drafter proposed fewer than gamma at times (drafted / gamma would say 4)
    view.add_request(3, **done, drafted_tokens=20, accepted_tokens=10, verify_iterations=5)
    for rid in (1, 2, 3):
        pol.on_event(RequestFinished(time_s=1.0, request=rid, worker=0, length=10), view)
    assert pol.step_tau() == pytest.approx(1 + 55 / 15)
    _start(pol, view, step=1)
    assert pol.log == [(0, 5, pytest.approx(1 + 55 / 15))]
    assert pol.controller.tau_prev == pytest.approx(1 + 55 / 15)


def _schedule(taus: list[float], **kw: object) -> list[int]:
    c = DraftLengthController(**kw)  # type: ignore[arg-type]
    return [c.observe(t) for t in taus]


def test_gamma_rises_only_after_patience_steps_near_the_ceiling() -> None:
    # gamma 5: up at tau >= 1 + 5 * 0.94 = 5.7; gamma 7: up at 7.58, down at 1 + 7 * 0.85 = 6.95
    assert _schedule([5.8, 5.9, 7.0, 7.6, 7.7, 9.6, 9.5]) == [5, 7, 7, 7, 9, 9, 11]


def test_transient_high_tau_does_not_move_gamma() -> None:
    assert _schedule([5.8, 5.0, 5.8, 5.6, 5.71]) == [5, 5, 5, 5, 5]


def test_gamma_falls_when_tau_stays_low_and_clamps_at_the_ends() -> None:
    # gamma 9: down at tau <= 1 + 9 * 0.85 = 8.65
    # the window still holds 7.5 (measured at gamma 9) one step after the move to 7
    assert _schedule([8.0, 7.5, 5.0, 5.0, 4.0, 4.0], gamma=9) == [9, 7, 7, 5, 5, 5]
    assert _schedule([12.0, 12.0, 12.0], gamma=11) == [11, 11, 11]


def test_boundary_values_are_inclusive() -> None:
    # thresholds exactly representable in binary: 1 + 5 * 0.75 = 4.75, 1 + 9 * 0.5 = 5.5
    kw = {"alpha_up": 0.75, "alpha_down": 0.5}
    assert _schedule([4.75, 4.75], **kw) == [5, 7]  # min >= 1 + gamma * alpha_up
    assert _schedule([4.75, 4.74], **kw) == [5, 5]
    assert _schedule([5.5, 5.5], gamma=9, **kw) == [9, 7]  # max <= 1 + gamma * alpha_down
    assert _schedule([5.5, 5.51], gamma=9, **kw) == [9, 9]


def test_window_reset_option() -> None:
    # literal Alg. 1 keeps the gamma-5 taus in the window after moving to 7
    assert _schedule([5.8, 5.9, 6.5], reset_window_on_change=False) == [5, 7, 5]
    assert _schedule([5.8, 5.9, 6.5], reset_window_on_change=True) == [5, 7, 7]


def test_parse_gammas() -> None:
    assert parse_gammas("5/7/9/11") == (5, 7, 9, 11)
    assert parse_gammas((9, 5)) == (5, 9)
    with pytest.raises(ValueError):
        parse_gammas("0/3")


def test_tau_carried_to_another_gamma_by_the_acceptance_model() -> None:
    assert expected_tau(1.0, 7) == 8.0
    assert expected_tau(0.5, 2) == pytest.approx(1.75)  # 1 + 0.5 + 0.25
    assert acceptance_from_tau(expected_tau(0.8, 5), 5) == pytest.approx(0.8)
    assert tau_at_gamma(6.0, 5, 7) == 8.0  # everything accepted stays everything accepted
    assert tau_at_gamma(1.75, 2, 3) == pytest.approx(1.875)
    assert tau_at_gamma(4.2, 5, 5) == 4.2


def test_toggle_uses_tau_rescaled_to_a_raised_gamma() -> None:
    for rescale, expected in ((True, 8.0), (False, 6.0)):
        pol = EfficientRolloutSpeculation(gamma0=5, rescale_tau=rescale)
        pol.controller.observe(6.0)
        pol.controller.observe(6.0)  # -> gamma 7; tau_prev 6.0 was measured at gamma 5
        assert pol.gamma == 7
        assert pol.expected_tau() == pytest.approx(expected)
