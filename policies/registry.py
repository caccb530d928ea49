"""Policies by name, with `name:key=value,...` parameter overrides from the command line."""

from __future__ import annotations

from collections.abc import Callable

from simctl.policies.compose import Composed
from simctl.policies.contract import Policy
from simctl.policies.placement import StaticGroupPlacement
from simctl.policies.rlhfuse import IdleWorkersTrain
from simctl.policies.speculation import FixedSpeculation


class UnknownPolicyError(ValueError):
    pass


def _verl() -> Policy:
    return Composed("verl", [StaticGroupPlacement()])


def _spec_coupled(method: str = "draft_small", gamma: int = 4) -> Policy:
    return Composed("spec-coupled", [StaticGroupPlacement(), FixedSpeculation(method, int(gamma))])


def _ngram(gamma: int = 4) -> Policy:
    return Composed("ngram", [StaticGroupPlacement(), FixedSpeculation("ngram", int(gamma))])


def _rlhfuse() -> Policy:
    return Composed("rlhfuse", [StaticGroupPlacement(), IdleWorkersTrain()])


REGISTRY: dict[str, tuple[Callable[..., Policy], str]] = {
    "verl": (_verl, "veRL: static group-level assignment, continuous batching, no speculation"),
    "spec-coupled": (_spec_coupled, "vanilla coupled draft-then-verify, small draft model, fixed gamma"),
    "ngram": (_ngram, "vanilla n-gram speculation, fixed gamma"),
    "rlhfuse": (_rlhfuse, "veRL placement; idle workers run prepare/learn of finished batches"),
}


def register(name: str, factory: Callable[..., Policy], help_text: str) -> None:
    """Add a policy family (used by the paper-policy modules)."""
    REGISTRY[name] = (factory, help_text)


def _coerce(value: str) -> object:
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    return value


def make_policy(spec: str) -> Policy:
    """Build a policy from `name` or `name:key=value,key=value`."""
    name, _, arg_text = spec.partition(":")
    if name not in REGISTRY:
        raise UnknownPolicyError(f"unknown policy '{name}'; known: {', '.join(sorted(REGISTRY))}")
    kwargs: dict[str, object] = {}
    for item in filter(None, arg_text.split(",")):
        key, eq, value = item.partition("=")
        if not eq:
            raise UnknownPolicyError(f"policy '{spec}': parameter '{item}' is not key=value")
        kwargs[key.strip().replace("-", "_")] = _coerce(value.strip())
    factory, _ = REGISTRY[name]
    try:
        policy = factory(**kwargs)
    except TypeError as exc:
        raise UnknownPolicyError(f"policy '{spec}': {exc}") from None
    if arg_text:
        policy.name = spec
    return policy


# Paper policies register themselves; imported last because they build on this module's
# siblings (compose, placement), never on the registry itself.
from simctl.policies import efficientrollout as _efficientrollout  # noqa: E402
from simctl.policies import speactor as _speactor  # noqa: E402
from simctl.policies import tlt as _tlt  # noqa: E402

_efficientrollout.register_policies(register)
_tlt.register_policies(register)
_speactor.register_policies(register)
from simctl.policies import composite as _composite  # noqa: E402, F401
from simctl.policies import rhymerl as _rhymerl  # noqa: E402, F401
from simctl.policies import seer as _seer  # noqa: E402, F401
