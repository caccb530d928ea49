"""Where the GPU-seconds of a rollout and the seconds of an RL step went, from what a run
recorded, never estimated.

Rollout (one step, one series): makespan x GPUs split per worker into busy phases, time
lent to another role (drafter, verifier, trainer: roles.parquet) and idle, so the parts add
up to makespan x GPUs and idle over the total is the run's own `gpu_idle_fraction`
(sim/metrics.py). What the busy time splits into depends on what the executor recorded:

- simulated runs (timeline.parquet): each segment records the seconds the simulator priced
  for `prefill` (first-admitted prompts), `preemption recompute` (context whose KV was lost
  to a preemption, or to a re-dispatch or migration without KV transfer, including tokens
  carried over from an earlier step) and `draft` (drafting on the worker's own GPUs, plus
  any wait for a decoupled drafter slower than verification); the rest of a segment is
  `verify` where it speculated, else `decode`. A prefill pass is priced once for all the
  tokens admitted before an iteration, so its prefill and recompute parts are shared in
  proportion to their tokens. Drafting on separate drafter workers (SpecActor's decoupled
  drafters, TLT's spot drafter) is theirs: `lent to another role`, not counted again.
  Runs written before the split (no prefill_s/recompute_s/draft_s columns) show
  `decode` and `speculative (draft + verify)`, with the rest "not recorded".
- live runs (iterations.parquet, one row per engine iteration): `draft` (the engine's own
  draft_s, also where the drafter proposed nothing), `verify` (the rest of an iteration
  that drafted), `prefill + decode` (the rest of one that admitted uncached tokens: prefill
  and the batch's decode share one forward), `decode`, and `executor / policy` (busy time
  outside the engine). The live executor does not preempt.

Step (mean over steps): rollout (the makespan), reward, training after the rollout and
weight sync, from run.json `parts` (sim/metrics.py: the trace's timing, else modelled by
sim/step_time.py). Live runs carry no `parts`: their step time is the measured makespan
plus the trace's recorded reward/training/sync timing where the workload has it, added up
without keeping the parts (live/recorder.py), and nothing is modelled live; so the time
after the rollout is one part, "not split", rather than a split the run never recorded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from simctl.reports.context import Context
from simctl.reports.load import Series
from simctl.reports.tables import Col, Table, fmt_num, fmt_pct, fmt_text
from simctl.sim.role_time import LENT_ROLES, role_seconds
from simctl.traces.run_format import PHASE_COLUMNS

# Every phase a breakdown may have, in drawing order; a run fills those it records.
PHASES = (
    "prefill",
    "preemption recompute",
    "prefill + decode",
    "decode",
    "speculative (draft + verify)",
    "draft",
    "verify",
    "executor / policy",
    "lent to another role",
    "idle",
)
SIM_PHASES = ("prefill", "preemption recompute", "decode", "draft", "verify", "lent to another role", "idle")
# simulated runs written before the timeline recorded its phase split
OLD_SIM_PHASES = ("decode", "speculative (draft + verify)", "lent to another role", "idle")
LIVE_PHASES = (
    "prefill + decode",
    "decode",
    "verify",
    "draft",
    "executor / policy",
    "lent to another role",
    "idle",
)
STEP_PARTS = ("rollout_s", "reward_s", "train_s", "weight_sync_s", "after_rollout_s")
STEP_PART_LABELS = {
    "rollout_s": "rollout",
    "reward_s": "reward",
    "train_s": "train",
    "weight_sync_s": "weight sync",
    "after_rollout_s": "after rollout (not split)",
}


@dataclass
class PhaseSeconds:
    """GPU-seconds of one series at one step, per phase it records."""

    label: str
    step: int
    makespan_s: float
    gpus: float  # all GPUs of the rollout workers
    seconds: dict[str, float] = field(default_factory=dict)
    not_recorded: tuple[str, ...] = ()

    @property
    def total(self) -> float:
        return float(sum(self.seconds.values()))


def gpus_per_worker(s: Series) -> float:
    """A simulated worker holds `gpus_per_worker` GPUs (cluster provenance; `tp` in runs
    recorded before data-parallel attention workers existed); a live worker one device."""
    cluster = s.run.cluster
    tp = cluster.get("gpus_per_worker", cluster.get("tp"))
    return float(tp) if isinstance(tp, int) and tp > 0 else 1.0


def _clipped(t0: np.ndarray, t1: np.ndarray, end: float) -> np.ndarray:
    return np.clip(t1, 0.0, end) - np.clip(t0, 0.0, end)


def _per_worker(workers: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    return np.bincount(workers.astype(np.int64), weights=values, minlength=n)[:n]


def phase_seconds(ctx: Context, s: Series, step: int | None = None) -> PhaseSeconds | None:
    """The breakdown of one series at a step (default: the report's); None without a
    timeline there or a finite makespan."""
    step = ctx.step if step is None else step
    seg = ctx.step_rows(s, "timeline", step)
    mk = s.makespan(step)
    if seg is None or seg.empty or not math.isfinite(mk) or mk <= 0:
        return None
    n = max(ctx.num_workers(s, seg), int(seg["worker"].max()) + 1)
    w = seg["worker"].to_numpy()
    dur = _clipped(seg["t0_s"].to_numpy(float), seg["t1_s"].to_numpy(float), mk)
    busy = _per_worker(w, dur, n)
    roles = ctx.step_rows(s, "roles", step)
    changes = (
        []
        if roles is None
        else list(
            zip(
                roles["worker"].astype(int),
                roles["time_s"].astype(float),
                roles["role"].astype(str),
                strict=True,
            )
        )
    )
    changes.sort(key=lambda c: c[1])
    lent = np.minimum(role_seconds(changes, n, mk, LENT_ROLES), np.clip(mk - busy, 0.0, None))
    g = gpus_per_worker(s)
    out = PhaseSeconds(s.label, step, mk, g * n)
    iters = ctx.step_rows(s, "iterations", step)
    if iters is not None and not iters.empty:
        out.seconds = _live_busy(iters, busy, mk, n, g)
        out.not_recorded = ("preemption recompute",)
    elif all(c in seg and bool(seg[c].notna().all()) for c in PHASE_COLUMNS):
        out.seconds = _sim_busy(seg, dur, g)
    else:
        spec = seg["gamma_mean"].fillna(0.0).to_numpy(float) > 0
        out.seconds = {
            "decode": float((dur[~spec]).sum() * g),
            "speculative (draft + verify)": float((dur[spec]).sum() * g),
        }
        out.not_recorded = ("prefill", "draft vs verify", "preemption recompute")
    out.seconds["lent to another role"] = float(lent.sum() * g)
    out.seconds["idle"] = float((mk - busy - lent).clip(0.0).sum() * g)
    return out


def _sim_busy(seg: pd.DataFrame, dur: np.ndarray, g: float) -> dict[str, float]:
    """Busy GPU-seconds of a simulated step by the phases its timeline recorded (module
    docstring); `dur`: each segment's seconds before the makespan, the phases of a segment
    that runs past it counted in the same share."""
    span = (seg["t1_s"] - seg["t0_s"]).to_numpy(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(span > 0, dur / span, 0.0)
    prefill, recompute, draft = (seg[c].to_numpy(float) * share for c in PHASE_COLUMNS)
    rest = np.clip(dur - prefill - recompute - draft, 0.0, None)
    spec = seg["gamma_mean"].fillna(0.0).to_numpy(float) > 0
    parts = {
        "prefill": prefill,
        "preemption recompute": recompute,
        "decode": np.where(spec, 0.0, rest),
        "draft": draft,
        "verify": np.where(spec, rest, 0.0),
    }
    return {k: float(v.sum() * g) for k, v in parts.items()}


def _live_busy(it: pd.DataFrame, busy: np.ndarray, mk: float, n: int, g: float) -> dict[str, float]:
    """Busy seconds of a live step split by its engine iterations (module docstring)."""
    t0 = it["t0_s"].to_numpy(float)
    eng = it["engine_s"].to_numpy(float)
    inside = _clipped(t0, t0 + eng, mk)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(eng > 0, inside / eng, 0.0)  # the part of each iteration before the makespan
    draft = np.minimum(it["draft_s"].to_numpy(float) * share, inside)  # proposing, even nothing
    rest = inside - draft
    drafted = it["drafted"].to_numpy() > 0
    prefill = (it["prefill_tokens"].to_numpy() > 0) & ~drafted
    w = it["worker"].to_numpy()
    engine_w = _per_worker(w, inside, n)
    # an engine can report more than the executor's busy span: never more than busy
    scale = np.where(engine_w > busy, busy / np.where(engine_w > 0, engine_w, 1.0), 1.0)[w.astype(np.int64)]
    parts = {
        "prefill + decode": np.where(prefill, rest, 0.0),
        "decode": np.where(~prefill & ~drafted, rest, 0.0),
        "verify": np.where(drafted, rest, 0.0),
        "draft": draft,
    }
    out = {k: float((v * scale).sum() * g) for k, v in parts.items()}
    out["executor / policy"] = float(np.clip(busy - engine_w, 0.0, None).sum() * g)
    return out


def step_parts(s: Series) -> dict[str, float]:
    """Mean seconds per step part (STEP_PARTS) over the steps the run recorded."""
    rows = [e for e in s.summary.get("steps", []) if isinstance(e, dict)]
    acc = dict.fromkeys(STEP_PARTS, 0.0)
    for e in rows:
        parts = e.get("parts")
        if isinstance(parts, dict):
            for k in ("rollout_s", "reward_s", "train_s", "weight_sync_s"):
                acc[k] += float(parts.get(k, 0.0))
        else:
            mk, st = float(e.get("rollout_makespan_s", 0.0)), float(e.get("step_time_s", 0.0))
            acc["rollout_s"] += mk
            acc["after_rollout_s"] += max(0.0, st - mk)
    return {k: v / len(rows) for k, v in acc.items()} if rows else {}


def fmt_sig(v: object) -> str:
    """Four significant digits: a live run on a CPU spends milliseconds, a cluster hours."""
    if not isinstance(v, int | float) or not math.isfinite(v):
        return "–"
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"


def breakdown_table(rows: list[PhaseSeconds], step: int) -> Table:
    """GPU-seconds per phase, one row per series (tables/breakdown.*)."""
    data = []
    for r in rows:
        row: dict = {"policy": r.label, "step": r.step, "makespan_s": r.makespan_s, "gpus": r.gpus}
        row |= {p: r.seconds.get(p) for p in PHASES}
        row["total_gpu_s"] = r.total
        row["idle_fraction"] = r.seconds["idle"] / r.total if r.total > 0 else float("nan")
        row["not_recorded"] = ", ".join(r.not_recorded)
        data.append(row)
    present = [p for p in PHASES if any(r.get(p) is not None for r in data)]
    cols = [
        Col("policy", "policy"),
        Col("makespan_s", "makespan (s)", fmt_num(2)),
        Col("gpus", "GPUs", fmt_num(0)),
    ]
    cols += [Col(p, f"{p} (GPU-s)", fmt_sig) for p in present]
    cols += [
        Col("total_gpu_s", "total (GPU-s)", fmt_sig),
        Col("idle_fraction", "idle", fmt_pct, "min"),
        Col("not_recorded", "not recorded", fmt_text),
    ]
    note = (
        f"Step {step}. Makespan x GPUs split into phases; the parts add up to the total. "
        "'–': the run does not record that phase apart (see 'not recorded')."
    )
    return Table("breakdown", f"GPU-seconds by phase, step {step}", cols, data, note)
