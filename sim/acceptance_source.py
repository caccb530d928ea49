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
from simctl.sim.position_acceptance import PositionAcceptance


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
        first_plain: np.ndarray | None = None,
        tree_width: np.ndarray | None = None,
    ) -> Draw:
        """Outcomes for rows `rids` drafting with `methods` (indices into the step's
        methods) at per-token acceptance `alpha` and depth `gamma`; `worker_topk` is the
        tree width of rows that follow their worker's setting; `rng` is the worker's.
        `first_plain`: rows whose first iteration is their admission's prefill pass, which
        computes their first token and verifies no draft (None: no such row); they emit
        exactly one token there and draft from the next iteration on. `tree_width`: each
        row's effective tree width (its verify budget included; None: every row a chain),
        which a position-dependent acceptance (sim.position_acceptance) needs to put an
        iteration's chain acceptance through the tree law."""
        ...

    def model_drift(self, probe: ModelProbe) -> float:
        """How far the acceptance a probe's rows were drawn with has moved since."""
        ...

    def finish(self, counters: Counter[str]) -> None:
        """The step is over: add the source's own totals to the run's counters."""
        ...


def plain_first_column(tokens: np.ndarray, first_plain: np.ndarray | None) -> np.ndarray:
    """`tokens` with one token in the first iteration of the `first_plain` rows (their
    prefill pass: an engine drafts for a request only after its first sampled token, as
    vLLM's proposers do). Sampled outcomes keep the same draws, so a block without newly
    admitted rows is drawn exactly as before.

    >>> plain_first_column(np.array([[3, 2], [4, 1]], np.int16), np.array([False, True]))
    array([[3, 2],
           [1, 1]], dtype=int16)
    """
    if first_plain is not None and tokens.shape[1] and first_plain.any():
        tokens[first_plain, 0] = 1
    return tokens


def sampled_tokens(
    positions: PositionAcceptance | None,
    rng: np.random.Generator,
    rids: np.ndarray,
    methods: np.ndarray,
    alpha: np.ndarray,
    gamma: np.ndarray,
    tree_width: np.ndarray | None,
    iterations: int,
    first_plain: np.ndarray | None,
) -> np.ndarray:
    """Sampled outcomes of rows (sim.acceptance.sample_tokens), by response position
    where the trace has buckets for some row's method (sim.position_acceptance: the same
    uniforms, so without buckets the same outcomes)."""
    if positions is not None and positions.covers(methods):
        return positions.sample(rng, rids, methods, alpha, gamma, tree_width, iterations, first_plain)
    return plain_first_column(sample_tokens(rng, alpha, gamma, iterations), first_plain)


class SampledAcceptance:
    """Acceptance sampled from the trace's per-request acceptance probabilities (by
    response position where `positions` holds the trace's buckets)."""

    def __init__(self, positions: PositionAcceptance | None = None) -> None:
        self.positions = positions

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
        first_plain: np.ndarray | None = None,
        tree_width: np.ndarray | None = None,
    ) -> Draw:
        return Draw(
            sampled_tokens(
                self.positions, rng, rids, methods, alpha, gamma, tree_width, iterations, first_plain
            )
        )

    def model_drift(self, probe: ModelProbe) -> float:
        return 0.0

    def finish(self, counters: Counter[str]) -> None:
        return None
