"""SpecActor's Algorithm 2 after the speed work (issue #17) equals its direct form: ticks read
the worker's requests in bulk and remember each acceptance's setting for the step, and
must give the actions the record-by-record, recompute-every-time form gives, tick after
tick (with and without a drafter serving the worker, across a new step)."""

from __future__ import annotations

from functools import partial

from hypothesis import given, settings
from hypothesis import strategies as st

from simctl.policies.acceptance_estimate import acceptance_of
from simctl.policies.contract import Action, ClusterView, RequestId, SetSpec, SpecConfig, StepStarted
from simctl.policies.speactor import SpecActor
from simctl.policies.speactor_model import best_window, reconfigure, tgs_coupled
from tests.policies.fakes import FakeView


class DirectSpecActor(SpecActor):
    """Algorithm 2 as first written: one `view.request` per request, no memo (each request's
    per-token p from its counters under its setting, policies.acceptance_estimate)."""

    def _reconfigure(self, worker: int, view: ClusterView) -> list[Action]:
        rates: dict[RequestId, float] = {}
        for rid in view.worker_requests(worker):
            rv = view.request(rid)
            if rv.state == "running" and rv.verify_iterations:
                p = acceptance_of(
                    rv.verify_iterations + rv.accepted_tokens, rv.verify_iterations, self._window_of(rv.spec)
                )
                assert p is not None
                rates[rid] = p
        if len(rates) < 2:
            return []
        mean = sum(rates.values()) / len(rates)
        laws = self.laws[self.method]
        gd = max(self.drafter_gpus, 1)
        actions: list[Action] = []
        for rid, p in rates.items():
            if p >= mean:
                continue
            mode, w, _ = reconfigure(laws, p, gd, self.max_window)
            if mode == "decoupled" and worker not in self.drafter_of:
                mode, w = "coupled", best_window(partial(tgs_coupled, laws, p, b=1.0), self.max_window)[0]
            decoupled = mode == "decoupled"
            spec = SpecConfig(
                method=self.method,
                gamma=w,
                mode="decoupled" if decoupled else "coupled",
                window=w if decoupled else 0,
                drafter_worker=self.drafter_of.get(worker) if decoupled else None,
            )
            if self.spec_of.get(rid) != spec:
                self.spec_of[rid] = spec
                actions.append(SetSpec(spec=spec, request=rid))
        return actions


# one request at a tick: (worker, state, drafted, accepted share in eighths); one verify
# iteration per drafted token
# (drafted counts that are multiples of 8 repeat acceptances across requests and workers)
request = st.tuples(
    st.integers(0, 2),
    st.sampled_from(["running", "running", "waiting"]),
    st.one_of(st.sampled_from([0, 8, 16]), st.integers(0, 40)),
)
# high acceptance below a higher mean is where the decoupled setting wins
eighths = st.one_of(st.integers(0, 8), st.integers(5, 8))
tick = st.tuples(st.integers(0, 2), st.lists(st.tuples(request, eighths), min_size=1, max_size=12))


@settings(max_examples=120, deadline=None)
@given(
    st.lists(st.lists(tick, max_size=8), min_size=1, max_size=2),
    st.integers(0, 4),
    st.booleans(),
    st.floats(0.003, 0.005),
)
def test_reconfigure_ticks_equal_the_direct_form(
    steps: list[list[tuple]], drafter_gpus: int, served: bool, draft_step: float
) -> None:
    fast, direct = SpecActor(fon=False), DirectSpecActor(fon=False)
    view = FakeView.make(4, gpus=4)
    view.t_draft_step = draft_step
    for step in steps:
        view.requests.clear()
        started = StepStarted(time_s=0.0, step=0, epoch=0, requests=tuple(range(12)))
        for rid in range(12):
            view.add_request(rid, rid % 3)
        for policy in (fast, direct):
            policy.on_event(started, view)
            policy.drafter_gpus = drafter_gpus
            policy.drafter_of = {0: 3, 1: 3} if served else {}
        for worker, rows in step:
            for rid, ((home, state, drafted), eighths) in enumerate(rows):
                accepted = drafted * eighths // 8
                view.add_request(
                    rid,
                    home,
                    state,
                    drafted_tokens=drafted,
                    accepted_tokens=accepted,
                    verify_iterations=drafted,
                )
            assert fast._reconfigure(worker, view) == direct._reconfigure(worker, view)
        assert fast.spec_of == direct.spec_of


def test_the_same_acceptance_on_a_served_and_an_unserved_worker() -> None:
    """One acceptance, two answers: decoupled where a drafter serves the worker, coupled
    where none does (the memo keys on both)."""
    view = FakeView.make(4, gpus=4)
    view.t_draft_step = 0.004
    fast, direct = SpecActor(fon=False), DirectSpecActor(fon=False)
    started = StepStarted(time_s=0.0, step=0, epoch=0, requests=tuple(range(4)))
    # 8 verifications of the step's 3-token window: every draft accepted, or 3.25 tokens per
    # verification (p = 0.86)
    for rid, (worker, accepted) in enumerate([(0, 24), (0, 18), (2, 24), (2, 18)]):
        view.add_request(rid, worker, drafted_tokens=24, accepted_tokens=accepted, verify_iterations=8)
    for policy in (fast, direct):
        policy.on_event(started, view)
        policy.drafter_gpus, policy.drafter_of = 1, {0: 3}
    served, unserved = fast._reconfigure(0, view), fast._reconfigure(2, view)
    assert fast.step_window == 3
    assert served == direct._reconfigure(0, view) and unserved == direct._reconfigure(2, view)
    assert [a.spec.mode for a in served + unserved] == ["decoupled", "coupled"]
