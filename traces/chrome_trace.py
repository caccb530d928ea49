"""A run's worker timeline as a Chrome/Perfetto trace (Trace Event Format JSON).

`simctl replay --chrome-trace FILE` and `simctl live --chrome-trace FILE` write it; open
it in ui.perfetto.dev or chrome://tracing. Layout:

- one process per policy (named by the policy);
- one thread (track) per rollout worker, named `worker N`, holding a complete event
  ("ph": "X") per busy segment of the timeline table (`traces/run_format.py` TIMELINE:
  `t0_s`..`t1_s`), named by its batch size, with args batch, iterations, kv_tokens,
  gamma_mean, step and, where the run records them, the seconds of the segment that were
  prefill, recompute and drafting (prefill_s, recompute_s, draft_s; null where not);
- a `steps` track per policy with one complete event per RL step;
- with the requests table, an instant event ("ph": "i", thread scope) on the worker's
  track where each request finished.

Each step's times start at 0 in the run directory; here the steps of a policy are laid end
to end (a step starts where the previous one's last segment or finish ended), so that the
whole run reads as one timeline. Times are microseconds ("ts", "dur"), as the format
requires.

It reads only the run format's frames, so the simulator and the live executor (which sits
below `reports/` in the layer order) both call it; it sits in `traces/`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simctl.traces.atomic import atomic_write
from simctl.traces.run_format import PHASE_COLUMNS

US = 1e6  # microseconds per second


def _us(seconds: float) -> float:
    return round(float(seconds) * US, 3)


def _dur(start_s: float, end_s: float) -> float:
    """A slice's length as the difference of its rounded ends: rounded apart, a slice could
    end a nanosecond after the next one on its track starts, which Perfetto reads as badly
    nested slices."""
    return max(round(_us(end_s) - _us(start_s), 3), 0.0)


def _plain(value: Any) -> Any:
    """A numpy scalar as a JSON value (NaN and missing as null)."""
    if value is None or value is pd.NA:
        return None
    if isinstance(value, np.integer | int) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, np.floating | float):
        return None if math.isnan(float(value)) else float(value)
    return value


def _step_spans(
    timeline: pd.DataFrame, requests: pd.DataFrame | None
) -> dict[tuple[str, int], tuple[float, float]]:
    """(policy, step) -> (start on the joined timeline, length) in seconds: a step lasts
    until its last segment or finish."""
    frames = [timeline.rename(columns={"t1_s": "end"})[["policy", "step", "end"]]]
    if requests is not None and len(requests):
        frames.append(requests.rename(columns={"finish_s": "end"})[["policy", "step", "end"]])
    both = pd.concat(frames, ignore_index=True)
    ends = {
        (str(policy), int(step)): 0.0 if pd.isna(end) else float(end)
        for (policy, step), end in both.groupby(["policy", "step"], sort=True)["end"].max().items()
    }
    spans: dict[tuple[str, int], tuple[float, float]] = {}
    clock: dict[str, float] = {}
    for policy, step in sorted(ends):
        start = clock.get(policy, 0.0)
        spans[(policy, step)] = (start, ends[(policy, step)])
        clock[policy] = start + ends[(policy, step)]
    return spans


def _metadata(pid: int, policy: str, workers: list[int], steps_tid: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": policy}},
        {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": steps_tid, "args": {"name": "steps"}},
        {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": steps_tid, "args": {"sort_index": -1}},
    ]
    for w in workers:
        events.append(
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": w + 1, "args": {"name": f"worker {w}"}}
        )
        events.append(
            {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": w + 1, "args": {"sort_index": w}}
        )
    return events


def _segments(
    pid: int, frame: pd.DataFrame, spans: Mapping[tuple[str, int], tuple[float, float]]
) -> list[dict[str, Any]]:
    out = []
    named = ("iterations", "kv_tokens", "gamma_mean", "replicas", *PHASE_COLUMNS)
    extra = [c for c in named if c in frame.columns]
    for row in frame.itertuples(index=False):
        start = spans[(str(row.policy), int(row.step))][0]
        args = {"batch": int(row.batch), "step": int(row.step)}
        args.update({c: _plain(getattr(row, c)) for c in extra})
        out.append(
            {
                "name": f"batch {int(row.batch)}",
                "cat": "busy",
                "ph": "X",
                "ts": _us(start + row.t0_s),
                "dur": _dur(start + row.t0_s, start + row.t1_s),
                "pid": pid,
                "tid": int(row.worker) + 1,
                "args": args,
            }
        )
    return out


def _finishes(
    pid: int, frame: pd.DataFrame, spans: Mapping[tuple[str, int], tuple[float, float]]
) -> list[dict[str, Any]]:
    out = []
    done = frame[frame["finish_s"].notna() & (frame["worker"] >= 0)]
    for row in done.itertuples(index=False):
        out.append(
            {
                "name": "finish",
                "cat": "request",
                "ph": "i",
                "s": "t",
                "ts": _us(spans[(str(row.policy), int(row.step))][0] + row.finish_s),
                "pid": pid,
                "tid": int(row.worker) + 1,
                "args": {
                    "request": int(row.request),
                    "prompt_id": int(row.prompt_id),
                    "sample": int(row.sample),
                    "response_len": int(row.response_len),
                    "step": int(row.step),
                },
            }
        )
    return out


def _steps(
    pid: int, tid: int, spans: Mapping[tuple[str, int], tuple[float, float]], policy: str
) -> list[dict[str, Any]]:
    return [
        {
            "name": f"step {step}",
            "cat": "step",
            "ph": "X",
            "ts": _us(start),
            "dur": _dur(start, start + length),
            "pid": pid,
            "tid": tid,
            "args": {"step": step},
        }
        for (p, step), (start, length) in sorted(spans.items())
        if p == policy
    ]


def chrome_trace(
    timeline: pd.DataFrame,
    requests: pd.DataFrame | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The Trace Event Format document of a run's timeline (and request finishes)."""
    spans = _step_spans(timeline, requests)
    policies = list(dict.fromkeys([*map(str, timeline["policy"]), *(p for p, _ in sorted(spans))]))
    events: list[dict[str, Any]] = []
    for pid, policy in enumerate(policies, start=1):
        frame = timeline[timeline["policy"] == policy]
        reqs = requests[requests["policy"] == policy] if requests is not None else None
        workers = {int(w) for w in frame["worker"]}
        if reqs is not None:
            workers |= {int(w) for w in reqs["worker"] if w >= 0}
        steps_tid = max(workers, default=-1) + 2
        events += _metadata(pid, policy, sorted(workers), steps_tid)
        events += _steps(pid, steps_tid, spans, policy)
        events += _segments(pid, frame, spans)
        if reqs is not None:
            events += _finishes(pid, reqs, spans)
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": dict(metadata or {})}


def write_chrome_trace(
    path: Path,
    timeline: pd.DataFrame,
    requests: pd.DataFrame | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> None:
    """`chrome_trace(...)` as JSON at `path`, atomically."""
    text = json.dumps(
        chrome_trace(timeline, requests, metadata), separators=(",", ":"), allow_nan=False, default=str
    )
    atomic_write(Path(path), lambda tmp: Path(tmp).write_text(text))


def write_run_chrome_trace(
    path: Path, tables: Mapping[str, Sequence[pd.DataFrame]], doc: Mapping[str, Any]
) -> None:
    """The Chrome trace of a run's tables (`requests`, `timeline` frames, as a run directory
    is written from) with run.json's identifying fields as metadata."""
    timeline = pd.concat(list(tables["timeline"]), ignore_index=True) if tables["timeline"] else None
    if timeline is None:
        timeline = pd.DataFrame(columns=["policy", "step", "worker", "t0_s", "t1_s", "batch"])
    requests = pd.concat(list(tables["requests"]), ignore_index=True) if tables.get("requests") else None
    meta = {k: doc[k] for k in ("trace", "cluster", "seed") if k in doc}
    write_chrome_trace(path, timeline, requests, {"simctl": "run timeline", **meta})
