"""What every `simctl calibrate` backend shares: the sweep of shapes to time and the
profile's measurement rows (format `simctl-profile/1`: sim/cost_model.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_BATCHES = (1, 4, 16, 32)
DEFAULT_CONTEXTS = (64, 256)
DEFAULT_GAMMAS = (4,)
DEFAULT_PREFILL = ((1, 64), (1, 256), (8, 64), (4, 256))
DEFAULT_DRAFTERS = ("ngram", "suffix", "w4-self")


@dataclass(frozen=True)
class Sweep:
    batches: Sequence[int] = DEFAULT_BATCHES
    contexts: Sequence[int] = DEFAULT_CONTEXTS
    gammas: Sequence[int] = DEFAULT_GAMMAS
    prefill: Sequence[tuple[int, int]] = DEFAULT_PREFILL
    drafters: Sequence[str] = DEFAULT_DRAFTERS
    repeats: int = 3


def measurement_row(
    kind: str, b: int, n: int, ctx: int, gamma: int, t: float, cpu: float | None = None
) -> dict[str, Any]:
    """One measurement of a `simctl-profile/1` profile (format: sim/cost_model.py)."""
    row = {
        "kind": kind,
        "num_seqs": b,
        "new_tokens": n,
        "context_tokens": ctx,
        "gamma": gamma,
        "time_s": max(t, 1e-7),
    }
    if cpu is not None:
        # This thread's CPU time in the same steps (not read by the simulator): cpu_s well
        # below time_s means the host took the core away while measuring.
        row["cpu_s"] = max(cpu, 1e-7)
    return row
