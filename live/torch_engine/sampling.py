"""Position-seeded sampling: the token at an absolute position is a pure function of
(seed, request id, position, target logits).

Why this makes speculative decoding lossless by construction: the engine accepts a draft
token iff it equals the target's own sample at that position. Since that sample does not
depend on which tokens were drafted, how many, or which other requests share the batch, the
emitted sequence is exactly what plain one-token-at-a-time decoding would emit, whatever the
drafter. (Standard rejection-sampling verification is lossless only in distribution; this is
lossless per sample, which is what makes it testable token for token.)

Noise comes from a counter-based integer hash evaluated on the device (Gumbel-max trick), not
from a stateful generator: a stateful RNG would tie the noise to the order and number of draws,
i.e. to batch composition and draft length. Integer ops are exact everywhere, so the noise is
bit-identical across batch shapes; only `log` may differ by an ulp across device types.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch

_M32 = 0xFFFFFFFF
_MIX_C1 = 0x7FEB352D
_MIX_C2 = 0x846CA68B
_ROW_SALT_A = 0x243F6A88
_ROW_SALT_B = 0x85A308D3
_WORD2_SALT = 0x68E31DA4


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling controls; temperature 0 means greedy (no noise drawn)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")


def _mix32_int(x: int) -> int:
    """Scalar twin of `_mix32` (lowbias32 from hash-prospector); must stay bit-identical."""
    x &= _M32
    x ^= x >> 16
    x = (x * _MIX_C1) & _M32
    x ^= x >> 15
    x = (x * _MIX_C2) & _M32
    x ^= x >> 16
    return x


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """(x * c) mod 2**32 for int64 tensors holding uint32 values.

    Split into 16-bit halves so no intermediate exceeds 2**48: signed int64 overflow is not
    something to rely on across backends.
    """
    lo = x * (c & 0xFFFF)
    hi = ((x * (c >> 16)) & 0xFFFF) << 16
    return (lo + hi) & _M32


def _mix32(x: torch.Tensor) -> torch.Tensor:
    x = x ^ (x >> 16)
    x = _mul32(x, _MIX_C1)
    x = x ^ (x >> 15)
    x = _mul32(x, _MIX_C2)
    return x ^ (x >> 16)


def request_key(seed: int, request_id: object) -> int:
    """64-bit stream key for a request.

    Hashing `str(request_id)` (not Python's salted `hash`) keeps keys stable across processes,
    so a rerun or a replay on another machine draws the same samples.
    """
    digest = hashlib.blake2b(f"{int(seed)}\x00{request_id!s}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def _row_words(key: int, position: int) -> tuple[int, int]:
    """Two independent 32-bit words per (key, position); two so that rows whose single word
    differs only in low bits cannot produce permuted copies of each other's noise."""
    if position < 0:
        raise ValueError(f"position must be >= 0, got {position}")
    base = _mix32_int(_mix32_int(key & _M32) ^ (key >> 32))
    base = _mix32_int(base ^ (position & _M32))
    base = _mix32_int(base ^ (position >> 32))
    return _mix32_int(base ^ _ROW_SALT_A), _mix32_int(base ^ _ROW_SALT_B)


def gumbel_noise(
    keys: Sequence[int], positions: Sequence[int], vocab_size: int, device: torch.device | str
) -> torch.Tensor:
    """Standard Gumbel noise [len(keys), vocab_size] (float64), a pure function of
    (key, position, token id) per element."""
    words = [_row_words(k, p) for k, p in zip(keys, positions, strict=True)]
    w = torch.tensor(words, dtype=torch.int64, device=device).reshape(-1, 2)
    vocab = torch.arange(vocab_size, dtype=torch.int64, device=device).unsqueeze(0)
    h1 = _mix32(_mix32(vocab ^ w[:, :1]) ^ w[:, 1:])
    h2 = _mix32(h1 ^ _WORD2_SALT)
    # 53-bit uniform strictly inside (0, 1), so both logs are finite.
    mantissa = (h1 >> 5).to(torch.float64) * float(1 << 26) + (h2 >> 6).to(torch.float64)
    u = (mantissa + 0.5) / float(1 << 53)
    return -torch.log(-torch.log(u))


def _apply_top_k_top_p(scores: torch.Tensor, top_ks: torch.Tensor, top_ps: torch.Tensor) -> torch.Tensor:
    """Mask scores outside each row's top-k / nucleus with -inf (ties at the cut are kept,
    so the result does not depend on sort stability)."""
    vocab = scores.shape[-1]
    sorted_scores, _ = torch.sort(scores, dim=-1, descending=True)
    k = torch.where(top_ks > 0, top_ks.clamp(max=vocab), torch.full_like(top_ks, vocab))
    kth = sorted_scores.gather(-1, (k - 1).unsqueeze(-1))
    keep = scores >= kth
    probs = torch.softmax(sorted_scores, dim=-1)
    mass_before = torch.cumsum(probs, dim=-1) - probs
    # The smallest prefix whose mass reaches top_p: an entry is in it iff the mass strictly
    # before it is below top_p.
    in_nucleus = mass_before < top_ps.unsqueeze(-1)
    n_keep = in_nucleus.sum(-1).clamp(min=1)
    pth = sorted_scores.gather(-1, (n_keep - 1).unsqueeze(-1))
    keep &= scores >= pth
    return scores.masked_fill(~keep, float("-inf"))


# Rows sampled together. Every operation is row-wise, so blocking changes no sample; it
# keeps the float64/int64 [rows, vocab] temporaries small. Unblocked, their size grows with
# the rows (a verify step samples gamma + 1 rows per request: 160 rows x 49k vocab is 63 MB
# per temporary) and the per-row cost on CPU rose from ~2.3 ms to ~8 ms (memory traffic and
# page faults): the cost of an iteration was then not linear in its sampled rows, which a
# calibrated cost model assumes.
ROW_BLOCK = 4


@torch.inference_mode()
def sample_tokens(
    logits: torch.Tensor,
    keys: Sequence[int],
    positions: Sequence[int],
    params: Sequence[SamplingParams],
) -> torch.Tensor:
    """Sample one token per row of `logits` [N, V]; row i is the distribution for absolute
    position `positions[i]` of the request whose stream key is `keys[i]`.

    Everything is row-wise, so a row's sample cannot depend on the other rows in the call
    (rows are processed in blocks of `ROW_BLOCK` on CPU).
    """
    n, _ = logits.shape
    if not (n == len(keys) == len(positions) == len(params)):
        raise ValueError("logits rows, keys, positions and params must have equal length")
    if n == 0:
        return torch.empty(0, dtype=torch.int64, device=logits.device)
    if n <= ROW_BLOCK or logits.device.type != "cpu":
        return _sample_rows(logits, keys, positions, params)
    return torch.cat(
        [
            _sample_rows(
                logits[i : i + ROW_BLOCK],
                keys[i : i + ROW_BLOCK],
                positions[i : i + ROW_BLOCK],
                params[i : i + ROW_BLOCK],
            )
            for i in range(0, n, ROW_BLOCK)
        ]
    )


def _sample_rows(
    logits: torch.Tensor,
    keys: Sequence[int],
    positions: Sequence[int],
    params: Sequence[SamplingParams],
) -> torch.Tensor:
    vocab = logits.shape[1]
    device = logits.device
    scores = logits.to(torch.float64)
    temps = torch.tensor([p.temperature for p in params], dtype=torch.float64, device=device)
    greedy = temps == 0
    scores = scores / torch.where(greedy, torch.ones_like(temps), temps).unsqueeze(-1)
    if any(p.top_k > 0 or p.top_p < 1.0 for p in params):
        top_ks = torch.tensor([p.top_k for p in params], dtype=torch.int64, device=device)
        top_ps = torch.tensor([p.top_p for p in params], dtype=torch.float64, device=device)
        scores = _apply_top_k_top_p(scores, top_ks, top_ps)
    if bool(greedy.all()):
        return scores.argmax(dim=-1)
    noise = gumbel_noise(keys, positions, vocab, device)
    perturbed = torch.where(greedy.unsqueeze(-1), scores, scores + noise)
    return perturbed.argmax(dim=-1)
