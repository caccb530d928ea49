"""The sweep's tidy table, read back from the points' run directories.

`DIR/sweep.parquet`: one row per point, in the spec's order: every axis value (trace,
steps, cluster, gpus, model, max_num_seqs, policy, one `param_<name>` column per parameter
the spec sets, seed; `model` is the target replayed, the trace's own unless the spec's
`models` names one; `max_num_seqs` the engine's batch limit per worker; `cost_model`
"roofline" or the measured profile the spec names) and
every metric (means over the point's steps; `speedup_vs_verl` is the veRL point's mean
makespan over this one's, on the same axes and seed). `DIR/sweep_steps.parquet`: the same metrics
per point and step (the report's bands). Both are written atomically. Wall and CPU time
columns (`TIME_COLUMNS`) are the only ones that differ between two runs of one sweep.
"""

from __future__ import annotations

import json
import math
from contextlib import suppress
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simctl.policies.params import INT64_MAX, INT64_MIN
from simctl.sweep_runner import POINT_KEY, STEPS_TABLE, TABLE, point_dir
from simctl.sweep_spec import SweepSpec
from simctl.traces.atomic import atomic_write
from simctl.traces.run_format import RUN_JSON

PARAM_PREFIX = "param_"
BASELINE = "verl"  # the policy `speedup_vs_verl` divides by
# what a point and its baseline share (the policy and its parameters aside)
PAIRED_ON = ["trace", "steps", "cluster", "model", "max_num_seqs", "cost_model", "seed"]
AXIS_COLUMNS = (
    "trace",
    "steps",
    "cluster",
    "gpus",
    "model",
    "max_num_seqs",
    "cost_model",
    "policy",
    "policy_spec",
    "seed",
)
METRICS = {
    "makespan_s": "mean rollout makespan (s)",
    "step_time_s": "mean step time (s)",
    "throughput_tok_s": "throughput (tokens/s)",
    "tail_s": "tail time (s)",
    "gpu_idle_fraction": "GPU idle fraction",
    "accept_len": "accept length (tokens/verify)",
    "gpu_seconds": "GPU-seconds (makespan x GPUs)",
}
TIME_COLUMNS = ("sim_cpu_s", "sim_wall_s")
_STEP_KEYS = {
    "makespan_s": "rollout_makespan_s",
    "step_time_s": "step_time_s",
    "throughput_tok_s": "throughput_tok_s",
    "tail_s": "tail_time_s",
    "gpu_idle_fraction": "gpu_idle_fraction",
    "accept_len": "mean_accept_len",
}


def _mean(values: list[Any]) -> float:
    nums = [float(v) for v in values if v is not None]
    return float(np.mean(nums)) if nums else math.nan


def _rows(spec: SweepSpec, out: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rows, step_rows = [], []
    for point in spec.points:
        doc = json.loads((point_dir(out, point) / RUN_JSON).read_text())
        entry = doc["policies"][point.policy_spec]
        gpus = int(doc["provenance"]["cluster"]["total_gpus"])
        steps = entry["steps"]
        axes = {
            "point_id": point.point_id,
            **{k: doc[POINT_KEY][k] for k in ("trace", "steps", "cluster")},
            "gpus": gpus,
            "model": str(doc["provenance"]["model"]),
            "max_num_seqs": int(doc["provenance"]["engine"]["max_num_seqs"]),
            "cost_model": str(doc["provenance"]["cost_model"]),
            "policy": point.policy,
            "policy_spec": point.policy_spec,
            **{PARAM_PREFIX + k: v for k, v in point.params},
            "seed": point.seed,
        }
        metrics = {m: _mean([s[key] for s in steps]) for m, key in _STEP_KEYS.items()}
        metrics["gpu_seconds"] = metrics["makespan_s"] * gpus
        metrics["n_steps"] = len(steps)
        times = {"sim_cpu_s": float(doc["sweep_cpu"]["sim_cpu_s"]), "sim_wall_s": float(entry["sim_wall_s"])}
        rows.append({**axes, **metrics, **times})
        for s in steps:
            values = {m: (math.nan if s[key] is None else float(s[key])) for m, key in _STEP_KEYS.items()}
            values["gpu_seconds"] = values["makespan_s"] * gpus
            step_rows.append({**axes, "step": int(s["step"]), **values})
    return rows, step_rows


def _param_column(values: list[Any]) -> pd.api.extensions.ExtensionArray | np.ndarray:
    """One dtype per parameter column: bool, integer, float, else text (None: not set).
    Integers beyond 64 bits (the spec refuses them; a point directory may still hold one)
    are tabled as text rather than failing once every point has run."""
    given = [v for v in values if v is not None]
    if given and all(isinstance(v, bool) for v in given):
        return pd.array(values, dtype="boolean")
    if given and all(isinstance(v, int) and not isinstance(v, bool) for v in given):
        if all(INT64_MIN <= v <= INT64_MAX for v in given):
            return pd.array(values, dtype="Int64")
        return pd.array([None if v is None else str(v) for v in values], dtype="string")
    if given and all(isinstance(v, int | float) and not isinstance(v, bool) for v in given):
        with suppress(OverflowError):  # (an integer beyond a float's range: text)
            return np.array([math.nan if v is None else float(v) for v in values])
    return pd.array([None if v is None else str(v) for v in values], dtype="string")


def _frame(rows: list[dict[str, Any]], params: list[str]) -> pd.DataFrame:
    """Columns in a fixed order: point id, axes with the parameters before the seed, the rest."""
    first = ["point_id", *AXIS_COLUMNS[:-1]]
    df = pd.DataFrame({c: [r[c] for r in rows] for c in first})
    for name in params:
        df[PARAM_PREFIX + name] = _param_column([r.get(PARAM_PREFIX + name) for r in rows])
    rest = [c for c in rows[0] if c not in first and not c.startswith(PARAM_PREFIX)] if rows else []
    for c in rest:
        df[c] = [r[c] for r in rows]
    return df


def add_speedup(df: pd.DataFrame, keys: list[str]) -> None:
    """`speedup_vs_verl`: the veRL point's makespan over this one's, paired on `keys` (the
    same requests, cluster, target, batch limit, costs and seed: a seed draws the same
    lengths and acceptance luck for both, so the ratio carries less sampling noise than a
    ratio of medians). NaN where the sweep has no such veRL point."""
    base = df[df["policy_spec"] == BASELINE].drop_duplicates(keys).set_index(keys)["makespan_s"]
    paired = df.join(base.rename("_baseline"), on=keys)["_baseline"]
    df["speedup_vs_verl"] = paired.to_numpy(dtype=float) / df["makespan_s"].to_numpy(dtype=float)


def sweep_tables(spec: SweepSpec, out: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per point, per point and step) from the points' run directories."""
    rows, step_rows = _rows(spec, out)
    table = _frame(rows, spec.params)
    steps = _frame(step_rows, spec.params)
    for df in (table, steps):
        df["seed"] = df["seed"].astype("int64")
        df["max_num_seqs"] = df["max_num_seqs"].astype("int64")
    table["n_steps"] = table["n_steps"].astype("int64")
    add_speedup(table, PAIRED_ON)
    add_speedup(steps, [*PAIRED_ON, "step"])
    return table, steps


def write_tables(table: pd.DataFrame, steps: pd.DataFrame, out: Path) -> None:
    atomic_write(out / TABLE, lambda tmp: table.to_parquet(tmp, index=False))
    atomic_write(out / STEPS_TABLE, lambda tmp: steps.to_parquet(tmp, index=False))


def write_outputs(spec: SweepSpec, out: Path, backend: str) -> tuple[pd.DataFrame, pd.DataFrame, Path]:
    """After a sweep ran: its tables written into `out` and its report page rendered
    (the command's and the Python API's last steps): (table, steps table, report index)."""
    from simctl.reports.sweep_page import build_sweep_report
    from simctl.sweep_runner import REPORT

    table, steps = sweep_tables(spec, out)
    write_tables(table, steps, out)
    index = build_sweep_report(table, steps, out / REPORT, {"spec": str(spec.path), "backend": backend})
    return table, steps, index
