"""Policies by name, with `name:key=value,...` parameter overrides from the command line.

The registry collects the families each policy module declares (`FAMILIES`); no policy
module imports it. `make_policy` parses a spec against the family's declaration and raises
`PolicySpecError` (one line naming the policy, the parameter, the value and what is
allowed) for anything it cannot run.

Only the built-in policies live here. Executors and commands resolve a `--policy` spec
through `traces/plugins.py`, which adds plug-in classes (`module:Class`, `file.py:Class`)
and installed `simctl.policies` entry points: loading code is I/O, which `policies/`
never does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from simctl.policies import baselines, composite, efficientrollout, rhymerl, seer, speactor, tlt
from simctl.policies.contract import Policy
from simctl.policies.family import Family, without_params
from simctl.policies.params import PolicySpecError, quote

#: The name the CLIs catch (kept: every spec problem is a PolicySpecError).
UnknownPolicyError = PolicySpecError

REGISTRY: dict[str, Family[Any]] = {
    family.name: family
    for module in (baselines, efficientrollout, tlt, speactor, composite, rhymerl, seer)
    for family in module.FAMILIES
}


def register(name: str, factory: Callable[[], Policy], help_text: str) -> None:
    """Add a policy without parameters under `name` (tests run their own policies so)."""
    REGISTRY[name] = without_params(name, help_text, factory)


def family(name: str) -> Family[Any]:
    """The family registered as `name`; PolicySpecError for a name nobody registered."""
    found = REGISTRY.get(name)
    if found is None:
        raise PolicySpecError(f"unknown policy {quote(name)}; known: {', '.join(sorted(REGISTRY))}")
    return found


def make_policy(spec: str) -> Policy:
    """Build a policy from `name` or `name:key=value,key=value`; a spec with parameters
    names the policy (reports tell two settings of one policy apart by it)."""
    name, _, arg_text = spec.partition(":")
    policy = family(name).make(arg_text)
    if arg_text:
        policy.name = spec
    return policy
