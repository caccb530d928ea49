"""RhymeRL HistoSpec (History Rhymes, arXiv:2508.18588 §5): speculative decoding from the
previous epoch's responses to the same prompt.

Drafting (`DraftRule`, replayed exactly by the simulator over token ids): one suffix tree
per prompt over its last occurrence's responses, branches weighted by the responses'
rewards (§5.3), prefix match of 7 tokens falling back to 3, and an AIMD draft window per
response: 2 tokens at first, +2 after a fully accepted draft up to 32, back to 2 on any
rejection (§5.4). No drafting without history: the first epoch runs plain (§6.2).

Batch-size threshold (§5.4): "through pre-profiling, HistoSpec gets the maximum viable
batch size for throughput gains at different acceptance rates". Here the profile is the
executor's cost model, read at the worker's running batch (the requests an iteration
holds; the queue behind a full KV cache does not decode) and context: speculation is on
while tau * t_plain(b) > t_spec(b), where tau is the tokens per verify iteration observed
so far (from finished requests' counters; a prior of 65% acceptance, §7.2.2, until then).

`verify_gamma`: an executor that charges one draft length per verify iteration (the
simulator today) is told `verify_gamma` (4), while the AIMD window changes every iteration;
the simulator's exact replay drafts the true window and counts it (bench/
bench_scheduling_policies.py prints drafted tokens per iteration next to the 4 charged).
Without token ids the simulator samples the trace's acceptance at this fixed draft length.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from simctl.policies.contract import (
    SPEC_OFF,
    Action,
    Capability,
    ClusterView,
    Event,
    Policy,
    RequestFinished,
    RequestId,
    SetSpec,
    SpecConfig,
    StepStarted,
    Tick,
    WorkerId,
)
from simctl.policies.draft_methods import DraftMethod
from simctl.policies.draft_rule import Aimd, DraftRule
from simctl.policies.seer_acceptance import expected_accept_len

METHOD = DraftMethod.HISTORY
AIMD = Aimd(start=2, step=2, maximum=32)  # §5.4
PREFIX_MAX, PREFIX_MIN = 7, 3  # §5.4
PRIOR_ACCEPT = 0.65  # §7.2.2 / Fig. 17: 65-79%
VERIFY_GAMMA = 4
CHECK_ITERATIONS = 128


def speculation_wins(view: ClusterView, batch: int, context_tokens: float, tau: float, gamma: int) -> bool:
    """Whether drafting `gamma` tokens yielding `tau` tokens per iteration beats plain
    decoding for this batch (the profiled threshold of §5.4)."""
    t_plain = view.cost(batch, batch, context_tokens)
    t_spec = view.cost(batch, batch * (gamma + 1), context_tokens) + view.draft_cost(
        METHOD, batch, context_tokens, gamma
    )
    return tau * t_plain > t_spec


class HistoSpec(Policy):
    """Per-worker on/off of history drafting by batch size and observed acceptance."""

    requires = frozenset({Capability.SPEC_PER_WORKER})

    def __init__(
        self,
        verify_gamma: int = VERIFY_GAMMA,
        aimd_max: int = AIMD.maximum,
        prior_accept: float = PRIOR_ACCEPT,
        tick_iterations: int = CHECK_ITERATIONS,
    ) -> None:
        self.verify_gamma = int(verify_gamma)
        self.aimd = Aimd(AIMD.start, AIMD.step, int(aimd_max))
        self.prior_accept = float(prior_accept)
        self.tick_iterations = int(tick_iterations)
        self.name = "histospec"
        self._rules: dict[str, DraftRule] = {
            METHOD: DraftRule(
                source="history", min_match=PREFIX_MIN, max_match=PREFIX_MAX, weight="reward", aimd=self.aimd
            )
        }
        self.spec = SpecConfig(method=METHOD, gamma=self.verify_gamma)
        self._enabled = False
        self._on: dict[WorkerId, bool] = {}
        self._accepted = 0
        self._iterations = 0.0

    @property
    def draft_rules(self) -> Mapping[str, DraftRule]:
        return self._rules

    @property
    def draft_methods_used(self) -> frozenset[str]:
        return frozenset({METHOD.value})

    @property
    def tau(self) -> float:
        """Tokens per verify iteration: observed once 100 iterations are in, else the prior."""
        if self._iterations >= 100:
            return 1.0 + self._accepted / self._iterations
        return expected_accept_len(self.prior_accept, self.verify_gamma)

    def on_event(self, event: Event, view: ClusterView) -> list[Action]:
        if isinstance(event, StepStarted):
            return self._start(event.requests, view)
        if not self._enabled:
            return []
        if isinstance(event, RequestFinished):
            self._observe(event.request, view)
            return self._configure(event.worker, view)
        if isinstance(event, Tick):
            return self._configure(event.worker, view)
        return []

    def wants_ticks(self, worker: WorkerId, view: ClusterView) -> bool:
        """Ticks re-evaluate speculation only in a step with history (set at StepStarted)."""
        return self._enabled

    def _start(self, requests: Sequence[RequestId], view: ClusterView) -> list[Action]:
        self._enabled = bool(requests) and bool(view.history(view.request(requests[0]).prompt_id).lengths)
        out: list[Action] = [SetSpec(spec=SPEC_OFF, worker=w) for w, on in self._on.items() if on]
        self._on = {}
        return out

    def _observe(self, rid: RequestId, view: ClusterView) -> None:
        req = view.request(rid)
        if req.verify_iterations:  # AIMD windows draft fewer than verify_gamma at times
            self._accepted += req.accepted_tokens
            self._iterations += req.verify_iterations

    def _configure(self, worker: WorkerId, view: ClusterView) -> list[Action]:
        wv = view.worker(worker)
        # The threshold is on decoding parallelism (§5.4: "increased decoding parallelism
        # yields higher GPU computational utilization"): the requests an iteration holds, not
        # the ones queued behind a full KV cache, which run no iteration and cost nothing yet.
        batch = wv.running or wv.waiting
        if batch == 0:
            return []
        on = speculation_wins(view, batch, float(max(wv.kv_used_tokens, batch)), self.tau, self.verify_gamma)
        if self._on.get(worker, False) == on:
            return []
        self._on[worker] = on
        return [SetSpec(spec=self.spec if on else SPEC_OFF, worker=worker)]
