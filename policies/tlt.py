"""TLT (Taming the Long-Tail, arXiv:2511.16665): elastic speculation for the long tail, BEG-MAB
strategy selection, an EAGLE drafter retrained on idle workers (spot trainer), and an
n-gram (model-free) fallback while no trained drafter exists.

Three parts that compose with any placement part:

- `SpotTrainer` (§4.2 Worker Coordinator): workers that ran dry become spot trainers once
  more than `idle_threshold` are idle, until the step's rollout ends. It books the
  GPU-seconds on a `DrafterLedger` shared with the speculation part. How good the drafter
  *is* after that training is ground truth and lives on the simulator side
  (sim/drafter_training.py); the policy only knows whether one has been trained.
- `TltSpeculation` (§5.1-5.3): speculation off while a worker has `threshold` or more
  requests left; below, the BEG-MAB picks (Draft_Depth, topK, Tokens_to_Verify) from the
  runtime batch size at every Tick, rewarded with the tokens per second it achieved.
- the ledger decides the drafter: EAGLE when trained (or `pretrained`), else n-gram.

Choices where the paper leaves a detail open (constructor keywords):

- ``scope="worker"``: "remaining requests" are the worker's (running + waiting). The
  threshold sits in TLT's per-engine Adaptive SD Manager and Fig. 14 profiles one TP4
  worker; ``scope="global"`` uses the step's unfinished count instead. Once on, SD stays on
  for the step (the count only falls under static placement).
- The reward's elapsed time is by default the *predicted* iteration time of the strategy
  at the current batch (view.cost + view.draft_cost) times the iterations, so rewards of
  two arms are compared at the same batch; ``reward_time="measured"`` divides by the
  simulated seconds between ticks instead (Alg. 1 literally: a measured step latency).
- Verification cost in the prediction uses Tokens_to_Verify when topK > 1 (tree), else
  depth + 1 (chain); the drafter step processes batch * topK tokens.
- A strategy becomes SpecConfig(method, gamma=depth, topk=topK, verify_tokens=
  Tokens_to_Verify); an executor that models only chains reads gamma as the draft depth.
- The n-gram drafter (TLT uses Lookahead [72]) drafts a fixed 8 tokens: the draft length
  at which the traces' n-gram acceptance is calibrated (Seer Table 2, max draft 8).
- The drafter counts as trained once any spot-training GPU-second was booked
  (``ready_gpu_s=0``); TLT's "initial training steps" use n-gram until then.
- ``idle_threshold=1`` (promotion needs two idle workers, a data-parallel pair for FSDP2
  training): the paper calls the threshold configurable but gives no value.
- ``bandit="worker"``: each rollout engine has its own BEG-MAB, as each has its own
  Adaptive SD Manager choosing "for each input batch" (§4, Fig. 6; the tuner lives in the
  SGLang engine, §5 Implementation), seeded from ``seed`` and the worker. ``bandit="shared"``
  pools every engine's rewards in one: its window of ``window`` rewards then spans ever
  less time as engines are added, so the choice flips more often on a larger cluster (at
  1,024 engines a 16-reward window covers a few iterations of the cluster).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from simctl.policies.beg_mab import DEFAULT_THRESHOLDS, DEFAULT_TOPK, BegMab, Strategy, default_strategies
from simctl.policies.bulk_reads import request_rows
from simctl.policies.compose import Composed
from simctl.policies.contract import (
    SPEC_OFF,
    Action,
    Capability,
    ClusterView,
    Event,
    Policy,
    RequestFinished,
    RequestId,
    Role,
    SetRole,
    SetSpec,
    SpecConfig,
    StepFinished,
    StepStarted,
    Tick,
    WorkerId,
    WorkerIdle,
    WorkerView,
)
from simctl.policies.draft_methods import DraftMethod
from simctl.policies.family import Family
from simctl.policies.params import Flag, Float, Int, OneOf, Param, PolicyParams
from simctl.policies.placement import StaticGroupPlacement

# §5.1 / §6.3: "activates SD only when the remaining request count drops below a
# configurable threshold (default: 32)".
ELASTIC_THRESHOLD = 32
NGRAM_GAMMA = 8


def elastic_active(remaining: int, threshold: int = ELASTIC_THRESHOLD) -> bool:
    """SD is worth it only in the tail: strictly fewer than `threshold` requests left."""
    return 0 < remaining < threshold


@dataclass
class DrafterLedger:
    """What the policy knows of its drafter: spot-training GPU-seconds booked so far."""

    pretrained: bool = False
    ready_gpu_s: float = 0.0
    spot_gpu_s: float = 0.0
    steps_with_training: int = 0

    @property
    def trained(self) -> bool:
        return self.pretrained or self.spot_gpu_s > self.ready_gpu_s


class SpotTrainer(Policy):
    """§4.2: promote idle workers to drafter training while the rollout tail runs."""

    name = "tlt-spot-trainer"
    requires = frozenset({Capability.ROLES})

    def __init__(self, ledger: DrafterLedger, idle_threshold: int = 1) -> None:
        self.ledger = ledger
        self.idle_threshold = int(idle_threshold)
        self._idle: list[WorkerId] = []
        self._training: dict[WorkerId, tuple[float, int]] = {}  # worker -> (start s, gpus)
        self._booked = False
        self._last_s = 0.0

    def on_event(self, event: Event, view: ClusterView) -> list[Action]:
        self._last_s = max(self._last_s, event.time_s)
        if isinstance(event, StepStarted):
            self._close(self._last_s)
            self._idle, self._training, self._booked = [], {}, False
            self._last_s = event.time_s
            return []
        if isinstance(event, StepFinished):
            self._close(event.time_s)
            return []
        if isinstance(event, WorkerIdle) and view.unfinished_count() > 0:
            if event.worker not in self._idle:
                self._idle.append(event.worker)
            if len(self._idle) <= self.idle_threshold:
                return []
            out: list[Action] = []
            for w in self._idle:
                if w not in self._training:
                    self._training[w] = (event.time_s, view.worker(w).gpus)
                    out.append(SetRole(worker=w, role=Role.SPOT_TRAINER))
            return out
        if isinstance(event, RequestFinished) and view.unfinished_count() == 0:
            # The coordinator halts spot training the moment rollout completes.
            self._close(event.time_s)
        return []

    def _close(self, end_s: float) -> None:
        if not self._training:
            return
        self.ledger.spot_gpu_s += sum(max(0.0, end_s - t0) * g for t0, g in self._training.values())
        if not self._booked:
            self.ledger.steps_with_training += 1
            self._booked = True
        self._training = {}


@dataclass
class _Interval:
    """Speculation counters of one worker since its last Tick."""

    accepted: int = 0
    iterations: float = 0.0
    start_s: float = 0.0


class TltSpeculation(Policy):
    """§5: elastic activation + BEG-MAB over EAGLE strategies (or fixed n-gram)."""

    name = "tlt-spec"
    requires = frozenset({Capability.SPEC_PER_WORKER})

    def __init__(
        self,
        ledger: DrafterLedger,
        drafter: Literal["adaptive", "ngram"] = "adaptive",
        threshold: int = ELASTIC_THRESHOLD,
        scope: Literal["worker", "global"] = "worker",
        method: str = DraftMethod.EAGLE,
        ngram_gamma: int = NGRAM_GAMMA,
        strategies: Sequence[Strategy] | None = None,
        thresholds: Sequence[int] = DEFAULT_THRESHOLDS,
        epsilon: float = 0.1,
        window: int = 16,
        seed: int = 0,
        tick_iterations: int = 16,
        reward_time: Literal["predicted", "measured"] = "predicted",
        bandit: Literal["worker", "shared"] = "worker",
    ) -> None:
        if drafter not in ("adaptive", "ngram") or scope not in ("worker", "global"):
            raise ValueError(f"drafter must be adaptive|ngram, scope worker|global; got {drafter}, {scope}")
        if bandit not in ("worker", "shared"):
            raise ValueError(f"bandit must be worker|shared, got {bandit}")
        if reward_time not in ("predicted", "measured"):
            raise ValueError(f"reward_time must be predicted|measured, got {reward_time}")
        self.ledger = ledger
        self.drafter = drafter
        self.threshold = int(threshold)
        self.scope = scope
        self.method = method
        self.ngram_gamma = int(ngram_gamma)
        self.reward_time = reward_time
        self.tick_iterations = int(tick_iterations)
        self.bandit = bandit
        self._seed = int(seed)
        self._mab_args = (
            tuple(strategies if strategies is not None else default_strategies()),
            tuple(thresholds),
            float(epsilon),
            int(window),
        )
        self.mab = self._new_mab(self._seed)  # the shared one; also checks the arguments
        self._mabs: dict[WorkerId, BegMab] = {}  # per engine (bandit="worker"), kept across steps
        self._use_eagle = False
        self._active: dict[WorkerId, bool] = {}
        self._strategy: dict[WorkerId, Strategy] = {}
        self._interval: dict[WorkerId, _Interval] = {}
        self._seen: dict[RequestId, tuple[int, int]] = {}
        #: (step, worker, time_s, strategy or None for n-gram, batch) per activation/switch.
        self.log: list[tuple[int, WorkerId, float, Strategy | None, int]] = []
        self._step = -1

    def _new_mab(self, seed: int) -> BegMab:
        strategies, thresholds, epsilon, window = self._mab_args
        return BegMab(strategies, thresholds, epsilon=epsilon, window=window, seed=seed)

    def mab_of(self, worker: WorkerId) -> BegMab:
        """The bandit choosing `worker`'s strategies: its own (created at first use, seeded
        from the policy's seed and the worker), or the shared one."""
        if self.bandit == "shared":
            return self.mab
        mab = self._mabs.get(worker)
        if mab is None:
            mab = self._mabs[worker] = self._new_mab(self._seed * 1_000_003 + int(worker))
        return mab

    # ------------------------------------------------------------------------ events
    def on_event(self, event: Event, view: ClusterView) -> list[Action]:
        if isinstance(event, StepStarted):
            return self._open_step(event, view)
        if isinstance(event, RequestFinished):
            self._fold(view, event.request, event.worker)
            return self._maybe_activate(event.worker, view, event.time_s)
        if isinstance(event, Tick):
            if self._active.get(event.worker):
                return self._retune(event.worker, view, event.time_s)
            return self._maybe_activate(event.worker, view, event.time_s)
        return []

    def wants_ticks(self, worker: WorkerId, view: ClusterView) -> bool:
        """A Tick retunes an active worker's EAGLE strategy, or activates an inactive one
        whose remaining count fell into the tail. Neither can happen while n-gram drafts
        (no bandit to retune), nor while the worker's count stays above the threshold: it
        falls at a finish there (RequestFinished activates at once) or when a running
        request leaves (the worker re-plans and asks again); a waiting one can leave
        without a re-plan, so a worker with requests waiting keeps its Ticks. The global
        count is not tracked per worker, so `scope="global"` keeps them before activation."""
        if self._active.get(worker, True):
            return self._use_eagle
        if self.scope == "global":
            return True
        w = view.worker(worker)
        return w.waiting > 0 or elastic_active(w.running + w.waiting, self.threshold)

    def _open_step(self, event: StepStarted, view: ClusterView) -> list[Action]:
        self._step = event.step
        self._use_eagle = self.drafter == "adaptive" and self.ledger.trained
        self._active = dict.fromkeys(range(view.num_workers), False)
        self._strategy, self._interval, self._seen = {}, {}, {}
        out: list[Action] = [SetSpec(spec=SPEC_OFF, worker=w) for w in range(view.num_workers)]
        if self.scope == "global" and elastic_active(len(event.requests), self.threshold):
            for w in range(view.num_workers):
                out += self._activate(w, view, event.time_s)
        return out

    # -------------------------------------------------------------------- activation
    def remaining(self, worker: WorkerId, view: ClusterView) -> int:
        if self.scope == "global":
            return view.unfinished_count()
        w = view.worker(worker)
        return w.running + w.waiting

    def _maybe_activate(self, worker: WorkerId, view: ClusterView, now: float) -> list[Action]:
        if self._active.get(worker, True) or not elastic_active(self.remaining(worker, view), self.threshold):
            return []
        if self.scope == "global":
            out: list[Action] = []
            for w in range(view.num_workers):
                if not self._active[w]:
                    out += self._activate(w, view, now)
            return out
        return self._activate(worker, view, now)

    def _activate(self, worker: WorkerId, view: ClusterView, now: float) -> list[Action]:
        self._active[worker] = True
        self._interval[worker] = _Interval(start_s=now)
        if not self._use_eagle:
            self.log.append((self._step, worker, now, None, view.worker(worker).running))
            return [SetSpec(spec=SpecConfig(method=DraftMethod.NGRAM, gamma=self.ngram_gamma), worker=worker)]
        for rid in view.worker_requests(worker):  # the interval counts from now
            r = view.request(rid)
            self._seen[rid] = (r.accepted_tokens, r.verify_iterations)
        return self._switch(worker, view, now)

    # ------------------------------------------------------------------------ bandit
    def _fold(self, view: ClusterView, rid: RequestId, worker: WorkerId) -> None:
        """Add the request's counters since it was last read to its worker's interval."""
        if worker not in self._strategy:
            return
        r = view.request(rid)
        acc0, it0 = self._seen.get(rid, (0, 0))
        self._seen[rid] = (r.accepted_tokens, r.verify_iterations)
        iv = self._interval[worker]
        iv.accepted += r.accepted_tokens - acc0
        iv.iterations += r.verify_iterations - it0

    def _retune(self, worker: WorkerId, view: ClusterView, now: float) -> list[Action]:
        if not self._use_eagle or worker not in self._strategy:
            return []
        iv = self._interval[worker]
        rids = list(view.worker_requests(worker))  # migrated ones included
        if rids:  # `_fold` of each, the counters read in bulk (every tick of a worker)
            rows, seen = request_rows(view, rids), self._seen
            for rid, accepted, iterations in zip(rids, rows.accepted, rows.verify_iterations, strict=True):
                acc0, it0 = seen.get(rid, (0, 0))
                seen[rid] = (accepted, iterations)
                iv.accepted += accepted - acc0
                iv.iterations += iterations - it0
        w = view.worker(worker)
        if iv.iterations > 0 and w.running > 0:
            strategy = self._strategy[worker]
            a_bar = 1.0 + iv.accepted / iv.iterations
            if self.reward_time == "measured":
                elapsed = max(now - iv.start_s, 1e-12)
                reward = (iv.accepted + iv.iterations) / elapsed
            else:
                reward = a_bar * w.running / self.predicted_iteration_s(view, worker, strategy, w)
            self.mab_of(worker).record(strategy, reward, a_bar)
        return self._switch(worker, view, now, w.running)

    def _switch(
        self, worker: WorkerId, view: ClusterView, now: float, running: int | None = None
    ) -> list[Action]:
        """Start a new interval and pick the strategy for the worker's batch (`running`: its
        running sequences, if already read at this event)."""
        batch = view.worker(worker).running if running is None else running
        self._interval[worker] = _Interval(start_s=now)
        if batch <= 0:
            return []
        choice = self.mab_of(worker).select(batch)
        if self._strategy.get(worker) == choice:
            return []
        self._strategy[worker] = choice
        self.log.append((self._step, worker, now, choice, batch))
        spec = SpecConfig(
            method=self.method, gamma=choice.depth, topk=choice.topk, verify_tokens=choice.verify
        )
        return [SetSpec(spec=spec, worker=worker)]

    def predicted_iteration_s(
        self, view: ClusterView, worker: WorkerId, s: Strategy, wv: WorkerView | None = None
    ) -> float:
        """Draft (depth steps over batch*topK tokens) + verification of the drafted tokens
        (`wv`: the worker's view, if already read at this event)."""
        w = view.worker(worker) if wv is None else wv
        b, ctx = w.running, float(w.kv_used_tokens)
        verify = s.verify if s.topk > 1 else s.depth + 1
        return view.cost(b, b * verify, ctx) + view.draft_cost(self.method, b * s.topk, ctx, s.depth)


# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class TltParams(PolicyParams):
    """The parameters of the three TLT policies (a policy without a part ignores its own)."""

    threshold: Annotated[int, Param(Int(0, 1 << 20), "SD turns on below this many requests left")] = (
        ELASTIC_THRESHOLD
    )
    scope: Annotated[str, Param(OneOf(("worker", "global")), "whose requests count as left")] = "worker"
    ngram_gamma: Annotated[int, Param(Int(1, 64), "n-gram draft length while no EAGLE drafter exists")] = (
        NGRAM_GAMMA
    )
    epsilon: Annotated[float, Param(Float(0.0, 1.0), "BEG-MAB exploration probability")] = 0.1
    window: Annotated[int, Param(Int(1, 1 << 16), "rewards per strategy BEG-MAB keeps")] = 16
    seed: Annotated[int, Param(Int(), "seed of BEG-MAB's exploration")] = 0
    tick_iterations: Annotated[int, Param(Int(1, 1 << 20), "decode iterations between strategy choices")] = 16
    reward_time: Annotated[
        str, Param(OneOf(("predicted", "measured")), "reward per predicted or measured second")
    ] = "predicted"
    bandit: Annotated[
        str, Param(OneOf(("worker", "shared")), "one BEG-MAB per engine (the paper's) or one for all")
    ] = "worker"
    topk: Annotated[int, Param(Int(1, 64), "tree drafting's topK of every strategy")] = DEFAULT_TOPK
    pretrained: Annotated[bool, Param(Flag(), "an EAGLE drafter exists from the start (not tlt-base)")] = (
        False
    )
    idle_threshold: Annotated[
        int, Param(Int(0, 1 << 16), "idle workers kept before spot training starts (tlt)")
    ] = 1
    ready_gpu_s: Annotated[
        float, Param(Float(0.0), "spot-training GPU-seconds before the drafter counts (tlt)")
    ] = 0.0

    def speculation(self, ledger: DrafterLedger, drafter: Literal["adaptive", "ngram"]) -> TltSpeculation:
        return TltSpeculation(
            ledger,
            drafter=drafter,
            threshold=self.threshold,
            scope="global" if self.scope == "global" else "worker",
            ngram_gamma=self.ngram_gamma,
            strategies=default_strategies(self.topk),
            epsilon=self.epsilon,
            window=self.window,
            seed=self.seed,
            tick_iterations=self.tick_iterations,
            reward_time="measured" if self.reward_time == "measured" else "predicted",
            bandit="shared" if self.bandit == "shared" else "worker",
        )


def tlt(name: str, p: TltParams) -> Policy:
    """Full TLT: spot-trained EAGLE drafter (n-gram until one exists) + elastic BEG-MAB."""
    ledger = DrafterLedger(pretrained=p.pretrained, ready_gpu_s=p.ready_gpu_s)
    parts: list[Policy] = [
        StaticGroupPlacement(),
        SpotTrainer(ledger, idle_threshold=p.idle_threshold),
        p.speculation(ledger, "adaptive"),
    ]
    return Composed(name, parts)


def tlt_base(name: str, p: TltParams) -> Policy:
    """§6.1 TLT-Base: the adaptive drafter disabled, model-free (n-gram) drafting only."""
    return Composed(name, [StaticGroupPlacement(), p.speculation(DrafterLedger(), "ngram")])


def tlt_static_drafter(name: str, p: TltParams) -> Policy:
    """EAGLE drafter trained once before RL and never retrained (Table 6's stale drafter)."""
    spec = p.speculation(DrafterLedger(pretrained=p.pretrained), "adaptive")
    return Composed(name, [StaticGroupPlacement(), spec])


FAMILIES: tuple[Family[Any], ...] = (
    Family(
        "tlt",
        "TLT: elastic SD below 32 requests, BEG-MAB EAGLE strategies, spot-trained "
        "drafter on idle workers, n-gram until trained (pretrained=true skips that)",
        TltParams,
        tlt,
    ),
    Family("tlt-base", "TLT-Base: elastic SD with the model-free n-gram drafter only", TltParams, tlt_base),
    Family(
        "tlt-static-drafter",
        "TLT with an EAGLE drafter trained before RL and never retrained",
        TltParams,
        tlt_static_drafter,
        defaults={"pretrained": True},
    ),
)
