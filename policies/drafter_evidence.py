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
from typing import Any

from simctl.policies.acceptance_tables import p_from_tau
from simctl.policies.bulk_reads import draft_counters
from simctl.policies.contract import SPEC_OFF, ClusterView, RequestId, SpecConfig, WorkerId
from simctl.policies.drafter_arms import MULTI_PATH, P_MAX

# evidence converted for `record`: (iterations, request and pool fading factors, p)
Conversion = tuple[float, float, float, float]
# a drafting setting as `_observe` reads it: method, its conversions memo keyed by
# drafted * _PAIR + accepted, depth, multi-path gain (None: a chain)
Reading = tuple[str, dict[int, Conversion], int, float | None]
_PAIR = 1 << 32  # (an integer key is hashed and compared without a tuple's indirections)
_NONE = object()  # (no setting read yet)


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
        # request -> [drafted, accepted at the last read, its `own` entry or None]: one
        # lookup of a large mapping per read request, and no tuple built per read
        self._seen: dict[RequestId, list[Any]] = {}
        self._prompt: dict[RequestId, int] = {}
        # record's memos: (drafted, depth) -> (iterations, request and pool fading factors);
        # (drafted, accepted, depth) -> p_from_tau (kept per step: they only grow)
        self._fade: dict[tuple[int, int], tuple[float, float, float]] = {}
        self._chain_p: dict[tuple[int, int, int], float] = {}
        # `_reading`'s memos: id(setting) -> (setting, reading); (method, depth, gain) ->
        # conversions (the gains are set at the step start, after this reset)
        self._readings: dict[int, tuple[SpecConfig, Reading | None, bool]] = {}
        self._conversions: dict[tuple[str, int, float | None], dict[int, Conversion]] = {}

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
            rec = self._seen.get(rid)
            if rec is not None:  # (`_observe` holds a request's entry once read)
                rec[2] = own
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

    def _observe(
        self, rids: Sequence[RequestId], view: ClusterView, worker: WorkerId | None
    ) -> list[dict[str, list[float]] | None]:
        """`_observe_request` for each of `rids` (on `worker`), as one loop: configuring a
        worker reads every request on it. Returns each request's evidence afterwards (its
        `own` entry, None: none), which configuring reads next.

        The counters are read for all of `rids` at once (`draft_counters`). How a setting
        is read (`_reading`) is memoised per setting object, and `record`'s conversion per
        reading on the integers it is computed from (`_convert`): reads repeat the same few
        settings and (drafted, accepted) pairs (a tick is a fixed number of iterations).
        This runs for every request of a configured worker at every tick, with the
        simulator's state between two calls: it touches as few objects as it can."""
        seen, readings = self._seen, self._readings
        own_of, pool_of = self.own, self.pool
        # (on a worker, plain decoding and no setting mean the same)
        fallback = self._reading(self.default.get(worker, SPEC_OFF) if worker is not None else SPEC_OFF)[1]
        prompt = self._prompt
        owns: list[dict[str, list[float]] | None] = []
        drafted_now, accepted_now, specs = draft_counters(view, rids)
        # the last setting read and the last method credited: a worker's requests mostly
        # share both (one lookup each per run of equal ones, not per request)
        last_spec: object = _NONE
        read: tuple[SpecConfig, Reading | None, bool] | None = None
        last_method: str | None = None
        pool = [0.0, 0.0]
        for rid, d_now, a_now, spec in zip(rids, drafted_now, accepted_now, specs, strict=True):
            rec = seen.get(rid)
            if rec is None:  # first read this step (a request's prompt never changes)
                if rid not in prompt:  # (`_start` fills it for the step's requests)
                    prompt[rid] = view.request(rid).prompt_id
                own = own_of.get(rid)
                rec = seen[rid] = [d_now, a_now, own]
                drafted, accepted = d_now, a_now
            else:
                drafted = d_now - rec[0]
                accepted = a_now - rec[1]
                rec[0], rec[1] = d_now, a_now
                own = rec[2]
            owns.append(own)
            if drafted <= 0:  # nothing drafted since the last read: `record` ignores it
                continue
            if spec is not last_spec or read is None:
                last_spec = spec
                read = readings.get(id(spec))
                if read is None:
                    read = self._reading(spec)
            reading = read[1]
            if reading is None:
                if read[2]:  # told to decode plainly
                    continue
                reading = fallback  # it runs with its worker's setting, if any
                if reading is None:
                    continue
            method, conversions, _, _ = reading
            converted = conversions.get(drafted * _PAIR + accepted) if 0 <= accepted < _PAIR else None
            if converted is None:
                converted = self._convert(reading, drafted, accepted)
            iterations, keep, keep_pool, q = converted
            # `_credit`, inlined
            if own is None:
                own = rec[2] = own_of[rid] = {}
                owns[-1] = own
            for ev in own.values():
                ev[0] *= keep
                ev[1] *= keep
            mine = own.get(method)
            if mine is None:
                mine = own[method] = [0.0, 0.0]
            gain = q * iterations
            mine[0] += iterations
            mine[1] += gain
            if method != last_method:
                last_method = method
                got = pool_of.get(method)
                pool = pool_of[method] = [0.0, 0.0] if got is None else got
            pool[0] = pool[0] * keep_pool + iterations
            pool[1] = pool[1] * keep_pool + gain
        return owns

    def _reading(self, spec: SpecConfig) -> tuple[SpecConfig, Reading | None, bool]:
        """How `_observe` reads a request under `spec` (memoised per object, which the memo
        keeps alive so that its id is not reused): (spec, reading, plain). The reading of
        a setting that drafts is its method and the conversions of its evidence
        (`_convert`), shared by every setting of the same method, depth and multi-path
        gain; None otherwise, where `plain` tells plain decoding (nothing to credit) from
        no setting (the request follows its worker's)."""
        got = self._readings.get(id(spec))
        if got is not None:
            return got
        reading: Reading | None = None
        if spec.enabled:
            method = spec.method
            assert method is not None  # (enabled, so depth > 0 too)
            ratio = self._ratio.get(spec.topk, 1.0) if method == MULTI_PATH else None
            memo_key = (method, spec.gamma, ratio)
            conversions = self._conversions.get(memo_key)
            if conversions is None:
                conversions = self._conversions[memo_key] = {}
            reading = (method, conversions, spec.gamma, ratio)
        got = self._readings[id(spec)] = (spec, reading, spec.plain)
        return got

    def _convert(self, reading: Reading, drafted: int, accepted: int) -> Conversion:
        """`record`'s conversion of `drafted` draft tokens of which `accepted` were accepted
        under `reading`: (iterations, request and pool fading factors, p), memoised in the
        reading (and its parts across readings of the same depth)."""
        _, conversions, depth, ratio = reading
        fade = self._fade.get((drafted, depth))
        if fade is None:
            iterations = drafted / depth
            fade = self._fade[(drafted, depth)] = (
                iterations,
                math.exp(-iterations / self.request_horizon),
                math.exp(-iterations / self.pool_horizon),
            )
        iterations, keep, keep_pool = fade
        q = self._chain_p.get((drafted, accepted, depth))
        if q is None:
            q = self._chain_p[(drafted, accepted, depth)] = p_from_tau(1.0 + accepted / iterations, depth)
        if ratio is not None:  # the multi-path suffix tree: the chain's p from the tree's
            q /= ratio
        q = q if q < P_MAX else P_MAX
        got = (iterations, keep, keep_pool, q)
        if 0 <= accepted < _PAIR:  # (the memo's key holds both counts in one integer)
            conversions[drafted * _PAIR + accepted] = got
        return got
