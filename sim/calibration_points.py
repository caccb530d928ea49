"""Published micro-measurements the cost model is calibrated to, with simctl's value for each.

"Calibrate inputs, never outputs": every constant of the roofline (sim/cost_model.py
RooflineParams, sim/hardware.py GPUSpec) is fitted to one of these points or read from a
datasheet; none is tuned to a headline ratio of sim/experiments.py. Each point names the
paper (title and arXiv id in sim/experiments.py), the table or figure, the paper's value,
the setup simctl prices it at, and where the paper leaves a setup detail open, the
assumption. `evaluate()` recomputes simctl's value from the cost model every time, so the
table on the reproduction page, in `simctl reproduce --json` and in docs/calibration.md
cannot drift from the code.

`fitted` marks the points a constant was fitted to (their error is small by construction);
the others are checks. TOLERANCE is the issue's 15%: a point outside it is listed, never
hidden, with the reason in its note.

Worked example (TLT Table 2, H100 row): 164.65 tok/s without SD is 1/164.65 = 6.073 ms per
token; simctl prices Qwen2.5-7B TP1 decode at batch 1 and 2,048 context tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, partial
from typing import Any

from simctl.sim.cost_model import RooflineCostModel
from simctl.sim.hardware import get_gpu
from simctl.sim.models import get_model
from simctl.sim.step_time import post_rollout_time
from simctl.traces.schema import StepTiming

TOLERANCE = 0.15  # issue #15: every micro figure within 15% of the paper's value
CONTEXT = 2048  # context tokens per sequence where a paper does not state it (b=1: KV < 2%)

# Mean tokens (prompt + response) per step of the efficientrollout-qwen7b-8k preset, steps
# 0-99, seed 0 (EfficientRollout Table 2 averages 100 steps); tests/sim/test_calibration.py
# regenerates it.
ER_TOKENS_PER_STEP = 771_473

_TLT = "TLT (arXiv:2511.16665)"
_ER = "EfficientRollout (Kim, Lee et al.)"
_SA = "SpecActor (arXiv:2511.16193)"
_SEER = "Seer (arXiv:2511.14617)"


@cache
def _cm(model: str, gpu: str, tp: int) -> RooflineCostModel:
    return RooflineCostModel(get_model(model), get_gpu(gpu), tp)


def _decode_ms(model: str, gpu: str, tp: int, b: int = 1) -> float:
    return 1e3 * float(_cm(model, gpu, tp).iteration_time(b, b, b * CONTEXT))


def _verify_ms(model: str, gpu: str, tp: int, b: int, query: int) -> float:
    """One verification forward of `query` query tokens per sequence (gamma + 1)."""
    return 1e3 * float(_cm(model, gpu, tp).iteration_time(b, b * query, b * CONTEXT))


def _draft_ms(drafter: str, model: str, gpu: str, tp: int, steps: int, b: int = 1) -> float:
    """A cycle of `steps` draft steps, with a model drafter's per-cycle engine cost."""
    return 1e3 * float(_cm(model, gpu, tp).draft_time(drafter, b, b * CONTEXT, steps))


def _draft_step_ms(drafter: str, model: str, gpu: str, tp: int) -> float:
    """One more draft step in a cycle (a one-token drafter forward, T_q)."""
    return _draft_ms(drafter, model, gpu, tp, 2) - _draft_ms(drafter, model, gpu, tp, 1)


def _er_tv_ratio(model: str) -> float:
    """T_V/T_p of EfficientRollout Table 6: vLLM's timer books the speculative path's fixed
    cost with verification, simctl with drafting (RooflineParams.spec_cycle_overhead_s)."""
    cycle_cost = 1e3 * _cm(model, "a100", 1).params.spec_cycle_overhead_s
    return (_verify_ms(model, "a100", 1, 1, 4) + cycle_cost) / _decode_ms(model, "a100", 1)


def _tlt_sd_speedup(model: str, gpu: str, tp: int, accept: float, depth: int, verify_tokens: int) -> float:
    """Speedup of TLT's tree speculation at batch 1: `accept` tokens per cycle of `depth`
    EAGLE draft steps + one `verify_tokens`-token verification, against plain decode. The
    tree's topK alternatives ride in the same memory-bound passes at batch 1, so a draft
    step is priced as one chain step."""
    cycle = _draft_ms("eagle", model, gpu, tp, depth) + _verify_ms(model, gpu, tp, 1, verify_tokens)
    return accept * _decode_ms(model, gpu, tp) / cycle


# TLT's SD configuration where a table does not state it: Table 4's draft depth (10, topK 8)
# with 64 tokens verified, the best at batch 1 in Table 4.
_TLT_DEPTH, _TLT_VERIFY = 10, 64
# Accept length of TLT's EAGLE drafter on Qwen2.5-7B after RL (Table 6 "Target-R", RL
# training; the same 6.53 as Table 7's Eagle row).
_TLT_ACCEPT_7B = 6.53


# TLT Table 6's accept length is what TLT realised in its RL rollouts, so simctl's value is
# what the `tlt` policy realises replaying the TLT preset: steps 1-3 after a warm-up step
# (the end-to-end experiment's steps, §6.1), seed 0, on a quarter-scale layout (a quarter of the
# prompts on a quarter of the 64 GPUs).
_TLT_PRESET, _TLT_SCALE, _TLT_STEPS = "tlt-qwen32b-32k", 0.25, (1, 2, 3)


@cache
def _tlt_realised_accept_length() -> float:
    """Mean accept length (tokens per verification, bonus included) of the `tlt` policy."""
    run = _preset_replay(_TLT_PRESET, _TLT_SCALE, max(_TLT_STEPS) + 1, "tlt")
    lengths = [m.mean_accept_len for m in run.steps if m.step in _TLT_STEPS]
    return float(sum(x for x in lengths if x is not None) / len(lengths))


# RhymeRL Fig. 17's acceptance rate (accepted / drafted) is what HistoSpec realised, so
# simctl's value is what the `rhymerl` policy realises replaying the RhymeRL preset: the
# first four steps of the second epoch (the first with history), seed 0, on an eighth-scale
# layout, after the 32 steps of the first epoch that build the history.
_RR_PRESET, _RR_SCALE, _RR_STEPS = "rhymerl-math-14b-16k", 0.125, (32, 33, 34, 35)


def _replay(trace: Any, layout: str, policy: str) -> Any:
    """`policy` replaying every step of `trace` on `layout`, seed 0."""
    from simctl.sim.cluster import parse_cluster
    from simctl.sim.cost_model import load_cost_model
    from simctl.sim.replay import ReplaySetup, run_policy

    spec, model = parse_cluster(layout), get_model(trace.meta.model)
    cost = load_cost_model(model, spec)
    setup = ReplaySetup(trace=trace, cluster=spec, model=model, cost=cost, steps=trace.steps, seed=0)
    return run_policy(setup, policy)


def _preset_replay(preset: str, scale: float, steps: int, policy: str) -> Any:
    """`policy` replaying the first `steps` steps of `preset` (seed 0) on its scaled layout."""
    from simctl.traces.generate import generate_trace
    from simctl.traces.io import Trace
    from simctl.traces.layouts import layout_for

    df, meta, lists = generate_trace(preset, steps, 0, scale=scale)
    layout = layout_for(preset, scale)
    assert layout is not None
    return _replay(Trace(df=df, meta=meta, lists=lists), layout, policy)


# SpecActor Fig. 5b: generation of at most 4,096 tokens at a per-worker batch of 128, Qwen2.5-
# 32B, speculative vs plain: "no or negative gain" (§3). simctl: the first 128 requests of the
# DAPO-32B preset's step 0 (seed 0), clipped to 4,096 tokens, on one H800 TP4 worker (§5.1's
# platform), under the vanilla `spec-coupled` policy (0.5B drafter at the preset's assumed
# acceptance, gamma 4) against plain decoding.
_FIG5B_BATCH, _FIG5B_TOKENS = 128, 4096


@cache
def _speactor_fig5b_speedup() -> float:
    """Plain / speculative generation time of one batch of 128 (Fig. 5b's ratio)."""
    import numpy as np

    from simctl.traces.generate import generate_trace
    from simctl.traces.io import Trace

    df, meta, _ = generate_trace("dapo-32b-20k", 1, 0, scale=1 / 16)  # no token lists
    df = df.iloc[:_FIG5B_BATCH].copy()
    clipped = df["response_len"] >= _FIG5B_TOKENS
    df["response_len"] = np.minimum(df["response_len"], _FIG5B_TOKENS).astype(df["response_len"].dtype)
    df["max_tokens"] = np.full(len(df), _FIG5B_TOKENS, dtype=df["max_tokens"].dtype)
    df["finish_reason"] = np.where(clipped, "length", df["finish_reason"])
    trace = Trace(df=df.reset_index(drop=True), meta=meta, lists={})
    runs = [_replay(trace, "h800x4:tp4", p) for p in ("verl", "spec-coupled")]
    plain, spec = (r.steps[0].rollout_makespan_s for r in runs)
    return float(plain / spec)


@cache
def _rhymerl_realised_acceptance_rate() -> float:
    """Accepted / drafted tokens of the `rhymerl` policy over the measured steps."""
    import pandas as pd

    req = pd.concat(_preset_replay(_RR_PRESET, _RR_SCALE, max(_RR_STEPS) + 1, "rhymerl").requests)
    req = req[req["step"].isin(_RR_STEPS)]
    return float(req["accepted"].sum() / req["drafted"].sum())


# EfficientRollout's veRL (AR) baseline as published: Table 2's rollout time is the mean of
# 100 training steps; App. B / Fig. 6c is one step's completion curve, the first step of the
# second epoch (the preset's step 64). simctl: `verl` replaying the efficientrollout-
# qwen7b-8k preset, steps 0-99, seed 0, on the paper's layout (one node of 8 A100, TP1).
_ER_PRESET, _ER_STEPS, _ER_EPOCH2 = "efficientrollout-qwen7b-8k", 100, 64


@cache
def _er_verl_run() -> Any:
    return _preset_replay(_ER_PRESET, 1.0, _ER_STEPS, "verl")


def _er_verl_mean_rollout_s() -> float:
    steps = _er_verl_run().steps
    return float(sum(m.rollout_makespan_s for m in steps) / len(steps))


def _er_verl_finish_quantile_s(q: float) -> float:
    """Seconds by which a share `q` of step 64's requests finished (1.0: the makespan)."""
    import numpy as np
    import pandas as pd

    req = pd.concat(_er_verl_run().requests)
    return float(np.quantile(req.loc[req["step"] == _ER_EPOCH2, "finish_s"].to_numpy(), q))


def _seer_tau(refs: int) -> float:
    """Expected acceptance length (with the bonus token) of the grouped suffix-tree
    acceptance simctl draws for a group with `refs` siblings, at Table 2's max draft 8."""
    from simctl.traces.presets import SEER_TABLE2_GAMMA, suffix_acceptance

    p, g = suffix_acceptance(refs + 1), SEER_TABLE2_GAMMA
    return (1.0 - p ** (g + 1)) / (1.0 - p)


def _outside_rollout_s(model: str, gpu: str, gpus: int, tokens: float) -> float:
    """Reward + training + weight sync of one step, modelled from its work (sim/step_time.py)."""
    spec, dev = get_model(model), get_gpu(gpu)
    post = post_rollout_time(
        StepTiming(),
        tokens=int(tokens),
        active_params=float(spec.active_param_count()),
        weight_bytes=float(spec.weight_bytes()),
        total_gpus=gpus,
        gpu_flops=dev.bf16_flops,
        sync_bw_Bps=dev.rdma_bw,
    )
    return post.reward_s + post.train_s + post.weight_sync_s


@dataclass(frozen=True)
class CalibrationPoint:
    """One published micro-measurement and how simctl computes the same quantity."""

    id: str
    paper: str
    source: str  # table / figure / section
    quantity: str  # what is measured, with model, GPU, TP, batch
    unit: str
    paper_value: float
    simctl: Callable[[], float]
    fitted: str = ""  # the constant fitted to this point ("" = a check)
    note: str = ""  # assumptions, and the reason for an error beyond TOLERANCE
    # the paper states a bound ("no or negative gain"): at most paper_value; the error is
    # how far simctl lies above it (0 at or below)
    at_most: bool = False


POINTS: tuple[CalibrationPoint, ...] = (
    CalibrationPoint(
        "tlt-t2-h100-7b-decode",
        _TLT,
        "Table 2, H100 row, w/o SD (164.65 tok/s)",
        "decode time per token, Qwen2.5-7B, TP1, batch 1, H100",
        "ms",
        round(1e3 / 164.65, 3),
        lambda: _decode_ms("qwen2.5-7b", "h100", 1),
        fitted="RooflineParams.hbm_bw_eff (with EfficientRollout App. E.3), iteration_overhead_s",
    ),
    CalibrationPoint(
        "tlt-t2-a100-7b-decode",
        _TLT,
        "Table 2, A100 row, w/o SD (92.83 tok/s)",
        "decode time per token, Qwen2.5-7B, TP1, batch 1, A100",
        "ms",
        round(1e3 / 92.83, 3),
        lambda: _decode_ms("qwen2.5-7b", "a100", 1),
    ),
    CalibrationPoint(
        "er-t6-a100-7b-tp",
        _ER,
        "Table 6, Qwen2.5-7B, T_p",
        "single-token target forward, Qwen2.5-7B, TP1, A100",
        "ms",
        10.45,
        lambda: _decode_ms("qwen2.5-7b", "a100", 1),
        note="batch not stated; priced at batch 1 (T_p is within 3% of TLT Table 2's batch-1 A100 value)",
    ),
    CalibrationPoint(
        "er-t6-a100-7b-tq",
        _ER,
        "Table 6, Qwen2.5-7B, T_q",
        "one-token EAGLE-3 drafter forward, Qwen2.5-7B, TP1, A100",
        "ms",
        0.82,
        lambda: _draft_step_ms("eagle", "qwen2.5-7b", "a100", 1),
        fitted="RooflineParams.draft_step_overhead_s, eagle_vocab",
    ),
    CalibrationPoint(
        "er-t6-a100-14b-tq",
        _ER,
        "Table 6, Qwen2.5-14B, T_q",
        "one-token EAGLE-3 drafter forward, Qwen2.5-14B, TP1, A100",
        "ms",
        0.91,
        lambda: _draft_step_ms("eagle", "qwen2.5-14b", "a100", 1),
    ),
    *(
        CalibrationPoint(
            f"er-t6-a100-{key}-tv-ratio",
            _ER,
            f"Table 6, {name}, T_V/T_p (gamma = 3, §4.1)",
            f"verify of 4 tokens / single-token forward, {name}, TP1, A100",
            "ratio",
            ratio,
            partial(_er_tv_ratio, model),
            fitted="RooflineParams.spec_cycle_overhead_s" if key == "7b" else "",
            note="batch not stated; priced at batch 1 as T_p. The roofline alone gives 1.00 (a "
            "4-token verify is memory-bound like decode); the rest is the speculative path's "
            "fixed cost per cycle",
        )
        for key, name, model, ratio in (
            ("7b", "Qwen2.5-7B", "qwen2.5-7b", 1.37),
            ("8b", "Llama3.1-8B", "llama3.1-8b", 1.45),
            ("14b", "Qwen2.5-14B", "qwen2.5-14b", 1.40),
        )
    ),
    CalibrationPoint(
        "tlt-t7-h100-7b-tp2-decode",
        _TLT,
        "Table 7, Base (No-SD) (242.11 tok/s)",
        "decode time per token, Qwen2.5-7B, TP2, batch 1, H100",
        "ms",
        round(1e3 / 242.11, 3),
        lambda: _decode_ms("qwen2.5-7b", "h100", 2),
        fitted="GPUSpec.allreduce_latency_s of H100 (6.8 us)",
    ),
    CalibrationPoint(
        "sa-5.1-h800-32b-tp4-decode",
        _SA,
        "§5.1 ('lower to 13 ms when per-worker batch size is 1')",
        "decode time per token, Qwen2.5-32B, TP4, batch 1, H800 (vLLM 0.10)",
        "ms",
        13.0,
        lambda: _decode_ms("qwen2.5-32b", "h800", 4),
        fitted="GPUSpec.allreduce_latency_s of H800 (45 us)",
    ),
    CalibrationPoint(
        "sa-fig6b-verify-2x-batch",
        _SA,
        "§3 / Fig. 6b ('2x batch (from 128 to 256) only incurs a 1.4x higher latency')",
        "verify time at batch 256 / at batch 128, Qwen2.5-32B, TP4, H800, gamma 2",
        "ratio",
        1.4,
        lambda: _verify_ms("qwen2.5-32b", "h800", 4, 256, 3) / _verify_ms("qwen2.5-32b", "h800", 4, 128, 3),
        fitted="bounds RooflineParams.verify_per_seq_overhead_s (0: any c_V > 0 moves it to 2x)",
        note="gamma not stated; priced at the coupled window SpecActor's planner picks at batch 128 (2); "
        "at 384-768 query tokens the roofline is compute-bound, so larger gammas approach 1.8x",
    ),
    CalibrationPoint(
        "sa-fig5b-spec-gain-batch-128",
        _SA,
        "§3 / Fig. 5b ('for common per-worker batch sizes (e.g., 128), speculative decoding brings "
        "no or negative gain')",
        "plain / speculative time of 128 requests of at most 4,096 tokens, Qwen2.5-32B, one H800 "
        "TP4 worker, 0.5B drafter, gamma 4",
        "x",
        1.0,
        _speactor_fig5b_speedup,
        note="a bound: at most 1.0. The 0.5B drafter's acceptance (preset: 0.60 per token, lower "
        "in long responses) and gamma are not published",
        at_most=True,
    ),
    CalibrationPoint(
        "tlt-t1-h100-32b-tp4-sd-speedup",
        _TLT,
        "Table 1, topK 8 (accept length 8.67, speedup 3.64x)",
        "SD speedup, Qwen2.5-32B, TP4, H100, draft depth 12, 64 tokens verified, batch 1",
        "x",
        3.64,
        partial(_tlt_sd_speedup, "qwen2.5-32b", "h100", 4, 8.67, 12, 64),
        note="batch 1 as in Fig. 13; the drafter's LM head over EAGLE-3's 32k draft vocabulary "
        "(RooflineParams.eagle_vocab; TLT's EAGLE-1 uses the full one, which would give -3.5%)",
    ),
    CalibrationPoint(
        "tlt-t7-h100-7b-tp2-eagle-speedup",
        _TLT,
        "Table 7, Eagle (accept length 6.53, 542.12 tok/s, 2.24x)",
        "SD speedup, Qwen2.5-7B, TP2, batch 1, H100",
        "x",
        2.24,
        partial(_tlt_sd_speedup, "qwen2.5-7b", "h100", 2, _TLT_ACCEPT_7B, _TLT_DEPTH, _TLT_VERIFY),
        note="draft depth and tokens verified not stated: Table 4's depth 10, 64 verified",
    ),
    *(
        CalibrationPoint(
            f"tlt-t2-{gpu}-7b-sd-speedup",
            _TLT,
            f"Table 2, {gpu.upper()} row, w/ SD vs w/o SD ({speedup}x)",
            f"SD speedup, Qwen2.5-7B, TP1, batch 1, {gpu.upper()}",
            "x",
            speedup,
            partial(_tlt_sd_speedup, "qwen2.5-7b", gpu, 1, _TLT_ACCEPT_7B, _TLT_DEPTH, _TLT_VERIFY),
            note="accept length not stated: Table 6's 6.53 (Target-R, RL training); Table 4's depth "
            "10 with 64 verified",
        )
        for gpu, speedup in (("h100", 2.61), ("a100", 2.79))
    ),
    CalibrationPoint(
        "tlt-t6-accept-length",
        _TLT,
        "Table 6, RL training: accept length 4.59 (Target-Base) .. 6.53 (Target-R), midpoint",
        "mean accept length of the tlt policy replaying the tlt-qwen32b-32k preset, steps 1-3, "
        "quarter-scale layout",
        "tokens",
        round((4.59 + 6.53) / 2, 2),
        _tlt_realised_accept_length,
        fitted="traces/presets.py EAGLE_ACCEPT_TLT (an acceptance input, like Seer's Table 2 rows)",
        note="Table 6 is for a Qwen2.5-7B target; TLT publishes no accept length for the 32B run",
    ),
    CalibrationPoint(
        "rhymerl-f17-acceptance-rate",
        "RhymeRL (arXiv:2508.18588)",
        "§7.2.2 / Fig. 17: acceptance rate 'remains 65%-79%' (low end: the first history epoch)",
        "accepted / drafted tokens of the rhymerl policy replaying the rhymerl-math-14b-16k "
        "preset, steps 32-35 (second epoch), eighth-scale layout",
        "ratio",
        0.65,
        _rhymerl_realised_acceptance_rate,
        fitted="traces/presets.py HISTORY_ACCEPT (an acceptance input; HISTORY_MAX realises 79%)",
    ),
    CalibrationPoint(
        "er-t2-7b-outside-rollout",
        _ER,
        "Table 2, Qwen2.5-7B, veRL (AR): step 132.6 s - rollout 82.4 s",
        "reward + training + weight sync per step, Qwen2.5-7B, 8 A100, 1,024 responses",
        "s",
        round(132.6 - 82.4, 1),
        lambda: _outside_rollout_s("qwen2.5-7b", "a100", 8, ER_TOKENS_PER_STEP),
        fitted="sim/step_time.py TRAIN_MFU",
        note="tokens per step: the preset's mean over steps 0-99 (the paper states none)",
    ),
    CalibrationPoint(
        "er-t2-14b-outside-rollout",
        _ER,
        "Table 2, Qwen2.5-14B, veRL (AR): step 221.1 s - rollout 126.6 s",
        "reward + training + weight sync per step, Qwen2.5-14B, 8 A100, 1,024 responses",
        "s",
        round(221.1 - 126.6, 1),
        lambda: _outside_rollout_s("qwen2.5-14b", "a100", 8, ER_TOKENS_PER_STEP),
        note="assumes the 7B run's tokens per step (same dataset and budget, §4.1)",
    ),
    CalibrationPoint(
        "er-f6c-7b-p50",
        _ER,
        "App. B / Fig. 6c, Qwen2.5-7B, veRL (AR): 'about 50% of requests finish within 13 s'",
        "time by which half the requests of step 64 (first of the second epoch) finished, "
        "verl replaying the efficientrollout-qwen7b-8k preset, 8 A100, TP1",
        "s",
        13.0,
        partial(_er_verl_finish_quantile_s, 0.5),
        fitted="A100 GPUSpec.per_seq_overhead_s = 74 us (c_T of EfficientRollout Eq. 2)",
        note="the preset's lengths come from the same paper (Table 5's mean response, Fig. 6c's "
        "quantile ratios); at 10 us per sequence the body ran at 15 ms per iteration and half the "
        "requests finished in 8.9 s (-32%)",
    ),
    *(
        CalibrationPoint(
            f"er-f6c-7b-{name}",
            _ER,
            f"App. B / Fig. 6c, Qwen2.5-7B, veRL (AR): {text}",
            f"the same step's {what}",
            "s",
            value,
            partial(_er_verl_finish_quantile_s, q),
        )
        for name, text, what, q, value in (
            ("p90", "'90% within 22 s'", "90th percentile finish time", 0.9, 22.0),
            ("p99", "'99% within 30 s'", "99th percentile finish time", 0.99, 30.0),
            ("makespan", "'the total rollout makespan is about 88 s'", "rollout makespan", 1.0, 88.0),
        )
    ),
    CalibrationPoint(
        "er-t2-7b-verl-rollout",
        _ER,
        "Table 2, Qwen2.5-7B, veRL (AR): rollout generation 82.4 s (mean of 100 steps)",
        "mean rollout makespan of verl over the preset's steps 0-99, 8 A100, TP1",
        "s",
        82.4,
        _er_verl_mean_rollout_s,
        note="the runaway tail (a response reaching the 8,192-token budget) sets a step's makespan; "
        "it reaches the budget in 69 of the preset's 100 steps (runaway_prob assumed)",
    ),
    *(
        CalibrationPoint(
            f"seer-t2-refs{n}",
            _SEER,
            f"Table 2, n = {n}, Linear",
            f"mean acceptance length of grouped suffix-tree drafting, {n} sibling references, max draft 8",
            "tokens",
            tau,
            partial(_seer_tau, n),
            fitted="traces/presets.py suffix_acceptance (acceptance input, interpolated between rows)",
        )
        for n, tau in ((0, 1.70), (1, 2.04), (5, 2.32), (15, 2.53))
    ),
)


@dataclass(frozen=True)
class CalibrationRow:
    id: str
    paper: str
    source: str
    quantity: str
    unit: str
    paper_value: float
    simctl: float
    error: float  # simctl / paper - 1 (for a bound: how far above it, else 0)
    within_tolerance: bool
    fitted: str
    note: str
    at_most: bool = False

    def to_json(self) -> dict[str, object]:
        return dict(self.__dict__)


def evaluate(points: tuple[CalibrationPoint, ...] = POINTS) -> list[CalibrationRow]:
    """simctl's value and relative error for every point (recomputed from the cost model)."""
    rows = []
    for p in points:
        value = float(p.simctl())
        err = value / p.paper_value - 1.0
        if p.at_most:
            err = max(err, 0.0)
        rows.append(
            CalibrationRow(
                p.id,
                p.paper,
                p.source,
                p.quantity,
                p.unit,
                p.paper_value,
                value,
                err,
                abs(err) <= TOLERANCE,
                p.fitted,
                p.note,
                p.at_most,
            )
        )
    return rows
