"""Seer's adaptive grouped speculative decoding (arXiv:2511.14617 §4.4,
§5 "Speculative Decoding", Table 2, Fig. 11-12).

The drafter is a suffix tree per prompt group over all its responses as generated
(`DraftRule(source="group")`: siblings' tokens arrive in batched appends and are fetched
at least every `tick_iterations` decode iterations, the request's own tokens at once);
`group_context=False` keeps only the request's own tokens (Fig. 11 "No-Context").

Adaptive range: for each worker, at every tick and whenever a request leaves it, choose
the draft depth d and number of paths k (multi-path: k paths of depth d verified as one
tree of k*d + 1 tokens) that maximise predicted tokens per second,

    b * tau(p_k, d) / (cost(b, b * (k*d + 1), ctx) + draft_cost(b, ctx, k*d)),

against plain decoding b / cost(b, b, ctx), with b the worker's concurrency and ctx its KV
tokens: few long requests get long, wide drafts, a full batch none (Fig. 12). This is the
paper's precomputed per-request / per-batch thresholds written as one search over the
executor's cost model. tau comes from Table 2 (the prior at G - 1 references, or 0 without
group context), converted to a per-token acceptance at its draft length of 8.
`adaptive=False` drafts a fixed `fixed_depth` (Table 2's 8) on one path at every batch
size (Fig. 11 "No-Adapt"). Not modelled: filtering candidates by the tree's confidence.

The executor is told gamma = d, topk = k and verify_tokens = k * d (a tree whose k
root candidates each continue as one chain).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from simctl.policies.contract import (
    SPEC_OFF,
    Action,
    Capability,
    ChunkFinished,
    ClusterView,
    Event,
    Policy,
    RequestFinished,
    SetSpec,
    SpecConfig,
    StepStarted,
    Tick,
    WorkerId,
)
from simctl.policies.draft_methods import DraftMethod
from simctl.policies.draft_rule import DraftRule
from simctl.policies.seer_acceptance import (
    TABLE2_DRAFT,
    expected_accept_len,
    per_token_acceptance,
    table2_tau,
)

METHOD = DraftMethod.SUFFIX
DEPTHS = (1, 2, 3, 4, 6, 8, 12, 16)
PATHS = (1, 2, 4)  # Table 2's multi-path columns
FETCH_ITERATIONS = 128  # periodic fetch of sibling tokens, and the re-evaluation period
FIXED_DEPTH = TABLE2_DRAFT


def best_spec(
    view: ClusterView,
    batch: int,
    context_tokens: float,
    accept: dict[int, float],
    depths: tuple[int, ...] = DEPTHS,
    method: str = METHOD,
) -> SpecConfig:
    """The (depth, paths) with the highest predicted token rate, or SPEC_OFF when plain
    decoding is faster. `accept` maps paths k -> per-token acceptance."""
    best, best_rate = SPEC_OFF, batch / view.cost(batch, batch, context_tokens)
    for k, p in sorted(accept.items()):
        for d in depths:
            g = k * d
            t = view.cost(batch, batch * (g + 1), context_tokens) + view.draft_cost(
                method, batch, context_tokens, g
            )
            rate = batch * expected_accept_len(p, d) / t
            if rate > best_rate * (1 + 1e-9):
                best_rate = rate
                best = SpecConfig(method=method, gamma=d, topk=k, verify_tokens=g if k > 1 else 0)
    return best


class GroupedSpeculation(Policy):
    """Per-worker draft depth and width from concurrency (see the module docstring)."""

    requires = frozenset({Capability.SPEC_PER_WORKER})

    def __init__(
        self,
        adaptive: bool = True,
        group_context: bool = True,
        multi_path: bool = True,
        fixed_depth: int = FIXED_DEPTH,
        tick_iterations: int = FETCH_ITERATIONS,
    ) -> None:
        assert fixed_depth >= 1
        self.adaptive = bool(adaptive)
        self.group_context = bool(group_context)
        self.multi_path = bool(multi_path)
        self.fixed_depth = int(fixed_depth)
        self.tick_iterations = int(tick_iterations)
        self.name = "seer-grouped-sd"
        self._rules: dict[str, DraftRule] = {METHOD: DraftRule(source="group" if group_context else "own")}
        self._current: dict[WorkerId, SpecConfig] = {}
        self._accept: dict[int, float] = {}
        self._memo: dict[tuple[int, float], SpecConfig] = {}  # (batch, rounded ctx) -> choice

    @property
    def draft_rules(self) -> Mapping[str, DraftRule]:
        return self._rules

    def on_event(self, event: Event, view: ClusterView) -> list[Action]:
        if isinstance(event, StepStarted):
            refs = max(0, view.info.group_size - 1) if self.group_context else 0
            paths = PATHS if self.multi_path else (1,)
            self._accept = {k: per_token_acceptance(table2_tau(refs, k), TABLE2_DRAFT) for k in paths}
            self._current, self._memo = {}, {}
            if not self.adaptive:
                fixed = SpecConfig(method=METHOD, gamma=self.fixed_depth)
                self._current = {w: fixed for w in range(view.num_workers)}
                return [SetSpec(spec=fixed, worker=w) for w in range(view.num_workers)]
            return []
        if not self.adaptive:
            return []
        if isinstance(event, Tick | ChunkFinished | RequestFinished):
            return self._configure(event.worker, view)
        return []

    def _configure(self, worker: WorkerId, view: ClusterView) -> list[Action]:
        wv = view.worker(worker)
        batch = wv.running + wv.waiting
        if batch == 0:
            return []
        ctx = float(max(wv.kv_used_tokens, batch))
        key = (batch, round(ctx, 1 - math.floor(math.log10(ctx))))  # 2 significant digits
        spec = self._memo.get(key)
        if spec is None:
            spec = self._memo[key] = best_spec(view, batch, key[1], self._accept)
        current = self._current.get(worker, SPEC_OFF)
        if current is spec or current == spec:  # memoised choices repeat as the same object
            return []
        self._current[worker] = spec
        return [SetSpec(spec=spec, worker=worker)]
