"""Named presets for the synthetic trace generator, each number with its source.

Production rollout traces are not public, so every generated trace is calibrated to what
the five seed papers publish. A number a paper does not give is marked "assumed"
with the reason; those are the numbers to revisit first when a real trace disagrees.

Paper short names used in the comments (full references in the README, "Papers"):
  SpecActor        Fast LLM Post-training via Decoupled and Fastest-of-N Speculation (arXiv:2511.16193)
  Seer             Seer: Online Context Learning for Fast Synchronous LLM RL (arXiv:2511.14617)
  RhymeRL          History Rhymes: Accelerating LLM Reinforcement Learning with RhymeRL (arXiv:2508.18588)
  EfficientRollout EfficientRollout: System-Aware Self-Speculative Decoding for RL Rollouts (Kim, Lee et al.)
  TLT              Taming the Long-Tail: Efficient Reasoning RL Training with Adaptive Drafter
                   (arXiv:2511.16665)

Acceptance numbers are the schema's per-token acceptance probability p (see
traces.schema). Papers report mean acceptance *length* tau (tokens per verify iteration,
bonus token included) at a draft length gamma; `per_token_acceptance` inverts
tau = (1 - p^(gamma+1)) / (1 - p), the i.i.d. model the simulator samples from
(sim/acceptance.py), so a trace replays the paper's tau at the paper's gamma.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from simctl.traces.schema import KNOWN_METHODS, StepTiming


def per_token_acceptance(accept_len: float, gamma: int) -> float:
    """p with (1 - p^(gamma+1)) / (1 - p) == accept_len (bisection; tau is monotone in p)."""
    if not 1.0 <= accept_len <= gamma + 1:
        raise ValueError(f"acceptance length {accept_len} outside [1, {gamma + 1}]")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        tau = (1.0 - mid ** (gamma + 1)) / (1.0 - mid)
        lo, hi = (mid, hi) if tau < accept_len else (lo, mid)
    return round((lo + hi) / 2, 4)


# Seer Table 2 (Qwen2-VL-72B task, compressed suffix tree, max draft 8, "Linear" column):
# mean acceptance length by the number n of sibling responses in the group's tree.
SEER_TABLE2_LINEAR: tuple[tuple[int, float], ...] = ((0, 1.70), (1, 2.04), (5, 2.32), (15, 2.53))
SEER_TABLE2_GAMMA = 8  # Seer Table 2 caption: "maximum draft length of 8 tokens per step"


def suffix_acceptance(group_size: int) -> float:
    """Grouped suffix-tree acceptance for a group of G: G-1 sibling references (Seer Table 2).

    Interpolated linearly in log2(1 + n) between the table's rows (flat beyond n = 15),
    because each doubling of references adds a roughly constant amount in the table.
    """
    n = max(0, group_size - 1)
    xs = [math.log2(1 + r) for r, _ in SEER_TABLE2_LINEAR]
    ys = [t for _, t in SEER_TABLE2_LINEAR]
    x = min(math.log2(1 + n), xs[-1])
    for i in range(1, len(xs)):
        if x <= xs[i]:
            tau = ys[i - 1] + (ys[i] - ys[i - 1]) * (x - xs[i - 1]) / (xs[i] - xs[i - 1])
            return per_token_acceptance(tau, SEER_TABLE2_GAMMA)
    return per_token_acceptance(ys[-1], SEER_TABLE2_GAMMA)


@dataclass(frozen=True)
class MethodShape:
    """How a method's acceptance varies around its batch mean (same for every preset).

    kappa: Beta concentration of the per-request draw (std = sqrt(m(1-m)/(kappa+1))).
    len_slope: shift of the request's mean on the logit scale per standard deviation of
        its log length within the step (negative: the long tail drafts worse).
    pos_slope: change of the per-bucket acceptance (probability units) per doubling of
        (1 + position/512) inside a response; only used for the optional bucket columns.
    """

    kappa: float
    len_slope: float
    pos_slope: float


# kappa = 20 for every method: assumed. SpecActor §3 ("each prompt's acceptance rate varies
# significantly", Fig. 7: the best draft method differs per request) and RhymeRL Fig. 6b (a
# wide per-response acceptance distribution) show large per-request spread but give no
# variance; 20 gives a per-request std of ~0.11 at p = 0.6.
METHOD_SHAPES: Mapping[str, MethodShape] = MappingProxyType(
    {
        # SpecActor §5.2: n-gram has "low acceptance rates for the straggler requests" -> the
        # strongest negative length effect (-0.3 logit per SD: assumed size).
        # Position: more of the request's own tokens to look up later on (+0.02: assumed).
        "ngram": MethodShape(kappa=20.0, len_slope=-0.3, pos_slope=0.02),
        # Seer §4.4 / Fig. 12: long-tail requests see richer group trees (siblings have
        # finished) and acceptance length rises late in the rollout -> positive slopes
        # (+0.2 logit per SD, +0.03 per doubling: assumed sizes).
        "suffix": MethodShape(kappa=20.0, len_slope=0.2, pos_slope=0.03),
        # RhymeRL gives no length or position dependence for history drafting: none assumed.
        "history": MethodShape(kappa=20.0, len_slope=0.0, pos_slope=0.0),
        # SpecActor Alg. 3 premise: low-acceptance requests are the tail ones (-0.15: assumed);
        # slight decay with depth (-0.01 per doubling: assumed, weaker than EAGLE's below).
        "draft_small": MethodShape(kappa=20.0, len_slope=-0.15, pos_slope=-0.01),
        "draft_medium": MethodShape(kappa=20.0, len_slope=-0.15, pos_slope=-0.01),
        # EfficientRollout §D: the W4 self-drafter tracks the policy; no length/position
        # dependence reported -> none assumed.
        "w4_self": MethodShape(kappa=20.0, len_slope=0.0, pos_slope=0.0),
        # EfficientRollout Table 8 (Qwen2.5-7B, EAGLE3, gamma=3): tau 1.970 at 0-512 -> 1.604
        # at 4k-8k, i.e. p 0.49 -> 0.37 over ~3.1 doublings of (1 + pos/512) = -0.04 per
        # doubling; long responses therefore average lower (-0.2 logit per SD: assumed).
        "eagle": MethodShape(kappa=20.0, len_slope=-0.2, pos_slope=-0.04),
    }
)

# Shared per-prompt "predictability" on the logit scale, common to all methods of one prompt
# (the same prompt is easy or hard to draft for every drafter): std 0.25, assumed.
PROMPT_ACCEPT_SIGMA = 0.25
# History acceptance in epoch 0, where no earlier epoch exists. The schema forbids NaN, so a
# floor is emitted; the simulator should disable history drafting while `epoch == 0`
# (RhymeRL §6.2: "not enabled during the first epoch as no historical information exists").
HISTORY_EPOCH0_ACCEPT = 0.02
# Width of the optional position buckets (meta.accept_bucket_tokens): EfficientRollout
# Tables 7/8 report depth-dependent block efficiency with a first bin of 0-512 tokens.
ACCEPT_BUCKET_TOKENS = 512


@dataclass(frozen=True)
class Timing:
    """Non-rollout time per step, from the papers' phase shares of step time.

    Seconds are share / rollout_share * rollout_s; reward and train scale with the number of
    responses (the generator multiplies them by `scale`), weight sync does not.
    """

    rollout_share: float
    reward_share: float
    train_share: float
    weight_sync_share: float
    rollout_s: float  # nominal rollout seconds of one step at scale 1 (baseline system)

    def step_timing(self, scale: float = 1.0) -> StepTiming:
        per_share = self.rollout_s / self.rollout_share
        return StepTiming(
            reward_s=round(self.reward_share * per_share * scale, 3),
            train_s=round(self.train_share * per_share * scale, 3),
            weight_sync_s=round(self.weight_sync_share * per_share, 3),
        )


@dataclass(frozen=True)
class Preset:
    """Everything the generator needs for one workload; see traces.generate for the model.

    Length model parameters are on the natural-log scale of response length: the body is
    lognormal with total std `len_sigma`, a share `icc` of its variance between prompts; a
    fraction `runaway_prob` of responses add an Exponential(`runaway_log_mean`) excursion
    (degenerate loops that run to the budget); the median grows by `growth_per_step` per step
    at first and saturates over `growth_horizon` steps.
    """

    name: str
    paper: str
    model: str  # catalogue name (sim.models.get_model)
    hardware: str  # catalogue name (sim.hardware.get_gpu)
    algorithm: str
    temperature: float
    prompts_per_step: int
    group_size: int
    max_tokens: int
    steps_per_epoch: int | None  # None: every step draws fresh prompts (no repeats)
    prompt_len_median: float
    prompt_len_sigma: float
    len_median0: float
    len_sigma: float
    icc: float
    epoch_rho: float  # AR(1) correlation of a prompt's difficulty between its epochs
    runaway_prob: float
    runaway_log_mean: float
    growth_per_step: float
    growth_horizon: float
    reward_base: float  # logit of P(correct) for a median prompt at step 0
    accept: Mapping[str, float]  # batch-mean per-token acceptance by method
    history_epoch_gain: float  # added to accept["history"] per epoch after the first
    history_max: float
    timing: Timing
    clip_target: tuple[float, float]  # share of responses hitting max_tokens, steps 0-99

    @property
    def requests_per_step(self) -> int:
        return self.prompts_per_step * self.group_size

    def describe(self) -> str:
        """One line for `simctl trace presets`: model, hardware and the step's shape."""
        return (
            f"{self.model} on {self.hardware}, {self.algorithm}, {self.prompts_per_step} prompts x "
            f"{self.group_size} samples, max {self.max_tokens} tokens ({self.paper})"
        )

    def history_accept(self, epoch: int) -> float:
        """History drafting needs an earlier epoch; its quality grows over epochs (RhymeRL)."""
        if epoch <= 0:
            return HISTORY_EPOCH0_ACCEPT
        return min(self.history_max, self.accept["history"] + self.history_epoch_gain * (epoch - 1))


def _accept(**means: float) -> Mapping[str, float]:
    missing = set(KNOWN_METHODS) - set(means)
    extra = set(means) - set(KNOWN_METHODS)
    if missing or extra:
        raise ValueError(f"acceptance must cover exactly KNOWN_METHODS: missing {missing}, extra {extra}")
    return MappingProxyType(dict(means))


# --- Acceptance numbers shared by several presets ------------------------------------------

# Seer Table 2, n = 0 row (the request's own tokens only, i.e. plain n-gram lookup):
# tau 1.70 at max draft 8.
NGRAM_ACCEPT = per_token_acceptance(1.70, 8)  # -> ~0.41
# EfficientRollout Table 4: RTN W4 drafter tau 5.18 at gamma 5 (Qwen2.5-7B-Instruct, batch 1).
W4_ACCEPT_TABLE4 = per_token_acceptance(5.18, 5)  # -> ~0.94
# EfficientRollout Table 2: quantized self-SD tau 7.5 at gamma 7 during RL on Qwen2.5-7B
# (policy sharpening raises agreement over training, App. D).
W4_ACCEPT_RL_7B = per_token_acceptance(7.5, 7)  # -> ~0.98
# EfficientRollout Table 2: learned auxiliary (EAGLE3) drafter tau 2.1 at gamma 3, T = 1.0.
# SpecActor §4.1 says its frozen EAGLE (TLT's) is below TLT's numbers at T = 1.0, so this
# T = 1.0 figure stands in for frozen EAGLE everywhere except TLT.
EAGLE_ACCEPT_T1 = per_token_acceptance(2.1, 3)  # -> ~0.58
# TLT Table 6 (RL training, adaptive drafter): accept length 4.59 (base) .. 6.53 (after RL);
# midpoint 5.56. That is the accept length TLT measured in its own rollouts, so it is matched
# where simctl measures the same statistic: the mean accept length (tokens per verification,
# bonus included) of the `tlt` policy replaying this preset, steps 1-3 after a warm-up step,
# on a quarter-scale layout (sim/calibration_points.py "tlt-t6-accept-length" recomputes it). The
# chain (top-1) acceptance below gives 5.61 there with one BEG-MAB per engine (0.87: 5.18,
# 0.88: 5.18, 0.885: 5.36, 0.89: 5.68, 0.91: 5.77; the bandits make it noisy). It was 0.87
# (5.56) while one bandit served every engine. A static tree calculation (depth 10, topK 8,
# 32 tokens: 0.665 -> 5.56), the value before that, overstates what the
# policy realises: SD runs in the long tail, whose responses draw lower acceptance
# (MethodShape len_slope), and at larger batches the bandit picks smaller trees.
EAGLE_ACCEPT_TLT_TREE = per_token_acceptance(5.56, 10)  # -> ~0.85
EAGLE_ACCEPT_TLT = 0.90
# SpecActor Fig. 10 plots the 0.5B/1.5B draft models' acceptance length but the text gives
# no value: assumed p = 0.60 / 0.66 (between n-gram and EAGLE-after-training, the 1.5B above
# the 0.5B; §5.1 "0.5B is a sweet point" means the cheaper model wins despite lower p).
DRAFT_SMALL_ACCEPT = 0.60
DRAFT_MEDIUM_ACCEPT = 0.66
# RhymeRL §7.2.2 / Fig. 17: "the acceptance rate, i.e., the proportion of accepted tokens
# among the draft, remains 65%-79% and also increases as training continues". That is
# accepted / drafted under HistoSpec's AIMD draft windows, not a per-token acceptance: the
# values below are the per-token (chain) acceptances at which the `rhymerl` policy realises
# 65% and 79% replaying the rhymerl-math-14b-16k preset (eighth-scale layout, seed 0, first history
# epoch; sim/calibration_points.py "rhymerl-f17-acceptance-rate" recomputes the first).
# Per-token 0.65, the value before, realised 36%. Used from the second epoch on, rising
# linearly to the 79% level after 8 epochs (Fig. 6a spans 8 epochs: the pace is assumed).
HISTORY_ACCEPT = 0.85
HISTORY_MAX = 0.915
HISTORY_GAIN = round((HISTORY_MAX - HISTORY_ACCEPT) / 7, 4)


# --- SpecActor traces (§5.1) -----------------------------------------------------------------

# SpecActor §2.2: rollout is 70-80% of post-training time; §2.1: the prepare (reward) phase
# is "negligible". Weight sync is not reported: 2% assumed (Seer Table 1 reports 2-6%).
# Absolute step times are only in Fig. 12 (an image): the nominal rollout is assumed from
# the 13 ms batch-1 TPOT (§5.1) over a 20K-token tail plus large-batch start, ~600 s.
# SpecActor §2.2: rollout is 75-80% of a step, while the prepare+learn phases that RLHFuse can
# overlap are "about 5%" (Fig. 2a) and overlapping them speeds training up by only ~3% on
# long budgets; the remainder (weight resharding/sync, offload) cannot overlap rollout.
_SPECACTOR_TIMING = Timing(
    rollout_share=0.75, reward_share=0.01, train_share=0.05, weight_sync_share=0.19, rollout_s=600.0
)

DAPO_32B_20K = Preset(
    name="dapo-32b-20k",
    paper="SpecActor §5.1 (DAPO-32B-20K)",
    model="qwen2.5-32b",  # §5.1: Qwen2.5-32B
    hardware="h800",  # §5.1: Hopper 80 GB with 400 GB/s NVLink, which is the H800 part
    algorithm="dapo",  # §5.1
    temperature=1.0,  # §5.1: "we set the sampling temperature ... to 1.0"
    prompts_per_step=1024,  # §5.1: 16,384 responses per step incl. group factor (fn. 3) / G
    group_size=16,  # not in SpecActor: assumed DAPO's default of 16 samples per prompt
    max_tokens=20480,  # §5.1 "budget of 20 K tokens"; DAPO's 16,384 + 4,096 overlong buffer
    steps_per_epoch=100,  # §2.1 "each prompt is typically seen only once or twice (1-2 epochs)":
    # assumed 2 epochs over the 200-step trace
    prompt_len_median=180.0,  # assumed: math competition prompts with a chat template
    prompt_len_sigma=0.5,  # assumed
    len_median0=3000.0,  # assumed: no length numbers in the text; with the growth below the
    # step-200 median reaches ~5.6K and ~6% of responses hit the 20K budget
    len_sigma=0.85,  # assumed: Fig. 2(a) long tail; p99/p50 ~ 7x
    icc=0.8,  # Seer Fig. 4 "most groups show consistent lengths"; 0.8 (with the runaway share
    # below) calibrated so veRL's static placement on 128 TP4 workers idles ~40% of GPU time
    # at step 0, rising with length growth: SpecActor §2.2 measures ~50% on this trace
    epoch_rho=0.9,  # assumed: RhymeRL §6.1 rank persistence, weaker for a 100-step gap
    runaway_prob=0.005,  # assumed: loops that run to the budget, independent of the group
    runaway_log_mean=1.0,  # assumed
    growth_per_step=0.004,  # §2.2/§5.4: responses lengthen as the model gets "smarter"; no
    # rate given: assumed 0.4%/step (RhymeRL Fig. 3a measures 0.72%/step for a 32B model)
    growth_horizon=400.0,  # assumed saturation so long traces stay below the budget
    reward_base=0.0,  # assumed: ~50% correct at step 0 (DAPO filters all-0/all-1 groups)
    accept=_accept(
        ngram=NGRAM_ACCEPT,
        suffix=suffix_acceptance(16),
        history=HISTORY_ACCEPT,  # only from the second epoch (step >= 100)
        draft_small=DRAFT_SMALL_ACCEPT,
        draft_medium=DRAFT_MEDIUM_ACCEPT,
        w4_self=W4_ACCEPT_TABLE4,
        eagle=EAGLE_ACCEPT_T1,
    ),
    history_epoch_gain=HISTORY_GAIN,
    history_max=HISTORY_MAX,
    timing=_SPECACTOR_TIMING,
    clip_target=(0.01, 0.10),  # SpecActor §2.2/Fig. 2: tail runs to the 20K budget; few % assumed
)

GRPO_32B_20K = Preset(
    name="grpo-32b-20k",
    paper="SpecActor §5.1 (GRPO-32B-20K)",
    model="qwen2.5-32b",  # §5.1
    hardware="h800",  # §5.1 (see dapo-32b-20k)
    algorithm="grpo",  # §5.1
    temperature=1.0,  # §5.1
    prompts_per_step=1024,  # §5.1: 8,192 responses per step incl. group factor / G
    group_size=8,  # not in SpecActor: assumed 8 (Seer §2.1: GRPO uses 8-16 per prompt)
    max_tokens=20480,  # §5.1 "budget of 20 K tokens"
    steps_per_epoch=100,  # as dapo-32b-20k
    prompt_len_median=180.0,  # assumed
    prompt_len_sigma=0.5,  # assumed
    len_median0=3000.0,  # assumed (see dapo-32b-20k)
    len_sigma=0.85,  # assumed
    icc=0.8,  # as dapo-32b-20k (calibrated to SpecActor §2.2 ~50% veRL GPU waste)
    epoch_rho=0.9,  # assumed
    runaway_prob=0.005,  # as dapo-32b-20k
    runaway_log_mean=1.0,  # assumed
    growth_per_step=0.003,  # assumed, slower than DAPO (no dynamic sampling of hard prompts)
    growth_horizon=400.0,  # assumed
    reward_base=0.0,  # assumed
    accept=_accept(
        ngram=NGRAM_ACCEPT,
        suffix=suffix_acceptance(8),
        history=HISTORY_ACCEPT,
        draft_small=DRAFT_SMALL_ACCEPT,
        draft_medium=DRAFT_MEDIUM_ACCEPT,
        w4_self=W4_ACCEPT_TABLE4,
        eagle=EAGLE_ACCEPT_T1,
    ),
    history_epoch_gain=HISTORY_GAIN,
    history_max=HISTORY_MAX,
    # §5.1: 256 GPUs, per-worker batch 128 (half of DAPO's): nominal rollout assumed 450 s.
    timing=Timing(
        rollout_share=0.75, reward_share=0.01, train_share=0.22, weight_sync_share=0.02, rollout_s=450.0
    ),
    clip_target=(0.01, 0.10),  # as dapo-32b-20k
)

PPO_32B_20K = Preset(
    name="ppo-32b-20k",
    paper="SpecActor §5.1 (PPO-32B-20K)",
    model="qwen2.5-32b",  # §5.1
    hardware="h800",  # §5.1 (see dapo-32b-20k)
    algorithm="ppo",  # §5.1
    temperature=1.0,  # §5.1
    prompts_per_step=4096,  # §5.1: batch 4,096, "only one response per prompt"
    group_size=1,  # §5.1
    max_tokens=20480,  # §5.1 "maximum response length is 20 K tokens"
    steps_per_epoch=100,  # as dapo-32b-20k
    prompt_len_median=180.0,  # assumed
    prompt_len_sigma=0.5,  # assumed
    len_median0=2500.0,  # assumed: PPO traces generate somewhat shorter answers
    len_sigma=0.85,  # assumed
    icc=0.6,  # assumed; with one response per prompt only the total variance is visible
    epoch_rho=0.9,  # assumed
    runaway_prob=0.02,  # assumed
    runaway_log_mean=1.0,  # assumed
    growth_per_step=0.003,  # assumed
    growth_horizon=400.0,  # assumed
    reward_base=0.0,  # assumed
    accept=_accept(
        ngram=NGRAM_ACCEPT,
        suffix=suffix_acceptance(1),  # no siblings: the n = 0 row of Seer Table 2
        history=HISTORY_ACCEPT,
        draft_small=DRAFT_SMALL_ACCEPT,
        draft_medium=DRAFT_MEDIUM_ACCEPT,
        w4_self=W4_ACCEPT_TABLE4,
        eagle=EAGLE_ACCEPT_T1,
    ),
    history_epoch_gain=HISTORY_GAIN,
    history_max=HISTORY_MAX,
    # §5.1: PPO also trains a 32B critic -> rollout at the low end (70%) of §2.2's 70-80%;
    # per-worker batch 64: nominal rollout assumed 400 s.
    timing=Timing(
        rollout_share=0.70, reward_share=0.01, train_share=0.27, weight_sync_share=0.02, rollout_s=400.0
    ),
    clip_target=(0.005, 0.10),  # as dapo-32b-20k (shorter start)
)


# --- Seer workloads (§6.1, Table 5) ----------------------------------------------------------

# Seer §6.1 gives no temperature: assumed 1.0 (the common RL setting, SpecActor §5.1).
# Seer §7: "different iterations sample different data", so no prompt repeats (no epochs).
# Seer Table 1: rollout / training / weight update shares; reward "overlaps nearly
# completely with the rollout phase" -> reward share 0. Absolute iteration times are only
# in Fig. 7 (an image): nominal rollouts assumed from tokens per instance.
# Seer §2.2: lengths "span from hundreds to 98K tokens" with averages of "tens of thousands".

SEER_MOONLIGHT_64K = Preset(
    name="seer-moonlight-64k",
    paper="Seer §6.1 Table 5 (Moonlight)",
    model="moonlight-16b-a3b",  # Table 5 / §6.1
    hardware="h800",  # §6.1: "8 H800 GPUs" per node
    algorithm="grpo",  # §6.1
    temperature=1.0,  # assumed (see above)
    prompts_per_step=400,  # Table 5 "Prompts per Iter"
    group_size=8,  # Table 5 "Reqs per Prompt"
    max_tokens=65536,  # Table 5 "Max. Gen. Length"
    steps_per_epoch=None,  # §7: fresh prompts every iteration
    prompt_len_median=200.0,  # assumed: math prompts (Table 1 caption)
    prompt_len_sigma=0.5,  # assumed
    len_median0=12000.0,  # assumed: "tens of thousands" on average (§2.2) under a 64K cap
    len_sigma=0.9,  # assumed: Fig. 2 spans hundreds .. the budget
    icc=0.6,  # Seer Fig. 4 (strong within-group length correlation): assumed 0.6
    epoch_rho=0.9,  # unused (no repeats)
    runaway_prob=0.02,  # assumed
    runaway_log_mean=0.8,  # assumed
    growth_per_step=0.002,  # assumed: 10-iteration runs (§6.2.1), little visible growth
    growth_horizon=400.0,  # assumed
    reward_base=0.0,  # assumed
    accept=_accept(
        ngram=NGRAM_ACCEPT,
        suffix=suffix_acceptance(8),
        history=HISTORY_ACCEPT,  # never used: all rows are epoch 0
        draft_small=DRAFT_SMALL_ACCEPT,  # assumed: no same-family small model exists
        draft_medium=DRAFT_MEDIUM_ACCEPT,  # assumed (same)
        w4_self=W4_ACCEPT_TABLE4,  # assumed: EfficientRollout Table 4 figure
        eagle=EAGLE_ACCEPT_T1,  # assumed: frozen EAGLE at T = 1.0
    ),
    history_epoch_gain=HISTORY_GAIN,
    history_max=HISTORY_MAX,
    # Table 1 Moonlight: 84% / 14% / 2%; rollout ~2,000 s assumed (3,200 responses of
    # ~15K tokens on 32 single-GPU instances).
    timing=Timing(
        rollout_share=0.84, reward_share=0.0, train_share=0.14, weight_sync_share=0.02, rollout_s=2000.0
    ),
    clip_target=(0.01, 0.10),  # Seer Fig. 2: lengths reach the budget; few % assumed
)

SEER_QWEN2VL_72B_40K = Preset(
    name="seer-qwen2vl-72b-40k",
    paper="Seer §6.1 Table 5 (Qwen2-VL-72B)",
    model="qwen2-vl-72b",  # Table 5; the catalogue models its Qwen2-72B LM plus the ViT
    hardware="h800",  # §6.1
    algorithm="grpo",  # §6.1
    temperature=1.0,  # assumed
    prompts_per_step=600,  # Table 5
    group_size=16,  # Table 5
    max_tokens=40960,  # Table 5
    steps_per_epoch=None,  # §7
    prompt_len_median=1200.0,  # assumed: vision-language prompts carry image tokens
    prompt_len_sigma=0.6,  # assumed
    len_median0=6000.0,  # assumed: mixed vision-language reasoning, shorter than math
    len_sigma=0.9,  # assumed
    icc=0.6,  # assumed (Seer Fig. 4)
    epoch_rho=0.9,  # unused
    runaway_prob=0.02,  # assumed
    runaway_log_mean=0.8,  # assumed
    growth_per_step=0.002,  # assumed
    growth_horizon=400.0,  # assumed
    reward_base=0.0,  # assumed
    accept=_accept(
        ngram=NGRAM_ACCEPT,
        suffix=suffix_acceptance(16),  # Table 2 was measured on this task: n = 15 row
        history=HISTORY_ACCEPT,
        draft_small=DRAFT_SMALL_ACCEPT,  # assumed
        draft_medium=DRAFT_MEDIUM_ACCEPT,  # assumed
        w4_self=W4_ACCEPT_TABLE4,  # assumed
        eagle=EAGLE_ACCEPT_T1,  # assumed
    ),
    history_epoch_gain=HISTORY_GAIN,
    history_max=HISTORY_MAX,
    # Table 1 Qwen2-VL-72B: 63% / 31% / 6%; rollout ~2,500 s assumed (9,600 responses on
    # 16 TP8 instances).
    timing=Timing(
        rollout_share=0.63, reward_share=0.0, train_share=0.31, weight_sync_share=0.06, rollout_s=2500.0
    ),
    clip_target=(0.01, 0.10),  # as seer-moonlight-64k
)

SEER_KIMI_K2_96K = Preset(
    name="seer-kimi-k2-96k",
    paper="Seer §6.1 Table 5 (Kimi-K2)",
    model="kimi-k2",  # Table 5
    hardware="h800",  # §6.1
    algorithm="grpo",  # §6.1
    temperature=1.0,  # assumed
    prompts_per_step=800,  # Table 5
    group_size=8,  # Table 5
    max_tokens=98304,  # Table 5
    steps_per_epoch=None,  # §7
    prompt_len_median=200.0,  # assumed: math prompts (Table 1 caption)
    prompt_len_sigma=0.5,  # assumed
    len_median0=20000.0,  # assumed: §2.2 "tens of thousands", Fig. 2 reaches 98K
    len_sigma=0.9,  # assumed
    icc=0.6,  # assumed (Seer Fig. 4)
    epoch_rho=0.9,  # unused
    runaway_prob=0.02,  # assumed
    runaway_log_mean=0.8,  # assumed
    growth_per_step=0.002,  # assumed
    growth_horizon=400.0,  # assumed
    reward_base=0.0,  # assumed
    accept=_accept(
        ngram=NGRAM_ACCEPT,
        suffix=suffix_acceptance(8),
        history=HISTORY_ACCEPT,
        draft_small=DRAFT_SMALL_ACCEPT,  # assumed
        draft_medium=DRAFT_MEDIUM_ACCEPT,  # assumed
        w4_self=W4_ACCEPT_TABLE4,  # assumed
        eagle=EAGLE_ACCEPT_T1,  # assumed
    ),
    history_epoch_gain=HISTORY_GAIN,
    history_max=HISTORY_MAX,
    # Table 1 Kimi-K2: 87% / 10% / 3%; rollout ~3,500 s assumed (6,400 responses of ~25K
    # tokens on 8 DP32/EP32 instances).
    timing=Timing(
        rollout_share=0.87, reward_share=0.0, train_share=0.10, weight_sync_share=0.03, rollout_s=3500.0
    ),
    clip_target=(0.01, 0.10),  # as seer-moonlight-64k (Fig. 2 reaches 98K)
)


# --- RhymeRL (§3, §5-§7) ---------------------------------------------------------------------

RHYMERL_MATH_14B_16K = Preset(
    name="rhymerl-math-14b-16k",
    paper="RhymeRL §7 (Math-14B, 16K)",
    model="qwen3-14b",  # §7 trains Qwen3-14B-Base (Table 3: 40 layers, 5120 hidden, 8 KV
    # heads). Until f46a8bd the catalogue had no Qwen3-14B and this was qwen2.5-14b (48
    # layers: 20% more KV per token, so 17% fewer tokens per worker)
    hardware="h800",  # §7 names no GPU ("8 high-performance GPUs", 8x400 Gb/s CX7 per node):
    # assumed Hopper-class H800 for a ByteDance/SJTU cluster
    algorithm="grpo",  # §7 "We train these models using GRPO"
    temperature=1.0,  # not given: assumed 1.0
    prompts_per_step=256,  # assumed: §7 samples an 8K-prompt set and Fig. 9 spans 20 epochs
    # in 300-1000 steps (~35 steps/epoch): 8,192 prompts / 32 steps = 256 per step
    group_size=16,  # §7: "the response group size is set to 16"
    max_tokens=16384,  # §7 / Fig. 14: "max response length is set to 16K tokens"
    steps_per_epoch=32,  # see prompts_per_step
    prompt_len_median=150.0,  # assumed: internal math prompts
    prompt_len_sigma=0.5,  # assumed
    len_median0=2000.0,  # assumed: Fig. 3a starts at ~1K mean for 32B; a larger start keeps
    # a 16K clip share of a few % within ~100 steps
    len_sigma=1.0,  # assumed: Fig. 3b "response lengths vary widely"
    icc=0.85,  # Table 2: 80-86% of responses stay in their predicted (or a lower) rank group
    # of 8 using the previous epoch's group median; a lognormal model needs a high ICC for
    # that (0.85 gives ~70%; 16% moving up would need ICC > 0.97 with rho ~ 1)
    epoch_rho=0.98,  # §6.1 "the ranking order across adjacent epochs remains similar":
    # assumed 0.98 (with ICC 0.85 -> Spearman of prompt medians ~0.95)
    runaway_prob=0.01,  # assumed
    runaway_log_mean=1.0,  # assumed
    growth_per_step=0.005,  # Fig. 3a: 1K -> 10K mean in 320 steps (0.72%/step, 32B);
    # assumed somewhat slower for 14B
    growth_horizon=400.0,  # assumed
    reward_base=0.5,  # assumed: math correctness ~60% at step 0 (Fig. 19 reward curves)
    accept=_accept(
        ngram=NGRAM_ACCEPT,
        suffix=suffix_acceptance(16),
        history=HISTORY_ACCEPT,  # §7.2.2 / Fig. 17: 65% in the first history epoch
        draft_small=DRAFT_SMALL_ACCEPT,  # assumed
        draft_medium=DRAFT_MEDIUM_ACCEPT,  # assumed
        w4_self=W4_ACCEPT_TABLE4,  # assumed
        eagle=EAGLE_ACCEPT_T1,  # assumed; §7.4 argues static drafters go stale
    ),
    history_epoch_gain=HISTORY_GAIN,  # Fig. 17: rising to 79%
    history_max=HISTORY_MAX,
    # §3.1 / Fig. 2: rollout is 91% of RL time for the math model at 16K. Reward
    # (rule-based) 1%, weight sync 1%: assumed; training the remaining 7%. Rollout ~900 s
    # assumed (4,096 responses on 64 TP2 workers, 16K tail).
    timing=Timing(
        rollout_share=0.91, reward_share=0.01, train_share=0.07, weight_sync_share=0.01, rollout_s=900.0
    ),
    clip_target=(0.01, 0.10),  # Fig. 3b long tail under 16K; few % assumed
)


# --- EfficientRollout (§4.1, App. B, App. F) ---------------------------------------------------

EFFICIENTROLLOUT_QWEN7B_8K = Preset(
    name="efficientrollout-qwen7b-8k",
    paper="EfficientRollout §4.1 / App. B, F (Qwen2.5-7B, SimpleRL-8k-hard)",
    model="qwen2.5-7b",  # §4.1
    hardware="a100",  # §4.1 / F.1: one node of 8 A100-SXM4-80GB
    algorithm="grpo",  # §4.1
    temperature=1.0,  # F.3: "default sampling temperature is set to 1.0"
    prompts_per_step=128,  # F.3: train batch size 128
    group_size=8,  # F.3: 8 rollouts per prompt
    max_tokens=8192,  # F.3: maximum rollout length 8,192
    steps_per_epoch=64,  # SimpleRL-8k: ~8K prompts / 128 = 64 steps (assumed 8,192); App. B
    # analyses "the first step of the second epoch" inside the 100-step run
    prompt_len_median=120.0,  # assumed: MATH level 3-5 problems
    prompt_len_sigma=0.4,  # assumed
    len_median0=500.0,  # Table 5: mean response 661 tokens from epoch 2 on (with growth and
    # the lognormal mean factor exp(sigma^2/2), a 500-token start median matches)
    len_sigma=0.45,  # App. B / Fig. 6c: completion 50% at 13 s, 90% at 22 s, 99% at 30 s ->
    # p90/p50 ~1.7 and p99/p50 ~2.3, i.e. a lognormal body of sigma ~0.4-0.45
    icc=0.6,  # assumed (Seer Fig. 4)
    epoch_rho=0.9,  # assumed
    runaway_prob=0.006,  # App. B: makespan 88 s vs 30 s at p99 -> a thin tail runs ~3x past
    # p99 to the 8K budget: assumed 0.6% of responses
    runaway_log_mean=1.5,  # assumed (tail reaches the budget for ~0.1% of responses)
    growth_per_step=0.002,  # assumed: mild growth over the 100-step run
    growth_horizon=400.0,  # assumed
    reward_base=0.5,  # Table 2: final accuracy 71% (assumed ~60% at the start)
    accept=_accept(
        ngram=NGRAM_ACCEPT,
        suffix=suffix_acceptance(8),
        history=HISTORY_ACCEPT,  # assumed as RhymeRL's first history epoch (Table 5's
        # Spec-RL reuses only 4.4% of tokens, but it is prefix-only and lossy)
        draft_small=0.65,  # assumed: a 0.5B drafter for a 7B target aligns better than for 32B
        draft_medium=0.70,  # assumed
        w4_self=W4_ACCEPT_RL_7B,  # Table 2: tau 7.5 at gamma 7 -> ~0.98
        eagle=EAGLE_ACCEPT_T1,  # Table 2: tau 2.1 at gamma 3 -> ~0.58
    ),
    history_epoch_gain=HISTORY_GAIN,
    history_max=HISTORY_MAX,
    # Table 2 (veRL AR, Qwen2.5-7B): rollout 82.4 s of a 132.6 s step -> 50.2 s other.
    # Split assumed: reward 3 s (rule-based math), weight sync 5 s, training 42.2 s.
    timing=Timing(
        rollout_share=82.4 / 132.6,
        reward_share=3.0 / 132.6,
        train_share=42.2 / 132.6,
        weight_sync_share=5.0 / 132.6,
        rollout_s=82.4,
    ),
    clip_target=(0.0002, 0.01),  # App. B: only the last few of 1,024 reach the budget
)


# --- TLT (§1, §6.1, §6.3) --------------------------------------------------------------------

TLT_QWEN32B_32K = Preset(
    name="tlt-qwen32b-32k",
    paper="TLT §6.1 (Qwen2.5-32B, GRPO, 32K)",
    model="qwen2.5-32b",  # §6.1 "Qwen2.5-32B ... a larger base model"
    hardware="h100",  # §6.1: 8 DGX H100 servers (64 GPUs)
    algorithm="grpo",  # §6.1
    temperature=0.9,  # §6.1 "we set the temperature=0.9"
    prompts_per_step=256,  # assumed: not given; Fig. 14's case study has 128 requests per
    # TP4 worker, 16 such workers on 64 GPUs -> 2,048 requests = 256 prompts x 8
    group_size=8,  # assumed: not given (Seer §2.1: GRPO uses 8-16)
    max_tokens=32768,  # §6.1 "maximum generation length of 32K tokens"
    steps_per_epoch=None,  # assumed: Eurus-2-RL subset larger than the traced steps
    prompt_len_median=250.0,  # assumed: math + competitive-programming prompts
    prompt_len_sigma=0.6,  # assumed
    len_median0=2500.0,  # assumed: Fig. 1a "most generated sequences are relatively short"
    len_sigma=0.9,  # assumed: Fig. 2 gap between p75 and the maximum
    icc=0.6,  # assumed (Seer Fig. 4)
    epoch_rho=0.9,  # unused
    runaway_prob=0.03,  # Fig. 2: "in most RL steps, a few responses reach the maximum" (~1-2%)
    runaway_log_mean=1.3,  # assumed
    growth_per_step=0.003,  # assumed: ByteDance trace (Fig. 2) lengthens over 385 steps
    growth_horizon=400.0,  # assumed
    reward_base=0.0,  # assumed
    accept=_accept(
        ngram=NGRAM_ACCEPT,  # §5.3 model-free drafter
        suffix=suffix_acceptance(8),
        history=HISTORY_ACCEPT,  # never used: no repeats
        draft_small=DRAFT_SMALL_ACCEPT,  # assumed
        draft_medium=DRAFT_MEDIUM_ACCEPT,  # assumed
        w4_self=W4_ACCEPT_TABLE4,  # assumed
        eagle=EAGLE_ACCEPT_TLT,  # Table 6: accept length 4.59-6.53, realised (see above)
    ),
    history_epoch_gain=HISTORY_GAIN,
    history_max=HISTORY_MAX,
    # §1 / Fig. 1a: rollout ~85% of step time; Fig. 2 (ByteDance, Qwen2.5-32B): steps of ~40
    # minutes -> 2,040 s rollout, 360 s other. Split assumed: inference stage (reference and
    # old log-probs plus rule-based reward) 120 s, training 220 s, weight sync 20 s.
    timing=Timing(
        rollout_share=0.85,
        reward_share=0.05,
        train_share=220.0 / 2400.0,
        weight_sync_share=20.0 / 2400.0,
        rollout_s=2040.0,
    ),
    clip_target=(0.003, 0.05),  # Fig. 2: "in most RL steps, a few responses reach the maximum"
)


PRESETS: Mapping[str, Preset] = MappingProxyType(
    {
        p.name: p
        for p in (
            DAPO_32B_20K,
            GRPO_32B_20K,
            PPO_32B_20K,
            SEER_MOONLIGHT_64K,
            SEER_QWEN2VL_72B_40K,
            SEER_KIMI_K2_96K,
            RHYMERL_MATH_14B_16K,
            EFFICIENTROLLOUT_QWEN7B_8K,
            TLT_QWEN32B_32K,
        )
    }
)


def get_preset(name: str) -> Preset:
    """The named preset, or ValueError listing the known names."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}") from None
