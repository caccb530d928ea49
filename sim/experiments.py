"""The five papers' headline experiments as data, one entry each: what `simctl reproduce` runs.

Every entry names the generator preset (traces/presets.py), the paper's cluster layout
(traces/layouts.py), the baseline and the policy, the measured steps, the metric as the
paper defines it, and the paper's value with where it is stated. Data only: the runner is
simctl/reproduce_runner.py, the page reports/reproduce_page.py.

Paper values. A range the paper states is used as is. A single value is widened only by
its own rounding (a "1.3x" is [1.25, 1.35]; a ratio of two table entries given to 0.1 s is
the ratio's extremes over the entries' rounding), never by a tolerance of ours.

Papers (full references in the README, "Papers"):
  SpecActor        Fast LLM Post-training via Decoupled and Fastest-of-N Speculation (arXiv:2511.16193)
  Seer             Seer: Online Context Learning for Fast Synchronous LLM RL (arXiv:2511.14617)
  TLT              Taming the Long-Tail: Efficient Reasoning RL Training with Adaptive Drafter
                   (arXiv:2511.16665)
  RhymeRL          History Rhymes: Accelerating LLM Reinforcement Learning with RhymeRL (arXiv:2508.18588)
  EfficientRollout EfficientRollout: System-Aware Self-Speculative Decoding for RL Rollouts
                   (Kim, Lee et al.; no arXiv id known)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from simctl.traces.layouts import NOT_EXPRESSIBLE, layout_for

# Metric names and what they measure; each is computed per seed and measured step (the
# pipeline metric per seed, over the measured steps) by simctl/reproduce_runner.py.
METRICS: Mapping[str, str] = MappingProxyType(
    {
        "rollout_speedup": "baseline rollout time / policy rollout time (rollout makespan of the step)",
        "step_speedup": "baseline end-to-end step time / policy step time (rollout + reward + train + sync)",
        "throughput_gain": "policy rollout throughput / baseline's (output tokens per second of rollout)",
        "tail_reduction": "1 - policy tail latency / baseline's "
        "(time spent solely on the last 10% of requests)",
        "training_throughput": "policy training throughput / baseline's (samples per second through the "
        "one-step off-policy rollout-reward-train pipeline over the measured steps)",
    }
)

PAPERS: Mapping[str, str] = MappingProxyType(
    {
        "speactor": "SpecActor (arXiv:2511.16193)",
        "seer": "Seer (arXiv:2511.14617)",
        "tlt": "TLT (arXiv:2511.16665)",
        "rhymerl": "RhymeRL (arXiv:2508.18588)",
        "efficientrollout": "EfficientRollout (Kim, Lee et al.)",
    }
)

# Policies whose rollout workers start their next step as soon as they finish theirs
# (RhymeRL §4.2 worker-controlled weight update, §6.2 HistoPipe); every other policy's
# rollout ends at a barrier. Both run the one-step off-policy pipeline (RhymeRL §2: veRL
# adopts off-policyness 1; §7.1 compares at equal off-policyness).
PIPELINED_POLICIES = frozenset({"rhymerl-pipe", "rhymerl-pipe-2tier", "rhymerl"})


@dataclass(frozen=True)
class PaperValue:
    lo: float
    hi: float
    source: str  # table / figure / section of the paper
    text: str  # what the paper says, or how [lo, hi] follows from it


@dataclass(frozen=True)
class Scale:
    """One way to run an experiment: trace scale, cluster, steps and seeds."""

    trace_scale: float  # fraction of the preset's prompts per step
    cluster: str  # cluster spec (the paper's layout; scaled with the prompts where trace_scale < 1)
    steps: tuple[int, ...]  # measured steps
    warmup: tuple[int, ...] = ()  # replayed before the measured steps, not measured
    seeds: int = 1
    baseline_cluster: str | None = None  # the baseline on another cluster (veRL 2x GPUs)

    @property
    def replayed(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.warmup) | set(self.steps)))


@dataclass(frozen=True)
class Experiment:
    paper: str  # key of PAPERS
    id: str
    title: str
    preset: str
    metric: str  # key of METRICS
    baseline: str  # policy spec
    policy: str  # policy spec
    value: PaperValue
    full: Scale | None  # None: not expressible
    quick: Scale | None
    ladder: str | None = None  # experiments of one ladder are shown side by side, in order
    not_expressible: str | None = None
    note: str = ""
    # The unpublished input a miss is swept over (a key of sim/sensitivity.py SENSITIVITIES);
    # None: its paper's.
    sensitivity: str | None = None


def rounded(value: float, digits: int) -> tuple[float, float]:
    """The interval a value printed with `digits` decimals stands for."""
    half = 0.5 * 10.0**-digits
    return (round(value - half, digits + 2), round(value + half, digits + 2))


def ratio_of_rounded(a: float, b: float, digits: int) -> tuple[float, float]:
    """a / b for two table entries printed with `digits` decimals: its extremes."""
    (alo, ahi), (blo, bhi) = rounded(a, digits), rounded(b, digits)
    return (round(alo / bhi, 4), round(ahi / blo, 4))


def _pv(bounds: tuple[float, float], source: str, text: str) -> PaperValue:
    return PaperValue(bounds[0], bounds[1], source, text)


def _layout(preset: str, scale: float) -> str:
    spec = layout_for(preset, scale)
    if spec is None:
        raise ValueError(f"preset {preset} has no expressible layout")
    return spec


def _x2(spec: str) -> str:
    """The same GPU and TP with twice the GPUs ("veRL (2x)", SpecActor §5.1)."""
    gpu, rest = spec.split("x", 1)
    count, tp = rest.split(":", 1)
    return f"{gpu}x{2 * int(count)}:{tp}"


# --- SpecActor (§5.1-§5.5) ------------------------------------------------------------------

_SA = "dapo-32b-20k"
# §5.1: "uniformly sample at least 10% of all training steps" of the 200-step trace.
_SA_FULL = Scale(1.0, _layout(_SA, 1.0), tuple(range(0, 200, 10)), seeds=3)
_SA_QUICK = Scale(1.0, _SA_FULL.cluster, (0, 100, 199), seeds=2)
_SA_FULL_2X = Scale(1.0, _SA_FULL.cluster, _SA_FULL.steps, seeds=3, baseline_cluster=_x2(_SA_FULL.cluster))
_SA_QUICK_2X = Scale(
    1.0, _SA_QUICK.cluster, _SA_QUICK.steps, seeds=2, baseline_cluster=_x2(_SA_QUICK.cluster)
)
_VANILLA = PaperValue(
    1.0,
    1.1,
    "§1, §5.4, §5.5; Fig. 5b",
    "'only 10% speedup at worst' (§1); vanilla speculation 'fail[s] to provide acceleration' at "
    "steps 175/200 (§5.4); no or negative gain at per-worker batch 128 (Fig. 5b)",
)


def _speactor(id_: str, title: str, metric: str, base: str, pol: str, value: PaperValue, **kw) -> Experiment:
    two_x = kw.pop("two_x", False)
    return Experiment(
        "speactor",
        id_,
        title,
        _SA,
        metric,
        base,
        pol,
        value,
        _SA_FULL_2X if two_x else _SA_FULL,
        _SA_QUICK_2X if two_x else _SA_QUICK,
        **kw,
    )


SPEACTOR = (
    _speactor(
        "speactor/rollout-vs-verl",
        "SpecActor rollout vs veRL (DAPO-32B-20K)",
        "rollout_speedup",
        "verl",
        "speactor",
        PaperValue(2.0, 2.4, "§5.2, abstract", "2.0-2.4x faster mean generation than veRL (up to 2.7x)"),
    ),
    _speactor(
        "speactor/e2e-vs-verl",
        "SpecActor end-to-end step time vs veRL",
        "step_speedup",
        "verl",
        "speactor",
        PaperValue(1.5, 1.7, "§5.2, Fig. 12", "1.5-1.7x faster end-to-end training than veRL and RLHFuse"),
    ),
    _speactor(
        "speactor/e2e-vs-verl-2x",
        "SpecActor end-to-end vs veRL on twice the GPUs",
        "step_speedup",
        "verl",
        "speactor",
        PaperValue(1.3, 1.4, "§5.2, Fig. 12", "1.3-1.4x training speedup over veRL (2x)"),
        two_x=True,
    ),
    _speactor(
        "speactor/vanilla-spec-coupled",
        "vanilla model-spec (0.5B drafter) vs veRL",
        "rollout_speedup",
        "verl",
        "spec-coupled",
        _VANILLA,
    ),
    _speactor(
        "speactor/vanilla-ngram", "vanilla n-gram vs veRL", "rollout_speedup", "verl", "ngram", _VANILLA
    ),
    _speactor(
        "speactor/fig15-vanilla",
        "Fig. 15: vanilla speculation vs veRL",
        "rollout_speedup",
        "verl",
        "speactor-vanilla",
        _pv(
            (round(1 / (1 - 0.0255), 4), round(1 / (1 - 0.0265), 4)),
            "§5.5, Fig. 15",
            "reduces rollout latency by only 2.6%",
        ),
        ladder="speactor-fig15",
    ),
    _speactor(
        "speactor/fig15-decoupled",
        "Fig. 15: + decoupled speculation (vs vanilla)",
        "rollout_speedup",
        "speactor-vanilla",
        "speactor-decoupled",
        _pv(rounded(1.3, 1), "§5.5, Fig. 15", "decoupled speculation accelerates rollout by 1.3x"),
        ladder="speactor-fig15",
    ),
    _speactor(
        "speactor/fig15-reconfig",
        "Fig. 15: + reconfiguration (vs decoupled)",
        "rollout_speedup",
        "speactor-decoupled",
        "speactor-decoupled-reconfig",
        _pv(rounded(1.2, 1), "§5.5, Fig. 15", "dynamic reconfiguration further shortens rollout by 1.2x"),
        ladder="speactor-fig15",
    ),
    _speactor(
        "speactor/fig15-fon",
        "Fig. 15: + Fastest-of-N (vs reconfiguration)",
        "rollout_speedup",
        "speactor-decoupled-reconfig",
        "speactor",
        _pv(rounded(1.2, 1), "§5.5, Fig. 15", "Fastest-of-N further accelerates rollout by 1.2x"),
        ladder="speactor-fig15",
    ),
)


# --- Seer (§6.1-§6.3) -------------------------------------------------------------------------

_SEER_MODELS = {  # preset, Table 6 (divided, + context, + grouped SD)
    "moonlight": ("seer-moonlight-64k", (1.27, 1.33, 1.77)),
    "qwen2vl": ("seer-qwen2vl-72b-40k", (1.31, 1.44, 1.87)),
    "kimi": ("seer-kimi-k2-96k", (1.35, 1.47, 1.77)),
}
_SEER_LADDER = (
    ("divided", "+ divided rollout", "seer-divided"),
    ("context", "+ context scheduling", "seer-divided-context"),
    ("grouped-sd", "+ grouped SD", "seer"),
)


def _seer_scales(
    preset: str, steps: tuple[int, ...], qsteps: tuple[int, ...], qseeds: int
) -> tuple[Scale | None, Scale | None]:
    spec = layout_for(preset)
    if spec is None:
        return None, None
    return Scale(1.0, spec, steps, seeds=3), Scale(1.0, spec, qsteps, seeds=qseeds)


def _seer(model: str) -> tuple[Experiment, ...]:
    preset, table6 = _SEER_MODELS[model]
    why = NOT_EXPRESSIBLE.get(preset)
    # §6.2.1: 10 iterations per task; Table 6: the 5th iteration (step 4).
    full, qk = _seer_scales(preset, tuple(range(10)), tuple(range(3)), 2)
    t6_full, t6_quick = _seer_scales(preset, (4,), (4,), 2)
    out = [
        Experiment(
            "seer",
            f"seer/{model}-throughput",
            f"Seer rollout throughput vs veRL ({model})",
            preset,
            "throughput_gain",
            "verl",
            "seer",
            PaperValue(
                1.74, 1.97, "§6.2.1, Fig. 7", "throughput +74% to +97% over veRL across the three tasks"
            ),
            full,
            qk,
            not_expressible=why,
        ),
        Experiment(
            "seer",
            f"seer/{model}-tail",
            f"Seer tail latency below veRL's ({model})",
            preset,
            "tail_reduction",
            "verl",
            "seer",
            PaperValue(0.75, 0.93, "§6.2.2, Fig. 8", "tail latency reduced by 75% to 93%"),
            full,
            qk,
            not_expressible=why,
        ),
    ]
    for (key, label, policy), value in zip(_SEER_LADDER, table6, strict=True):
        out.append(
            Experiment(
                "seer",
                f"seer/{model}-table6-{key}",
                f"Table 6 ({model}): {label} (cumulative, vs veRL)",
                preset,
                "throughput_gain",
                "verl",
                policy,
                _pv(rounded(value, 2), "§6.3, Table 6 (5th iteration)", f"{value:.2f}x over the baseline"),
                t6_full,
                t6_quick,
                ladder=f"seer-table6-{model}",
                not_expressible=why,
                # divided rollout and context scheduling read no draft acceptance
                sensitivity=None if policy == "seer" else "seer-memory",
            )
        )
    return tuple(out)


SEER = _seer("moonlight") + _seer("qwen2vl") + _seer("kimi")


# --- TLT (§6.1, §6.2) -------------------------------------------------------------------------

_TLT = "tlt-qwen32b-32k"
# §6.1: "average results over three training steps following an initial warm-up step".
_TLT_FULL = Scale(1.0, _layout(_TLT, 1.0), (1, 2, 3), warmup=(0,), seeds=3)
_TLT_QUICK = Scale(1.0, _TLT_FULL.cluster, (1, 2, 3), warmup=(0,), seeds=2)

TLT = (
    Experiment(
        "tlt",
        "tlt/e2e-vs-verl",
        "TLT end-to-end training throughput vs veRL (Qwen2.5-32B, 64 H100)",
        _TLT,
        "step_speedup",
        "verl",
        "tlt",
        PaperValue(
            1.7,
            2.1,
            "§6.2, Fig. 11",
            "1.7-2.1x over VeRL (token throughput: a global batch's tokens / step time, §6.1)",
        ),
        _TLT_FULL,
        _TLT_QUICK,
    ),
    Experiment(
        "tlt",
        "tlt/table3-32b-8-nodes",
        "TLT vs veRL, Qwen2.5-32B on 8 nodes",
        _TLT,
        "step_speedup",
        "verl",
        "tlt",
        _pv(rounded(2.12, 2), "§6.2, Table 3", "2.12x on 8 nodes (8 GPUs each)"),
        _TLT_FULL,
        _TLT_QUICK,
    ),
)


# --- RhymeRL (§7.1, §7.2.1) -------------------------------------------------------------------

_RR = "rhymerl-math-14b-16k"
# Epoch 0 (32 steps) builds the history HistoSpec and HistoPipe need (§6.2: not enabled in
# the first epoch); the second epoch is measured.
_RR_FULL = Scale(1.0, _layout(_RR, 1.0), tuple(range(32, 64)), warmup=tuple(range(32)), seeds=3)
_RR_QUICK = Scale(1.0, _RR_FULL.cluster, tuple(range(32, 36)), warmup=tuple(range(32)), seeds=2)


def _rhymerl(id_: str, title: str, base: str, pol: str, value: PaperValue, ladder: str | None) -> Experiment:
    return Experiment(
        "rhymerl",
        id_,
        title,
        _RR,
        "training_throughput",
        base,
        pol,
        value,
        _RR_FULL,
        _RR_QUICK,
        ladder=ladder,
        # HistoPipe and two-tier scheduling read no draft acceptance: the lengths they schedule
        sensitivity="rhymerl-lengths" if pol in ("rhymerl-pipe", "rhymerl-pipe-2tier") else None,
    )


RHYMERL = (
    _rhymerl(
        "rhymerl/math14b-vs-verl",
        "RhymeRL training throughput vs veRL (Math-14B, 16K)",
        "verl",
        "rhymerl",
        PaperValue(
            2.3,
            2.6,
            "§7.1, Fig. 13",
            "2.3x on average at 16K max response length, up to 2.6x",
        ),
        None,
    ),
    _rhymerl(
        "rhymerl/fig14-histopipe",
        "Fig. 14: HistoPipe vs veRL",
        "verl",
        "rhymerl-pipe",
        _pv(rounded(1.43, 2), "§7.2.1, Fig. 14", "HistoPipe 1.43x (Math-14B)"),
        "rhymerl-fig14",
    ),
    _rhymerl(
        "rhymerl/fig14-two-tier",
        "Fig. 14: + two-tier scheduling (vs HistoPipe)",
        "rhymerl-pipe",
        "rhymerl-pipe-2tier",
        _pv(rounded(1.10, 2), "§7.2.1, Fig. 14", "two-tier scheduling a further 1.10x"),
        "rhymerl-fig14",
    ),
    _rhymerl(
        "rhymerl/fig14-histospec",
        "Fig. 14: + HistoSpec (vs two-tier)",
        "rhymerl-pipe-2tier",
        "rhymerl",
        _pv(rounded(1.50, 2), "§7.2.1, Fig. 14", "HistoSpec a further 1.50x"),
        "rhymerl-fig14",
    ),
)


# --- EfficientRollout (§4, Table 2) -----------------------------------------------------------

_ER = "efficientrollout-qwen7b-8k"
# Table 2: "averaged over 100 training steps"; the adaptive draft length learns across steps,
# so the quick run keeps consecutive steps from the start.
_ER_FULL = Scale(1.0, _layout(_ER, 1.0), tuple(range(100)), seeds=3)
_ER_QUICK = Scale(1.0, _layout(_ER, 1.0), tuple(range(20)), seeds=2)
_T2 = "Table 2 (Qwen2.5-7B, mean of 100 steps)"


def _er(id_: str, title: str, metric: str, pol: str, value: PaperValue) -> Experiment:
    return Experiment("efficientrollout", id_, title, _ER, metric, "verl", pol, value, _ER_FULL, _ER_QUICK)


EFFICIENTROLLOUT = (
    _er(
        "efficientrollout/rollout-vs-verl",
        "EfficientRollout rollout vs veRL (AR)",
        "rollout_speedup",
        "efficientrollout",
        _pv(ratio_of_rounded(82.4, 66.3, 1), _T2, "rollout 82.4 s -> 66.3 s (-19.6%)"),
    ),
    _er(
        "efficientrollout/step-vs-verl",
        "EfficientRollout step time vs veRL (AR)",
        "step_speedup",
        "efficientrollout",
        _pv(ratio_of_rounded(132.6, 115.7, 1), _T2, "step 132.6 s -> 115.7 s (-12.7%)"),
    ),
    _er(
        "efficientrollout/quantized-selfspec-rollout",
        "quantized self-SD (always on, gamma 7) rollout vs veRL",
        "rollout_speedup",
        "quantized-selfspec",
        _pv(ratio_of_rounded(82.4, 75.6, 1), _T2, "rollout 82.4 s -> 75.6 s (-8.2%)"),
    ),
    _er(
        "efficientrollout/quantized-selfspec-step",
        "quantized self-SD (always on, gamma 7) step time vs veRL",
        "step_speedup",
        "quantized-selfspec",
        _pv(ratio_of_rounded(132.6, 127.6, 1), _T2, "step 132.6 s -> 127.6 s (-3.7%)"),
    ),
)


EXPERIMENTS: tuple[Experiment, ...] = SPEACTOR + SEER + TLT + RHYMERL + EFFICIENTROLLOUT


def experiments_of(paper: str) -> tuple[Experiment, ...]:
    """The experiments of one paper (a key of PAPERS) or of all with 'all'."""
    return EXPERIMENTS if paper == "all" else tuple(e for e in EXPERIMENTS if e.paper == paper)
