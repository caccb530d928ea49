"""Seer (arXiv:2511.14617) and the ablations of its Table 6, Fig. 10
and Fig. 11, registered by name:

| name | divided rollout | scheduling | grouped SD |
|---|---|---|---|
| seer-divided | yes | submission order (Fig. 10 "No-Context") | - |
| seer-divided-context | yes | context-aware (Alg. 1) | - |
| seer | yes | context-aware | adaptive, group context, multi-path |
| seer-no-group-context | yes | context-aware | adaptive, own tokens only (Fig. 11) |
| seer-no-adapt | yes | context-aware | fixed depth 8, group context (Fig. 11) |
| seer-oracle | yes | longest true length first (Fig. 10 "Oracle") | - |

Parameters (`name:key=value`): chunk_tokens, min_chunk_tokens, max_seqs, kv_margin, seed
for the scheduler; tick_iterations for the SD variants.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from simctl.policies.compose import Composed
from simctl.policies.contract import Policy
from simctl.policies.family import Family
from simctl.policies.params import Int, Param
from simctl.policies.seer_scheduler import Ordering, SchedulerParams
from simctl.policies.seer_spec import FETCH_ITERATIONS, GroupedSpeculation


@dataclass(frozen=True)
class SeerParams(SchedulerParams):
    tick_iterations: Annotated[
        int,
        Param(
            Int(1, 1 << 20), "decode iterations between sibling-token fetches and depth choices (SD variants)"
        ),
    ] = FETCH_ITERATIONS


def _variant(ordering: Ordering, sd: dict[str, bool] | None) -> Callable[[str, SeerParams], Policy]:
    def build(name: str, p: SeerParams) -> Policy:
        parts: list[Policy] = [p.scheduler(ordering)]
        if sd is not None:
            parts.append(GroupedSpeculation(tick_iterations=p.tick_iterations, **sd))
        return Composed(name, parts)

    return build


VARIANTS: dict[str, tuple[Ordering, dict[str, bool] | None, str]] = {
    "seer-divided": ("fifo", None, "Seer divided rollout only: chunked re-dispatch, least-loaded instance"),
    "seer-divided-context": ("context", None, "Seer divided rollout + context-aware scheduling (no SD)"),
    "seer": ("context", {}, "Seer: divided rollout, context-aware scheduling, adaptive grouped SD"),
    "seer-no-group-context": (
        "context",
        {"group_context": False},
        "Seer with grouped SD drafting from each request's own tokens only",
    ),
    "seer-no-adapt": ("context", {"adaptive": False}, "Seer with a fixed draft length 8 at every batch size"),
    "seer-oracle": ("oracle", None, "Seer divided rollout, longest-true-length-first (oracle) scheduling"),
}

FAMILIES: tuple[Family[Any], ...] = tuple(
    Family(name, text, SeerParams, _variant(ordering, sd)) for name, (ordering, sd, text) in VARIANTS.items()
)
