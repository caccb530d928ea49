"""The baseline policies by name: veRL's static placement, alone, with fixed speculation
(a small draft model or n-gram), or with RLHFuse-style stage fusion."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from simctl.policies.compose import Composed
from simctl.policies.contract import Policy
from simctl.policies.draft_methods import DraftMethod
from simctl.policies.family import Family, without_params
from simctl.policies.params import Int, Method, Param, PolicyParams
from simctl.policies.placement import StaticGroupPlacement
from simctl.policies.rlhfuse import IdleWorkersTrain
from simctl.policies.speculation import FixedSpeculation

GAMMA = Int(1, 64)


@dataclass(frozen=True)
class SpecCoupledParams(PolicyParams):
    method: Annotated[DraftMethod, Param(Method(), "draft method of every worker")] = DraftMethod.DRAFT_SMALL
    gamma: Annotated[int, Param(GAMMA, "draft tokens per iteration")] = 4


@dataclass(frozen=True)
class NgramParams(PolicyParams):
    gamma: Annotated[int, Param(GAMMA, "draft tokens per iteration")] = 4


def _verl() -> Policy:
    return Composed("verl", [StaticGroupPlacement()])


def _spec_coupled(name: str, p: SpecCoupledParams) -> Policy:
    return Composed(name, [StaticGroupPlacement(), FixedSpeculation(p.method, p.gamma)])


def _ngram(name: str, p: NgramParams) -> Policy:
    return Composed(name, [StaticGroupPlacement(), FixedSpeculation(DraftMethod.NGRAM, p.gamma)])


def _rlhfuse() -> Policy:
    return Composed("rlhfuse", [StaticGroupPlacement(), IdleWorkersTrain()])


FAMILIES: tuple[Family[Any], ...] = (
    without_params("verl", "veRL: static group-level assignment, continuous batching, no speculation", _verl),
    Family(
        "spec-coupled",
        "vanilla coupled draft-then-verify, small draft model, fixed gamma",
        SpecCoupledParams,
        _spec_coupled,
    ),
    Family("ngram", "vanilla n-gram speculation, fixed gamma", NgramParams, _ngram),
    without_params("rlhfuse", "veRL placement; idle workers run prepare/learn of finished batches", _rlhfuse),
)
