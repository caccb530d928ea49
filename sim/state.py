"""Per-step request state as parallel numpy arrays (structure of arrays).

A 16K-request step touches these arrays on every decision point, so they are columns the
worker processes slice with index arrays, never Python objects per request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from simctl.policies.contract import SPEC_OFF, SpecConfig
from simctl.traces.schema import FILL_PREFIX, HIT_PREFIX, accept_column

# Columns a replica starts at zero (its own counters), not copied from the original.
_ZEROED_ON_CLONE = (
    "drafted",
    "accepted",
    "spec_iters",
    "spec_tokens",
    "preemptions",
    "dispatches",
    "kv_resident",
)

# Request states (int8 codes; names match RequestView.state).
UNASSIGNED, WAITING, RUNNING, FINISHED, DEFERRED, CANCELLED = range(6)
STATE_NAMES = ("unassigned", "waiting", "running", "finished", "deferred", "cancelled")
PLAIN_GAMMA = -1  # req_gamma of a request told SPEC_PLAIN (0 follows its worker)


@dataclass
class StepState:
    """Everything the simulator tracks about one step's requests."""

    step: int
    epoch: int
    prompt_id: np.ndarray
    sample: np.ndarray
    prompt_len: np.ndarray
    target_len: np.ndarray  # response_len from the trace: what the request will generate
    max_tokens: np.ndarray
    accept: dict[str, np.ndarray]  # method -> per-request acceptance probability
    fills: dict[str, np.ndarray] = field(default_factory=dict)  # method -> share of draft slots filled
    hits: dict[str, np.ndarray] = field(default_factory=dict)  # method -> share of iterations drafting
    methods: list[str] = field(init=False)  # column order of accept_mat
    accept_mat: np.ndarray = field(init=False)  # (n, methods) acceptance probabilities
    fill_mat: np.ndarray = field(init=False)  # (n, methods) share of draft slots filled (1 = all)
    hit_mat: np.ndarray = field(init=False)  # (n, methods) share of iterations that drafted (1 = all)
    req_method: np.ndarray = field(init=False)  # per-request override: index into methods, -1 none
    req_gamma: np.ndarray = field(init=False)  # per-request draft length, 0 = worker's, PLAIN_GAMMA
    req_window: np.ndarray = field(init=False)  # decoupled draft window, 0 = coupled
    req_topk: np.ndarray = field(init=False)  # tree width per level (1 = chain)
    req_verify: np.ndarray = field(init=False)  # tree tokens verified per iteration (0 = gamma)
    origin: np.ndarray = field(init=False)  # the request a row serves (replica rows > n_requests)
    n_requests: int = field(init=False)  # rows below this are the step's requests
    generated: np.ndarray = field(init=False)
    start_generated: np.ndarray = field(init=False)
    worker: np.ndarray = field(init=False)
    state: np.ndarray = field(init=False)
    dispatch_end: np.ndarray = field(init=False)  # `generated` value at which this dispatch ends
    priority: np.ndarray = field(init=False)
    kv_resident: np.ndarray = field(init=False)  # context tokens whose KV is still valid somewhere
    finish_s: np.ndarray = field(init=False)
    drafted: np.ndarray = field(init=False)
    accepted: np.ndarray = field(init=False)
    spec_iters: np.ndarray = field(init=False)
    spec_tokens: np.ndarray = field(init=False)
    preemptions: np.ndarray = field(init=False)
    dispatches: np.ndarray = field(init=False)
    # The row's prompt was prefilled in this step (a Fastest-of-N replica inherits it):
    # tokens a later admission computes again are preemption/migration recompute.
    prefilled: np.ndarray = field(init=False)
    spec: list[SpecConfig] = field(init=False)  # per-request override; SPEC_OFF = use worker's
    # what every worker's planner derives from the acceptance matrices, computed once per
    # step (sim.spec_planner: each entry kept with the matrix it came from)
    derived: dict[str, Any] = field(init=False, default_factory=dict, repr=False, compare=False)
    # column -> (buffer with spare rows, the prefix view the column is): `clone_row`
    _buffers: dict[str, tuple[np.ndarray, np.ndarray]] = field(
        init=False, default_factory=dict, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        n = len(self.prompt_id)
        self.generated = np.zeros(n, np.int64)
        self.start_generated = np.zeros(n, np.int64)  # tokens a carried-over request already had
        self.worker = np.full(n, -1, np.int32)
        self.state = np.zeros(n, np.int8)
        self.dispatch_end = self.target_len.astype(np.int64).copy()
        self.priority = np.zeros(n, np.float64)
        self.kv_resident = np.zeros(n, np.int64)
        self.finish_s = np.full(n, np.nan)
        self.drafted = np.zeros(n, np.int64)
        self.accepted = np.zeros(n, np.int64)
        self.spec_iters = np.zeros(n, np.int64)
        self.spec_tokens = np.zeros(n, np.int64)
        self.preemptions = np.zeros(n, np.int32)
        self.dispatches = np.zeros(n, np.int32)
        self.prefilled = np.zeros(n, np.bool_)
        self.spec = [SPEC_OFF] * n
        self.methods = list(self.accept)
        self.accept_mat = (
            np.column_stack([self.accept[m] for m in self.methods]) if self.methods else np.zeros((n, 0))
        )
        self.fill_mat = (
            np.column_stack([self.fills.get(m, np.ones(n)) for m in self.methods])
            if self.methods
            else np.ones((n, 0))
        )
        self.hit_mat = (
            np.column_stack([self.hits.get(m, np.ones(n)) for m in self.methods])
            if self.methods
            else np.ones((n, 0))
        )
        self.req_method = np.full(n, -1, np.int16)
        self.req_gamma = np.zeros(n, np.int16)
        self.req_window = np.zeros(n, np.int16)
        self.req_topk = np.ones(n, np.int16)
        self.req_verify = np.zeros(n, np.int16)
        self.origin = np.arange(n, dtype=np.int64)
        self.n_requests = n

    _ROW_ARRAYS = (
        "prompt_id",
        "sample",
        "prompt_len",
        "target_len",
        "max_tokens",
        "generated",
        "start_generated",
        "worker",
        "state",
        "dispatch_end",
        "priority",
        "kv_resident",
        "finish_s",
        "drafted",
        "accepted",
        "spec_iters",
        "spec_tokens",
        "preemptions",
        "dispatches",
        "prefilled",
        "accept_mat",
        "fill_mat",
        "hit_mat",
        "req_method",
        "req_gamma",
        "req_window",
        "req_topk",
        "req_verify",
        "origin",
    )

    def clone_row(self, rid: int) -> int:
        """Append a Fastest-of-N replica of row `rid` (same progress, own counters); its id."""
        new = len(self.prompt_id)
        for name in self._ROW_ARRAYS:
            self._append_copy(name, rid)
        for name in _ZEROED_ON_CLONE:
            getattr(self, name)[new] = 0
        self.finish_s[new] = np.nan
        self.worker[new] = -1
        self.spec.append(self.spec[rid])
        return new

    def _append_copy(self, name: str, rid: int) -> None:
        """Append a copy of row `rid` to column `name`. A step launches thousands of
        replicas and re-allocating every column per replica made cloning quadratic, so a
        cloned column is a prefix view of a buffer with spare rows: an append writes one
        row and re-slices, and only a full buffer (or a column replaced since) is copied."""
        arr = getattr(self, name)
        n = len(arr)
        buf, view = self._buffers.get(name, (None, None))
        if buf is None or arr is not view or len(buf) <= n:
            buf = np.empty((n + 1 + max(64, n // 4), *arr.shape[1:]), arr.dtype)
            buf[:n] = arr
        buf[n] = arr[rid]
        view = buf[: n + 1]
        self._buffers[name] = (buf, view)
        setattr(self, name, view)

    def method_index(self, method: str) -> int:
        """Column of `method` in accept_mat; KeyError when the trace lacks it."""
        return self.methods.index(method) if method in self.methods else self._missing(method)

    def _missing(self, method: str) -> int:
        raise KeyError(method)

    @property
    def n(self) -> int:
        return len(self.prompt_id)

    @classmethod
    def from_frame(cls, df: pd.DataFrame, step: int) -> StepState:
        """Build from one step's trace rows (any order; kept in the order given)."""
        accept = {
            c[len("accept_") :]: df[c].to_numpy(np.float64)
            for c in df.columns
            if c.startswith("accept_") and c == accept_column(c[len("accept_") :])
        }
        fills = {
            c[len(FILL_PREFIX) :]: df[c].to_numpy(np.float64) for c in df.columns if c.startswith(FILL_PREFIX)
        }
        hits = {
            c[len(HIT_PREFIX) :]: df[c].to_numpy(np.float64) for c in df.columns if c.startswith(HIT_PREFIX)
        }
        epoch = int(df["epoch"].iat[0]) if "epoch" in df.columns and len(df) else 0
        return cls(
            step=step,
            epoch=epoch,
            prompt_id=df["prompt_id"].to_numpy(np.int64),
            sample=df["sample"].to_numpy(np.int32),
            prompt_len=df["prompt_len"].to_numpy(np.int64),
            target_len=df["response_len"].to_numpy(np.int64),
            max_tokens=df["max_tokens"].to_numpy(np.int64),
            accept=accept,
            fills=fills,
            hits=hits,
        )

    def context(self, ids: np.ndarray) -> np.ndarray:
        return self.prompt_len[ids] + self.generated[ids]
