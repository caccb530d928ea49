"""A replayed trace's acceptance, injected into real engines (issue #14, "Replaying a trace
on hardware").

A trace records, per request and draft method, the per-token probability `a` that a
drafted token is accepted (`accept_<method>`, optionally by response position:
`accept_<method>_buckets`). Real drafters on a small CPU model accept at their own rates,
so to replay a trace on hardware with *its* speculation the engines verify synthetically:
each drafted position is accepted by a seeded Bernoulli draw with the trace's rate for the
request's method at that response position, and acceptance stops at the first rejection
(chain rule, as in real verification and in the simulator's 1 + min(Geometric(a), gamma)).

The draw for a position is a pure function of (the request's stream key, its absolute
position): a request re-dispatched after a chunk, or migrated, continues with the same
draws, as its sampled tokens do (live/torch_engine/sampling.py).

Measuring it back. The raw accepted/drafted ratio is not `a`: after the first rejection the
rest of the draft is discarded, so at a = 0.8, gamma = 4 only 59% of drafted tokens are
accepted. Every verified position up to and including the first rejection is one Bernoulli
trial, so the per-token rate a run realised is accepted / (accepted + rejections), where a
rejection is a verify iteration that accepted fewer tokens than it drafted
(`per_token_rate`); that is the number to hold against the trace's.

This module imports neither torch nor vLLM: the workload builds these objects, the engines
only evaluate them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
# keeps the acceptance draws independent of the sampling noise drawn for the same
# (key, position) by live/torch_engine/sampling.py
_ACCEPT_SALT = np.uint64(0xA5A5_1F2E_3C4D_5B6A)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser on uint64 arrays (arithmetic wraps mod 2**64, as intended)."""
    x = x + _GOLDEN
    x = (x ^ (x >> np.uint64(30))) * _MIX1
    x = (x ^ (x >> np.uint64(27))) * _MIX2
    return x ^ (x >> np.uint64(31))


def acceptance_uniforms(key: int, positions: np.ndarray) -> np.ndarray:
    """U[0, 1) per absolute position, a pure function of (key, position).

    >>> u = acceptance_uniforms(7, np.arange(3))
    >>> bool(((u >= 0) & (u < 1)).all()), bool((u == acceptance_uniforms(7, np.arange(3))).all())
    (True, True)
    """
    k = _splitmix64(np.array([key & 0xFFFF_FFFF_FFFF_FFFF], dtype=np.uint64) ^ _ACCEPT_SALT)
    h = _splitmix64(k ^ _splitmix64(np.asarray(positions, dtype=np.uint64)))
    return (h >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


@dataclass(frozen=True)
class MethodAcceptance:
    """One request's trace acceptance for one method, in replayed tokens.

    `bucket_tokens` is the bucket width in replayed tokens (the trace's
    `accept_bucket_tokens` times the replay's length scale); positions past the last
    bucket use the last one.
    """

    method: str
    prompt_len: int  # the request's original prompt: response position = absolute - this
    mean: float
    buckets: tuple[float, ...] = ()
    bucket_tokens: float | None = None

    def rates(self, response_positions: np.ndarray) -> np.ndarray:
        """Per-token acceptance at these response positions (0 = first response token).

        >>> m = MethodAcceptance("ngram", 10, 0.5, (0.9, 0.1), 2.0)
        >>> m.rates(np.arange(5)).tolist()
        [0.9, 0.9, 0.1, 0.1, 0.1]
        """
        pos = np.asarray(response_positions, dtype=np.float64)
        if not self.buckets or not self.bucket_tokens:
            return np.full(pos.shape, self.mean)
        idx = np.clip((np.maximum(pos, 0.0) // self.bucket_tokens).astype(np.int64), 0, len(self.buckets) - 1)
        return np.asarray(self.buckets, dtype=np.float64)[idx]

    def accepted(self, key: int, first_position: int, drafted: int) -> int:
        """How many of `drafted` draft tokens, the first at absolute position
        `first_position`, verification accepts: the leading run of positions whose draw
        falls under that position's rate (chain rule: nothing after the first rejection)."""
        if drafted <= 0:
            return 0
        positions = np.arange(first_position, first_position + drafted, dtype=np.int64)
        ok = acceptance_uniforms(key, positions) < self.rates(positions - self.prompt_len)
        return drafted if ok.all() else int(np.argmin(ok))


class MissingAcceptance(ValueError):
    """A request speculates with a method the replayed trace has no acceptance for."""


@dataclass(frozen=True)
class TraceAcceptance:
    """A replayed request's acceptance for every method its trace row records."""

    methods: tuple[MethodAcceptance, ...]

    def names(self) -> list[str]:
        return [m.method for m in self.methods]

    def for_method(self, method: str) -> MethodAcceptance:
        """The rates a request speculating with `method` is verified with; raises
        MissingAcceptance (one line) when the trace has no `accept_<method>`."""
        for m in self.methods:
            if m.method == method:
                return m
        have = ", ".join(f"accept_{n}" for n in self.names()) or "none"
        raise MissingAcceptance(
            f"the replayed trace has no acceptance column 'accept_{method}' for draft method "
            f"'{method}' (it has {have}): replay with a policy that drafts with one of those"
        )


def token_weighted_rates(rows: Iterable[tuple[TraceAcceptance, int]]) -> dict[str, float]:
    """Per method, the mean per-token acceptance weighted by response tokens, over
    (acceptance, response length) pairs: what one engine-wide rate stands for.

    >>> a = TraceAcceptance((MethodAcceptance("ngram", 1, 0.2),))
    >>> b = TraceAcceptance((MethodAcceptance("ngram", 1, 0.8),))
    >>> token_weighted_rates([(a, 1), (b, 3)])
    {'ngram': 0.65}
    """
    num: dict[str, float] = {}
    den: dict[str, float] = {}
    for acc, tokens in rows:
        for m in acc.methods:
            num[m.method] = num.get(m.method, 0.0) + m.mean * tokens
            den[m.method] = den.get(m.method, 0.0) + tokens
    return {k: round(num[k] / den[k], 12) for k in num if den[k] > 0}


def unconditional_rates(rate: float, gamma: int) -> list[float]:
    """vLLM's `synthetic_acceptance_rates` (P(the first i+1 drafts are all accepted)) for a
    per-token rate: [a, a^2, ..., a^gamma].

    >>> unconditional_rates(0.5, 3)
    [0.5, 0.25, 0.125]
    """
    a = min(1.0, max(0.0, float(rate)))
    return [a ** (i + 1) for i in range(gamma)]


def per_token_rate(iterations: Iterable[tuple[int, int]]) -> float | None:
    """The per-token acceptance realised over (drafted, accepted) verify iterations:
    accepted / (accepted + iterations that rejected a draft); None with no trial.

    >>> per_token_rate([(4, 4), (4, 1), (0, 0)])
    0.8333333333333334
    """
    accepted = trials = 0
    for drafted, acc in iterations:
        accepted += acc
        trials += acc + (1 if acc < drafted else 0)
    return accepted / trials if trials else None


def rates_key(rates: Mapping[str, float] | None) -> tuple[tuple[str, float], ...]:
    """A hashable, order-free form of method -> rate (engine caches key on it)."""
    return tuple(sorted((rates or {}).items()))
