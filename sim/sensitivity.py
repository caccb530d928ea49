"""Sensitivity curves for reproduced experiments that miss the paper's value.

Where an experiment still misses after calibration, the question is not which constant to
tune but which *unpublished* input would have to take which value for simctl to land in
the paper's range, and whether the paper's text makes that value plausible. This module
declares one such input per paper (each with the section that leaves it open), the grid of
values swept, and the explicit transform that applies a value to a run:

``accept:<method>``  the step-mean per-token acceptance of one draft method in the trace.
    Every row of a step is shifted by one common amount on the logit scale so the step's
    mean equals the value (as the generator calibrates its means): the ranking of
    requests, their spread and the per-prompt predictability stay as generated, only the
    level moves. History rows of epoch 0 keep their floor (RhymeRL §6.2: no history exists
    in the first epoch). Position buckets, where present, move with their row.
``cost:<field>``  a field of the roofline cost model's fitted terms
    (sim/cost_model.py RooflineParams), replaced for the run; only fields the docs mark as
    estimates qualify, never a datasheet number or a published micro-measurement.
``gen:<field>``  a numeric parameter of the experiment's trace preset (traces/presets.py)
    that the preset marks as assumed (the spread of response lengths, their correlation
    within a group): the trace is generated again, same seed, with that parameter changed.
    Every policy reads the trace, the baselines included. This is how scheduling-only
    policies (divided rollout, HistoPipe) get a curve: they read no acceptance or drafter
    cost, only the lengths they schedule.

``cluster:gpu_mem_util``  the share of GPU memory the serving engine takes for weights and
    KV cache (sim/cluster.py), for every run of the experiment, the baseline's included:
    how soon a long-generation batch runs out of KV cache and preempts (Seer §2.2).

Most experiments sweep their paper's input; an experiment may name another
(`Experiment.sensitivity`). A `gen:` or `cluster:` input's calibrated value is the
experiment's own preset's or layout's (`Sensitivity.at`). A point at which the model no
longer fits (too little memory) is left out of the curve.

The calibrated point of a curve is the experiment's own run (seed 0, same steps), so the
curve passes through what the table shows for that seed. A policy that never speculates
reads neither acceptance nor drafter cost; its replays are shared between the points.

`crossing` is the pure part: where a piecewise-linear curve enters the paper's range.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from simctl.sim.cluster import ClusterSpec, parse_cluster
from simctl.sim.cost_model import DEFAULT_PARAMS, RooflineParams
from simctl.sim.experiments import Experiment
from simctl.traces.generate import generate_trace
from simctl.traces.io import Trace
from simctl.traces.presets import get_preset
from simctl.traces.schema import KNOWN_METHODS, accept_column, bucket_column

# Preset parameters a `gen:` input may move, each with the values it may take: only those
# every preset marks as assumed (traces/presets.py comments) and that no paper publishes.
GEN_FIELDS: Mapping[str, tuple[float, float]] = MappingProxyType(
    {
        "len_sigma": (0.05, 3.0),  # log-normal spread of response lengths
        "icc": (0.0, 0.99),  # share of that spread common to a prompt's group
    }
)

# Cluster fields a `cluster:` input may move, with the (open, closed] range of values.
CLUSTER_FIELDS: Mapping[str, tuple[float, float]] = MappingProxyType({"gpu_mem_util": (0.0, 1.0)})

# Policies that never speculate: acceptance and drafter cost cannot change their replays
# (tests/sim/test_sensitivity.py replays each under a changed input and compares).
NON_SPECULATIVE = frozenset(
    {"verl", "seer-divided", "seer-divided-context", "rhymerl-pipe", "rhymerl-pipe-2tier"}
)
_BISECTIONS = 60  # halvings of the shift's bracket: far below float32 resolution
_SHIFT_BOUND = 40.0  # |logit shift| bracket: beyond it every draw is 0 or 1 in float32
_EPS = 1e-9  # keeps logits finite at acceptance 0 or 1 (below float32 spacing near 1)


@dataclass(frozen=True)
class Sensitivity:
    """One unpublished input of a paper's experiments and the values swept over it."""

    input: str  # "accept:<method>" or "cost:<RooflineParams field>"
    label: str  # what the value means, for the page
    calibrated: float  # the value simctl runs with
    quick_grid: tuple[float, ...]  # swept besides the calibrated value (--quick)
    full_grid: tuple[float, ...]  # swept besides the calibrated value (full runs)
    why: str  # why this input: the paper's text that leaves it open
    # Measured steps a --quick sweep keeps (the middle ones of the experiment's), where its
    # replays are slow; None keeps them all (and the calibrated point is the headline run).
    quick_steps: int | None = None

    def __post_init__(self) -> None:
        kind, _, name = self.input.partition(":")
        if kind == "accept":
            if name not in KNOWN_METHODS:
                raise ValueError(f"sensitivity input {self.input!r}: unknown method {name!r}")
            bad = [v for v in (self.calibrated, *self.quick_grid, *self.full_grid) if not 0 < v < 1]
            if bad:
                raise ValueError(f"sensitivity input {self.input!r}: acceptance {bad[0]} outside (0, 1)")
        elif kind == "cost":
            if name not in {f.name for f in dataclasses.fields(RooflineParams)}:
                raise ValueError(f"sensitivity input {self.input!r}: no cost-model field {name!r}")
        elif kind == "gen":
            if name not in GEN_FIELDS:
                raise ValueError(
                    f"sensitivity input {self.input!r}: not an assumed preset parameter "
                    f"(one of {', '.join(sorted(GEN_FIELDS))})"
                )
            lo, hi = GEN_FIELDS[name]
            bad = [v for v in (self.calibrated, *self.quick_grid, *self.full_grid) if not lo <= v <= hi]
            if bad:
                raise ValueError(f"sensitivity input {self.input!r}: {bad[0]} outside [{lo}, {hi}]")
        elif kind == "cluster":
            if name not in CLUSTER_FIELDS:
                raise ValueError(f"sensitivity input {self.input!r}: no cluster field {name!r} to sweep")
            lo, hi = CLUSTER_FIELDS[name]
            bad = [v for v in (self.calibrated, *self.quick_grid, *self.full_grid) if not lo < v <= hi]
            if bad:
                raise ValueError(f"sensitivity input {self.input!r}: {bad[0]} outside ({lo}, {hi}]")
        else:
            raise ValueError(f"sensitivity input {self.input!r}: kind must be accept, cost, gen or cluster")

    @property
    def kind(self) -> str:
        return self.input.partition(":")[0]

    @property
    def name(self) -> str:
        return self.input.partition(":")[2]

    def grid(self, quick: bool) -> tuple[float, ...]:
        """Swept values in ascending order, the calibrated one included."""
        return tuple(sorted({self.calibrated, *(self.quick_grid if quick else self.full_grid)}))

    def sweep_steps(self, steps: Sequence[int], quick: bool) -> tuple[int, ...]:
        """The measured steps a sweep replays: all, or the middle `quick_steps` in quick mode."""
        k = self.quick_steps
        if not quick or k is None or len(steps) <= k:
            return tuple(steps)
        start = (len(steps) - k) // 2
        return tuple(steps[start : start + k])

    def reads(self, policy: str) -> bool:
        """Whether a replay of `policy` can depend on this input (else it is shared): every
        policy reads its trace and its cluster, only speculation reads acceptance and cost."""
        return self.kind in ("gen", "cluster") or policy.split(":", 1)[0] not in NON_SPECULATIVE

    def at(self, preset: str, cluster: str) -> Sensitivity:
        """This input as an experiment on `preset` and `cluster` runs it: a `gen:` input's
        calibrated value is the preset's own, a `cluster:` input's the layout's (accept and
        cost inputs have one value for the paper)."""
        if self.kind == "gen":
            value = float(getattr(get_preset(preset), self.name))
        elif self.kind == "cluster":
            value = float(getattr(parse_cluster(cluster), self.name))
        else:
            return self
        return self if value == self.calibrated else dataclasses.replace(self, calibrated=value)


def _pct(method: str, preset: str) -> float:
    return round(float(get_preset(preset).accept[method]), 4)


SENSITIVITIES: Mapping[str, Sensitivity] = MappingProxyType(
    {
        "speactor": Sensitivity(
            "accept:draft_small",
            "per-token acceptance of the 0.5B draft model (step mean)",
            _pct("draft_small", "dapo-32b-20k"),
            (0.45, 0.75, 0.9, 0.95),
            (0.4, 0.5, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95),
            "SpecActor picks the 0.5B drafter as 'a sweet point' (§5.1) and plots its mean acceptance "
            "length on the DAPO-32B-20K trace only in Fig. 10 (an image); the text gives no number, "
            "so simctl assumes p = 0.60 (traces/presets.py). Every speculative rung depends on it, "
            "and SpecActor's offline profile (its first drafter choice, §4.2) moves with it.",
            quick_steps=1,
        ),
        "seer": Sensitivity(
            "accept:suffix",
            "per-token acceptance of the grouped suffix-tree drafter (step mean)",
            _pct("suffix", "seer-moonlight-64k"),
            (0.3, 0.45, 0.75),
            (0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.65, 0.75, 0.85),
            "Seer measures grouped-suffix acceptance only on the Qwen2-VL-72B task (Table 2: 20 "
            "sampled groups, maximum draft 8; Fig. 12, §6.4.2: the adaptive mean acceptance length "
            "'reaches over 3.5 in the later stage'); for Moonlight and Kimi-K2 it gives none, so their "
            "level is carried over from Table 2 by group size.",
            quick_steps=1,
        ),
        "tlt": Sensitivity(
            "accept:eagle",
            "per-token chain acceptance of the adaptive EAGLE drafter (step mean)",
            _pct("eagle", "tlt-qwen32b-32k"),
            (0.55, 0.8, 0.92),
            (0.5, 0.55, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95),
            "TLT gives the adaptive drafter's accept length only for a Qwen2.5-7B target (Table 6: "
            "4.59 base, 6.53 after RL); for the Qwen2.5-32B end-to-end run (Fig. 11, Table 3) it "
            "gives none during RL at temperature 0.9 (Table 1's 8.29-8.67 for Qwen-32B is an offline "
            "benchmark of topK, §6.3). The curve flattens because TLT speculates only below 32 "
            "requests per worker: the rest of veRL's rollout stays as it is, and the paper's range "
            "needs a rollout gain of at least 1.94x (docs/calibration.md, 'TLT end to end').",
        ),
        "rhymerl": Sensitivity(
            "accept:history",
            "per-token acceptance of the history drafter in the measured epoch (step mean)",
            round(float(get_preset("rhymerl-math-14b-16k").history_accept(1)), 4),
            (0.4, 0.5, 0.8),
            (0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7, 0.75, 0.8, 0.9),
            "RhymeRL's 65%-79% is 'the proportion of accepted tokens among the draft' under AIMD "
            "windows of 2..32 (§7.2.2, Fig. 17); simctl's per-token level (0.85, rising to 0.915) "
            "realises that ratio at its fixed 4-token draft. What the paper does not give is the "
            "tokens one verification yields under real windows: its hits are mostly 1-2 tokens "
            "(Fig. 8), which keeps AIMD at its 2-token floor, and Fig. 17's speculation rate has no "
            "values. The curve over p stands in for both; the gain does not depend on load "
            "(bench/rhymerl_histospec_load.py).",
        ),
        "efficientrollout": Sensitivity(
            "cost:eta_d",
            "W4A16 drafter kernel overhead eta_D (x the ideal W4 weight traffic)",
            DEFAULT_PARAMS.eta_d,
            (1.75, 2.5, 3.5),
            (1.0, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0),
            "EfficientRollout's drafter-to-target latency ratio of 0.360 is 'predicted by our roofline "
            "model under memory-bound, zero-overhead assumptions' (Table 4, App. C.3); the realised W4 "
            "kernel overhead during rollout (Eq. 2's eta_D) is fitted but not published (App. E.3), "
            "so simctl estimates eta_D = 1.25 from Marlin kernel figures.",
        ),
        # Inputs that experiments name (Experiment.sensitivity) instead of their paper's: the
        # scheduling-only rungs read no acceptance or drafter cost.
        "seer-memory": Sensitivity(
            "cluster:gpu_mem_util",
            "share of GPU memory the engine takes for weights and KV cache (every run)",
            0.9,
            (0.6, 0.75),
            (0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85),
            "Seer's divided rollout balances load and 'prevents preemption' (Fig. 1, §4.2); Fig. 3 "
            "(Qwen2-VL-72B) shows 'insufficient KVCache capacity causes frequent request preemptions' "
            "early in a baseline rollout. How much memory the baseline's engine leaves for KV cache is "
            "not published: simctl's layouts take vLLM's default 0.9 (veRL's documented trainer config "
            "sets 0.5 for a rollout engine colocated with training). Less memory, more preemption.",
        ),
        "rhymerl-lengths": Sensitivity(
            "gen:len_sigma",
            "log-normal spread of response lengths (trace generated again, same seed)",
            1.0,
            (0.6, 1.3),
            (0.5, 0.6, 0.7, 0.8, 0.9, 1.1, 1.2, 1.3),
            "HistoPipe's complementary order needs rollout times that are 'approximately linear' across "
            "ranking groups; 'long-tailed rollouts (Fig. 3b) cause the time distributions to approximate "
            "exponential patterns' (§6.4), which two-tier scheduling reshapes. Fig. 3b shows the lengths "
            "only as a plot, so the preset assumes a spread (sigma 1.0), checked against the one number "
            "given: veRL's 'over 46% GPU resource idleness' (§1).",
        ),
    }
)


def sensitivity_for(e: Experiment) -> Sensitivity | None:
    """The input swept for an experiment (the one it names, else its paper's) with the
    experiment's own calibrated value, or None."""
    s = SENSITIVITIES.get(e.sensitivity or e.paper)
    scale = e.full or e.quick
    return None if s is None or scale is None else s.at(e.preset, scale.cluster)


# --- transforms -------------------------------------------------------------------------------


def _logit(x: np.ndarray) -> np.ndarray:
    x = np.clip(x, _EPS, 1.0 - _EPS)
    return np.log(x / (1.0 - x))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # = 1 / (1 + exp(-x)), without overflow


def logit_shift(values: np.ndarray, mean: float) -> float:
    """c with mean(sigmoid(logit(values) + c)) == mean (bisection: the mean rises with c;
    Newton diverges where draws sit at 0 or 1 and the slope vanishes).

    >>> v = np.array([0.2, 0.4, 0.6])
    >>> round(float(_sigmoid(_logit(v) + logit_shift(v, 0.7)).mean()), 6)
    0.7
    """
    if not 0.0 < mean < 1.0:
        raise ValueError(f"target mean acceptance {mean} outside (0, 1)")
    x = _logit(np.asarray(values, dtype=np.float64))
    lo, hi = -_SHIFT_BOUND, _SHIFT_BOUND
    for _ in range(_BISECTIONS):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _sigmoid(x + mid).mean() < mean else (lo, mid)
    return 0.5 * (lo + hi)


def _shift_buckets(arr: pa.Array, shift: np.ndarray) -> pa.Array:
    """Each row's buckets moved by its row's logit shift."""
    parents = pc.list_parent_indices(arr).to_numpy()
    vals = arr.flatten().to_numpy(zero_copy_only=False).astype(np.float64)
    moved = _sigmoid(_logit(vals) + shift[parents]).astype(np.float32)
    offsets = pc.subtract(arr.offsets, arr.offsets[0])
    return pa.ListArray.from_arrays(offsets, pa.array(moved, type=arr.type.value_type))


def with_acceptance(trace: Trace, method: str, mean: float) -> Trace:
    """A copy of `trace` whose step-mean acceptance of `method` is `mean` in every step."""
    col = accept_column(method)
    if col not in trace.df.columns:
        raise ValueError(f"trace has no column {col!r} to set")
    df = trace.df.copy()
    acc = df[col].to_numpy(dtype=np.float64)
    shift = np.zeros(len(df))
    live = np.ones(len(df), dtype=bool)
    if method == "history" and "epoch" in df.columns:
        live = df["epoch"].to_numpy() > 0  # no history exists in the first epoch
    steps = df["step"].to_numpy()
    for step in np.unique(steps[live]):
        rows = live & (steps == step)
        shift[rows] = logit_shift(acc[rows], mean)
    df[col] = np.where(live, _sigmoid(_logit(acc) + shift), acc).astype(df[col].dtype)
    lists = dict(trace.lists)
    if bucket_column(method) in lists:
        lists[bucket_column(method)] = _shift_buckets(lists[bucket_column(method)], shift)
    notes = {**trace.meta.notes, "sensitivity": f"accept:{method} step mean set to {mean:g}"}
    meta = dataclasses.replace(trace.meta, notes=notes)
    return Trace(df=pd.DataFrame(df), meta=meta, lists=lists, path=trace.path)


def cost_params(s: Sensitivity, value: float, base: RooflineParams = DEFAULT_PARAMS) -> RooflineParams:
    """The cost model's terms with this input's field at `value` (unchanged for accept inputs)."""
    if s.kind != "cost":
        return base
    changes: dict[str, Any] = {s.name: value}
    return dataclasses.replace(base, **changes)


def apply_trace(s: Sensitivity, trace: Trace, value: float) -> Trace:
    """The trace a run at `value` replays, from the calibrated one (unchanged for cost and
    cluster inputs; a `gen:` input generates its own, `generated`)."""
    if s.kind == "gen":
        raise ValueError(f"sensitivity input {s.input!r} generates its trace: use generated()")
    return with_acceptance(trace, s.name, value) if s.kind == "accept" else trace


def generated(s: Sensitivity, preset: str, steps: int, seed: int, scale: float, value: float) -> Trace:
    """The preset's trace generated with the `gen:` input at `value` (same seed and layout:
    every other draw of the generator is its own stream, so only what the parameter shapes
    moves)."""
    changes: dict[str, Any] = {s.name: value}
    varied = dataclasses.replace(get_preset(preset), **changes)
    df, meta, lists = generate_trace(varied, steps, seed, scale=scale)
    was = getattr(get_preset(preset), s.name)
    notes = {**meta.notes, "sensitivity": f"{s.input} set to {value:g} (preset: {was:g})"}
    return Trace(df=df, meta=dataclasses.replace(meta, notes=notes), lists=lists)


def cluster_spec(s: Sensitivity, spec: ClusterSpec, value: float) -> ClusterSpec:
    """The cluster a run at `value` uses (unchanged unless a `cluster:` input)."""
    if s.kind != "cluster":
        return spec
    changes: dict[str, Any] = {s.name: value}
    return dataclasses.replace(spec, **changes)


# --- where a curve reaches the paper ----------------------------------------------------------


def crossing(
    values: Sequence[float], metric: Sequence[float], lo: float, hi: float, calibrated: float
) -> float | None:
    """The input value nearest `calibrated` at which the curve lies in [lo, hi].

    The curve is linear between grid points (sorted by value; non-finite points are
    skipped); None when no point of it is in the range.

    >>> round(crossing([1, 2, 3], [1.0, 1.5, 2.0], 1.7, 1.9, calibrated=1), 6)
    2.4
    >>> crossing([1, 2], [1.0, 1.2], 1.7, 1.9, calibrated=1) is None
    True
    """
    if lo > hi:
        raise ValueError(f"empty range [{lo}, {hi}]")
    pts = sorted((float(x), float(y)) for x, y in zip(values, metric, strict=True) if math.isfinite(y))
    hits: list[float] = [x for x, y in pts if lo <= y <= hi]
    for (x0, y0), (x1, y1) in itertools.pairwise(pts):
        if y0 == y1 or x0 == x1:
            continue
        for bound in (lo, hi):
            t = (bound - y0) / (y1 - y0)
            if 0.0 <= t <= 1.0:
                hits.append(x0 + t * (x1 - x0))
    if not hits:
        return None
    return min(hits, key=lambda x: (abs(x - calibrated), x))


@dataclass(frozen=True)
class Curve:
    """A swept experiment: the metric (mean over the sweep's samples) at each input value."""

    input: str
    label: str
    calibrated: float
    values: tuple[float, ...]
    metric: tuple[float, ...]
    reaches_paper_at: float | None
    seeds: int
    steps: tuple[int, ...]  # measured steps of the sweep (seed 0)
    why: str
    # the baseline's GPU idle fraction at each value (NaN where it did not run): where a
    # paper measured its baseline's idleness, the plausible part of the curve shows here
    baseline_idle: tuple[float, ...] = ()

    def to_json(self) -> dict:
        return {
            "input": self.input,
            "label": self.label,
            "calibrated": self.calibrated,
            "values": list(self.values),
            "metric": [m if math.isfinite(m) else None for m in self.metric],
            "baseline_idle": [m if math.isfinite(m) else None for m in self.baseline_idle],
            "reaches_paper_at": self.reaches_paper_at,
            "seeds": self.seeds,
            "steps": list(self.steps),
            "why": self.why,
        }
