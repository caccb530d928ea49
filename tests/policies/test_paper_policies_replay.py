"""Every EfficientRollout/TLT policy name end to end through sim.replay on a tiny trace."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from simctl.policies.beg_mab import Strategy
from simctl.policies.efficientrollout import EfficientRolloutSpeculation
from simctl.policies.family import without_params
from simctl.policies.registry import REGISTRY, make_policy
from simctl.sim.replay import PolicyRun, run_policy
from tests.factories import make_frame, make_setup, make_trace, random_lengths, run_one

NAMES = [
    "efficientrollout",
    "quantized-selfspec",
    "efficientrollout-fixed-gamma",
    "tlt",
    "tlt-base",
    "tlt-static-drafter",
]
ACCEPT = {"w4_self": 0.9, "eagle": 0.8, "ngram": 0.4}
# TP1 as in EfficientRollout App. F.3: on TP4 a W4 draft step costs ~0.7 of a decode step
# and, with the per-cycle cost of model drafting, the toggle rightly keeps SD off.
CLUSTER = "h100x16:tp1"


def _trace(steps: int = 1, n: int = 64, accept: dict[str, float] | None = None, seed: int = 0):
    frames = [make_frame(random_lengths(seed + s, n), step=s, accept=accept or ACCEPT) for s in range(steps)]
    return make_trace(frames)


def _run_object(monkeypatch: pytest.MonkeyPatch, trace, policy, cluster: str = "h100x16") -> PolicyRun:
    """Replay a policy object we keep a handle on (to read its state afterwards)."""
    monkeypatch.setitem(REGISTRY, "captured", without_params("captured", "test", lambda: policy))
    return run_policy(make_setup(trace, cluster=cluster), "captured")


@pytest.mark.parametrize("name", NAMES)
def test_policy_replays_and_speculates(name: str) -> None:
    trace = _trace()
    run = run_one(trace, name, cluster=CLUSTER)
    req = pd.concat(run.requests)
    assert req["finish_s"].notna().all()
    assert run.steps[0].output_tokens == int(trace.df["response_len"].sum())
    assert run.steps[0].mean_accept_len is not None  # 4 requests per worker: SD turns on
    assert (req["accepted"] <= req["drafted"]).all()


def test_every_name_is_registered_and_takes_cli_parameters() -> None:
    for name in NAMES:
        assert name in REGISTRY
    er = make_policy("efficientrollout:gammas=5/7,epsilon=0.1")
    assert er.params()["gammas"] == [5, 7] and er.params()["epsilon"] == 0.1
    assert er.parts[1].controller.gammas == (5, 7)  # type: ignore[attr-defined]
    tlt_policy = make_policy("tlt:threshold=16,pretrained=true")
    assert tlt_policy.params()["threshold"] == 16 and tlt_policy.params()["pretrained"] is True
    assert tlt_policy.parts[2].threshold == 16  # type: ignore[attr-defined]


def test_toggle_is_monotone_per_worker_in_the_simulator() -> None:
    # one A100 worker starting at 256 requests: compute-bound verification, SD must wait
    lengths = random_lengths(5, 256, lo=50, hi=3000)
    trace = make_trace(make_frame(lengths, accept={"w4_self": 0.95}))
    run = run_one(trace, "efficientrollout", cluster="a100x1:tp1")
    tl = run.timeline[0].sort_values("t0_s")
    spec = (tl["gamma_mean"] > 0).to_numpy()
    assert not spec[0] and spec[-1]
    first_on = int(np.argmax(spec))
    assert spec[first_on:].all()  # never switched off again
    assert tl["batch"].iloc[first_on] < 256


def test_gamma_adapts_across_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    # acceptance ~1: tau ~ gamma + 1 >= 1 + 0.94 gamma, so gamma rises every P = 2 steps
    pol = make_policy("efficientrollout")
    spec = pol.parts[1]  # type: ignore[attr-defined]
    assert isinstance(spec, EfficientRolloutSpeculation)
    trace = _trace(steps=5, accept={"w4_self": 1.0})
    run = _run_object(monkeypatch, trace, pol, cluster=CLUSTER)
    tl = pd.concat(run.timeline)
    assert tl.groupby("step")["gamma_mean"].max().tolist() == [5, 5, 7, 7, 9]
    # every step is closed at its StepFinished, the last one included
    assert [g for _, g, _ in spec.log] == [5, 5, 7, 7, 9]
    assert all(tau is not None and tau > 0.94 * g + 1 for _, g, tau in spec.log)


def test_tlt_spot_trains_on_idle_workers_then_drafts_with_eagle(monkeypatch: pytest.MonkeyPatch) -> None:
    # one group per worker; group 0 is long, so the other three workers idle early
    lengths = np.array([4000] * 4 + [300] * 12)
    frames = [make_frame(lengths, step=s, accept=ACCEPT) for s in range(2)]
    pol = make_policy("tlt")
    run = _run_object(monkeypatch, make_trace(frames), pol)
    roles = pd.concat(run.roles)
    spot = roles[roles["role"] == "spot-trainer"]
    assert set(spot["worker"]) == {1, 2, 3} and set(spot["step"]) == {0, 1}
    spec = pol.parts[2]  # type: ignore[attr-defined]
    ledger = spec.ledger
    assert ledger.trained and ledger.steps_with_training == 2
    by_step = {s: {type(x) for (st, _, _, x, _) in spec.log if st == s} for s in (0, 1)}
    assert by_step[0] == {type(None)}  # n-gram fallback: no trained drafter in step 0
    assert by_step[1] == {Strategy}
