"""ShortestFirst: each request to the least-loaded worker, shortest expected response first.

A complete plug-in policy (docs/writing-a-policy.md). Run it with
`simctl replay TRACE --policy docs/examples/shortest_first.py:ShortestFirst:default_len=256`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

from simctl.policies.contract import Action, Assign, ClusterView, Event, Policy, RequestView, StepStarted
from simctl.policies.params import Flag, Int, Param, PolicyParams


@dataclass(frozen=True)
class ShortestFirstParams(PolicyParams):
    default_len: Annotated[int, Param(Int(1, 10**6), "expected length of a prompt never seen")] = 512
    prioritize: Annotated[bool, Param(Flag(), "admit expected-short requests first")] = True


class ShortestFirst(Policy):
    """Least-loaded placement by expected length (earlier epochs' mean), shortest first."""

    name = "shortest-first"
    params_type = ShortestFirstParams

    def __init__(self, params: ShortestFirstParams = ShortestFirstParams()) -> None:
        self.p = params

    def expected(self, r: RequestView, view: ClusterView) -> float:
        seen = [n for lengths in view.history(r.prompt_id).lengths for n in lengths]
        return sum(seen) / len(seen) if seen else float(min(self.p.default_len, r.max_tokens))

    def on_event(self, event: Event, view: ClusterView) -> Sequence[Action]:
        if not isinstance(event, StepStarted):
            return []
        requests = [view.request(rid) for rid in event.requests]
        guess = {r.id: self.expected(r, view) for r in requests}
        load = [0.0] * view.num_workers
        actions: list[Action] = []
        for r in sorted(requests, key=lambda r: (guess[r.id], r.id)):
            worker = min(range(view.num_workers), key=lambda w: (load[w], w))
            load[worker] += r.prompt_len + guess[r.id]
            priority = -guess[r.id] if self.p.prioritize else 0.0
            actions.append(Assign(request=r.id, worker=worker, priority=priority))
        return actions
