"""The contract between policies and executors (the simulator in `sim/`, real engines in `live/`).

A policy is told what happened (an *event*), may read the cluster through a read-only
*view*, and answers with *actions*. It never learns whether time is simulated. Executors
call `Policy.on_event` synchronously, in event-time order, and apply the returned actions
before any later event is delivered; actions at one instant apply in list order.

Executors that cannot carry an action out exactly declare it in their capability set; a
policy may read `view.capabilities` to choose an alternative, and an executor that is
handed an action it lacks the capability for records it as approximated or rejected, never
silently drops it.

This module is pure data and protocols: no simpy, torch or I/O (the same objects run in
both executors).
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Literal, NamedTuple, NoReturn, Protocol, TypeVar

from simctl.policies.draft_rule import DraftRule
from simctl.policies.params import PolicyParams

T = TypeVar("T")

RequestId = int
WorkerId = int


class Role(StrEnum):
    """What a worker's GPUs are doing; the timeline and GPU-idle accounting follow it."""

    ROLLOUT = "rollout"
    DRAFTER = "drafter"
    VERIFIER = "verifier"
    SPOT_TRAINER = "spot-trainer"
    TRAINER = "trainer"  # end-to-end training of finished groups (RLHFuse-style overlap)
    IDLE = "idle"


class Capability(StrEnum):
    """Actions an executor can carry out exactly."""

    PLACE = "place"  # Assign a request to a chosen worker
    CHUNK = "chunk"  # Assign with max_tokens below the request's budget, re-dispatch later
    PRIORITY = "priority"  # worker-local admission order by Assign.priority
    MIGRATE = "migrate"  # move a running request (KV transfer or recompute)
    SPEC_PER_WORKER = "spec-per-worker"
    SPEC_PER_REQUEST = "spec-per-request"  # different method/gamma per request in one batch
    DECOUPLED = "decoupled"  # drafter on other GPUs, draft window
    REPLICAS = "replicas"  # Fastest-of-N replicas of one request
    ROLES = "roles"  # SetRole
    DEFER = "defer"  # push a request to the next step


ALL_CAPABILITIES = frozenset(Capability)


@dataclass(frozen=True)
class SpecConfig:
    """How a request (or every request of a worker) is decoded.

    `method` None means plain decoding. `gamma` is the draft depth. `topk` > 1 drafts a
    tree (or multi-path) keeping topk candidates per level, of which the `verify_tokens`
    most confident are verified together (0: a chain of gamma tokens, TLT's
    Tokens_to_Verify otherwise). Decoupled mode runs the drafter on `drafter_worker`, at
    most `window` tokens ahead.
    """

    method: str | None = None
    gamma: int = 0
    mode: Literal["coupled", "decoupled"] = "coupled"
    window: int = 0
    topk: int = 1
    drafter_worker: WorkerId | None = None
    verify_tokens: int = 0

    @property
    def tokens_verified(self) -> int:
        """Draft tokens the target verifies per iteration (excluding the bonus token)."""
        return self.verify_tokens if self.topk > 1 and self.verify_tokens > 0 else self.gamma

    @property
    def enabled(self) -> bool:
        return self.method is not None and self.method != PLAIN and self.gamma > 0

    @property
    def plain(self) -> bool:
        """The per-request override "decode plainly whatever the worker does"."""
        return self.method == PLAIN


PLAIN = "plain"
# On a request, SPEC_OFF means "follow the worker's speculation" (the default) and
# SPEC_PLAIN "no speculation for this request even where its worker speculates": a policy
# choosing per request needs both. On a worker the two mean the same.
SPEC_OFF = SpecConfig()
SPEC_PLAIN = SpecConfig(method=PLAIN)


# ----------------------------------------------------------------------------- events


@dataclass(frozen=True)
class Event:
    time_s: float


@dataclass(frozen=True)
class StepStarted(Event):
    """A new RL step's requests exist (unassigned). Policies place them here."""

    step: int
    epoch: int
    requests: tuple[RequestId, ...]


@dataclass(frozen=True)
class RequestFinished(Event):
    """A request produced its whole response (EOS or its budget) on `worker`."""

    request: RequestId
    worker: WorkerId
    length: int


@dataclass(frozen=True)
class ChunkFinished(Event):
    """A dispatch with a `max_tokens` chunk limit ended; the request waits unassigned."""

    request: RequestId
    worker: WorkerId
    generated: int


@dataclass(frozen=True)
class WorkerIdle(Event):
    """A worker has nothing running or waiting."""

    worker: WorkerId


@dataclass(frozen=True)
class Tick(Event):
    """Every `Policy.tick_iterations` decode iterations of a worker."""

    worker: WorkerId
    iteration: int


@dataclass(frozen=True)
class CopyCancelled(Event):
    """Fastest-of-N: the copy of `request` on `worker` was stopped because the copy on
    `winner` finished first (the request's RequestFinished comes first). Actions a policy
    takes itself (`Cancel`) are not echoed."""

    request: RequestId
    worker: WorkerId
    winner: WorkerId


@dataclass(frozen=True)
class WorkerLost(Event):
    """`worker` died mid-step: its engine process or actor went away live, or a fault was
    injected in the simulator (`--fail-worker W@T`). `requests` were placed on it (waiting
    or running) and are unassigned again, keeping the tokens the executor had received
    (a re-placement continues from there); place them on surviving workers. The worker
    takes no work for the rest of the run: its `WorkerView.alive` is False, and an Assign,
    Migrate or LaunchReplica aimed at it goes to the least-loaded surviving worker instead.
    A policy that ignores this event still completes its step: whatever is still
    unassigned after it returns goes to the least-loaded surviving worker too
    (`policies/worker_loss.py`); run.json counts both."""

    worker: WorkerId
    requests: tuple[RequestId, ...]


@dataclass(frozen=True)
class StepFinished(Event):
    step: int
    rollout_makespan_s: float


# ---------------------------------------------------------------------------- actions


@dataclass(frozen=True)
class Action:
    pass


@dataclass(frozen=True)
class Assign(Action):
    """Queue `request` on `worker`. `max_tokens` caps this dispatch (a chunk); higher
    `priority` is admitted first when the worker's batch or KV cache is full."""

    request: RequestId
    worker: WorkerId
    max_tokens: int | None = None
    priority: float = 0.0


@dataclass(frozen=True)
class SetSpec(Action):
    """Speculation for one request (`request` set) or for every request of `worker`. A
    request's own setting wins over its worker's; SPEC_OFF on a request hands it back to
    the worker's, SPEC_PLAIN keeps it plain."""

    spec: SpecConfig
    request: RequestId | None = None
    worker: WorkerId | None = None


@dataclass(frozen=True)
class Migrate(Action):
    """Move a queued or running request to another worker; `transfer_kv` False recomputes."""

    request: RequestId
    worker: WorkerId
    transfer_kv: bool = True


@dataclass(frozen=True)
class SetRole(Action):
    worker: WorkerId
    role: Role


@dataclass(frozen=True)
class LaunchReplica(Action):
    """Fastest-of-N: run another copy of `request` on `worker` with `spec`; the first copy
    to finish completes the request and the executor cancels the rest."""

    request: RequestId
    worker: WorkerId
    spec: SpecConfig


@dataclass(frozen=True)
class Cancel(Action):
    """Stop the copy of `request` running on `worker` (a replica, or the request itself)."""

    request: RequestId
    worker: WorkerId


@dataclass(frozen=True)
class Defer(Action):
    """Finish this request in the next step, keeping its tokens (RhymeRL inter-step migration)."""

    request: RequestId


# ------------------------------------------------------------------------------ views


class RequestView(NamedTuple):
    """A request as a policy may see it. `length` is known only after it finished, except to
    oracle policies that read `view.oracle_length`. A named tuple: policies read thousands
    of these per simulated step, and a tuple is built several times faster than a frozen
    dataclass."""

    id: RequestId
    prompt_id: int
    sample: int
    prompt_len: int
    max_tokens: int
    generated: int
    worker: WorkerId | None
    state: Literal["unassigned", "waiting", "running", "finished", "deferred", "cancelled"]
    spec: SpecConfig
    drafted_tokens: int
    accepted_tokens: int
    # Verify iterations the request took part in while speculating. Tokens per verify
    # iteration are 1 + accepted / verify_iterations; drafted / gamma is not a count of
    # iterations wherever a drafter proposes fewer than gamma tokens (n-gram without a
    # match, AIMD windows) or the depth changed on the way.
    verify_iterations: int = 0

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else None


@dataclass(frozen=True)
class WorkerView:
    id: WorkerId
    gpus: int
    node: int
    role: Role
    running: int
    waiting: int
    kv_used_tokens: int
    kv_capacity_tokens: int
    spec: SpecConfig
    alive: bool = True  # False once the worker was lost (WorkerLost); it takes no work
    # KV tokens each running sequence holds besides its context: its window in the model's
    # sliding-window layers (gpt-oss, Gemma 2/3), counted against kv_capacity_tokens; 0
    # for most models
    kv_window_tokens: int = 0


@dataclass(frozen=True)
class PromptHistory:
    """What earlier steps showed for one prompt (RhymeRL, Seer-style estimates)."""

    lengths: tuple[tuple[int, ...], ...] = ()  # per earlier occurrence: response lengths
    rewards: tuple[tuple[float, ...], ...] = ()


@dataclass(frozen=True)
class ModelInfo:
    """What a policy may know of the rollout model and hardware (for roofline decisions)."""

    model: str
    gpu: str
    tp: int
    group_size: int
    temperature: float
    # the engine's batch limit per worker (vLLM's max_num_seqs): a scheduler that holds
    # requests centrally hands a worker no more than it runs at once
    max_num_seqs: int = 256


class ClusterView(Protocol):
    """Read-only state. Executors implement it over their own bookkeeping; every call is a
    cheap read at the current instant (policies may call it on every event). Actions a
    policy returns show in the view only once the executor applied them (after `on_event`
    returned)."""

    @property
    def now_s(self) -> float:
        """The executor's clock at this event, in seconds (simulated or measured; event
        times use the same clock). Cost: constant."""
        ...

    @property
    def step(self) -> int:
        """The RL step being rolled out (0-based). Cost: constant."""
        ...

    @property
    def epoch(self) -> int:
        """The epoch of the step (prompts repeat once per epoch). Cost: constant."""
        ...

    @property
    def capabilities(self) -> frozenset[Capability]:
        """Actions the executor carries out exactly in this run. Cost: constant."""
        ...

    @property
    def info(self) -> ModelInfo:
        """The rollout model, GPU, TP degree, group size and temperature. Cost: constant."""
        ...

    @property
    def num_workers(self) -> int:
        """Rollout workers (TP groups), ids 0 .. num_workers - 1. Cost: constant."""
        ...

    @property
    def draft_methods(self) -> frozenset[str]:
        """Draft methods the executor can speculate with in this run (a replayed trace needs
        an acceptance column per method; a live backend has its own drafters). Cost:
        constant."""
        ...

    def worker(self, worker: WorkerId) -> WorkerView:
        """One worker's role, batch (running / waiting), KV use and speculation setting now.
        Cost: constant (a small record is built per call)."""
        ...

    def request(self, request: RequestId) -> RequestView:
        """One request of this step as it is now: placement, state, tokens generated and its
        speculation counters. Cost: constant (a named tuple is built per call)."""
        ...

    def worker_requests(self, worker: WorkerId) -> Sequence[RequestId]:
        """Unfinished requests placed on `worker` now (state "waiting" or "running"), in
        ascending id order; a migrated request is listed on its new worker only, a
        Fastest-of-N replica is not a request. Cost: proportional to the worker's requests."""
        ...

    def step_requests(self) -> Sequence[RequestId]:
        """Every request of this step, finished ones included, in id order. Cost: constant
        to get (the executor's own sequence: do not modify it); iterating it is
        proportional to the step's requests."""
        ...

    def unfinished_count(self) -> int:
        """Requests of this step not finished yet. Cost: constant."""
        ...

    def history(self, prompt_id: int) -> PromptHistory:
        """What earlier steps showed for a prompt (empty in its first epoch). Cost:
        constant (a lookup)."""
        ...

    def cost(self, num_seqs: float, new_tokens: float, context_tokens: float) -> float:
        """Predicted seconds of one worker iteration (the executor's cost model or profile).
        Cost: one cost-model evaluation (microseconds; memoise where called in loops)."""
        ...

    def draft_cost(self, method: str, num_seqs: float, context_tokens: float, gamma: int) -> float:
        """Predicted seconds for `method` to draft `gamma` tokens for `num_seqs` sequences of
        `context_tokens` KV tokens in all. Cost: one cost-model evaluation."""
        ...

    def oracle_length(self, request: RequestId) -> int:
        """True response length; only executors replaying a trace can answer (else raise).
        Cost: constant."""
        ...


# ----------------------------------------------------------------------------- policy


_NO_RULES: Mapping[str, DraftRule] = MappingProxyType({})


class Policy(ABC):
    """A decision maker. Executors call `on_event` for every event, in time order, and
    apply the returned actions before delivering the next event. State kept on the policy
    object persists across steps of one run (policies that learn across steps rely on it)."""

    #: Name used by `simctl replay --policy` and in reports.
    name: str = "policy"
    #: Capabilities without which the policy cannot run as designed.
    requires: frozenset[Capability] = frozenset({Capability.PLACE})
    #: Ask for a Tick event every this many decode iterations of each worker.
    tick_iterations: int | None = None
    #: The resolved parameters of a policy built by name (`policies/registry.py` sets them);
    #: None for an object built directly (a part, a test's policy).
    parameters: PolicyParams | None = None

    @abstractmethod
    def on_event(self, event: Event, view: ClusterView) -> Sequence[Action]:
        """React to one event; return actions to apply now (possibly none)."""

    def params(self) -> dict[str, object]:
        """The resolved parameters, for provenance in run.json and reports (every declared
        parameter, given or default; `{}` for a policy without a declaration)."""
        return {} if self.parameters is None else self.parameters.as_dict()

    @property
    def draft_rules(self) -> Mapping[str, DraftRule]:
        """How this policy's model-free draft methods draft, by method name (none: the
        executor's defaults). The simulator reads it when it sets up each step's replay of
        drafting over recorded tokens (sim/replay.py), so what it replays is what the
        policy's drafter would propose live. A composed policy has the union of its parts'."""
        return _NO_RULES

    @property
    def draft_methods_used(self) -> frozenset[str]:
        """The drafting methods this policy may speculate with (empty: it never drafts, or
        it drafts with whatever `view.draft_methods` offers). Executors read it once before a
        run and refuse a policy none of whose methods they can draft with, rather than let
        it run silently as plain decoding (a replayed trace needs an `accept_<method>`
        column per method). A composed policy has the union of its parts'."""
        return frozenset()

    def wants_ticks(self, worker: WorkerId, view: ClusterView) -> bool:
        """Whether a `Tick` of `worker` could change this policy's answer now (default: yes).

        Ticks exist for decisions that depend on progress between events, and each one
        costs an executor a stop: the simulator ends a stretch of a planned block there
        (TLT's Tick every 16 iterations of 512 workers made most of its step's simulator
        time, answered with nothing). The simulator asks when it plans a worker's block
        (again after any action that reaches the worker, an admission, a finish with
        requests waiting) and, while the answer is no, after each event of that worker
        (a request finishing or ending its chunk there) and at a tick where the block
        stops anyway; a live executor asks when a Tick falls due. A Tick answered False is skipped: not
        delivered and not counted as an event; the tick cadence and the iteration count
        a Tick carries are unchanged. Answer False only where the Tick handler would
        return no action and change no state of the policy until the policy hears an
        event of this worker or sends it an action. Cost: called per planned block and
        per event of a worker whose Ticks are declined; keep it constant-time."""
        return True

    def offline_profile(self, acceptance: Mapping[str, float]) -> None:
        """The workload's per-token draft acceptance by method, as an offline profile would
        measure it before the run (SpecActor, arXiv:2511.16193 §4.2, selects its first
        drafter from such a profile: "the profiling only needs to be done once"). Executors
        that know it call this once, before the first step: the simulator passes a replayed
        trace's acceptance (token-weighted over its first replayed step); a live run may pass
        a profile of its own or none. A policy that plans from profiled acceptance overrides
        it; the default ignores it."""
        return None

    def observe(self, actions: Sequence[Action]) -> None:
        """Actions another part of the same composed policy returned for the current event,
        before the executor applied them (the view shows them only afterwards).
        `compose.Composed` calls it on every part right after any part returned a non-empty
        answer, in part order (the answering part included); executors never call it. A
        part that must know placements made at the same instant (e.g. to configure a
        worker a scheduler just filled) overrides it; the default ignores them."""
        return None


def give_offline_profile(policy: Policy, acceptance: Mapping[str, float]) -> None:
    """`policy.offline_profile(acceptance)`, for executors: a duck-typed policy without the
    method is not told."""
    tell = getattr(policy, "offline_profile", None)
    if tell is not None and acceptance:
        tell(acceptance)


def wants_tick(policy: Policy, worker: WorkerId, view: ClusterView) -> bool:
    """`policy.wants_ticks(worker, view)`, for executors: a policy written without the
    `Policy` base class (duck-typed) and without that method wants every Tick."""
    asks = getattr(policy, "wants_ticks", None)
    if asks is None:
        return True
    try:
        return bool(asks(worker, view))
    except (Exception, SystemExit) as exc:  # (a plug-in's sys.exit is its error too)
        _reraise(policy, f"wants_ticks(worker {worker})", exc)


#: The module name prefix under which `traces/plugins.py` loads a `file.py:Class` plug-in.
FILE_PLUGIN_PREFIX = "simctl_plugin_"


class PolicyRaised(RuntimeError):
    """A plug-in policy's own code raised while an executor asked it something. Executors
    raise this in its place (the original as its cause, for `--debug`) so that the one-line
    error names the policy, what it was asked and the error, and the user looks at their
    policy: left unwrapped, any exception is reported as a bug in simctl."""


def decide(policy: Policy, event: Event, view: ClusterView) -> Sequence[Action]:
    """`policy.on_event(event, view)`, for executors: an exception of a plug-in's own code
    comes out as `PolicyRaised` (`plugin_failure`)."""
    try:
        return policy.on_event(event, view)
    except (Exception, SystemExit) as exc:  # (a plug-in's sys.exit is its error too)
        _reraise(policy, f"on_event({type(event).__name__} at t={event.time_s:.3f} s)", exc)


def asked(policy: Policy, what: str, call: Callable[[], T]) -> T:
    """`call()`, which asks `policy` `what` (its params, its settings, its offline
    profile), for executors: an exception of a plug-in's own code comes out as
    `PolicyRaised`, as `decide` does for `on_event`."""
    try:
        return call()
    except (Exception, SystemExit) as exc:  # (a plug-in's sys.exit is its error too)
        _reraise(policy, what, exc)


def _reraise(policy: Policy, asked: str, exc: BaseException) -> NoReturn:
    """Raise `exc` again, as `PolicyRaised` (it the cause) where `plugin_failure` says so."""
    failure = plugin_failure(policy, asked, exc)
    if failure is None:
        raise exc
    raise failure from exc


def plugin_failure(policy: Policy, asked: str, exc: BaseException) -> PolicyRaised | None:
    """The `PolicyRaised` for `exc`, raised by `policy` while answering `asked`; None where
    simctl should let it through as it is: one of simctl's own errors (they name their
    input already), or raised by a policy that is simctl's own through and through (a
    built-in or a composition of built-ins: a bug in simctl)."""
    if type(exc).__module__.startswith("simctl."):
        return None
    parts = [policy, *getattr(policy, "parts", ())]
    if all(type(p).__module__.startswith("simctl.") for p in parts):
        return None
    text = (str(exc).strip().splitlines() or [""])[0]
    error = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    cls = type(policy)
    where = f"{cls.__module__}:{cls.__qualname__}"
    if cls.__module__.startswith(FILE_PLUGIN_PREFIX):  # (loaded from a file: name the file)
        where = f"{getattr(sys.modules.get(cls.__module__), '__file__', cls.__module__)}:{cls.__qualname__}"
    return PolicyRaised(
        f"policy {policy.name!r} ({where}) raised {error} in {asked}; rerun with --debug for the traceback"
    )
