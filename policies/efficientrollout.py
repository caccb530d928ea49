"""EfficientRollout (System-Aware Self-Speculative Decoding for RL Rollouts): W4 self-speculation with a
roofline SD toggle (§3.2, Eq. 3) and an adaptive draft length across steps (§3.3, Alg. 1).

The drafter is the trace method ``w4_self`` (the simulator's cost model prices it as the
``w4-self`` drafter: App. E.3's W_D/W_T ~ 0.35 and eta_D). Refreshing it every step (Alg. 1
line 3) costs the policy nothing to decide, so it is not represented here.

Choices where the paper leaves a detail open (each a constructor keyword):

- The toggle is evaluated per rollout worker, on that worker's runtime batch B and KV
  tokens: the paper runs one vLLM engine per GPU (TP = 1, App. F.3) and each engine sees
  only its own shrinking batch. It is checked at every `Tick` (``tick_iterations``
  decode iterations) and whenever one of the worker's requests finishes, the moments the
  batch changes; the paper checks every decode step, which the simulator does not emit.
- Block efficiency tau used by the toggle is the previous step's measured value, as Alg. 1
  (line 1 starts it at gamma_0; line 20 carries it over). Within the step there is nothing
  better: SD is off until the toggle fires, and once on it is never re-evaluated.
  When gamma changed since that measurement, the measured tau is converted to the new
  gamma through the i.i.d. acceptance model tau = (1 - a^(gamma+1)) / (1 - a)
  (``rescale_tau=True``). Alg. 1 literally feeds the old tau (``rescale_tau=False``), which
  under-predicts every raise of gamma; on a TP4 worker, whose W4 draft step costs ~0.7 of
  a target step (TP all-reduces are not quantised), that can keep SD off for good after a
  raise, and with SD off no tau is measured that could lower gamma again.
- Step-level tau = tokens emitted per speculative iteration over all requests of the step
  (bonus token included), the quantity Eq. 1 multiplies by T_p. A step in which SD never
  turned on has no tau; it is skipped (the patience window only holds measured steps).
- The patience window keeps tau values measured at an earlier gamma after gamma changed
  (Alg. 1 compares the last P taus with the *current* gamma); ``reset_window_on_change``
  clears it instead.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from simctl.policies.compose import Composed
from simctl.policies.contract import (
    SPEC_OFF,
    Action,
    Capability,
    ClusterView,
    Event,
    Policy,
    RequestFinished,
    SetSpec,
    SpecConfig,
    StepFinished,
    StepStarted,
    Tick,
    WorkerId,
)
from simctl.policies.draft_methods import DraftMethod
from simctl.policies.family import Family
from simctl.policies.params import Flag, Float, Int, Method, OrNone, Param, PolicyParams, SlashList
from simctl.policies.placement import StaticGroupPlacement

# §4.1 / App. F.3: Gamma = {5, 7, 9, 11} (gamma = 3 omitted as dominated), alpha_up 0.94,
# alpha_down 0.85, P = 2, epsilon 0.05.
PAPER_GAMMAS: tuple[int, ...] = (5, 7, 9, 11)
ALPHA_UP = 0.94
ALPHA_DOWN = 0.85
PATIENCE = 2
EPSILON = 0.05


def predicted_speedup(tau: float, t_target: float, t_draft: float, t_verify: float) -> float:
    """Eq. 1/3: tau * T_p / (gamma * T_q + T_V); `t_draft` is already the whole gamma-token draft."""
    denominator = t_draft + t_verify
    return tau * t_target / denominator if denominator > 0 else 0.0


def sd_toggle(sd_on: bool, speedup: float, epsilon: float = EPSILON) -> bool:
    """Monotone Eq. 3: switch on once the predicted speedup reaches 1 + epsilon, then stay on
    for the rest of the rollout (the batch only shrinks, moving further into the SD regime)."""
    return sd_on or speedup >= 1.0 + epsilon


def acceptance_from_tau(tau: float, gamma: int) -> float:
    """Per-token acceptance a with (1 - a^(gamma+1)) / (1 - a) == tau (bisection)."""
    if tau >= gamma + 1:
        return 1.0
    if tau <= 1.0:
        return 0.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected_tau(mid, gamma) < tau else (lo, mid)
    return (lo + hi) / 2


def expected_tau(accept: float, gamma: int) -> float:
    """Tokens per speculative iteration (bonus included) at per-token acceptance `accept`."""
    return float(gamma + 1) if accept >= 1.0 else (1.0 - accept ** (gamma + 1)) / (1.0 - accept)


def tau_at_gamma(tau: float, measured_gamma: int, gamma: int) -> float:
    """A tau measured at one draft length, carried over to another."""
    if measured_gamma == gamma:
        return tau
    return expected_tau(acceptance_from_tau(tau, measured_gamma), gamma)


def parse_gammas(gammas: str | Sequence[int]) -> tuple[int, ...]:
    """The draft-length set from a tuple or a CLI string such as "5/7/9/11" (commas separate
    policy parameters on the command line, so the set uses slashes)."""
    values = (
        [int(x) for x in str(gammas).replace(";", "/").split("/") if x.strip()]
        if isinstance(gammas, str | int)
        else [int(x) for x in gammas]
    )
    out = tuple(sorted(set(values)))
    if not out or out[0] < 1:
        raise ValueError(f"draft-length set must be positive integers, got {gammas!r}")
    return out


@dataclass
class DraftLengthController:
    """Alg. 1 lines 14-20: move gamma one notch along Gamma when the step-level block efficiency
    stayed near the ceiling (min over the last P steps >= 1 + gamma * alpha_up) or too low
    to pay for drafting (max over the last P steps <= 1 + gamma * alpha_down)."""

    gammas: tuple[int, ...] = PAPER_GAMMAS
    gamma: int = PAPER_GAMMAS[0]
    alpha_up: float = ALPHA_UP
    alpha_down: float = ALPHA_DOWN
    patience: int = PATIENCE
    reset_window_on_change: bool = False
    tau_prev: float = field(default=float(PAPER_GAMMAS[0]))
    window: deque[float] = field(default_factory=deque)
    #: the draft length tau_prev was measured at (the prior counts as measured at gamma_0)
    tau_prev_gamma: int = 0

    def __post_init__(self) -> None:
        if self.gamma not in self.gammas:
            raise ValueError(f"gamma_0={self.gamma} is not in the draft-length set {self.gammas}")
        if self.patience < 1:
            raise ValueError(f"patience must be >= 1, got {self.patience}")
        self.window = deque(self.window, maxlen=self.patience)
        self.tau_prev_gamma = self.tau_prev_gamma or self.gamma

    def observe(self, tau: float) -> int:
        """Feed one step's measured tau; returns the draft length for the next step."""
        self.window.append(tau)
        self.tau_prev, self.tau_prev_gamma = tau, self.gamma
        if len(self.window) < self.patience:
            return self.gamma
        i = self.gammas.index(self.gamma)
        new = self.gamma
        if min(self.window) >= 1.0 + self.gamma * self.alpha_up and i + 1 < len(self.gammas):
            new = self.gammas[i + 1]
        elif max(self.window) <= 1.0 + self.gamma * self.alpha_down and i > 0:
            new = self.gammas[i - 1]
        if new != self.gamma:
            self.gamma = new
            if self.reset_window_on_change:
                self.window.clear()
        return self.gamma


class EfficientRolloutSpeculation(Policy):
    """Speculation part of EfficientRollout (pair it with a placement part).

    toggle=False is the paper's "quantized self-SD" baseline (always on); adapt=False fixes
    gamma (the Fig. 4a ablation).
    """

    name = "efficientrollout-spec"
    requires = frozenset({Capability.SPEC_PER_WORKER})

    def __init__(
        self,
        method: str = DraftMethod.W4_SELF,
        gamma0: int = 5,
        gammas: str | Sequence[int] = PAPER_GAMMAS,
        alpha_up: float = ALPHA_UP,
        alpha_down: float = ALPHA_DOWN,
        patience: int = PATIENCE,
        epsilon: float = EPSILON,
        toggle: bool = True,
        adapt: bool = True,
        tau_prior: float | None = None,
        tick_iterations: int = 64,
        check_on_finish: bool = True,
        reset_window_on_change: bool = False,
        rescale_tau: bool = True,
    ) -> None:
        gamma_set = parse_gammas(gammas) if adapt else (int(gamma0),)
        if int(gamma0) not in gamma_set:
            gamma_set = tuple(sorted({*gamma_set, int(gamma0)}))
        self.method = method
        self.epsilon = float(epsilon)
        self.use_toggle = bool(toggle)
        self.adapt = bool(adapt)
        self.check_on_finish = bool(check_on_finish)
        self.rescale_tau = bool(rescale_tau)
        self.tick_iterations = int(tick_iterations) if self.use_toggle else None
        self.controller = DraftLengthController(
            gammas=gamma_set,
            gamma=int(gamma0),
            alpha_up=float(alpha_up),
            alpha_down=float(alpha_down),
            patience=int(patience),
            reset_window_on_change=bool(reset_window_on_change),
            # Alg. 1 line 1: tau_prev <- gamma_0 before any measurement.
            tau_prev=float(gamma0 if tau_prior is None else tau_prior),
        )
        self._sd_on: dict[WorkerId, bool] = {}
        self._step_open = False
        self._accepted = 0
        self._iterations = 0.0
        #: (step, gamma used, measured tau or None) per finished step, for reports and tests.
        self.log: list[tuple[int, int, float | None]] = []
        self._step = -1

    @property
    def gamma(self) -> int:
        return self.controller.gamma

    def spec(self) -> SpecConfig:
        return SpecConfig(method=self.method, gamma=self.gamma)

    # ------------------------------------------------------------------------ events
    def on_event(self, event: Event, view: ClusterView) -> list[Action]:
        if isinstance(event, StepStarted):
            self._close_step()
            return self._open_step(event, view)
        if isinstance(event, StepFinished):
            self._close_step()
            return []
        if isinstance(event, RequestFinished):
            self._count(view, event.request)
            if self.check_on_finish:
                return self._maybe_switch_on(event.worker, view)
            return []
        if isinstance(event, Tick):
            return self._maybe_switch_on(event.worker, view)
        return []

    def wants_ticks(self, worker: WorkerId, view: ClusterView) -> bool:
        """Ticks check the toggle while SD is off on the worker; once on it stays on for the
        step, and the SetSpec that turns it on makes the worker re-plan."""
        return self.use_toggle and not self._sd_on.get(worker, True)

    def _open_step(self, event: StepStarted, view: ClusterView) -> list[Action]:
        self._step_open = True
        self._step = event.step
        self._accepted, self._iterations = 0, 0.0
        on = not self.use_toggle  # Alg. 1 line 4: sd_on <- false at every step
        self._sd_on = dict.fromkeys(range(view.num_workers), on)
        spec = self.spec() if on else SPEC_OFF
        return [SetSpec(spec=spec, worker=w) for w in range(view.num_workers)]

    def _close_step(self) -> None:
        """Alg. 1 lines 14-20, once per step (at StepFinished, or at the next StepStarted)."""
        if not self._step_open:
            return
        self._step_open = False
        tau = self.step_tau()
        self.log.append((self._step, self.gamma, tau))
        if tau is None:
            return
        if self.adapt:
            self.controller.observe(tau)
        else:
            self.controller.tau_prev, self.controller.tau_prev_gamma = tau, self.gamma

    def _count(self, view: ClusterView, request: int) -> None:
        r = view.request(request)
        if r.verify_iterations:
            self._accepted += r.accepted_tokens
            self._iterations += r.verify_iterations

    def step_tau(self) -> float | None:
        """Tokens per speculative iteration over the requests finished so far this step."""
        return 1.0 + self._accepted / self._iterations if self._iterations else None

    # ------------------------------------------------------------------------ toggle
    def predicted(self, view: ClusterView, worker: WorkerId) -> float | None:
        """Eq. 3's predicted speedup for the worker's current batch (None: nothing running)."""
        w = view.worker(worker)
        b = w.running
        if b <= 0:
            return None
        ctx = float(w.kv_used_tokens)
        g = self.gamma
        t_p = view.cost(b, b, ctx)
        t_q = view.draft_cost(self.method, b, ctx, g)
        t_v = view.cost(b, b * (g + 1), ctx)
        return predicted_speedup(self.expected_tau(), t_p, t_q, t_v)

    def expected_tau(self) -> float:
        """Block efficiency the toggle assumes for this step's gamma."""
        c = self.controller
        return tau_at_gamma(c.tau_prev, c.tau_prev_gamma, c.gamma) if self.rescale_tau else c.tau_prev

    def _maybe_switch_on(self, worker: WorkerId, view: ClusterView) -> list[Action]:
        if not self.use_toggle or self._sd_on.get(worker, True):
            return []
        speedup = self.predicted(view, worker)
        if speedup is None or not sd_toggle(False, speedup, self.epsilon):
            return []
        self._sd_on[worker] = True
        return [SetSpec(spec=self.spec(), worker=worker)]


# --------------------------------------------------------------------------- registry


GAMMA = Int(1, 64)


@dataclass(frozen=True)
class _SpeculationParams(PolicyParams):
    """What the three EfficientRollout policies share (`EfficientRolloutSpeculation`'s keywords)."""

    method: Annotated[DraftMethod, Param(Method(), "draft method (W4 self-speculation)")] = (
        DraftMethod.W4_SELF
    )
    gammas: Annotated[
        tuple[int, ...], Param(SlashList(GAMMA, canonical=True, also=";"), "draft-length set Gamma (Alg. 1)")
    ] = PAPER_GAMMAS
    alpha_up: Annotated[float, Param(Float(0.0, 1.0), "raise gamma when tau >= 1 + gamma * alpha_up")] = (
        ALPHA_UP
    )
    alpha_down: Annotated[float, Param(Float(0.0, 1.0), "lower gamma when tau <= 1 + gamma * alpha_down")] = (
        ALPHA_DOWN
    )
    patience: Annotated[int, Param(Int(1, 1024), "steps of tau the gamma decision looks at (P)")] = PATIENCE
    epsilon: Annotated[float, Param(Float(0.0), "SD turns on at a predicted speedup of 1 + epsilon")] = (
        EPSILON
    )
    tau_prior: Annotated[
        float | None,
        Param(OrNone(Float(1.0)), "block efficiency assumed before any step measured one (none: gamma_0)"),
    ] = None
    tick_iterations: Annotated[int, Param(Int(1, 1 << 20), "decode iterations between SD toggle checks")] = 64
    check_on_finish: Annotated[bool, Param(Flag(), "also check the toggle when a request finishes")] = True
    reset_window_on_change: Annotated[bool, Param(Flag(), "clear the patience window when gamma changes")] = (
        False
    )
    rescale_tau: Annotated[
        bool, Param(Flag(), "carry a measured tau over to a new gamma (module docstring)")
    ] = True

    def part(self, gamma0: int, toggle: bool, adapt: bool) -> EfficientRolloutSpeculation:
        return EfficientRolloutSpeculation(
            method=self.method,
            gamma0=gamma0,
            gammas=self.gammas,
            alpha_up=self.alpha_up,
            alpha_down=self.alpha_down,
            patience=self.patience,
            epsilon=self.epsilon,
            toggle=toggle,
            adapt=adapt,
            tau_prior=self.tau_prior,
            tick_iterations=self.tick_iterations,
            check_on_finish=self.check_on_finish,
            reset_window_on_change=self.reset_window_on_change,
            rescale_tau=self.rescale_tau,
        )


@dataclass(frozen=True)
class EfficientRolloutParams(_SpeculationParams):
    gamma0: Annotated[int, Param(GAMMA, "draft length of the first step (gamma_0)")] = 5
    toggle: Annotated[bool, Param(Flag(), "roofline SD toggle (Eq. 3); false: SD always on")] = True
    adapt: Annotated[bool, Param(Flag(), "adapt gamma across steps (Alg. 1); false: gamma_0 throughout")] = (
        True
    )


@dataclass(frozen=True)
class QuantizedSelfSpecParams(_SpeculationParams):
    gamma: Annotated[int, Param(GAMMA, "fixed draft length (Table 2's best gamma* for Qwen2.5-7B)")] = 7


@dataclass(frozen=True)
class FixedGammaParams(_SpeculationParams):
    gamma: Annotated[int, Param(GAMMA, "fixed draft length (the adaptive policy's starting point)")] = 5
    toggle: Annotated[bool, Param(Flag(), "roofline SD toggle (Eq. 3); false: SD always on")] = True


def efficientrollout(name: str, p: EfficientRolloutParams) -> Policy:
    """veRL placement (the paper's stack) + toggle + adaptive gamma."""
    return Composed(name, [StaticGroupPlacement(), p.part(p.gamma0, p.toggle, p.adapt)])


def quantized_selfspec(name: str, p: QuantizedSelfSpecParams) -> Policy:
    """Always-on W4 self-SD at a fixed gamma. Default 7: Table 2's best fixed gamma* for
    Qwen2.5-7B (tau/gamma 7.5/7.0); the paper picks gamma* in {3, 5, 7} per model."""
    return Composed(name, [StaticGroupPlacement(), p.part(p.gamma, toggle=False, adapt=False)])


def efficientrollout_fixed_gamma(name: str, p: FixedGammaParams) -> Policy:
    """Toggle on, gamma fixed (Fig. 4a ablation; 5 = the adaptive policy's starting point)."""
    return Composed(name, [StaticGroupPlacement(), p.part(p.gamma, p.toggle, adapt=False)])


FAMILIES: tuple[Family[Any], ...] = (
    Family(
        "efficientrollout",
        "EfficientRollout: W4 self-SD, roofline SD toggle (Eq. 3), adaptive gamma (Alg. 1)",
        EfficientRolloutParams,
        efficientrollout,
    ),
    Family(
        "quantized-selfspec",
        "EfficientRollout baseline: always-on W4 self-SD at a fixed gamma (default 7)",
        QuantizedSelfSpecParams,
        quantized_selfspec,
    ),
    Family(
        "efficientrollout-fixed-gamma",
        "EfficientRollout with the SD toggle but a fixed gamma (default 5)",
        FixedGammaParams,
        efficientrollout_fixed_gamma,
    ),
)
