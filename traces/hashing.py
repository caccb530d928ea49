"""64-bit hashing of token arrays, shared by the token generator and the simulator's n-gram
keys (both must hash alike for exact replay to find what generation put there).

>>> hex(int(splitmix64(np.array([1], dtype=np.uint64))[0]))  # pinned: generated token traces depend on it
'0x5692161d100b05e5'
"""

from __future__ import annotations

import numpy as np

_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
#: Multiplier spreading token ids over 64 bits before mixing (2^64 / golden ratio).
GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser: a cheap, well-mixed hash of uint64 arrays (wraps on overflow)."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))
