"""Reads of many requests or workers at once, for policy parts that read a whole worker or
the whole step at an event (a best-drafter part reads every request of a worker at each
tick; Fastest-of-N scans every unfinished request when a worker goes idle).

The `ClusterView` protocol builds one record per `request(r)` / `worker(w)` call, which
dominates such scans. An executor's view may answer them in bulk with the methods of
`BulkView` (the simulator's and the live view do); each helper here uses them when the view
has them and reads record by record otherwise, with the same answer either way (tested),
so a policy stays executor-agnostic and a view without them (a test's fake, a user's)
still works.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol, cast

import numpy as np

from simctl.policies.contract import ClusterView, RequestId, SpecConfig, WorkerId

Counters = tuple[list[int], list[int], list[SpecConfig]]  # drafted, accepted, own setting


class RequestRows(NamedTuple):
    """Columns of `RequestView` for many requests, in the order asked."""

    state: list[str]
    worker: list[WorkerId | None]
    drafted: list[int]
    accepted: list[int]
    spec: list[SpecConfig]
    verify_iterations: list[int]


class RequestColumns(NamedTuple):
    """What Fastest-of-N reads of every unfinished request at each idle worker, as arrays
    in the order asked (a scan that is quadratic in the step's size: no per-request Python)."""

    in_flight: np.ndarray  # bool: waiting or running, on a worker
    worker: np.ndarray  # int64: the worker, -1 for none
    drafted: np.ndarray  # int64: draft tokens proposed so far
    accepted: np.ndarray  # int64: of them accepted
    method: np.ndarray  # int64: index into `methods` of the request's own draft method, -1: none
    methods: Sequence[str]


IN_FLIGHT_STATES = frozenset(("running", "waiting"))


class BulkView(Protocol):
    """The optional bulk reads of an executor's view (module docstring)."""

    def draft_counters(self, requests: Sequence[RequestId]) -> Counters: ...
    def request_rows(self, requests: Sequence[RequestId]) -> RequestRows: ...
    def worker_loads(self, workers: Sequence[WorkerId]) -> list[int]: ...
    def worker_specs(self, workers: Sequence[WorkerId]) -> list[SpecConfig]: ...
    def request_columns(self, requests: Sequence[RequestId]) -> RequestColumns: ...


def draft_counters(view: ClusterView, rids: Sequence[RequestId]) -> Counters:
    """Per request of `rids`: drafted tokens, accepted tokens and its own speculation
    setting, as `view.request(r)` reports them."""
    if hasattr(view, "draft_counters"):
        return cast(BulkView, view).draft_counters(rids)
    views = [view.request(r) for r in rids]
    return [v.drafted_tokens for v in views], [v.accepted_tokens for v in views], [v.spec for v in views]


def request_rows(view: ClusterView, rids: Sequence[RequestId]) -> RequestRows:
    """State, worker, draft counters, own setting and verify iterations of each request of
    `rids`."""
    if hasattr(view, "request_rows"):
        return cast(BulkView, view).request_rows(rids)
    vs = [view.request(r) for r in rids]
    return RequestRows(
        [v.state for v in vs],
        [v.worker for v in vs],
        [v.drafted_tokens for v in vs],
        [v.accepted_tokens for v in vs],
        [v.spec for v in vs],
        [v.verify_iterations for v in vs],
    )


def worker_loads(view: ClusterView, workers: Sequence[WorkerId]) -> list[int]:
    """Running plus waiting sequences of each worker of `workers`."""
    if hasattr(view, "worker_loads"):
        return cast(BulkView, view).worker_loads(workers)
    out = []
    for w in workers:
        wv = view.worker(w)
        out.append(wv.running + wv.waiting)
    return out


def drafting_method(spec: SpecConfig) -> str | None:
    """The draft method `spec` drafts with (None: it drafts nothing, so a request with it
    follows its worker's setting, and a worker with it decodes plainly)."""
    return spec.method if spec.enabled and spec.method is not None else None


def worker_specs(view: ClusterView, workers: Sequence[WorkerId]) -> list[SpecConfig]:
    """The speculation setting of each worker of `workers`, without the rest of a
    `WorkerView` (its KV count is a sum over the worker's requests): Fastest-of-N reads the
    setting of every worker whose requests follow it, at every idle worker of the tail."""
    if hasattr(view, "worker_specs"):
        return cast(BulkView, view).worker_specs(workers)
    return [view.worker(w).spec for w in workers]


def request_columns(view: ClusterView, rids: Sequence[RequestId]) -> RequestColumns:
    """`RequestColumns` of each request of `rids`. A request's own method is its setting's
    when that setting drafts (else it follows its worker's: -1)."""
    if hasattr(view, "request_columns"):
        return cast(BulkView, view).request_columns(rids)
    rows = request_rows(view, [int(r) for r in rids])
    n = len(rows.state)
    worker = np.array([-1 if w is None else w for w in rows.worker], np.int64).reshape(n)
    in_flight = np.array([s in IN_FLIGHT_STATES for s in rows.state], bool).reshape(n) & (worker >= 0)
    methods: list[str] = []
    own = [drafting_method(s) for s in rows.spec]
    for m in own:
        if m is not None and m not in methods:
            methods.append(m)
    method = np.array([-1 if m is None else methods.index(m) for m in own], np.int64).reshape(n)
    drafted = np.array(rows.drafted, np.int64).reshape(n)
    accepted = np.array(rows.accepted, np.int64).reshape(n)
    return RequestColumns(in_flight, worker, drafted, accepted, method, methods)
