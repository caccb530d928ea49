"""Sampling how many tokens a speculative iteration yields.

With per-token acceptance probability a and draft length g, a verify iteration emits
1 + min(G, g) tokens where G ~ Geometric(a) counts accepted drafts before the first
rejection (the +1 is the target's correction/bonus token). Iterations are independent given
a, so sampling a whole block of iterations at once and discarding the unused tail is
statistically identical to stepping one iteration at a time.
"""

from __future__ import annotations

import numpy as np

# Acceptance 1.0 would make numpy's geometric(p=0) undefined; this cap changes nothing
# observable for gamma <= 64.
MAX_ACCEPT = 1.0 - 1e-12


def expected_tokens(alpha: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    """E[tokens per iteration] = (1 - a^(g+1)) / (1 - a); g + 1 when a = 1."""
    a = np.minimum(np.maximum(alpha, 0.0), MAX_ACCEPT)  # np.clip, without its overhead
    g = np.asarray(gamma, dtype=np.float64)
    return np.where(g > 0, (1.0 - a ** (g + 1.0)) / (1.0 - a), 1.0)


def inverse_log(a: np.ndarray) -> np.ndarray:
    """1 / ln a in float32, 0 where a = 0 (no draft is ever accepted): what a cell of
    `sample_tokens` multiplies ln U by (sim.position_acceptance tables it per bucket)."""
    with np.errstate(divide="ignore"):
        return np.where(a > 0, 1.0 / np.log(np.maximum(a, 1e-300)), 0.0).astype(np.float32)


def sample_tokens(
    rng: np.random.Generator, alpha: np.ndarray, gamma: np.ndarray, iterations: int
) -> np.ndarray:
    """Tokens emitted per request (rows) per iteration (columns), int16.

    1 + min(G, g) = 1 + #{j in 1..g : U < a^j} for one uniform U per iteration, and since
    a^j falls with j that count is ceil(ln U / ln a) - 1: one pass over the matrix whatever
    the draft length, instead of drawing geometrics or comparing against g thresholds.
    """
    a = np.minimum(np.maximum(np.asarray(alpha, dtype=np.float64), 0.0), MAX_ACCEPT)
    g = np.asarray(gamma, dtype=np.int64)
    u = rng.random((len(a), iterations), dtype=np.float32)
    drafts = a > 0
    inv = inverse_log(a)
    with np.errstate(divide="ignore", invalid="ignore"):  # (ln 0, and 0 * -inf: see below)
        r = np.log(u, out=u)
        r *= inv[:, None]
    np.ceil(r, out=r)
    top = (g + 1).astype(np.float32)[:, None]
    if drafts.all():
        # ln U < 0 (U < 1) and 1/ln a < 0 (0 < a < 1): r > 0 (+inf at U = 0), never NaN, so
        # ceil(r) >= 1 already; the clamp at g + 1 writes the int16 result directly
        return np.minimum(r, top, out=np.empty(r.shape, np.int16), casting="unsafe")
    # in place, as np.clip(r, 1, g + 1) without its temporaries (but NaN, which 0 * ln 0
    # makes of a row that never drafts at U = 0, becomes 1 where np.clip keeps it); the 1 as
    # a column, which numpy broadcasts several times faster than a Python scalar
    np.fmax(r, np.ones((len(a), 1), np.float32), out=r)
    np.minimum(r, top, out=r)
    return r.astype(np.int16)


def stall_after_rejection(tokens: np.ndarray, window: np.ndarray) -> np.ndarray:
    """Decoupled speculation (SpecActor §4.1): the drafter runs up to a window ahead, so a
    fully accepted window is followed at once by the next; after a rejection the drafts in
    flight are wasted and the request sits out one verification while the drafter redrafts.

    `tokens` holds one verification outcome per column (1..w+1); returns the same outcomes
    laid out in iterations with a 0-token iteration after every rejected window.
    """
    full = tokens == (window[:, None] + 1)
    length = np.where(full, 1, 2)
    start = np.cumsum(length, axis=1) - length
    out = np.zeros_like(tokens)
    keep = start < tokens.shape[1]
    rows, _ = np.nonzero(keep)
    out[rows, start[keep]] = tokens[keep]
    return out


# Tree drafting: probability that an alternative (non-top) candidate at a level matches,
# relative to the top candidate. Assumed 0.5: with it a chain acceptance of 0.65 becomes an
# acceptance length of ~8.6 at depth 12, topK 8, 64 tokens to verify, as TLT Table 1
# measures, and widening past verify // depth candidates per level changes nothing (Table 1
# shows topK 6..16 alike; our model is more sensitive below that).
TREE_ALT_MATCH = 0.5


def tree_acceptance(alpha: np.ndarray, gamma: np.ndarray, topk: np.ndarray, verify: np.ndarray) -> np.ndarray:
    """Per-level acceptance of a token tree: the level is accepted when the top candidate
    or one of the w-1 alternatives the verify budget covers matches,
    p_tree = 1 - (1 - p) * (1 - c*p)^(w - 1), w = min(topk, verify // depth)."""
    a = np.asarray(alpha, dtype=np.float64)
    depth = np.maximum(np.asarray(gamma, dtype=np.int64), 1)
    w = np.maximum(1, np.minimum(np.asarray(topk), np.asarray(verify) // depth))
    return 1.0 - (1.0 - a) * (1.0 - TREE_ALT_MATCH * a) ** (w - 1)
