"""Per-request acceptance for the recorded trace, in the unit the simulator consumes.

The trace's `accept_<method>` is a per-token acceptance probability a: the simulator draws
each verify iteration's tokens as 1 + min(Geometric(a), gamma) (sim/acceptance.py). The
engine's raw accepted/drafted ratio is not that number: drafts stop at the first
rejection, so at a = 0.8, gamma = 4 only 59% of drafted tokens are accepted. Replaying
accepted/drafted would make the simulator's speculation far too slow, so the recorder
stores the a whose expected tokens per iteration equal the observed ones (and the raw
counts go to the run directory's requests table).

A drafter may also propose fewer than gamma tokens (an n-gram drafter finds no match most
of the time at temperature 1). `draft_fill_<method>` (drafted / (gamma x iterations))
records how full the draft slots really were: the simulator prices verification by it.
`draft_hit_<method>` (iterations with at least one draft token / iterations) records how
often the drafter proposed anything at all. Fill alone does not say that: an engine that
pads the verify forward to its widest request pays the full verify width as soon as one
request drafts, and plain decode cost when none does, so the expected cost of an iteration
depends on P(no request drafts) = prod(1 - hit_i), not only on the mean fill (on a CPU run
with SmolLM2 and n-gram drafting, 17% of iterations had no draft; pricing all of them at
the mean fill overpredicted the run by 4%). The simulator prices that mix (`sim/worker.py`).

Model-free drafters are deterministic and verification is exact match, so their
acceptance on a recorded response is not a guess: replaying the drafter over the tokens
(`replay_model_free`) gives exactly what the engine would have accepted, for requests or
runs that never speculated with that method.
"""

from __future__ import annotations

from collections.abc import Sequence

from simctl.live.drafters import model_free_drafter
from simctl.policies.efficientrollout import acceptance_from_tau


def fit_alpha(tokens: int, iterations: int, gamma: float) -> float:
    """Per-token acceptance a with E[tokens per iteration | a, gamma] = tokens / iterations."""
    if iterations <= 0 or gamma <= 0:
        return 0.0
    g = max(1, round(gamma))
    return float(min(1.0, max(0.0, acceptance_from_tau(tokens / iterations, g))))


def replay_model_free(
    method: str,
    prompt: Sequence[int],
    response: Sequence[int],
    siblings: Sequence[tuple[Sequence[int], Sequence[int]]],
    gamma: int,
) -> tuple[int, int, int, int]:
    """(tokens, iterations, drafted, hits) the engine would need for `response` drafting with
    `method` at draft length `gamma` (hits: iterations that drafted anything). Siblings
    (prompt, response) are seen up to the same response position: group members decoding
    side by side advance about one token per iteration."""
    drafter = model_free_drafter(method)
    ctx = list(prompt)
    n = len(response)
    pos = iterations = drafted = hits = 0
    while pos < n:
        k = min(gamma, n - pos - 1)
        group = [[*p, *r[:pos]] for p, r in siblings] if method == "suffix" else []
        draft = drafter.propose(ctx, group, k) if k > 0 else []
        drafted += min(len(draft), k)
        hits += min(len(draft), k) > 0
        accepted = 0
        while accepted < min(len(draft), k) and draft[accepted] == response[pos + accepted]:
            accepted += 1
        step = accepted + 1
        ctx.extend(response[pos : pos + step])
        pos += step
        iterations += 1
    return n, iterations, drafted, hits
