"""What the best-drafter part has learned of each draft method's acceptance.

Per-token acceptance p of a chain draft is estimated twice:
- per method, pooled over every request and step: the prior worth `pool_prior_iterations`
  verify iterations, plus every observation;
- per request and method, the request's own observations on top of the pooled value worth
  `request_prior_iterations`.
Observations are what the view reports per request (drafted / accepted since the last
read), converted to p at the depth the request drafted with. Evidence fades over
`pool_horizon` / `request_horizon` verify iterations (acceptance drifts within a step).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from simctl.policies.acceptance_tables import p_from_tau
from simctl.policies.bulk_reads import draft_counters
from simctl.policies.contract import SPEC_OFF, ClusterView, RequestId, SpecConfig, WorkerId
from simctl.policies.drafter_arms import MULTI_PATH, P_MAX


class DrafterEvidence:
    """Acceptance estimates of a best-drafter part (see the module docstring). `default`
    (each worker's setting) tells which method a request following its worker ran."""

    prior: dict[str, float]
    pool: dict[str, list[float]]
    pool_prior_iterations: float
    request_prior_iterations: float
    pool_horizon: float
    request_horizon: float
    default: dict[WorkerId, SpecConfig]
    _ratio: dict[int, float]

    def _reset_evidence(self) -> None:
        """Forget the requests (every step); the pooled evidence (`pool`) stays."""
        self.own: dict[RequestId, dict[str, list[float]]] = {}  # request -> method -> evidence
        # request -> (drafted, accepted) at the last read
        self._seen: dict[RequestId, tuple[int, int]] = {}
        self._prompt: dict[RequestId, int] = {}
        # record's memos: (drafted, depth) -> (iterations, request and pool fading factors);
        # (drafted, accepted, depth) -> p_from_tau (kept per step: they only grow)
        self._fade: dict[tuple[int, int], tuple[float, float, float]] = {}
        self._chain_p: dict[tuple[int, int, int], float] = {}

    def pooled(self, method: str) -> float:
        """Pooled chain acceptance of a method: the prior plus every observation."""
        it, ps = self.pool.get(method, (0.0, 0.0))
        n0 = self.pool_prior_iterations
        return (ps + n0 * self.prior.get(method, 0.5)) / (it + n0)

    def acceptance(self, rid: RequestId, method: str) -> float:
        """A request's chain acceptance for a method: its own evidence over the pooled one."""
        return self._blend(rid, method, self.pooled(method))

    def _blend(self, rid: RequestId, method: str, pooled: float) -> float:
        it, ps = self.own.get(rid, {}).get(method, (0.0, 0.0))
        n0 = self.request_prior_iterations
        return (ps + n0 * pooled) / (it + n0)

    def record(
        self, rid: RequestId, method: str, depth: int, ratio: float, drafted: int, accepted: int
    ) -> None:
        """Evidence from `drafted` draft tokens at `depth` of which `accepted` were accepted."""
        if drafted <= 0 or depth <= 0:
            return
        iterations = drafted / depth
        p = min(P_MAX, p_from_tau(1.0 + accepted / iterations, depth) / ratio)
        # Older evidence fades as the request moves on (acceptance drifts: a grouped tree
        # grows with the siblings), for the methods it no longer runs as well, which thus
        # return to their pooled value.
        self._credit(
            rid,
            method,
            iterations,
            p,
            math.exp(-iterations / self.request_horizon),
            math.exp(-iterations / self.pool_horizon),
        )

    def _credit(
        self, rid: RequestId, method: str, iterations: float, p: float, keep: float, keep_pool: float
    ) -> None:
        """`record` once the evidence is converted: fade the request's evidence by `keep`
        and the pooled one by `keep_pool`, then add `iterations` at acceptance p."""
        own = self.own.get(rid)
        if own is None:
            own = self.own[rid] = {}
        for ev in own.values():
            ev[0] *= keep
            ev[1] *= keep
        mine = own.get(method)
        if mine is None:
            mine = own[method] = [0.0, 0.0]
        mine[0] += iterations
        mine[1] += p * iterations
        pool = self.pool.get(method)
        if pool is None:
            pool = self.pool[method] = [0.0, 0.0]
        pool[0] = pool[0] * keep_pool + iterations
        pool[1] = pool[1] * keep_pool + p * iterations

    def _observe_request(self, rid: RequestId, view: ClusterView, worker: WorkerId | None) -> None:
        """Credit what the request drafted since the last read to the arm it ran with."""
        self._observe((rid,), view, worker)

    def _observe(self, rids: Sequence[RequestId], view: ClusterView, worker: WorkerId | None) -> None:
        """`_observe_request` for each of `rids` (on `worker`), as one loop: configuring a
        worker reads every request on it. `record`'s conversion is memoised on the integers
        it is computed from: reads repeat the same few (drafted, depth) pairs (a tick is a
        fixed number of iterations) and often the same accepted count. The counters are read
        for all of `rids` at once (`draft_counters`)."""
        seen, ratios, fade, chain_p = self._seen, self._ratio, self._fade, self._chain_p
        own_of, pool_of = self.own, self.pool
        fallback = self.default.get(worker, SPEC_OFF) if worker is not None else SPEC_OFF
        prompt = self._prompt
        drafted_now, accepted_now, specs = draft_counters(view, rids)
        for rid, d_now, a_now, spec in zip(rids, drafted_now, accepted_now, specs, strict=True):
            last = seen.get(rid)
            seen[rid] = (d_now, a_now)
            if last is None:  # first read this step (a request's prompt never changes)
                if rid not in prompt:  # (`_start` fills it for the step's requests)
                    prompt[rid] = view.request(rid).prompt_id
                drafted, accepted = d_now, a_now
            else:
                drafted = d_now - last[0]
                accepted = a_now - last[1]
            if drafted <= 0:  # nothing drafted since the last read: `record` ignores it
                continue
            if spec.plain:
                continue
            if not spec.enabled:  # the request runs with its worker's setting, if any
                spec = fallback
                if not spec.enabled:
                    continue
            method, depth = spec.method, spec.gamma
            assert method is not None  # (enabled, so depth > 0 too)
            converted = fade.get((drafted, depth))
            if converted is None:
                iterations = drafted / depth
                converted = fade[(drafted, depth)] = (
                    iterations,
                    math.exp(-iterations / self.request_horizon),
                    math.exp(-iterations / self.pool_horizon),
                )
            iterations, keep, keep_pool = converted
            q = chain_p.get((drafted, accepted, depth))
            if q is None:
                q = chain_p[(drafted, accepted, depth)] = p_from_tau(1.0 + accepted / iterations, depth)
            if method == MULTI_PATH:
                q /= ratios.get(spec.topk, 1.0)
            q = q if q < P_MAX else P_MAX
            # `_credit`, inlined (every request of a configured worker, at every tick)
            own = own_of.get(rid)
            if own is None:
                own = own_of[rid] = {}
            for ev in own.values():
                ev[0] *= keep
                ev[1] *= keep
            mine = own.get(method)
            if mine is None:
                mine = own[method] = [0.0, 0.0]
            mine[0] += iterations
            mine[1] += q * iterations
            pool = pool_of.get(method)
            if pool is None:
                pool = pool_of[method] = [0.0, 0.0]
            pool[0] = pool[0] * keep_pool + iterations
            pool[1] = pool[1] * keep_pool + q * iterations
