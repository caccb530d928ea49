"""Per-token acceptance recovered from counters (policies.acceptance_estimate), SpecActor's
use of it, and the offline profile an executor hands a policy before the first step."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simctl.policies.acceptance_estimate import GRID, acceptance_of, pooled_acceptance
from simctl.policies.compose import Composed
from simctl.policies.contract import give_offline_profile
from simctl.policies.draft_methods import DraftMethod
from simctl.policies.placement import StaticGroupPlacement
from simctl.policies.speactor import DEFAULT_PRIOR, SpecActor
from simctl.policies.speactor_model import tokens_coupled
from simctl.sim.offline_profile import trace_acceptance
from simctl.sim.replay import run_policy
from tests.factories import make_frame, make_setup, make_trace

probability = st.floats(0.01, 0.99)
window = st.integers(1, 8)


@settings(max_examples=200, deadline=None)
@given(probability, window, st.integers(1, 10_000))
def test_a_request_at_its_expected_rate_gives_back_its_p(p: float, w: int, verifications: int) -> None:
    tokens = tokens_coupled(p, w) * verifications
    got = acceptance_of(tokens, verifications, w)
    assert got is not None and got == pytest.approx(p, abs=2.0 / GRID)


@settings(max_examples=100, deadline=None)
@given(probability, st.dictionaries(window, st.integers(1, 5_000), min_size=1, max_size=5))
def test_pooled_windows_at_one_p_give_back_that_p(p: float, verifications: dict[int, int]) -> None:
    counts = {w: (float(n), tokens_coupled(p, w) * n) for w, n in verifications.items()}
    got = pooled_acceptance(counts)
    assert got is not None and got == pytest.approx(p, abs=2.0 / GRID)


@settings(max_examples=100, deadline=None)
@given(window, st.floats(1.0, 9.0), st.floats(1.0, 9.0))
def test_more_tokens_per_verification_never_means_lower_acceptance(w: int, a: float, b: float) -> None:
    lo, hi = sorted((a, b))
    assert acceptance_of(lo * 10, 10, w) <= acceptance_of(hi * 10, 10, w)  # type: ignore[operator]


def test_the_raw_ratio_is_not_p_beyond_one_token() -> None:
    """accepted / drafted is p only at a one-token window: at p = 0.9 and w = 4 it is 0.77,
    which planning used to take for p."""
    p, w, n = 0.9, 4, 1000
    accepted = (tokens_coupled(p, w) - 1.0) * n
    assert accepted / (w * n) == pytest.approx(0.7738, abs=1e-3)
    assert acceptance_of(n + accepted, n, w) == pytest.approx(0.9, abs=1e-3)
    assert acceptance_of(n + 0.6 * n, n, 1) == pytest.approx(0.6, abs=1e-3)  # w = 1: the ratio
    assert acceptance_of(0, 0, 4) is None and pooled_acceptance({4: (0.0, 0.0)}) is None


def test_speactor_profiles_per_window_and_plans_with_p() -> None:
    """What a step verified at a 4-token window enters the next ladder as per-token p, and
    below 500 verifications the offline profile (or the default prior) stands."""
    sa = SpecActor()
    sa.profiled = {DraftMethod.DRAFT_SMALL: {4: [400.0, 400.0 * tokens_coupled(0.9, 4)]}}
    assert sa.acceptance(DraftMethod.DRAFT_SMALL) == DEFAULT_PRIOR[DraftMethod.DRAFT_SMALL]
    sa.offline_profile({DraftMethod.DRAFT_SMALL: 0.8, "nonsense": 1.5})
    assert sa.acceptance(DraftMethod.DRAFT_SMALL) == 0.8 and "nonsense" not in sa.prior
    sa.profiled[DraftMethod.DRAFT_SMALL][1] = [200.0, 200.0 * tokens_coupled(0.9, 1)]
    assert sa.acceptance(DraftMethod.DRAFT_SMALL) == pytest.approx(0.9, abs=1e-3)


class _Recorder(StaticGroupPlacement):
    """veRL's placement, remembering the offline profiles it is told."""

    name = "recorder"

    def __init__(self) -> None:
        super().__init__()
        self.profiles: list[dict[str, float]] = []

    def offline_profile(self, acceptance: Mapping[str, float]) -> None:
        self.profiles.append(dict(acceptance))


def test_composed_policies_pass_the_profile_to_every_part() -> None:
    a, b = _Recorder(), _Recorder()
    give_offline_profile(Composed("both", [a, b]), {"ngram": 0.4})
    assert a.profiles == b.profiles == [{"ngram": 0.4}]
    give_offline_profile(a, {})  # nothing measured: nothing told
    assert len(a.profiles) == 1


def test_a_replay_tells_the_policy_its_first_steps_token_weighted_acceptance() -> None:
    lengths = np.array([100, 100, 300, 500])
    first = make_frame(lengths, step=3, accept={"ngram": np.array([0.2, 0.4, 0.6, 0.8])})
    later = make_frame(lengths, step=4, accept={"ngram": np.full(4, 0.1)})
    trace = make_trace([first, later])
    expected = (0.2 * 100 + 0.4 * 100 + 0.6 * 300 + 0.8 * 500) / 1000
    assert trace_acceptance(trace, 3) == {"ngram": pytest.approx(expected)}
    assert trace_acceptance(trace, 9) == {}
    rec = _Recorder()
    run_policy(make_setup(trace), rec)
    assert rec.profiles == [{"ngram": pytest.approx(expected)}]
