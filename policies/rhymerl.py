"""RhymeRL (papers/rhymerl-history-rhymes.md) and the steps of its Fig. 14 breakdown,
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

from simctl.policies.contract import Policy
from simctl.policies.placement import StaticGroupPlacement
from simctl.policies.registry import register
from simctl.policies.rhymerl_pipe import ALPHA, BETA_MIN, MAX_SHARE, RANKING_GROUPS, HistoPipe
from simctl.policies.rhymerl_spec import AIMD, PRIOR_ACCEPT, VERIFY_GAMMA, HistoSpec
from simctl.policies.suffix_tree import Drafting


def _variant(name: str, pipe: bool, two_tier: bool, spec: bool) -> Callable[..., Policy]:
    def factory(
        ranking_groups: int = RANKING_GROUPS,
        alpha: float = ALPHA,
        beta_min: float = BETA_MIN,
        migrate: bool = True,
        inter_step: bool = True,
        t_train_s: float = 0.0,
        max_share: float = MAX_SHARE,
        verify_gamma: int = VERIFY_GAMMA,
        aimd_max: int = AIMD.maximum,
        prior_accept: float = PRIOR_ACCEPT,
    ) -> Policy:
        parts: list[Policy] = [
            HistoPipe(
                int(ranking_groups),
                two_tier,
                bool(migrate),
                float(alpha),
                float(beta_min),
                bool(inter_step),
                float(t_train_s),
                max_share=float(max_share),
            )
            if pipe
            else StaticGroupPlacement()
        ]
        if spec:
            parts.append(HistoSpec(int(verify_gamma), int(aimd_max), float(prior_accept)))
        return Drafting(name, parts)

    return factory


VARIANTS = {
    "rhymerl-pipe": (True, False, False, "RhymeRL HistoPipe: alternating ranking groups + outlier migration"),
    "rhymerl-pipe-2tier": (True, True, False, "RhymeRL HistoPipe with two-tier worker allocation"),
    "rhymerl": (True, True, True, "RhymeRL: HistoPipe (two-tier) + HistoSpec history drafting (AIMD)"),
    "histospec-only": (False, False, True, "veRL placement + RhymeRL HistoSpec history drafting"),
}

for _name, (_pipe, _two_tier, _spec, _help) in VARIANTS.items():
    register(_name, _variant(_name, _pipe, _two_tier, _spec), _help)
