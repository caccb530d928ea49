"""Per-step summary of a trace: the numbers that decide how long a rollout tail is."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from simctl.traces.atomic import atomic_write
from simctl.traces.io import Trace
from simctl.traces.schema import BUCKET_SUFFIX, accept_column, acceptance_methods

PERCENTILES = (50, 90, 99)


def top_decile_token_share(lengths: np.ndarray) -> float:
    """Share of all generated tokens that sit in the longest 10% of responses."""
    if len(lengths) == 0:
        return float("nan")
    k = max(1, int(np.ceil(0.1 * len(lengths))))
    top = np.partition(lengths, len(lengths) - k)[len(lengths) - k :]
    return float(top.sum() / lengths.sum())


def step_summary(trace: Trace) -> pd.DataFrame:
    """One row per step: its epoch (where the trace has the column: history drafting and
    length-history scheduling act from the second), counts, length percentiles, clip
    fraction, tail share, acceptance."""
    df = trace.df
    methods = acceptance_methods(list(df.columns))
    rows = []
    for step, g in df.groupby("step", sort=True):
        lens = g["response_len"].to_numpy()
        row: dict[str, float | int] = {"step": int(step)}
        if "epoch" in g.columns:
            row["epoch"] = int(g["epoch"].max())  # (a step's latest epoch, if it spans two)
        row |= {
            "requests": len(g),
            "groups": int(g["prompt_id"].nunique()),
            "group_size": int(g.groupby("prompt_id").size().max()),
            "mean": float(lens.mean()),
        }
        for q, v in zip(PERCENTILES, np.percentile(lens, PERCENTILES), strict=True):
            row[f"p{q}"] = float(v)
        row["max"] = int(lens.max())
        row["clip_frac"] = float((g["finish_reason"].astype(str) == "length").mean())
        row["top10_token_share"] = top_decile_token_share(lens)
        for m in methods:
            row[f"acc_{m}"] = float(g[accept_column(m)].mean())
        rows.append(row)
    return pd.DataFrame(rows)


def position_summary(trace: Trace) -> pd.DataFrame | None:
    """Acceptance by response position, one row per method with buckets
    (`accept_<method>_buckets`): the token-weighted mean of the bucket values over ranges
    of positions that double, `[0, B)`, `[B, 2B)`, `[2B, 4B)`, ... with `B` the bucket
    width (the layout of EfficientRollout's Table 8, whose EAGLE-3 acceptance falls along
    a response). Each verify iteration of a replay draws at its position's bucket
    (sim/position_acceptance.py), so this is what the simulator will use. None: no
    buckets."""
    width = trace.meta.accept_bucket_tokens
    cols = sorted(c for c in trace.lists if c.startswith("accept_") and c.endswith(BUCKET_SUFFIX))
    if not width or not cols:
        return None
    length = trace.df["response_len"].to_numpy(np.int64)
    reach = int(length.max()) if len(length) else 0
    ranges = max(1, int(np.ceil(np.log2(max(reach, width) / width))) + 1)
    labels = [_span(0, width)] + [_span(width << (r - 1), width << r) for r in range(1, ranges)]
    rows = []
    for col in cols:
        values, offsets = trace.token_arrays(col)
        counts = np.diff(offsets)
        row = np.repeat(np.arange(len(counts)), counts)
        start = (np.arange(len(values)) - offsets[:-1][row]) * width
        tokens = np.clip(length[row] - start, 0, width).astype(np.float64)
        where = np.where(start < width, 0, np.floor(np.log2(np.maximum(start, width) / width)) + 1)
        where = np.minimum(where, ranges - 1).astype(np.int64)
        weight = np.bincount(where, tokens, minlength=ranges)
        total = np.bincount(where, tokens * values.astype(np.float64), minlength=ranges)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(weight > 0, total / weight, np.nan)
        rows.append(
            {"method": col[len("accept_") : -len(BUCKET_SUFFIX)], **dict(zip(labels, mean, strict=True))}
        )
    return pd.DataFrame(rows)


def _span(lo: int, hi: int) -> str:
    """'512-1k' for [512, 1024): the range's ends in tokens, thousands as k."""

    def short(v: int) -> str:
        return f"{v // 1024}k" if v >= 1024 and v % 1024 == 0 else str(v)

    return f"{short(lo)}-{short(hi)}"


def plot_lengths(trace: Trace, path: str | Path) -> Path:
    """Length histogram (log count) and per-step CDF, so the long tail is visible at a glance."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    df = trace.df
    lens = df["response_len"].to_numpy()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    ax1.hist(lens, bins=80, color="#4C72B0")
    ax1.set_yscale("log")
    ax1.set_xlabel("response length (tokens)")
    ax1.set_ylabel("responses (log)")
    ax1.set_title(f"{trace.meta.preset or trace.path.name if trace.path else 'trace'}: all steps")
    mx = int(df["max_tokens"].max())
    ax1.axvline(mx, color="k", ls="--", lw=1, label=f"max_tokens={mx}")
    ax1.legend()
    steps = trace.steps
    chosen = steps if len(steps) <= 6 else [steps[int(i)] for i in np.linspace(0, len(steps) - 1, 6)]
    for s in chosen:
        x = np.sort(df.loc[df["step"] == s, "response_len"].to_numpy())
        ax2.plot(x, np.arange(1, len(x) + 1) / len(x), label=f"step {s}")
    ax2.set_xlabel("response length (tokens)")
    ax2.set_ylabel("CDF")
    ax2.set_title("per-step length CDF")
    ax2.grid(alpha=0.3)
    ax2.legend(fontsize=8)
    path = Path(path)
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=120, format=path.suffix.lstrip(".") or "png"))
    plt.close(fig)
    return path
