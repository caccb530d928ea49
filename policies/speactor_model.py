"""SpecActor's performance model and its three algorithms, as pure functions (SpecActor §4).

Costs enter as affine laws in the batch size, D(b) = b*D' + alpha for drafting one token
and V_w(b) = b*V'_w + beta_w for verifying w drafted tokens, fitted from whatever cost
oracle the executor offers (the simulator's roofline or a measured profile), so the same
code plans in simulation and on hardware.

Worked example (p = 0.8, w = 2): P(0) = 0.2, P(1) = 0.16, P(2) = 0.64, so
tau_2 = 0.2*1/2 + 0.16*2/2 + 2*0.64 = 1.54 tokens per window.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache, partial


@dataclass(frozen=True)
class Affine:
    """t(b) = slope * b + intercept (seconds)."""

    slope: float
    intercept: float

    def __call__(self, b: float) -> float:
        return self.slope * b + self.intercept

    @classmethod
    def fit(cls, f: Callable[[float], float], lo: float = 1.0, hi: float = 128.0) -> Affine:
        """Two-point fit; the paper fits offline profiles the same way (§4.1)."""
        y0, y1 = f(lo), f(hi)
        slope = max(0.0, (y1 - y0) / (hi - lo))
        return cls(slope=slope, intercept=max(0.0, y0 - slope * lo))


def accept_distribution(p: float, w: int) -> list[float]:
    """P(a, w): a tokens of a w-token window accepted (SpecActor §4.1)."""
    return [p**a * (1.0 - p) for a in range(w)] + [p**w]


def tau_decoupled(p: float, w: int) -> float:
    """Expected tokens per decoupled window: a partially accepted window costs a second
    cycle (the drafter redrafts), so it yields (a+1)/2 per cycle; a full one yields w.
    (Summed term by term in order, as `taus_decoupled` does for every window at once.)"""
    probs = accept_distribution(p, w)
    partial_s = 0.0
    for a in range(w):
        partial_s += probs[a] * (a + 1) / 2.0
    return partial_s + w * probs[w]


def taus_decoupled(p: float, max_window: int) -> list[float]:
    """`tau_decoupled(p, w)` for w = 1 .. max_window in one pass (equal to the float): the
    sums of shorter windows are prefixes of a longer one's. Algorithm 2 asks for every
    window of every running request below the mean acceptance at every tick."""
    out = []
    partial_s = 0.0
    for a in range(max_window):
        partial_s += p**a * (1.0 - p) * (a + 1) / 2.0
        w = a + 1
        out.append(partial_s + w * p**w)
    return out


def tokens_coupled(p: float, gamma: int) -> float:
    """Expected tokens per coupled draft-then-verify iteration (with the bonus token)."""
    if p >= 1.0:
        return gamma + 1.0
    return (1.0 - p ** (gamma + 1)) / (1.0 - p)


@dataclass(frozen=True)
class CostLaws:
    """Affine cost laws of one draft method against one verifier configuration."""

    draft: Affine  # one draft token for a batch of b, on one drafter GPU
    verify: Callable[[int], Affine]  # w -> verification of w drafted tokens, batch b
    decode: Affine  # plain decoding, batch b


def tgs_decoupled(laws: CostLaws, p: float, w: int, b: float, drafter_gpus: int) -> float:
    """Tokens per second per request: tau_w / max(w * D_gd(b), V_w(b)); g_d drafter GPUs
    split the batch data-parallel."""
    draft = w * laws.draft(b / max(drafter_gpus, 1))
    return tau_decoupled(p, w) / max(draft, laws.verify(w)(b), 1e-12)


def tgs_coupled(laws: CostLaws, p: float, w: int, b: float) -> float:
    return tokens_coupled(p, w) / max(w * laws.draft(b) + laws.verify(w)(b), 1e-12)


def tgs_plain(laws: CostLaws, b: float) -> float:
    return 1.0 / max(laws.decode(b), 1e-12)


@dataclass(frozen=True)
class Plan:
    """Algorithm 1's output: drafter GPUs per verifier (0 = coupled), verifier GPUs, window."""

    drafter_gpus: int
    verifier_gpus: int
    window: int
    tgs: float
    batch: float


def plan_search(
    laws: CostLaws,
    p: float,
    total_batch: int,
    total_gpus: int,
    verifier_configs: Sequence[int],
    max_window: int = 16,
) -> Plan:
    """Algorithm 1: enumerate verifier configurations, drafter GPUs (fewer than the
    verifier's, line 3) and windows up to the pruning bound of line 5; keep the best TGS."""
    best = Plan(0, 0, 0, 0.0, 0.0)
    for g_v in verifier_configs:
        for g_d in range(1, g_v + 1):
            b = math.ceil((g_d + g_v) * total_batch / total_gpus)
            v1 = laws.verify(1)
            w_max = max(
                math.ceil(v1.slope / max(laws.draft.slope, 1e-15)),
                math.ceil(v1.intercept / max(laws.draft.intercept, 1e-15)),
            )
            w_max = max(1, min(w_max, max_window))
            for w in range(1, w_max + 1):
                tgs = tgs_decoupled(laws, p, w, b, g_d)
                if tgs > best.tgs:
                    best = Plan(g_d, g_v, w, tgs, b)
    return best


def best_window(tgs_of_w: Callable[[int], float], max_window: int = 16) -> tuple[int, float]:
    """(w, TGS) maximising TGS over 1..max_window; ties keep the smaller window."""
    best_w, best = 1, tgs_of_w(1)
    for w in range(2, max_window + 1):
        v = tgs_of_w(w)
        if v > best:
            best_w, best = w, v
    return best_w, best


def reconfigure(laws: CostLaws, p: float, drafter_gpus: int, max_window: int = 16) -> tuple[str, int, float]:
    """Algorithm 2 for one request at batch 1: ('coupled'|'decoupled', window, TGS).

    The best windows of `tgs_coupled` and `tgs_decoupled` at b = 1 (`best_window`), the
    same floats computed with the cost side once per (laws, drafter GPUs, windows): only
    the acceptance differs from request to request (`_window_costs`)."""
    coupled_s, decoupled_s = _window_costs(laws, drafter_gpus, max_window)
    w_c, t_c = _best_ratio([tokens_coupled(p, w) for w in range(1, max_window + 1)], coupled_s)
    w_d, t_d = _best_ratio(taus_decoupled(p, max_window), decoupled_s)
    return ("decoupled", w_d, t_d) if t_d > t_c else ("coupled", w_c, t_c)


@lru_cache(maxsize=256)
def _window_costs(laws: CostLaws, drafter_gpus: int, max_window: int) -> tuple[list[float], list[float]]:
    """Per window w = 1 .. max_window at b = 1: the denominators of `tgs_coupled` and
    `tgs_decoupled` (seconds per iteration and per window cycle)."""
    b = 1.0
    coupled = [max(w * laws.draft(b) + laws.verify(w)(b), 1e-12) for w in range(1, max_window + 1)]
    decoupled = [
        max(w * laws.draft(b / max(drafter_gpus, 1)), laws.verify(w)(b), 1e-12)
        for w in range(1, max_window + 1)
    ]
    return coupled, decoupled


def _best_ratio(tokens: list[float], seconds: list[float]) -> tuple[int, float]:
    """`best_window` over tokens[w - 1] / seconds[w - 1]: the first maximum."""
    best_w, best = 1, tokens[0] / seconds[0]
    for i in range(1, len(tokens)):
        v = tokens[i] / seconds[i]
        if v > best:
            best_w, best = i + 1, v
    return best_w, best


@dataclass(frozen=True)
class LadderRung:
    method: str
    acceptance: float
    gamma: int
    speedup: float  # over plain decoding at the ladder's batch size


def draft_ladder(
    laws_by_method: dict[str, CostLaws], acceptance: dict[str, float], batch: float, max_gamma: int = 8
) -> list[LadderRung]:
    """Speedup of each method at its (profiled) acceptance, best first (§4.2, Fig. 11).
    The paper builds it by simulating random acceptance; the closed-form expectation of the
    same process is used here."""
    rungs = []
    for m, laws in laws_by_method.items():
        p = acceptance[m]
        g, tgs = best_window(partial(tgs_coupled, laws, p, b=batch), max_gamma)
        rungs.append(LadderRung(m, p, g, tgs / tgs_plain(laws, batch)))
    return sorted(rungs, key=lambda r: (-r.speedup, r.method))


def has_room(
    method: str, workers_by_method: dict[str, list[int]], load: dict[int, int], max_batch: int
) -> bool:
    """Whether a worker serving `method` can take another copy (its batch below `max_batch`)."""
    return any(load.get(w, 0) < max_batch for w in workers_by_method.get(method, ()))


def least_loaded(
    method: str,
    workers_by_method: dict[str, list[int]],
    free: list[int],
    load: dict[int, int],
    max_batch: int,
) -> int | None:
    """Algorithm 3's choice of worker for one copy: the least-loaded worker serving
    `method` whose batch is below `max_batch`, else the first free worker, dedicated to the
    method from then on (taken from `free`); None when neither exists."""
    pool = [w for w in workers_by_method.get(method, []) if load.get(w, 0) < max_batch]
    if not pool and free:
        w_new = free.pop(0)
        workers_by_method.setdefault(method, []).append(w_new)
        pool = [w_new]
    if not pool:
        return None
    return min(pool, key=lambda x: (load.get(x, 0), x))


def fastest_of_n(
    requests: Sequence[tuple[int, float]],
    methods: Sequence[str],
    assigned: dict[tuple[int, str], int],
    workers_by_method: dict[str, list[int]],
    free_workers: list[int],
    load: dict[int, int],
    max_batch: int,
) -> list[tuple[int, str, int]]:
    """Algorithm 3, draft-first greedy: requests by acceptance ascending, methods by ladder
    rank; each (request, method) pair not yet running goes to the least-loaded worker that
    serves that method (a free worker is dedicated to a method on first use) while its
    verification batch stays below `max_batch`. Returns new (request, method, worker)."""
    out = []
    free = list(free_workers)

    # methods whose workers have room; once none has and no free worker is left, no later
    # request can be placed (loads only grow), so the scan stops there
    room = {m: has_room(m, workers_by_method, load, max_batch) for m in methods}
    # (acceptance, request) tuples sort in C: the order of a key of the same pair
    for _acc, rid in sorted([(acc, rid) for rid, acc in requests]):
        if not free and not any(room.values()):
            break
        for m in methods:
            if (rid, m) in assigned or not (free or room[m]):
                continue
            w = least_loaded(m, workers_by_method, free, load, max_batch)
            if w is None:
                continue
            assigned[(rid, m)] = w
            load[w] = load.get(w, 0) + 1
            out.append((rid, m, w))
            room[m] = has_room(m, workers_by_method, load, max_batch)
    return out
