"""Seer (papers/seer-online-context-learning.md) and the ablations of its Table 6, Fig. 10
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

from simctl.policies.contract import Policy
from simctl.policies.registry import register
from simctl.policies.seer_scheduler import (
    CHUNK_TOKENS,
    KV_MARGIN,
    MAX_SEQS,
    MIN_CHUNK_TOKENS,
    Ordering,
    SeerScheduler,
)
from simctl.policies.seer_spec import FETCH_ITERATIONS, GroupedSpeculation
from simctl.policies.suffix_tree import Drafting


def _variant(name: str, ordering: Ordering, sd: dict[str, bool] | None) -> Callable[..., Policy]:
    def factory(
        chunk_tokens: int = CHUNK_TOKENS,
        min_chunk_tokens: int = MIN_CHUNK_TOKENS,
        max_seqs: int = MAX_SEQS,
        kv_margin: float = KV_MARGIN,
        seed: int = 0,
        tick_iterations: int = FETCH_ITERATIONS,
    ) -> Policy:
        parts: list[Policy] = [
            SeerScheduler(
                ordering, int(chunk_tokens), int(max_seqs), float(kv_margin), int(seed), int(min_chunk_tokens)
            )
        ]
        if sd is not None:
            parts.append(GroupedSpeculation(tick_iterations=int(tick_iterations), **sd))
        return Drafting(name, parts)

    return factory


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

for _name, (_ordering, _sd, _help) in VARIANTS.items():
    register(_name, _variant(_name, _ordering, _sd), _help)
