"""Replaying a trace: each policy, step by step, on the same cluster and seed.

A fresh policy object per policy name, kept across the steps of the replay (policies that
adapt across steps rely on it); a fresh simulation per step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from simctl.policies.action_checks import params_problem, policy_problem
from simctl.policies.compose import drafting_gap
from simctl.policies.contract import ModelInfo, Policy, PromptHistory, Role, asked, give_offline_profile
from simctl.sim.cluster import ClusterSpec
from simctl.sim.cost_model import CostModel, ProfiledCostModel
from simctl.sim.drafter_training import (
    DEFAULT_DRAFTER_PARAMS,
    DrafterTrainingParams,
    eagle_acceptance_scale_history,
)
from simctl.sim.drafters import DRAFTERS
from simctl.sim.engine import EngineConfig, SimError, StepSimulation
from simctl.sim.gc_thresholds import fewer_collections
from simctl.sim.metrics import StepMetrics, accept_len, idle_fraction, step_parts, tail_time
from simctl.sim.models import ModelSpec
from simctl.sim.offline_profile import trace_acceptance
from simctl.sim.parallel_replay import replay_parallel
from simctl.sim.plan import Plan
from simctl.sim.position_acceptance import PositionAcceptance
from simctl.sim.role_time import LENT_ROLES, role_seconds
from simctl.sim.state import DEFERRED, StepState
from simctl.sim.step_time import post_rollout_time, step_time
from simctl.sim.token_methods import ANNOTATE_HINT, offered_methods, with_token_methods
from simctl.sim.token_replay import StepReplay, TraceTokens
from simctl.sim.worker_faults import faults_of_step
from simctl.traces.cli_options import WorkerFault
from simctl.traces.io import Trace
from simctl.traces.plugins import make_policy
from simctl.traces.run_format import (
    ROLE_CHANGE_COLUMNS,
    RUN_TABLES,
    SEGMENT_COLUMNS,
    PolicyEntry,
    WorkerLossEntry,
    policy_entry,
)
from simctl.traces.schema import StepTiming, TraceMeta


@dataclass
class ReplaySetup:
    trace: Trace
    cluster: ClusterSpec
    model: ModelSpec
    cost: CostModel
    steps: list[int]
    seed: int = 0
    engine: EngineConfig = field(default_factory=EngineConfig)
    cost_source: str = "roofline"
    # Ground truth of the EAGLE drafter's quality as spot training keeps it aligned (TLT).
    drafter_params: DrafterTrainingParams = field(default_factory=lambda: DEFAULT_DRAFTER_PARAMS)
    # Injected worker losses (`--fail-worker`, sim/worker_faults.py); checked by the caller.
    faults: tuple[WorkerFault, ...] = ()

    def layout(self) -> list[tuple[int, int]]:
        c = self.cluster
        return [(c.worker_node(w), c.gpus_per_worker) for w in range(c.num_workers)]

    def info(self) -> ModelInfo:
        m = self.trace.meta
        return ModelInfo(
            model=self.model.name,
            gpu=self.cluster.gpu.name,
            tp=self.cluster.tp,
            group_size=m.group_size,
            temperature=m.temperature,
            max_num_seqs=self.engine.max_num_seqs,
        )


@dataclass
class PolicyRun:
    """One policy's replay over the trace's steps: metrics and the run directory's tables."""

    name: str
    params: dict[str, object]
    steps: list[StepMetrics] = field(default_factory=list)
    requests: list[pd.DataFrame] = field(default_factory=list)
    timeline: list[pd.DataFrame] = field(default_factory=list)
    roles: list[pd.DataFrame] = field(default_factory=list)
    sim_wall_s: float = 0.0
    # CPU seconds of this process spent simulating: benchmarks compare policies by it, as it
    # barely moves when other work shares the machine (wall time does)
    sim_cpu_s: float = 0.0
    step_cpu_s: list[float] = field(default_factory=list)  # sim_cpu_s, step by step
    events: int = 0
    counters: dict[str, int] = field(default_factory=dict)
    worker_losses: list[WorkerLossEntry] = field(default_factory=list)

    def summary(self) -> PolicyEntry:
        """This policy's entry in run.json (traces/run_format.py)."""
        entry = policy_entry(
            self.steps,
            sim_wall_s=self.sim_wall_s,
            events=self.events,
            counters=self.counters,
            params=self.params,
        )
        if self.worker_losses:
            entry["worker_losses"] = list(self.worker_losses)
        return entry

    def tables(self) -> dict[str, list[pd.DataFrame]]:
        """Its frames of the run directory's tables (one per step)."""
        return {"requests": self.requests, "timeline": self.timeline, "roles": self.roles}


def run_tables(runs: Mapping[str, PolicyRun]) -> dict[str, list[pd.DataFrame]]:
    """The run directory's tables of all policies (traces.run_format.write_run_dir)."""
    return {name: [f for r in runs.values() for f in r.tables()[name]] for name in RUN_TABLES}


def _step_frames(setup: ReplaySetup) -> dict[int, pd.DataFrame]:
    df = setup.trace.df
    wanted = with_token_methods(df[df["step"].isin(setup.steps)], setup.trace)
    return {int(s): g for s, g in wanted.groupby("step", sort=True)}


def measured_timing(meta: TraceMeta, step: int) -> StepTiming:
    """The step's reward/train/sync seconds if the trace measured them (a live recording, an
    imported log); a generated trace's are a preset's assumption, so the simulator models
    them from the work instead (sim/step_time.py), the same way for every trace."""
    return StepTiming() if meta.source == "generated" else meta.timing_for(step)


def trace_draft_methods(trace: Trace) -> frozenset[str]:
    """Drafting methods the trace offers: its accept_<method> columns, and the model-free
    methods wherever it has response token ids (replayed exactly: sim.token_methods)."""
    return offered_methods(trace)


@dataclass
class ReplayState:
    """Everything one step of a policy's replay hands the next: the policy object (what it
    learned), the run so far, and the simulator's own carry-over. Resuming from it gives
    the same run as not stopping (each step's simulation is seeded afresh from the setup),
    which is what lets a long sweep point go on from its last checkpoint (simctl.
    sweep_checkpoint) rather than from its first step."""

    policy: Policy
    run: PolicyRun
    done: int = 0  # steps of the setup replayed so far
    history: dict[int, PromptHistory] = field(default_factory=dict)
    spot_gpu_s: list[float] = field(default_factory=list)  # per step: GPU-s training the drafter
    carry: pd.DataFrame = field(default_factory=pd.DataFrame)  # deferred requests, tokens so far
    lost: set[int] = field(default_factory=set)  # workers lost so far (lost for the rest)


def profile_gap(policy: Policy, offered: frozenset[str], cost: CostModel) -> str | None:
    """Why a measured profile cannot price the drafting `policy` declares it may do with
    the `offered` methods (None: it can, or the costs are not a profile's): checked before a
    run, not when the policy first drafts minutes into it. A policy that declares no
    methods is priced as it drafts (its methods are not known before)."""
    if not isinstance(cost, ProfiledCostModel):
        return None
    used = sorted(policy.draft_methods_used & offered)
    missing = cost.missing_drafters(DRAFTERS[m] for m in used if m in DRAFTERS)
    return cost.unpriced(missing[0]) if missing else None


def _check_policy(setup: ReplaySetup, policy: Policy) -> None:
    """Refuse, before anything runs, a policy whose settings are bad or whose drafting the
    trace and cost profile cannot replay."""
    problem = asked(policy, "its settings", lambda: policy_problem(policy))
    if problem:
        raise SimError(f"policy '{getattr(policy, 'name', policy)}': {problem}")
    gap = drafting_gap(policy, trace_draft_methods(setup.trace))
    if gap:
        raise SimError(f"{gap} ({ANNOTATE_HINT})")
    unpriced = profile_gap(policy, trace_draft_methods(setup.trace), setup.cost)
    if unpriced:
        raise SimError(unpriced)


def _start(setup: ReplaySetup, policy: Policy) -> ReplayState:
    """A fresh run's state: the policy's parameters (for run.json) and, told once, what an
    offline profile of the workload's drafters would measure."""
    params = asked(policy, "params()", policy.params)
    problem = params_problem(params)
    if problem:
        raise SimError(f"policy '{policy.name}': {problem}")
    state = ReplayState(policy, PolicyRun(name=policy.name, params=params))
    if setup.steps:
        acceptance = trace_acceptance(setup.trace, min(setup.steps))
        asked(policy, "offline_profile()", lambda: give_offline_profile(policy, acceptance))
    return state


def run_policy(
    setup: ReplaySetup,
    policy_spec: str | Policy,
    on_step: Callable[[str, int], None] | None = None,
    resume: ReplayState | None = None,
    after_step: Callable[[ReplayState], None] | None = None,
) -> PolicyRun:
    """One policy (a spec, traces/plugins.py, or a policy object) over the setup's steps;
    from `resume` (a state `after_step` was given) when set, for the steps it has not
    replayed. `after_step(state)` follows every step, `on_step(policy name, step)` too."""
    if resume is None:
        policy = make_policy(policy_spec) if isinstance(policy_spec, str) else policy_spec
    else:
        policy = resume.policy
    _check_policy(setup, policy)
    state = _start(setup, policy) if resume is None else resume
    run, history, spot_gpu_s, lost = state.run, state.history, state.spot_gpu_s, state.lost
    info = setup.info()
    tokens = TraceTokens(setup.trace) if setup.trace.has_tokens() else None
    for index, (step, frame) in enumerate(_step_frames(setup).items()):
        if index < state.done:
            continue
        t0, c0 = time.perf_counter(), time.process_time()
        frame, step_state = _with_carried(frame, state.carry, step)
        _age_drafter(step_state, spot_gpu_s, setup.drafter_params)
        trace_rows = setup.trace.df.index.get_indexer(frame.index)
        sim = _FirstTimesSimulation(
            step_state,
            policy,
            setup.cost,
            setup.layout(),
            setup.engine,
            setup.seed,
            view_extras={"info": info, "history": history},
            acceptance=StepReplay(
                step_state,
                trace_rows,
                tokens,
                getattr(policy, "draft_rules", None),
                PositionAcceptance.of_trace(setup.trace, step_state, trace_rows),
            ),
            lost=sorted(lost),
            faults=faults_of_step(setup.faults, step, setup.steps[0]),
        )
        with fewer_collections():
            makespan = sim.run()
        lost |= sim.faults.lost
        run.worker_losses += sim.faults.losses
        spot_gpu_s.append(float((_role_seconds(sim, makespan, {Role.SPOT_TRAINER}) * _gpus(sim)).sum()))
        run.sim_wall_s += time.perf_counter() - t0
        run.step_cpu_s.append(time.process_time() - c0)
        run.sim_cpu_s += run.step_cpu_s[-1]
        run.events += sim.counters["events"]
        for k, v in sim.counters.items():
            run.counters[k] = run.counters.get(k, 0) + int(v)
        run.steps.append(_metrics(setup, sim, frame, makespan))
        run.requests.append(_request_frame(sim, run.name))
        run.timeline.append(_timeline_frame(sim, run.name))
        run.roles.append(
            pd.DataFrame(sim.roles, columns=ROLE_CHANGE_COLUMNS).assign(policy=run.name, step=step)
        )
        _extend_history(history, frame)
        state.carry = _deferred(frame, step_state)
        state.done = index + 1
        if state.done == len(setup.steps) and len(state.carry):
            # deferred out of the last step replayed: never generated in this run (a step
            # that defers everything shows a makespan of 0), which the run says
            run.counters["deferred_past_last_step"] = len(state.carry)
        if on_step:
            on_step(run.name, step)
        if after_step:
            after_step(state)
    return run


class FirstTimes:
    """When each row was first in a running batch (`start_s`: its first busy segment
    began) and when its first token came (the end of that segment's first iteration), from
    the segments the workers report; NaN while it has not run."""

    def __init__(self) -> None:
        self.start_s = np.full(0, np.nan)
        self.first_token_s = np.full(0, np.nan)

    def see(self, t0: float, plan: Plan, pos_iterations: int, t1: float) -> None:
        ids = plan.ids
        if not len(ids):
            return
        if len(self.start_s) <= int(ids.max()):  # rows appended (Fastest-of-N replicas)
            grow = int(ids.max()) + 1 - len(self.start_s)
            self.start_s = np.concatenate([self.start_s, np.full(grow, np.nan)])
            self.first_token_s = np.concatenate([self.first_token_s, np.full(grow, np.nan)])
        new = ids[np.isnan(self.start_s[ids])]
        if not len(new):
            return
        self.start_s[new] = t0
        self.first_token_s[new] = min(t1, t0 + _first_iteration_s(plan, pos_iterations, t1 - t0))

    @staticmethod
    def earliest(times: np.ndarray, origin: np.ndarray, n: int) -> np.ndarray:
        """Per request (rows < n): the earliest of its own row and its replicas' rows."""
        out = np.full(n, np.inf)
        m = min(len(times), len(origin))
        ok = np.flatnonzero(np.isfinite(times[:m]))
        np.minimum.at(out, origin[ok], times[ok])
        out[np.isinf(out)] = np.nan
        return out


def _first_iteration_s(plan: Plan, iterations: int, duration: float) -> float:
    """Duration of the first iteration of a segment of `iterations` plan iterations lasting
    `duration`: the segment starts at the plan iteration whose span matches."""
    cum = np.concatenate([[0.0], np.asarray(plan.cum_s, np.float64)])
    k = len(cum) - 1
    if iterations < 1 or iterations > k:
        return duration / max(iterations, 1)
    spans = cum[iterations:] - cum[: k - iterations + 1]  # span of iterations pos..pos+it-1
    pos = int(np.argmin(np.abs(spans - duration)))
    return float(cum[pos + 1] - cum[pos])


class _FirstTimesSimulation(StepSimulation):
    """The step simulation, also noting each request's first admission and first token from
    the segments it records (the requests table's start_s and first_token_s)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.first_s = FirstTimes()

    def record_segment(
        self, worker: int, t0: float, t1: float, iterations: int, plan: Plan, batch: int, pos: int
    ) -> None:
        super().record_segment(worker, t0, t1, iterations, plan, batch, pos)
        if pos == 0:  # every row of a plan runs from its first iteration: later stretches add none
            self.first_s.see(t0, plan, iterations, t1)


CARRIED = "_carried_generated"


def _with_carried(frame: pd.DataFrame, carry: pd.DataFrame, step: int) -> tuple[pd.DataFrame, StepState]:
    """Requests deferred by the previous step (RhymeRL's inter-step migration) join this
    step with the tokens they had; their KV is recomputed on admission."""
    if not len(carry):
        return frame, StepState.from_frame(frame, step)
    merged = pd.concat([frame, carry.drop(columns=CARRIED)])
    state = StepState.from_frame(merged, step)
    state.generated[len(frame) :] = carry[CARRIED].to_numpy(np.int64)
    state.start_generated = state.generated.copy()
    return merged, state


def _deferred(frame: pd.DataFrame, state: StepState) -> pd.DataFrame:
    idx = np.flatnonzero(state.state[: state.n_requests] == DEFERRED)
    return frame.iloc[idx].assign(**{CARRIED: state.generated[idx]})


def _age_drafter(state: StepState, spot_gpu_s: list[float], params: DrafterTrainingParams) -> None:
    """The trace's EAGLE acceptance is that of a drafter aligned with the current policy;
    after each policy update it degrades unless spot training realigns it."""
    if "eagle" in state.methods:
        j = state.methods.index("eagle")
        scale = eagle_acceptance_scale_history(spot_gpu_s, params)
        state.accept_mat[:, j] = np.clip(state.accept_mat[:, j] * scale, 0.0, 1.0)


def _gpus(sim: StepSimulation) -> np.ndarray:
    return np.asarray([w.gpus for w in sim.workers], dtype=np.float64)


def _role_seconds(sim: StepSimulation, makespan: float, roles: Collection[str]) -> np.ndarray:
    """Per worker: seconds spent in one of `roles` before the makespan."""
    return role_seconds(sim.roles, len(sim.workers), makespan, roles)


def _metrics(setup: ReplaySetup, sim: StepSimulation, frame: pd.DataFrame, makespan: float) -> StepMetrics:
    st = sim.state
    nworkers = len(sim.workers)
    busy = np.zeros(nworkers)
    if sim.segments:
        seg = np.asarray([(s[0], s[2] - s[1]) for s in sim.segments])
        np.add.at(busy, seg[:, 0].astype(int), seg[:, 1])
    gpus = _gpus(sim)
    lent = _role_seconds(sim, makespan, LENT_ROLES)
    trainer = _role_seconds(sim, makespan, {Role.TRAINER})
    n = st.n_requests
    done = ~np.isnan(st.finish_s[:n])
    tokens = int((st.target_len[:n] - st.start_generated[:n])[done].sum())
    post = post_rollout_time(
        measured_timing(setup.trace.meta, st.step),
        tokens=int(st.target_len[:n].sum() + st.prompt_len[:n].sum()),
        active_params=float(setup.model.active_param_count()),
        weight_bytes=float(setup.model.weight_bytes()),
        total_gpus=setup.cluster.total_gpus,
        gpu_flops=setup.cluster.gpu.bf16_flops,
        sync_bw_Bps=setup.cluster.gpu.rdma_bw,
    )
    total = step_time(makespan, post, float((trainer * gpus).sum()), setup.cluster.total_gpus)
    reward_s, train_s, sync_s = step_parts(makespan, total, post.reward_s, post.weight_sync_s)
    return StepMetrics(
        step=st.step,
        rollout_makespan_s=makespan,
        step_time_s=total,
        output_tokens=tokens,
        throughput_tok_s=tokens / makespan if makespan > 0 else 0.0,
        tail_time_s=tail_time(st.finish_s[:n], makespan),
        gpu_idle_fraction=idle_fraction(busy, lent, gpus, makespan),
        mean_accept_len=accept_len(st.spec_tokens, st.spec_iters),
        reward_s=reward_s,
        train_s=train_s,
        weight_sync_s=sync_s,
        post_source=post.source,
    )


def _request_frame(sim: _FirstTimesSimulation, policy: str) -> pd.DataFrame:
    """One row per request; counters of its Fastest-of-N replicas are added to it."""
    st = sim.state
    n = st.n_requests

    def total(arr: np.ndarray) -> np.ndarray:
        out = arr[:n].copy()
        if len(arr) > n:
            np.add.at(out, st.origin[n:], arr[n:])
        return out

    return pd.DataFrame(
        {
            "policy": policy,
            "step": np.int32(st.step),
            "request": np.arange(n, dtype=np.int32),
            "prompt_id": st.prompt_id[:n],
            "sample": st.sample[:n],
            "worker": st.worker[:n],
            "prompt_len": st.prompt_len[:n],
            "response_len": st.target_len[:n],
            "finish_s": st.finish_s[:n],
            "preemptions": total(st.preemptions),
            "dispatches": total(st.dispatches),
            "drafted": total(st.drafted),
            "accepted": total(st.accepted),
            "spec_iters": total(st.spec_iters),
            "replicas": np.bincount(st.origin[n:] if len(st.origin) > n else [], minlength=n)[:n].astype(
                np.int32
            ),
            "start_s": sim.first_s.earliest(sim.first_s.start_s, st.origin, n),
            "first_token_s": sim.first_s.earliest(sim.first_s.first_token_s, st.origin, n),
        }
    )


def _timeline_frame(sim: StepSimulation, policy: str) -> pd.DataFrame:
    df = pd.DataFrame(sim.segments, columns=SEGMENT_COLUMNS)
    return df.assign(policy=policy, step=np.int32(sim.state.step))


def _extend_history(history: dict[int, PromptHistory], frame: pd.DataFrame) -> None:
    has_reward = "reward" in frame.columns
    for pid, g in frame.groupby("prompt_id", sort=False):
        old = history.get(int(pid), PromptHistory())
        lengths = (*old.lengths, tuple(int(x) for x in g["response_len"]))
        rewards = (*old.rewards, tuple(float(x) for x in g["reward"])) if has_reward else old.rewards
        history[int(pid)] = PromptHistory(lengths=lengths, rewards=rewards)


def replay(
    setup: ReplaySetup,
    policy_specs: Sequence[str],
    on_step: Callable[[str, int], None] | None = None,
    jobs: int = 1,
    order: Sequence[int] | None = None,
) -> dict[str, PolicyRun]:
    """Each policy's run, by name; `jobs` > 1 runs them in that many processes at once
    (sim/parallel_replay.py: the same results; `on_step` is then called for all of a
    policy's steps when it finishes), started in `order` (indices of `policy_specs`)."""
    if jobs > 1 and len(policy_specs) > 1:

        def finished(spec: str) -> None:
            for step in setup.steps:
                if on_step is not None:
                    on_step(spec, step)

        done = replay_parallel(run_policy, setup, policy_specs, jobs, finished, order)
        return {run.name: run for run in done}
    runs: dict[str, PolicyRun] = {}
    for spec in policy_specs:
        run = run_policy(setup, spec, on_step)
        runs[run.name] = run
    return runs
