"""The simulator's implementation of the policies' read-only ClusterView."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np
import simpy

from simctl.policies.bulk_reads import RequestColumns, RequestRows
from simctl.policies.contract import (
    Capability,
    ModelInfo,
    PromptHistory,
    RequestView,
    SpecConfig,
    WorkerView,
)
from simctl.sim.cost_model import CostModel
from simctl.sim.drafters import DRAFTERS
from simctl.sim.engine_config import SIM_CAPABILITIES
from simctl.sim.placement import Placement
from simctl.sim.state import RUNNING, STATE_NAMES, WAITING, StepState
from simctl.sim.worker import Worker


class ViewSource(Protocol):
    """What the view reads of the step simulation (sim.engine.StepSimulation)."""

    @property
    def env(self) -> simpy.Environment: ...
    @property
    def state(self) -> StepState: ...
    @property
    def workers(self) -> Sequence[Worker]: ...
    @property
    def placement(self) -> Placement: ...
    @property
    def unfinished(self) -> int: ...
    @property
    def cost(self) -> CostModel: ...
    def drafter_for(self, method: str) -> str: ...


class SimView:
    def __init__(
        self,
        sim: ViewSource,
        info: ModelInfo | None = None,
        history: Mapping[int, PromptHistory] | None = None,
        capabilities: frozenset[Capability] | None = None,
    ) -> None:
        self._sim = sim
        self._info = info or ModelInfo(model="unknown", gpu="unknown", tp=1, group_size=1, temperature=1.0)
        self._history = history or {}
        self._caps = capabilities if capabilities is not None else SIM_CAPABILITIES
        self._ids = range(sim.state.n_requests)

    @property
    def now_s(self) -> float:
        return float(self._sim.env.now)

    @property
    def step(self) -> int:
        return self._sim.state.step

    @property
    def epoch(self) -> int:
        return self._sim.state.epoch

    @property
    def capabilities(self) -> frozenset[Capability]:
        return self._caps

    @property
    def info(self) -> ModelInfo:
        return self._info

    @property
    def num_workers(self) -> int:
        return len(self._sim.workers)

    @property
    def draft_methods(self) -> frozenset[str]:
        """Methods the step can draft with: the trace's acceptance columns that name a
        DraftMethod (DRAFTERS is keyed by it), which include the model-free methods its
        token ids replay (sim.replay adds their columns: sim.token_methods)."""
        return frozenset(m for m in self._sim.state.methods if m in DRAFTERS)

    def worker(self, worker: int) -> WorkerView:
        w = self._sim.workers[worker]
        return WorkerView(
            id=w.id,
            gpus=w.gpus,
            node=w.node,
            role=w.role,
            running=len(w.running),
            waiting=w.waiting_count,
            kv_used_tokens=w.kv_used(),
            kv_capacity_tokens=w.kv_capacity,
            spec=w.spec,
            alive=not w.lost,
            kv_window_tokens=w.kv_window,
        )

    def request(self, request: int) -> RequestView:
        st = self._sim.state
        w = int(st.worker[request])
        return RequestView(
            id=request,
            prompt_id=int(st.prompt_id[request]),
            sample=int(st.sample[request]),
            prompt_len=int(st.prompt_len[request]),
            max_tokens=int(st.max_tokens[request]),
            generated=int(st.generated[request]),
            worker=w if w >= 0 else None,
            state=STATE_NAMES[st.state[request]],  # type: ignore[arg-type]
            spec=st.spec[request],
            drafted_tokens=int(st.drafted[request]),
            accepted_tokens=int(st.accepted[request]),
            verify_iterations=int(st.spec_iters[request]),
        )

    def draft_counters(self, requests: Sequence[int]) -> tuple[list[int], list[int], list[SpecConfig]]:
        """Drafted tokens, accepted tokens and own speculation setting of many requests at
        once, as `request(r).drafted_tokens` etc. would give them (optional fast path of
        `policies.bulk_reads.draft_counters`: a best-drafter part reads every request
        of a worker at each of its ticks). Cost: proportional to `requests`."""
        st = self._sim.state
        ids = np.fromiter(requests, np.int64, len(requests))
        spec = st.spec
        return st.drafted[ids].tolist(), st.accepted[ids].tolist(), [spec[r] for r in ids.tolist()]

    def request_rows(self, requests: Sequence[int]) -> RequestRows:
        """State, worker, draft counters and own setting of many requests at once, as
        `request(r)` gives them (`policies.bulk_reads.request_rows`: Fastest-of-N scans every
        unfinished request whenever a worker goes idle). Cost: proportional to `requests`."""
        st = self._sim.state
        ids = np.fromiter(requests, np.int64, len(requests))
        spec = st.spec
        return RequestRows(
            [STATE_NAMES[s] for s in st.state[ids].tolist()],
            [w if w >= 0 else None for w in st.worker[ids].tolist()],
            st.drafted[ids].tolist(),
            st.accepted[ids].tolist(),
            [spec[r] for r in ids.tolist()],
            st.spec_iters[ids].tolist(),
        )

    def worker_loads(self, workers: Sequence[int]) -> list[int]:
        """Running plus waiting sequences of many workers, as `worker(w)` gives them, without
        the KV count a `WorkerView` costs (`policies.bulk_reads.worker_loads`). Cost:
        proportional to `workers`."""
        ws = self._sim.workers
        return [len(ws[w].running) + ws[w].waiting_count for w in workers]

    def request_columns(self, requests: Sequence[int]) -> RequestColumns:
        """`policies.bulk_reads.RequestColumns` of many requests, read from the state's
        arrays (Fastest-of-N scans every unfinished request whenever a worker goes idle).
        A request's own method is the state's per-request override (`req_method`, set
        exactly when its setting drafts). Cost: a few numpy takes."""
        st = self._sim.state
        ids = np.asarray(requests, np.int64)
        state, worker = st.state[ids], st.worker[ids].astype(np.int64)
        in_flight = ((state == WAITING) | (state == RUNNING)) & (worker >= 0)
        return RequestColumns(
            in_flight,
            worker,
            st.drafted[ids].astype(np.int64),
            st.accepted[ids].astype(np.int64),
            st.req_method[ids].astype(np.int64),
            st.methods,
        )

    def worker_specs(self, workers: Sequence[int]) -> list[SpecConfig]:
        """Speculation setting of many workers, as `worker(w).spec` gives it
        (`policies.bulk_reads.worker_specs`). Cost: proportional to `workers`."""
        ws = self._sim.workers
        return [ws[w].spec for w in workers]

    def worker_requests(self, worker: int) -> Sequence[int]:
        return self._sim.placement.on(worker)

    def step_requests(self) -> Sequence[int]:
        return self._ids

    def unfinished_count(self) -> int:
        return self._sim.unfinished

    def history(self, prompt_id: int) -> PromptHistory:
        return self._history.get(prompt_id, PromptHistory())

    def cost(self, num_seqs: float, new_tokens: float, context_tokens: float) -> float:
        return float(self._sim.cost.iteration_time(num_seqs, new_tokens, context_tokens))

    def draft_cost(self, method: str, num_seqs: float, context_tokens: float, gamma: int) -> float:
        drafter = self._sim.drafter_for(method)
        return float(self._sim.cost.draft_time(drafter, num_seqs, context_tokens, gamma))

    def oracle_length(self, request: int) -> int:
        return int(self._sim.state.target_len[request])
