"""A hand-driven ClusterView for unit tests of policy parts (no simulator)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from simctl.policies.contract import (
    ALL_CAPABILITIES,
    SPEC_OFF,
    Capability,
    ModelInfo,
    PromptHistory,
    RequestView,
    Role,
    WorkerView,
)


@dataclass
class FakeView:
    """Workers and requests set by the test; cost = affine in tokens (hand-computable)."""

    workers: list[WorkerView] = field(default_factory=list)
    requests: dict[int, RequestView] = field(default_factory=dict)
    unfinished: int = 0
    now: float = 0.0
    t_base: float = 0.010
    t_per_token: float = 1e-4
    t_draft_step: float = 0.002
    methods: frozenset[str] = frozenset(
        {"ngram", "suffix", "history", "draft_small", "draft_medium", "w4_self", "eagle"}
    )

    @staticmethod
    def make(n_workers: int, gpus: int = 4) -> FakeView:
        ws = [
            WorkerView(
                id=w,
                gpus=gpus,
                node=0,
                role=Role.ROLLOUT,
                running=0,
                waiting=0,
                kv_used_tokens=0,
                kv_capacity_tokens=10**6,
                spec=SPEC_OFF,
            )
            for w in range(n_workers)
        ]
        return FakeView(workers=ws)

    def set_worker(self, w: int, **changes: object) -> None:
        self.workers[w] = replace(self.workers[w], **changes)

    def add_request(self, rid: int, worker: int | None, state: str = "running", **changes: object) -> None:
        base = RequestView(
            id=rid,
            prompt_id=rid,
            sample=0,
            prompt_len=10,
            max_tokens=100,
            generated=0,
            worker=worker,
            state=state,
            spec=SPEC_OFF,
            drafted_tokens=0,  # type: ignore[arg-type]
            accepted_tokens=0,
        )
        self.requests[rid] = base._replace(**changes)

    # ClusterView protocol
    @property
    def now_s(self) -> float:
        return self.now

    @property
    def step(self) -> int:
        return 0

    @property
    def epoch(self) -> int:
        return 0

    @property
    def capabilities(self) -> frozenset[Capability]:
        return ALL_CAPABILITIES

    @property
    def info(self) -> ModelInfo:
        return ModelInfo(model="m", gpu="g", tp=1, group_size=1, temperature=1.0)

    @property
    def num_workers(self) -> int:
        return len(self.workers)

    @property
    def draft_methods(self) -> frozenset[str]:
        return self.methods

    def worker(self, worker: int) -> WorkerView:
        return self.workers[worker]

    def request(self, request: int) -> RequestView:
        return self.requests[request]

    def worker_requests(self, worker: int) -> Sequence[int]:
        return sorted(
            r for r, rv in self.requests.items() if rv.worker == worker and rv.state in ("waiting", "running")
        )

    def step_requests(self) -> Sequence[int]:
        return sorted(self.requests)

    def unfinished_count(self) -> int:
        return self.unfinished

    def history(self, prompt_id: int) -> PromptHistory:
        return PromptHistory()

    def cost(self, num_seqs: float, new_tokens: float, context_tokens: float) -> float:
        return self.t_base + self.t_per_token * new_tokens

    def draft_cost(self, method: str, num_seqs: float, context_tokens: float, gamma: int) -> float:
        return self.t_draft_step * gamma

    def oracle_length(self, request: int) -> int:
        raise NotImplementedError
