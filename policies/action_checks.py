"""What every executor checks of a policy's answer before carrying any of it out, and of
the policy itself before a run (`policy_problem`).

An action's fields are typed but not enforced (dataclasses), and the executors index numpy
arrays and lists with them: a request id of -1 acted on the step's last request, a replica's
row was taken for a request (finishing it twice), and a float, a string or None failed deep
inside numpy or simpy as if simctl had a bug. These checks make each of those one line that
names the policy's action; the executors then check what depends on their state (a
worker's existence, a request's state).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from numbers import Integral, Real
from typing import Any

from simctl.policies.contract import (
    Action,
    Assign,
    LaunchReplica,
    Migrate,
    Role,
    SetRole,
    SetSpec,
    SpecConfig,
)
from simctl.policies.draft_rule import DraftRule

# Draft depth, window, candidates per level and tokens verified per iteration: far above
# any published setting (SpecActor's windows of 8, TLT's 64 verified tokens), low enough
# that a typo cannot price iterations of millions of tokens.
MAX_DRAFT = 1024

_MODES = ("coupled", "decoupled")


def _is_int(value: Any) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool)


def _request_problem(rid: Any, n_requests: int) -> str | None:
    if not _is_int(rid):
        return f"request {rid!r} is not an integer id"
    if not 0 <= rid < n_requests:
        return f"request {rid} is not one of the step's requests (0..{n_requests - 1})"
    return None


def _worker_problem(wid: Any) -> str | None:
    # (its range is the executor's: it knows its workers)
    return None if _is_int(wid) else f"worker {wid!r} is not an integer id"


def spec_problem(spec: Any) -> str | None:
    """What is wrong with a SpecConfig's fields (None: nothing)."""
    if not isinstance(spec, SpecConfig):
        return f"spec {type(spec).__name__} is not a SpecConfig"
    if spec.method is not None and not isinstance(spec.method, str):
        return f"spec method {spec.method!r} is not a name"
    if spec.mode not in _MODES:
        return f"spec mode {spec.mode!r} is not coupled or decoupled"
    for name, low in (("gamma", 0), ("window", 0), ("topk", 1), ("verify_tokens", 0)):
        value = getattr(spec, name)
        if not _is_int(value) or not low <= value <= MAX_DRAFT:
            return f"spec {name} {value!r} is not an integer in {low}..{MAX_DRAFT}"
    if spec.drafter_worker is not None and not _is_int(spec.drafter_worker):
        return f"spec drafter_worker {spec.drafter_worker!r} is not an integer id"
    return None


def action_problem(action: Any, n_requests: int) -> str | None:
    """What is wrong with one action as given, whatever the executor's state (None:
    nothing): an Action, its request ids among the step's `n_requests`, integer workers,
    a dispatch cap of at least one token, a finite priority, a valid SpecConfig and Role."""
    if not isinstance(action, Action):
        return f"returned {action!r} ({type(action).__name__}), not an action"
    optional = isinstance(action, SetSpec)  # (a request's, or a worker's, setting)
    if hasattr(action, "request") and not (optional and action.request is None):
        problem = _request_problem(action.request, n_requests)
        if problem:
            return problem
    if hasattr(action, "worker") and not (optional and action.worker is None):
        problem = _worker_problem(action.worker)
        if problem:
            return problem
    if isinstance(action, Assign):
        cap = action.max_tokens
        if cap is not None and (not _is_int(cap) or cap < 1):
            return f"max_tokens {cap!r} is not None or an integer >= 1"
        priority = action.priority
        if not isinstance(priority, Real) or isinstance(priority, bool) or not math.isfinite(priority):
            return f"priority {priority!r} is not a finite number"
    elif isinstance(action, SetSpec):
        if action.request is None and action.worker is None:
            return "sets speculation for neither a request nor a worker"
        return spec_problem(action.spec)
    elif isinstance(action, LaunchReplica):
        return spec_problem(action.spec)
    elif isinstance(action, SetRole):
        if not isinstance(action.role, Role):
            return f"role {action.role!r} is not a Role"
    elif isinstance(action, Migrate) and not isinstance(action.transfer_kv, bool):
        return f"transfer_kv {action.transfer_kv!r} is not True or False"
    # (Defer and Cancel have their request and worker only; an action type the executor
    # does not know, it says so itself)
    return None


def answer_problem(actions: Any) -> str | None:
    """What is wrong with an answer as a whole: a list (or tuple) of actions, or None."""
    if actions is None or isinstance(actions, (list, tuple)):
        return None
    return f"on_event returned {type(actions).__name__}, not a list of actions"


def checked(actions: Sequence[Action] | None, n_requests: int) -> tuple[Sequence[Action], str | None]:
    """(the actions, the first problem with the answer or any of them: None when none)."""
    problem = answer_problem(actions)
    if problem or not actions:
        return (), problem
    for action in actions:
        problem = action_problem(action, n_requests)
        if problem:
            return actions, f"{_shown(action)}: {problem}"
    return actions, None


def _shown(action: Any) -> str:
    text = repr(action)
    return text if len(text) <= 160 else text[:157] + "..."


def policy_problem(policy: Any) -> str | None:
    """What is wrong with a policy's own settings, read before a run (None: nothing): a
    name (results are kept and reported by it), a tick cadence of whole iterations (0.5
    failed inside simpy, -5 ticked at every iteration), draft rules by method name, and
    parameters that run.json can hold (`params_problem`)."""
    problem = name_problem(getattr(policy, "name", None))
    if problem:
        return problem
    ticks = getattr(policy, "tick_iterations", None)
    if ticks is not None and (not _is_int(ticks) or ticks < 1):
        return f"tick_iterations {ticks!r} is not None or an integer >= 1"
    rules = getattr(policy, "draft_rules", None)
    if rules is not None and (
        not isinstance(rules, Mapping)
        or not all(isinstance(k, str) and isinstance(v, DraftRule) for k, v in rules.items())
    ):
        return f"draft_rules {_shown(rules)} is not a mapping of method names to DraftRule"
    return None


#: The longest policy name: it labels table rows, figure legends and file names of reports.
MAX_NAME = 200


def name_problem(name: Any) -> str | None:
    """What is wrong with a policy's name (None: nothing): results are kept and reported by
    it, so it must be printable text of at most MAX_NAME characters (a control character,
    an ANSI escape say, would reach the terminal and the report page as it is)."""
    if not isinstance(name, str) or not name:
        return f"its name {name!r:.80} is not a non-empty string"
    if len(name) > MAX_NAME:
        return f"its name {name[:40]!r}... is {len(name)} characters long (at most {MAX_NAME})"
    if not name.isprintable():
        return f"its name {name[:80]!r} holds a control character"
    return None


def names_problem(named: Sequence[tuple[str, Any]]) -> str | None:
    """What is wrong with the names of the policies of one replay, given as (label, name):
    each a name, and no two alike (results are kept by name: the second replaced the first,
    a plug-in named verl the baseline's numbers). None: nothing."""
    first: dict[str, str] = {}
    for label, name in named:
        problem = name_problem(name)
        if problem:
            return f"policy {label}: {problem}"
        if name in first:
            return (
                f"{first[name]} and {label} are both named {name!r}: results are kept by name; give "
                "each its own (the class attribute `name`)"
            )
        first[name] = label
    return None


def params_problem(params: Any) -> str | None:
    """What keeps a policy's `params()` out of run.json (None: nothing): a dict of JSON
    values with finite numbers (a NaN failed the run's write, after the whole replay)."""
    if not isinstance(params, dict):
        return f"params() returned {type(params).__name__}, not a dict"
    try:
        json.dumps(params, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return f"params() returned {_shown(params)}: not JSON with finite numbers ({exc})"
    return None
