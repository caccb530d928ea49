"""RhymeRL (History Rhymes, arXiv:2508.18588) and the steps of its Fig. 14 breakdown,
registered by name:

| name | placement | two-tier | HistoSpec |
|---|---|---|---|
| rhymerl-pipe | HistoPipe: ranking groups alternating across steps, migration | - | - |
| rhymerl-pipe-2tier | HistoPipe | yes | - |
| rhymerl | HistoPipe | yes | yes |
| histospec-only | veRL static group placement | - | yes |

The gain of HistoPipe is across steps (a worker's short step complements its long next
step in the one-step off-policy pipeline, §4.2 / §6.2), so per-step rollout makespans do
not show it: bench/bench_scheduling_policies.py composes the per-worker pipeline.

Parameters (`name:key=value`): ranking_groups, alpha, beta_min, migrate, inter_step,
t_train_s, max_share (HistoPipe); verify_gamma, aimd_max, prior_accept (HistoSpec).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from simctl.policies.compose import Composed
from simctl.policies.contract import Policy
from simctl.policies.family import Family
from simctl.policies.params import Flag, Float, Int, Param, PolicyParams
from simctl.policies.placement import StaticGroupPlacement
from simctl.policies.rhymerl_pipe import ALPHA, BETA_MIN, MAX_SHARE, RANKING_GROUPS, HistoPipe
from simctl.policies.rhymerl_spec import AIMD, PRIOR_ACCEPT, VERIFY_GAMMA, HistoSpec


@dataclass(frozen=True)
class RhymeRLParams(PolicyParams):
    """HistoPipe's parameters, then HistoSpec's (a variant without the part ignores them)."""

    ranking_groups: Annotated[int, Param(Int(1, 1 << 16), "ranking groups prompts are cut into (§6.2)")] = (
        RANKING_GROUPS
    )
    alpha: Annotated[
        float,
        Param(Float(0.0, 1.0, lo_open=True), "unfinished share of a ranking group below which outliers move"),
    ] = ALPHA
    beta_min: Annotated[
        float, Param(Float(1.0), "floor of beta, the length growth that makes an outlier")
    ] = BETA_MIN
    migrate: Annotated[bool, Param(Flag(), "move outliers of short ranking groups (§6.3)")] = True
    inter_step: Annotated[bool, Param(Flag(), "defer outliers with nowhere to go to the next step")] = True
    t_train_s: Annotated[
        float, Param(Float(0.0), "training time, the floor of two-tier's target time t0")
    ] = 0.0
    max_share: Annotated[
        float, Param(Float(0.0, lo_open=True), "workers a ranking group may take, in fair shares (MAX_WKS)")
    ] = MAX_SHARE
    verify_gamma: Annotated[int, Param(Int(1, 64), "draft length charged per verify iteration")] = (
        VERIFY_GAMMA
    )
    aimd_max: Annotated[int, Param(Int(AIMD.start, 1024), "largest AIMD draft window (§5.4)")] = AIMD.maximum
    prior_accept: Annotated[
        float, Param(Float(0.0, 1.0, hi_open=True), "acceptance assumed before any is observed")
    ] = PRIOR_ACCEPT


def _variant(pipe: bool, two_tier: bool, spec: bool) -> Callable[[str, RhymeRLParams], Policy]:
    def build(name: str, p: RhymeRLParams) -> Policy:
        parts: list[Policy] = [
            HistoPipe(
                p.ranking_groups,
                two_tier,
                p.migrate,
                p.alpha,
                p.beta_min,
                p.inter_step,
                p.t_train_s,
                max_share=p.max_share,
            )
            if pipe
            else StaticGroupPlacement()
        ]
        if spec:
            parts.append(HistoSpec(p.verify_gamma, p.aimd_max, p.prior_accept))
        return Composed(name, parts)

    return build


VARIANTS = {
    "rhymerl-pipe": (True, False, False, "RhymeRL HistoPipe: alternating ranking groups + outlier migration"),
    "rhymerl-pipe-2tier": (True, True, False, "RhymeRL HistoPipe with two-tier worker allocation"),
    "rhymerl": (True, True, True, "RhymeRL: HistoPipe (two-tier) + HistoSpec history drafting (AIMD)"),
    "histospec-only": (False, False, True, "veRL placement + RhymeRL HistoSpec history drafting"),
}

FAMILIES: tuple[Family[Any], ...] = tuple(
    Family(name, text, RhymeRLParams, _variant(pipe, two_tier, spec))
    for name, (pipe, two_tier, spec, text) in VARIANTS.items()
)
