"""Which drafting methods a replayed trace offers: an `accept_<method>` column, or, for the
model-free drafters, recorded token ids alone (issue #16, "Acceptance from tokens").

With exact-match verification of a sampled sequence a deterministic draft token is
accepted exactly when it equals the recorded next token, so a trace with `response_tokens`
replays n-gram prompt lookup, Seer's suffix tree and RhymeRL's history drafter exactly
(sim.token_replay) and needs no acceptance column for them. The engine reads a per-request
acceptance for those methods in one place only: the expected tokens per iteration that
size how many iterations a worker draws ahead (sim.spec_planner's block length). Where the
trace lacks the column, :func:`with_token_methods` supplies the per-token acceptance the
trace generators are calibrated to (traces.presets) for that guess. Prompt lookup and
history outcomes (finish times, drafted/accepted counts) come from the tokens whatever it
is; Seer's grouped tree sees a sibling's tokens when a worker re-plans, and re-plan times
follow the guess, so its counts move slightly (under 1% in
tests/sim/test_token_acceptance.py, which checks both).

Model-based drafters (draft models, the W4 self-drafter, EAGLE) depend on weights, not on
the tokens: their acceptance must be in the trace, and `simctl trace annotate` measures
it for a real draft model over the recorded tokens (live/annotate.py).

>>> sorted(TOKEN_METHODS)
['history', 'ngram', 'suffix']
"""

from __future__ import annotations

import pandas as pd

from simctl.policies.draft_methods import DraftMethod
from simctl.traces.io import Trace
from simctl.traces.presets import HISTORY_ACCEPT, NGRAM_ACCEPT, suffix_acceptance
from simctl.traces.schema import ACCEPT_PREFIX, BUCKET_SUFFIX, accept_column

#: Methods a trace's token ids replay exactly (DraftMethod.model_free).
TOKEN_METHODS: frozenset[str] = frozenset(m.value for m in DraftMethod if m.model_free)

#: How to get a model-based method's acceptance into a trace (one clause of an error line).
ANNOTATE_HINT = (
    "model-based methods need accept_<method>: `simctl trace annotate TRACE --drafter DIR "
    "[--method NAME] -o OUT.parquet` measures it over the trace's response_tokens; "
    "ngram, suffix and history need only response_tokens"
)


def column_methods(trace: Trace) -> frozenset[str]:
    """Known methods with an `accept_<method>` column (bucket lists are not one)."""
    names = (c[len(ACCEPT_PREFIX) :] for c in trace.df.columns if c.startswith(ACCEPT_PREFIX))
    known = {m.value for m in DraftMethod}
    return frozenset(n for n in names if n in known and not n.endswith(BUCKET_SUFFIX))


def offered_methods(trace: Trace) -> frozenset[str]:
    """Methods the simulator can replay over `trace`: its acceptance columns, plus every
    model-free method when it carries response token ids."""
    return column_methods(trace) | (TOKEN_METHODS if trace.has_tokens() else frozenset())


def planning_acceptance(method: str, group_size: int) -> float:
    """The per-token acceptance the generators calibrate `method` to (Seer Table 2 for the
    grouped suffix tree at this group size; RhymeRL's history rate; prompt lookup's): only
    the block-length guess of an exactly replayed method reads it."""
    if method == DraftMethod.SUFFIX:
        return suffix_acceptance(group_size)
    if method == DraftMethod.HISTORY:
        return HISTORY_ACCEPT
    return NGRAM_ACCEPT


def with_token_methods(frame: pd.DataFrame, trace: Trace) -> pd.DataFrame:
    """`frame` (rows of `trace`, index kept) with an `accept_<method>` planning column for
    each model-free method the trace's tokens replay but its columns lack; unchanged for a
    trace without tokens or with every column present."""
    missing = sorted(offered_methods(trace) - column_methods(trace))
    if not missing:
        return frame
    group = int(trace.meta.group_size)
    return frame.assign(**{accept_column(m): planning_acceptance(m, group) for m in missing})
