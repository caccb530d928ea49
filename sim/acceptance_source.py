"""Where a speculative block's verification outcomes come from: an object handed to the
engine (and by it to each worker), so the workers never ask which kind they have.

Two implementations: :class:`SampledAcceptance` samples each row's outcomes from its
per-token acceptance (sim.acceptance), and ``sim.token_replay.StepReplay`` replays
model-free drafters exactly over a trace's recorded token ids (falling back to sampling
for methods it has no rule for). Each draw returns a frozen :class:`Draw`; nothing is read
off the source afterwards.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np

from simctl.policies.suffix_tree import DraftRule
from simctl.sim.acceptance import sample_tokens


class ModelProbe(NamedTuple):
    """A grouped-drafter acceptance-model draw (Seer Table 2 by visible siblings), kept to
    check later how far its rows' acceptance has drifted."""

    rule: DraftRule
    rows: np.ndarray
    paths: np.ndarray
    chain: np.ndarray  # the trace's chain acceptance of the rows
    p: np.ndarray  # per-token acceptance the rows were drawn with
    # the rows' sibling columns (sim.token_replay `_siblings`), reused by each drift check
    # of the same rows instead of gathered again; None: not known
    siblings: tuple[np.ndarray, np.ndarray] | None = None


@dataclass(frozen=True)
class Draw:
    """Outcomes of the next `iterations` verify iterations of the rows asked about."""

    # (rows, iterations) int16: tokens each row emits in each iteration (accepted + 1)
    tokens: np.ndarray
    # (rows, iterations) draft slots really verified per iteration where the source knows
    # them (NaN elsewhere); None: none known, the engine charges the configured draft length
    slots: np.ndarray | None = None
    # rows drawn from the grouped-drafter acceptance model, to check later for drift
    probe: ModelProbe | None = None


class AcceptanceSource(Protocol):
    @property
    def fetches_on_replan(self) -> bool:
        """Whether drafts read other requests' tokens when a worker plans (Seer's periodic
        fetch), so a worker must re-plan at every policy tick rather than only stop there."""
        ...

    def draw(
        self,
        rng: np.random.Generator,
        rids: np.ndarray,
        methods: np.ndarray,
        alpha: np.ndarray,
        gamma: np.ndarray,
        worker_topk: int,
        iterations: int,
    ) -> Draw:
        """Outcomes for rows `rids` drafting with `methods` (indices into the step's
        methods) at per-token acceptance `alpha` and depth `gamma`; `worker_topk` is the
        tree width of rows that follow their worker's setting; `rng` is the worker's."""
        ...

    def model_drift(self, probe: ModelProbe) -> float:
        """How far the acceptance a probe's rows were drawn with has moved since."""
        ...

    def finish(self, counters: Counter[str]) -> None:
        """The step is over: add the source's own totals to the run's counters."""
        ...


class SampledAcceptance:
    """Acceptance sampled from the trace's per-request acceptance probabilities."""

    @property
    def fetches_on_replan(self) -> bool:
        return False

    def draw(
        self,
        rng: np.random.Generator,
        rids: np.ndarray,
        methods: np.ndarray,
        alpha: np.ndarray,
        gamma: np.ndarray,
        worker_topk: int,
        iterations: int,
    ) -> Draw:
        return Draw(sample_tokens(rng, alpha, gamma, iterations))

    def model_drift(self, probe: ModelProbe) -> float:
        return 0.0

    def finish(self, counters: Counter[str]) -> None:
        return None
