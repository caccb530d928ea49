"""Turning live step records into the project's artefacts: a trace in the schema of
traces/schema.py (source "live") and a run directory with the same files and keys as
`simctl replay --out` (both write through traces/run_format.py), so `simctl replay` and
`simctl report` read live runs unchanged.

Metrics are the simulator's own functions (sim/metrics.py); only their inputs differ.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd
import pyarrow as pa

from simctl.live.acceptance import fit_alpha, replay_model_free
from simctl.live.drafters import MODEL_FREE
from simctl.live.executor import Overhead, StepRecord
from simctl.live.state import LiveRequest
from simctl.live.workload import Workload
from simctl.policies.contract import Role
from simctl.sim.metrics import StepMetrics, accept_len, idle_fraction, tail_time
from simctl.sim.role_time import LENT_ROLES, role_seconds
from simctl.sim.step_time import PostRollout, step_time
from simctl.traces.io import write_trace
from simctl.traces.run_format import (
    FORMAT_VERSION,
    ITERATION_COLUMNS,
    PHASE_COLUMNS,
    ROLE_CHANGE_COLUMNS,
    SEGMENT_COLUMNS,
    PolicyEntry,
    Provenance,
    RunDoc,
    WorkerLossEntry,
    command_provenance,
    policy_entry,
)
from simctl.traces.run_format import write_json as write_json  # re-exported for the live CLI
from simctl.traces.run_format import write_run_dir as write_tables
from simctl.traces.schema import FILL_PREFIX, HIT_PREFIX, TraceMeta, accept_column

# The executor's segments: the timeline's columns less `replicas` and the phase split, which
# it does not record (iterations.parquet splits live time)
LIVE_SEGMENT_COLUMNS = [c for c in SEGMENT_COLUMNS if c not in ("replicas", *PHASE_COLUMNS)]
DEFAULT_GAMMA = 4  # draft length for offline acceptance of methods no policy ran


@dataclass
class LiveRun:
    """One policy's live run over the workload (the simulator's counterpart:
    sim.replay.PolicyRun)."""

    name: str
    params: dict[str, object]
    records: list[StepRecord] = field(default_factory=list)
    approximated: Counter[str] = field(default_factory=Counter)
    overhead: Overhead = field(default_factory=Overhead)
    wall_s: float = 0.0
    error: str | None = None
    worker_losses: list[WorkerLossEntry] = field(default_factory=list)
    # concurrent runs: per report, seconds from its arrival to the controller's answer sent
    reaction_s: list[float] = field(default_factory=list)


# --------------------------------------------------------------------------- metrics


def step_metrics(rec: StepRecord, n_workers: int, workload: Workload) -> StepMetrics:
    """The simulator's per-step metrics over measured times. Step time: the makespan plus
    the trace's non-rollout timing when the workload came from a trace that has it (no
    training runs live)."""
    makespan = rec.makespan_s
    reqs = rec.requests[: rec.n_requests]
    done = [r for r in reqs if r.finish_s is not None and r.finish_s <= makespan + 1e-12]
    finish = np.array([r.finish_s for r in reqs if r.state == "finished"] or [], dtype=np.float64)
    finish = finish[finish <= makespan + 1e-12]
    busy = np.zeros(n_workers)
    for w, t0, t1, *_ in rec.segments:
        busy[w] += max(0.0, min(t1, makespan) - min(t0, makespan))
    gpus = np.ones(n_workers)
    lent = role_seconds(rec.roles, n_workers, makespan, LENT_ROLES)
    trainer = role_seconds(rec.roles, n_workers, makespan, {Role.TRAINER})
    t = workload.timing
    post = PostRollout(
        t.reward_s or 0.0, t.train_s or 0.0, t.weight_sync_s or 0.0, "trace" if t.train_s else "none"
    )
    tokens = sum(r.generated for r in done)
    return StepMetrics(
        step=rec.step,
        rollout_makespan_s=makespan,
        step_time_s=step_time(makespan, post, float(trainer.sum()), n_workers),
        output_tokens=int(tokens),
        throughput_tok_s=tokens / makespan if makespan > 0 else 0.0,
        tail_time_s=tail_time(finish, makespan),
        gpu_idle_fraction=idle_fraction(busy, lent, gpus, makespan),
        mean_accept_len=accept_len(
            np.array([r.spec_tokens for r in rec.requests]), np.array([r.spec_iters for r in rec.requests])
        ),
    )


def policy_summary(run: LiveRun, n_workers: int, workload: Workload) -> PolicyEntry:
    """This policy's entry in run.json: the simulator's fields plus live's own."""
    steps = [step_metrics(r, n_workers, workload) for r in run.records if r.complete]
    counters: Counter[str] = Counter()
    for r in run.records:
        counters.update(r.counters)
    entry = policy_entry(
        steps,
        sim_wall_s=run.wall_s,
        events=int(sum(r.events for r in run.records)),
        counters=counters,
        params=run.params,
    )
    ov = run.overhead
    entry["approximated"] = dict(run.approximated)
    entry["overhead"] = {
        "engine_s": ov.engine_s,
        "policy_s": ov.policy_s,
        "bookkeeping_s": ov.bookkeeping_s,
        "fraction_of_engine": ov.fraction,
    }
    entry["wall_s"] = run.wall_s
    if run.worker_losses:
        entry["worker_losses"] = list(run.worker_losses)
    if run.reaction_s:
        react = np.asarray(run.reaction_s)
        entry["reaction_s"] = {
            "median": float(np.median(react)),
            "p99": float(np.quantile(react, 0.99)),
            "reports": float(react.size),
        }
    if run.error:
        entry["error"] = run.error
    return entry


# ----------------------------------------------------------------------------- trace


def _recordable(rec: StepRecord) -> list[LiveRequest]:
    """Finished requests of whole groups (a partial step keeps its complete groups, so the
    trace still has equal group sizes)."""
    reqs = rec.requests[: rec.n_requests]
    if rec.complete:
        return [r for r in reqs if r.state == "finished" and r.generated > 0]
    groups: dict[int, list[LiveRequest]] = {}
    for r in reqs:
        groups.setdefault(r.spec_in.prompt_id, []).append(r)
    return [
        r for rs in groups.values() if all(x.state == "finished" and x.generated > 0 for x in rs) for r in rs
    ]


def _acceptance(
    runs: list[LiveRun], base: list[tuple[int, list[LiveRequest]]], offline: bool
) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(accept_<method>, draft_fill_<method>, draft_hit_<method>) per recorded row (units:
    live.acceptance)."""
    by_key: dict[tuple[int, int, int], list[LiveRequest]] = {}
    for run in runs:
        for rec in run.records:
            for r in rec.requests:
                by_key.setdefault((rec.step, r.spec_in.prompt_id, r.spec_in.sample), []).append(r)
    flat = [(step, r) for step, rs in base for r in rs]
    methods = sorted({m for rs in by_key.values() for r in rs for m in r.by_method})
    if offline:
        methods = sorted({*methods, *MODEL_FREE})
    out: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for m in methods:
        vals = np.full(len(flat), np.nan)
        fill = np.full(len(flat), np.nan)
        hit = np.full(len(flat), np.nan)
        gammas = []
        for i, (step, r) in enumerate(flat):
            stats = [
                x.by_method[m]
                for x in by_key[(step, r.spec_in.prompt_id, r.spec_in.sample)]
                if m in x.by_method
            ]
            it = sum(s.iterations for s in stats)
            if it:
                tok = sum(s.tokens for s in stats)
                gamma = sum(s.gamma_sum for s in stats) / it
                gammas.append(gamma)
                vals[i] = fit_alpha(tok, it, gamma)
                fill[i] = min(1.0, sum(s.drafted for s in stats) / max(1, sum(s.gamma_sum for s in stats)))
                hit[i] = sum(s.hits for s in stats) / it
        missing = np.isnan(vals)
        if missing.any() and m in MODEL_FREE:
            gamma = round(float(np.mean(gammas))) if gammas else DEFAULT_GAMMA
            for i in map(int, np.flatnonzero(missing)):
                step, r = flat[i]
                sibs = [(s.spec_in.prompt, s.tokens) for s in _siblings(base, step, r)]
                tok, it, drafted, hits = replay_model_free(m, r.spec_in.prompt, r.tokens, sibs, gamma)
                vals[i] = fit_alpha(tok, it, gamma)
                fill[i] = min(1.0, drafted / max(1, gamma * it))
                hit[i] = hits / max(1, it)
        elif missing.any():
            vals[missing] = float(np.nanmean(vals)) if (~missing).any() else 0.0
            fill[missing] = float(np.nanmean(fill)) if (~missing).any() else 1.0
            hit[missing] = float(np.nanmean(hit)) if (~missing).any() else 1.0
        out[m] = (vals.astype(np.float32), fill.astype(np.float32), hit.astype(np.float32))
    return out


def _siblings(base: list[tuple[int, list[LiveRequest]]], step: int, r: LiveRequest) -> list[LiveRequest]:
    for s, rs in base:
        if s == step:
            return [x for x in rs if x.spec_in.prompt_id == r.spec_in.prompt_id and x is not r]
    return []


def trace_table(
    runs: list[LiveRun], workload: Workload, *, offline_acceptance: bool = True
) -> tuple[pd.DataFrame, dict[str, pa.Array]]:
    """Rows of the first policy's run (the recorded outputs) with acceptance from all runs."""
    first = runs[0]
    epochs = {s.step: s.epoch for s in workload.steps}
    base = [(rec.step, _recordable(rec)) for rec in first.records]  # recorded requests per step
    rows = [(step, r) for step, rs in base for r in rs]
    df = pd.DataFrame(
        {
            "step": np.array([s for s, _ in rows], np.int32),
            "prompt_id": np.array([r.spec_in.prompt_id for _, r in rows], np.int64),
            "sample": np.array([r.spec_in.sample for _, r in rows], np.int32),
            "prompt_len": np.array([r.prompt_len for _, r in rows], np.int32),
            "response_len": np.array([r.generated for _, r in rows], np.int32),
            "max_tokens": np.array([max(r.spec_in.max_tokens, r.generated) for _, r in rows], np.int32),
            "finish_reason": [r.finish_reason or "length" for _, r in rows],
            "epoch": np.array([epochs.get(s, 0) for s, _ in rows], np.int32),
            "worker": np.array([-1 if r.worker is None else r.worker for _, r in rows], np.int32),
            "submit_s": np.array([r.submit_s if r.submit_s is not None else np.nan for _, r in rows]),
            "first_token_s": np.array(
                [r.first_token_s if r.first_token_s is not None else np.nan for _, r in rows]
            ),
            "finish_s": np.array([r.finish_s for _, r in rows], np.float64),
        }
    )
    for m, (vals, fill, hit) in _acceptance(runs, base, offline_acceptance).items():
        df[accept_column(m)] = vals
        df[f"{FILL_PREFIX}{m}"] = fill
        df[f"{HIT_PREFIX}{m}"] = hit
    lists = {
        "prompt_tokens": pa.array([list(r.spec_in.prompt) for _, r in rows], type=pa.list_(pa.int32())),
        "response_tokens": pa.array([r.tokens for _, r in rows], type=pa.list_(pa.int32())),
    }
    return df, lists


# meta_fields that are TraceMeta fields (the others are notes)
_META_FIELDS = ("model", "hardware", "temperature", "seed", "model_config")


def write_recording(
    path: Path,
    runs: list[LiveRun],
    workload: Workload,
    meta_fields: dict[str, Any],
    *,
    offline_acceptance: bool = True,
) -> Path:
    df, lists = trace_table(runs, workload, offline_acceptance=offline_acceptance)
    if not len(df):
        raise ValueError("no complete group of requests finished")
    meta = TraceMeta(
        model=str(meta_fields.get("model", "unknown")),
        hardware=str(meta_fields.get("hardware", "cpu")),
        temperature=float(meta_fields.get("temperature", 1.0)),
        group_size=workload.group_size,
        preset=None,
        seed=meta_fields.get("seed"),
        source="live",
        model_config=meta_fields.get("model_config"),
        timing=workload.timing,
        notes={
            **{k: v for k, v in meta_fields.items() if k not in _META_FIELDS},
            "recorded_policy": runs[0].name,
            "acceptance": "accept_<method>: per-token probability fitted to the observed tokens per "
            "speculative iteration (sim/acceptance.py model); model-free methods a policy did not run "
            "are replayed offline over response_tokens (exact under exact-match verification)",
            "workload": workload.source,
        },
    )
    return write_trace(path, df, meta, lists)


# ------------------------------------------------------------------------ run directory


def requests_frame(run: LiveRun) -> pd.DataFrame:
    """One row per request; its Fastest-of-N replicas' counters are added to it (as the
    simulator's requests table does)."""
    frames = []
    for rec in run.records:
        rs = rec.requests[: rec.n_requests]
        extra = {
            k: np.zeros(len(rs), np.int64)
            for k in ("dispatches", "drafted", "accepted", "spec_iters", "replicas")
        }
        for r in rec.requests[rec.n_requests :]:
            for k in ("dispatches", "drafted", "accepted", "spec_iters"):
                extra[k][r.origin] += getattr(r, k)
            extra["replicas"][r.origin] += 1
        frames.append(
            pd.DataFrame(
                {
                    "policy": run.name,
                    "step": np.int32(rec.step),
                    "request": np.array([r.id for r in rs], np.int32),
                    "prompt_id": np.array([r.spec_in.prompt_id for r in rs], np.int64),
                    "sample": np.array([r.spec_in.sample for r in rs], np.int32),
                    "worker": np.array([-1 if r.worker is None else r.worker for r in rs], np.int32),
                    "prompt_len": np.array([r.prompt_len for r in rs], np.int64),
                    "response_len": np.array([r.generated for r in rs], np.int64),
                    "finish_s": np.array([np.nan if r.finish_s is None else r.finish_s for r in rs]),
                    "preemptions": np.zeros(len(rs), np.int32),
                    "dispatches": np.array([r.dispatches for r in rs], np.int32)
                    + extra["dispatches"].astype(np.int32),
                    "drafted": np.array([r.drafted for r in rs], np.int64) + extra["drafted"],
                    "accepted": np.array([r.accepted for r in rs], np.int64) + extra["accepted"],
                    "spec_iters": np.array([r.spec_iters for r in rs], np.int64) + extra["spec_iters"],
                    "replicas": extra["replicas"].astype(np.int32),
                    "start_s": _earliest(rec, "start_s"),
                    "first_token_s": _earliest(rec, "first_token_s"),
                }
            )
        )
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _earliest(rec: StepRecord, attr: str) -> np.ndarray:
    """Per request: the earliest `attr` time of it and its Fastest-of-N replicas (NaN: none)."""
    out = np.full(rec.n_requests, np.inf)
    for r in rec.requests:
        t = getattr(r, attr)
        if t is not None and r.origin < rec.n_requests:
            out[r.origin] = min(out[r.origin], t)
    out[np.isinf(out)] = np.nan
    return out


def timeline_frame(run: LiveRun) -> pd.DataFrame:
    """The executor's segments; `replicas` null (not recorded live)."""
    frames = [
        pd.DataFrame(rec.segments, columns=LIVE_SEGMENT_COLUMNS).assign(
            replicas=pd.array([pd.NA] * len(rec.segments), dtype="Int32"),
            **dict.fromkeys(PHASE_COLUMNS, np.nan),
            policy=run.name,
            step=rec.step,
        )
        for rec in run.records
        if rec.segments
    ]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def iterations_frame(run: LiveRun) -> pd.DataFrame:
    """One row per engine iteration (columns: traces.run_format.ITERATIONS), for checking
    a cost profile against the iterations a live run really ran (bench/bench_live.py)."""
    frames = [
        pd.DataFrame(rec.iterations, columns=ITERATION_COLUMNS).assign(policy=run.name, step=rec.step)
        for rec in run.records
        if rec.iterations
    ]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def roles_frame(run: LiveRun) -> pd.DataFrame:
    frames = [
        pd.DataFrame(rec.roles, columns=ROLE_CHANGE_COLUMNS).assign(policy=run.name, step=rec.step)
        for rec in run.records
        if rec.roles
    ]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def run_document(
    runs: list[LiveRun],
    workload: Workload,
    *,
    trace_path: Path | None,
    trace_meta: dict[str, Any] | None,
    n_workers: int,
    seed: int,
    cluster_label: str,
    provenance: dict[str, Any],
) -> RunDoc:
    """run.json (traces/run_format.py RunDoc). `provenance`: the live fields (mode, backend,
    model, cost_model, engine, ...) the caller knows."""
    approximated: Counter[str] = Counter()
    for run in runs:
        approximated.update(run.approximated)
    prov = {
        **command_provenance(),
        "source": "live",
        "trace_meta": trace_meta or {},
        "steps": [s.step for s in workload.steps],
        **provenance,
    }
    return {
        "format_version": FORMAT_VERSION,
        "trace": str(trace_path) if trace_path else "",
        "cluster": cluster_label,
        "seed": seed,
        "policies": {run.name: policy_summary(run, n_workers, workload) for run in runs},
        "approximated": dict(approximated),
        "provenance": cast(Provenance, prov),
    }


def write_run_dir(out: Path, doc: RunDoc, runs: list[LiveRun]) -> None:
    """run.json + requests/timeline/roles/iterations Parquet (traces/run_format.py), all or
    nothing; the trace recorded into `out` (its default place) goes into the new directory."""
    recorded = Path(doc["trace"]) if doc["trace"] else None
    keep = [recorded.name] if recorded is not None and recorded.parent.resolve() == out.resolve() else []
    write_tables(
        out,
        doc,
        {
            "requests": [requests_frame(r) for r in runs],
            "timeline": [timeline_frame(r) for r in runs],
            "roles": [roles_frame(r) for r in runs],
            "iterations": [iterations_frame(r) for r in runs],
        },
        keep=keep,
    )
