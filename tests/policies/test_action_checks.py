"""A policy's answer is checked before either executor carries any of it out
(policies/action_checks.py): request ids among the step's requests (not -1, which numpy
read as the last request, nor a Fastest-of-N replica's row), integer workers, a dispatch
cap of at least one token, a finite priority, a valid SpecConfig and Role, a list of
actions. Each failure is one line naming the policy's action, never an internal error."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import simctl
from simctl.policies.action_checks import MAX_DRAFT, action_problem, checked
from simctl.policies.contract import (
    SPEC_OFF,
    Assign,
    Cancel,
    Defer,
    LaunchReplica,
    Migrate,
    Policy,
    Role,
    SetRole,
    SetSpec,
    SpecConfig,
    StepStarted,
)
from simctl.policies.params import PolicySpecError
from simctl.sim.engine import SimError

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "traces/samples/efficientrollout-qwen7b-8k-6steps.parquet"
N = 100  # requests of the step in the unit checks


@pytest.mark.parametrize(
    ("action", "words"),
    [
        (Defer(-1), "request -1 is not one of the step's requests (0..99)"),
        (Defer(N), "request 100 is not one of the step's requests"),  # a replica's row
        (Migrate(1.0, 0), "request 1.0 is not an integer id"),  # type: ignore[arg-type]
        (Cancel(True, 0), "request True is not an integer id"),  # type: ignore[arg-type]
        (Assign("0", 0), "request '0' is not an integer id"),  # type: ignore[arg-type]
        (Assign(0, 1.5), "worker 1.5 is not an integer id"),  # type: ignore[arg-type]
        (Assign(0, None), "worker None is not an integer id"),  # type: ignore[arg-type]
        (Assign(0, 0, max_tokens=0), "max_tokens 0 is not None or an integer >= 1"),
        (Assign(0, 0, max_tokens=2.5), "max_tokens 2.5"),  # type: ignore[arg-type]
        (Assign(0, 0, priority=math.nan), "priority nan is not a finite number"),
        (Assign(0, 0, priority="hi"), "priority 'hi' is not a finite number"),  # type: ignore[arg-type]
        (SetSpec(None, worker=0), "spec NoneType is not a SpecConfig"),  # type: ignore[arg-type]
        (SetSpec(SpecConfig("ngram", gamma=-3), worker=0), "spec gamma -3 is not an integer in 0..1024"),
        (SetSpec(SpecConfig("ngram", gamma=2.5), worker=0), "spec gamma 2.5"),  # type: ignore[arg-type]
        (SetSpec(SpecConfig("ngram", 4, mode="bogus"), worker=0), "spec mode 'bogus'"),  # type: ignore[arg-type]
        (SetSpec(SpecConfig("ngram", 4, topk=0), worker=0), "spec topk 0 is not an integer in 1..1024"),
        (SetSpec(SpecConfig("ngram", 4, window=10**9), worker=0), "spec window 1000000000"),
        (SetSpec(SpecConfig("ngram", 4, drafter_worker=1.5), worker=0), "drafter_worker 1.5"),  # type: ignore[arg-type]
        (SetSpec(SPEC_OFF), "neither a request nor a worker"),
        (SetSpec(SPEC_OFF, request=-2), "request -2 is not one of the step's requests"),
        (LaunchReplica(0, 1, None), "spec NoneType is not a SpecConfig"),  # type: ignore[arg-type]
        (SetRole(0, "idle"), "role 'idle' is not a Role"),  # type: ignore[arg-type]
        (Migrate(0, 1, transfer_kv="no"), "transfer_kv 'no'"),  # type: ignore[arg-type]
        (None, "returned None (NoneType), not an action"),
        ("Assign(0, 0)", "not an action"),
    ],
)
def test_bad_actions_are_named(action: Any, words: str) -> None:
    problem = action_problem(action, N)
    assert problem is not None and words in problem, problem


@pytest.mark.parametrize(
    "action",
    [
        Assign(0, 0),
        Assign(np.int64(N - 1), np.int32(3), max_tokens=np.int64(8), priority=np.float32(1.5)),
        SetSpec(SPEC_OFF, worker=0),
        SetSpec(SpecConfig("eagle", 8, topk=8, verify_tokens=64), request=5),
        SetSpec(SpecConfig("draft_small", 4, mode="decoupled", window=8, drafter_worker=2), worker=1),
        LaunchReplica(3, 1, SPEC_OFF),
        SetRole(0, Role.IDLE),
        Migrate(0, 1, transfer_kv=False),
        Cancel(2, 0),
        Defer(N - 1),
    ],
)
def test_good_actions_pass(action: Any) -> None:
    assert action_problem(action, N) is None


@given(
    rid=st.one_of(
        st.integers(-(2**70), 2**70), st.floats(allow_nan=True), st.booleans(), st.none(), st.text(max_size=3)
    )
)
def test_a_request_id_passes_only_when_it_is_one_of_the_steps(rid: Any) -> None:
    """Property: any value as a Defer's request passes exactly when it is an integer (not a
    bool) in 0..N-1."""
    ok = isinstance(rid, int) and not isinstance(rid, bool) and 0 <= rid < N
    assert (action_problem(Defer(rid), N) is None) == ok


@given(gamma=st.integers(-5, 2 * MAX_DRAFT), window=st.integers(-5, 2 * MAX_DRAFT))
def test_draft_settings_are_bounded(gamma: int, window: int) -> None:
    spec = SpecConfig("ngram", gamma, mode="decoupled", window=window, drafter_worker=1)
    ok = 0 <= gamma <= MAX_DRAFT and 0 <= window <= MAX_DRAFT
    assert (action_problem(SetSpec(spec, worker=0), N) is None) == ok


def test_the_answer_must_be_a_list() -> None:
    assert checked(5, N)[1] == "on_event returned int, not a list of actions"  # type: ignore[arg-type]
    assert checked(None, N) == ((), None)
    assert checked((Defer(0), Defer(-1)), N)[1] == (
        "Defer(request=-1): request -1 is not one of the step's requests (0..99)"
    )


class RoundRobin(Policy):
    """Round-robin placement; `extra(event, actions)` edits the step's first answer."""

    name = "rr"

    def __init__(self, extra: Any = None) -> None:
        self.extra = extra

    def on_event(self, event: Any, view: Any) -> Any:
        if isinstance(event, StepStarted):
            actions = [Assign(r, i % view.num_workers) for i, r in enumerate(event.requests)]
            return self.extra(event, actions) if self.extra else actions
        return []


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        # numpy read -1 as the last request: it was deferred, and the step ended without it
        (lambda e, a: [*a[:-1], Defer(-1)], "Defer(request=-1): request -1 is not one of the step's"),
        # a replica's row taken for a request: the step ended with one unfinished
        (
            lambda e, a: [*a, LaunchReplica(0, 1, SPEC_OFF), Defer(len(e.requests))],
            "is not one of the step's",
        ),
        (lambda e, a: [*a, Assign(0, 0, max_tokens=0)], "max_tokens 0 is not None or an integer >= 1"),
        (lambda e, a: 5, "on_event returned int, not a list of actions"),
        (lambda e, a: [*a, None], "returned None (NoneType), not an action"),
    ],
)
def test_the_simulator_refuses_them_in_one_line(extra: Any, words: str) -> None:
    trace = simctl.load_trace(SAMPLE)
    with pytest.raises(SimError) as err:
        simctl.replay(trace, [RoundRobin(extra)], cluster="a100x8:tp1", steps="0:1")
    (line,) = str(err.value).splitlines()
    assert line.startswith("policy 'rr': ") and words in line, line
    # and the same policy without the bad action replays
    assert len(simctl.replay(trace, [RoundRobin()], cluster="a100x8:tp1", steps="0:1").steps) == 1


@pytest.mark.parametrize(
    ("attrs", "words"),
    [
        ({"tick_iterations": 0.5}, "tick_iterations 0.5 is not None or an integer >= 1"),
        ({"tick_iterations": -5}, "tick_iterations -5"),
        ({"tick_iterations": "16"}, "tick_iterations '16'"),
        ({"name": 42}, "its name 42 is not a non-empty string"),
        ({"name": ""}, "its name '' is not a non-empty string"),
        ({"name": "tab\there\x1b[31mred"}, "its name 'tab\\there\\x1b[31mred' holds a control character"),
        ({"name": "x" * 300}, "is 300 characters long (at most 200)"),
        (
            {"draft_rules": {"ngram": 5}},
            "draft_rules {'ngram': 5} is not a mapping of method names to DraftRule",
        ),
        (
            {"params": lambda self: {"x": math.nan}},
            "params() returned {'x': nan}: not JSON with finite numbers",
        ),
        ({"params": lambda self: ["x"]}, "params() returned list, not a dict"),
    ],
)
def test_a_policys_own_settings_are_checked_before_the_run(attrs: dict[str, Any], words: str) -> None:
    """Bad settings failed inside simpy (tick_iterations 0.5), in the drafting replay
    (draft_rules), ticked at every iteration (-5), or failed the run's write after the
    whole replay (a NaN parameter): now one line before anything runs."""
    policy = type("Odd", (RoundRobin,), dict(attrs))()
    # (the API refuses a bad name itself, before the simulator would)
    with pytest.raises((SimError, PolicySpecError)) as err:
        simctl.replay(SAMPLE, [policy], cluster="a100x8:tp1", steps="0:1")
    assert words in str(err.value) and len(str(err.value).splitlines()) == 1, str(err.value)


def test_a_plugins_params_and_offline_profile_raising_are_its_errors() -> None:
    """`params()` and `offline_profile()` raising came out as the plug-in's raw exception;
    now PolicyRaised, as for `on_event`, naming what it was asked."""
    from simctl.policies.contract import PolicyRaised

    def boom(self: Any, *args: Any) -> Any:
        raise KeyError("r17")

    for hook in ("params", "offline_profile"):
        policy = type("Raises", (RoundRobin,), {hook: boom, "__module__": "my_plugin"})()
        with pytest.raises(PolicyRaised, match=rf"{hook}\(\)"):
            simctl.replay(SAMPLE, [policy], cluster="a100x8:tp1", steps="0:1")
