"""What an offline profile of a replayed workload's drafters would measure, for policies that
select a drafter from one before the first step (`Policy.offline_profile`; SpecActor,
arXiv:2511.16193 §4.2: "The profiling only needs to be done once, as the profiled results
are stable across different steps").

The trace's `accept_<method>` columns are per-request, per-token acceptances; a profile
counts tokens, so each method's value is the mean weighted by response length over the
first replayed step (long responses weigh as much as they generate). A profile is taken
before the run, so later steps do not enter it.
"""

from __future__ import annotations

import numpy as np

from simctl.traces.io import Trace
from simctl.traces.schema import ACCEPT_PREFIX, BUCKET_SUFFIX


def trace_acceptance(trace: Trace, step: int) -> dict[str, float]:
    """Per method with an acceptance column: the token-weighted mean per-token acceptance of
    `step`'s requests (empty when the step has no requests or no such columns)."""
    df = trace.df
    rows = df["step"].to_numpy() == step
    if not rows.any():
        return {}
    weight = df["response_len"].to_numpy()[rows].astype(np.float64)
    total = float(weight.sum())
    if total <= 0:
        return {}
    out: dict[str, float] = {}
    for col in df.columns:
        if col.startswith(ACCEPT_PREFIX) and not col.endswith(BUCKET_SUFFIX):
            values = df[col].to_numpy()[rows].astype(np.float64)
            out[col[len(ACCEPT_PREFIX) :]] = float(values @ weight / total)
    return out
