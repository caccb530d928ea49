"""Summaries of a reproduced experiment: mean, 95% interval, verdict against the paper.

The interval is Student's t interval of the mean over the samples (one per seed and
measured step; the pipeline metric one per seed). One sample gives a zero-width interval at
the value: nothing is known about its spread, and the page says n = 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from simctl.sim.experiments import Experiment
from simctl.sim.sensitivity import Curve

# Two-sided 95% quantiles of Student's t by degrees of freedom 1..30 (standard tables).
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
_Z975 = 1.959964

VERDICTS = ("in-range", "below", "above", "not-expressible", "error")


def t975(df: int) -> float:
    """Student's t 97.5% quantile; beyond the table, the Cornish-Fisher expansion."""
    if df < 1:
        raise ValueError(f"degrees of freedom {df} < 1")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclass(frozen=True)
class Summary:
    mean: float
    lo: float
    hi: float
    n: int


def summarize(samples: Sequence[float]) -> Summary:
    """Mean and 95% t interval of the mean (zero width for one sample)."""
    xs = [float(x) for x in samples]
    if not xs:
        raise ValueError("no samples to summarize")
    n = len(xs)
    mean = sum(xs) / n
    if n == 1:
        return Summary(mean, mean, mean, 1)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t975(n - 1) * sd / math.sqrt(n)
    return Summary(mean, mean - half, mean + half, n)


def verdict(ci_lo: float, ci_hi: float, paper_lo: float, paper_hi: float) -> str:
    """'in-range' when simctl's interval overlaps the paper's, else 'below' or 'above'."""
    if ci_lo > ci_hi or paper_lo > paper_hi:
        raise ValueError(f"empty interval [{ci_lo}, {ci_hi}] or [{paper_lo}, {paper_hi}]")
    if ci_hi < paper_lo:
        return "below"
    if ci_lo > paper_hi:
        return "above"
    return "in-range"


@dataclass(frozen=True)
class Result:
    """One experiment as reproduced: its samples, summary and verdict."""

    experiment: Experiment
    mode: str  # "quick" or "full"
    samples: tuple[tuple[int, int, float], ...] = ()  # (seed, step, value); step -1: whole run
    summary: Summary | None = None
    verdict: str = "not-expressible"
    reason: str = ""  # why there is no summary (not expressible, failed)
    detail: dict[str, Any] = field(default_factory=dict)
    sensitivity: Curve | None = None  # for a miss: the metric over an unpublished input

    def to_json(self) -> dict[str, Any]:
        e, s = self.experiment, self.summary
        return {
            "paper": e.paper,
            "id": e.id,
            "metric": e.metric,
            "paper_value": [e.value.lo, e.value.hi],
            "simctl": None if s is None else {"mean": s.mean, "ci95": [s.lo, s.hi], "n": s.n},
            "verdict": self.verdict,
            "title": e.title,
            "source": e.value.source,
            "baseline": e.baseline,
            "policy": e.policy,
            "preset": e.preset,
            "mode": self.mode,
            "reason": self.reason,
            **self.detail,
            **({} if self.sensitivity is None else {"sensitivity": self.sensitivity.to_json()}),
        }


def finished(e: Experiment, mode: str, samples: Sequence[tuple[int, int, float]], detail: dict) -> Result:
    """The result of an experiment that ran: summary and verdict from its finite samples
    (a metric is undefined where its denominator is 0, e.g. a baseline without a tail)."""
    values = [v for _, _, v in samples if math.isfinite(v)]
    if not values:
        return Result(e, mode, tuple(samples), verdict="error", reason="metric undefined in every sample")
    s = summarize(values)
    return Result(
        e, mode, tuple(samples), s, verdict(s.lo, s.hi, e.value.lo, e.value.hi), detail=dict(detail)
    )
