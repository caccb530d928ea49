"""The live executor's implementation of the policies' read-only ClusterView.

It reads the cluster state the executor shares with it (live/cluster_state.py), never the
executor itself, and what stays fixed for the run (`RunFacts`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from simctl.live.cluster_state import ClusterState
from simctl.policies.bulk_reads import RequestRows
from simctl.policies.contract import Capability, ModelInfo, PromptHistory, RequestView, SpecConfig, WorkerView

if TYPE_CHECKING:
    from simctl.sim.cost_model import CostModel


class CostModelMissing(RuntimeError):
    """A policy asked for predicted costs and the run has no cost model."""


@dataclass(frozen=True)
class RunFacts:
    """What a policy may read that does not change during a run."""

    policy_name: str
    info: ModelInfo
    capabilities: frozenset[Capability]
    draft_methods: frozenset[str]
    oracle: bool  # response lengths known in advance (trace replay)
    cost_model: CostModel | None = None


class LiveView:
    def __init__(self, cluster: ClusterState, facts: RunFacts, history: Mapping[int, PromptHistory]) -> None:
        self._c = cluster
        self._facts = facts
        self._history = history

    @property
    def now_s(self) -> float:
        return self._c.now

    @property
    def step(self) -> int:
        return self._c.step_no

    @property
    def epoch(self) -> int:
        return self._c.epoch

    @property
    def capabilities(self) -> frozenset[Capability]:
        return self._facts.capabilities

    @property
    def info(self) -> ModelInfo:
        return self._facts.info

    @property
    def num_workers(self) -> int:
        return len(self._c.workers)

    @property
    def draft_methods(self) -> frozenset[str]:
        return self._facts.draft_methods

    def worker(self, worker: int) -> WorkerView:
        w = self._c.workers[worker]
        return WorkerView(
            id=w.id,
            gpus=1,
            node=0,
            role=w.role,
            running=len(w.running),
            waiting=w.waiting,
            kv_used_tokens=self._c.kv_used(w),
            kv_capacity_tokens=w.kv_capacity,
            spec=w.spec,
            alive=not w.lost,
        )

    def request(self, request: int) -> RequestView:
        r = self._c.requests[request]
        return RequestView(
            id=r.id,
            prompt_id=r.spec_in.prompt_id,
            sample=r.spec_in.sample,
            prompt_len=r.prompt_len,
            max_tokens=r.spec_in.max_tokens,
            generated=r.generated,
            worker=r.worker,
            state=r.state,
            spec=r.spec,
            drafted_tokens=r.drafted,
            accepted_tokens=r.accepted,
            verify_iterations=r.spec_iters,
        )

    def draft_counters(self, requests: Sequence[int]) -> tuple[list[int], list[int], list[SpecConfig]]:
        """Drafted tokens, accepted tokens and own speculation setting of many requests at
        once, as `request(r)` gives them (the simulator's view has the same fast path, which
        `policies.bulk_reads.draft_counters` uses). Cost: proportional to `requests`."""
        rs = [self._c.requests[r] for r in requests]
        return [r.drafted for r in rs], [r.accepted for r in rs], [r.spec for r in rs]

    def request_rows(self, requests: Sequence[int]) -> RequestRows:
        """State, worker, draft counters and own setting of many requests at once, as
        `request(r)` gives them (`policies.bulk_reads`). Cost: proportional to `requests`."""
        rs = [self._c.requests[r] for r in requests]
        return RequestRows(
            [r.state for r in rs],
            [r.worker for r in rs],
            [r.drafted for r in rs],
            [r.accepted for r in rs],
            [r.spec for r in rs],
            [r.spec_iters for r in rs],
        )

    def worker_loads(self, workers: Sequence[int]) -> list[int]:
        """Running plus waiting sequences of many workers, as `worker(w)` gives them
        (`policies.bulk_reads`). Cost: proportional to `workers`."""
        ws = self._c.workers
        return [len(ws[w].running) + ws[w].waiting for w in workers]

    def worker_specs(self, workers: Sequence[int]) -> list[SpecConfig]:
        """Speculation setting of many workers, as `worker(w).spec` gives it
        (`policies.bulk_reads`). Cost: proportional to `workers`."""
        ws = self._c.workers
        return [ws[w].spec for w in workers]

    def worker_requests(self, worker: int) -> Sequence[int]:
        return self._c.worker_requests(worker)

    def step_requests(self) -> Sequence[int]:
        return range(self._c.n_requests)

    def unfinished_count(self) -> int:
        return self._c.unfinished

    def history(self, prompt_id: int) -> PromptHistory:
        return self._history.get(prompt_id, PromptHistory())

    def cost(self, num_seqs: float, new_tokens: float, context_tokens: float) -> float:
        return float(self._cost().iteration_time(num_seqs, new_tokens, context_tokens))

    def draft_cost(self, method: str, num_seqs: float, context_tokens: float, gamma: int) -> float:
        from simctl.sim.engine import DRAFTERS

        drafter = DRAFTERS.get(method, method)
        return float(self._cost().draft_time(drafter, num_seqs, context_tokens, gamma))

    def oracle_length(self, request: int) -> int:
        if not self._facts.oracle:
            raise LookupError("live run from prompts: response lengths are not known in advance")
        return self._c.requests[request].budget

    def _cost(self) -> CostModel:
        if self._facts.cost_model is None:
            raise CostModelMissing(
                f"policy '{self._facts.policy_name}' asks for predicted iteration costs: "
                "pass --profile PROFILE (from `simctl calibrate`)"
            )
        return self._facts.cost_model
