"""Checks of the per-step numbers of run.json that the report shows.

run.json is JSON a person can edit (or a disk can damage): a negative, NaN, infinite or
string makespan, or one step listed twice, would otherwise reach the page as a silently
wrong number (the headline kept the stored mean while the per-step table showed the
edited steps). Every value the report reads is checked here, and the first bad one is
refused in one line naming the file, the field path and the value, as `read_run_doc`
refuses invalid JSON or an unknown format_version: the caller treats both alike (fatal
for a lone run, left out with a warning beside usable runs).

Only what the report uses is checked; fields it never reads (counters, params, ...)
are left to the tools that read them.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from simctl.policies.params import INT64_MAX
from simctl.traces.run_format import RunFormatError

# Metrics of a step: (key, whether it must be present, whether null is allowed, upper bound)
STEP_FIELDS: tuple[tuple[str, bool, bool, float], ...] = (
    ("rollout_makespan_s", True, False, math.inf),
    ("step_time_s", False, False, math.inf),
    ("output_tokens", False, False, math.inf),
    ("throughput_tok_s", False, False, math.inf),
    ("tail_time_s", False, False, math.inf),
    ("gpu_idle_fraction", False, False, 1.0 + 1e-9),  # a fraction (1e-9: rounding)
    ("mean_accept_len", False, True, math.inf),  # null: no speculation
)
PART_FIELDS = ("rollout_s", "reward_s", "train_s", "weight_sync_s")
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_:=/.,+\-]+")
_SHOWN_CHARS = 60


def shown_value(value: Any) -> str:
    """A value as run.json spells it (NaN, Infinity, "text"), cut to one short line."""
    try:
        text = json.dumps(value, ensure_ascii=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 1] + "…"


def field_path(policy: str, *rest: str) -> str:
    """`policies.verl.steps[1].rollout_makespan_s`; a policy name that is not a plain word
    is quoted (JSON escapes), so a control character never reaches the terminal raw."""
    key = f".{policy}" if _PLAIN_KEY.fullmatch(policy) else f"[{shown_value(policy)}]"
    return "policies" + key + "".join(rest)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_number(doc_path: Path, where: str, value: Any, upper: float) -> None:
    if not _is_number(value):
        raise RunFormatError(f"{doc_path}: {where} is {shown_value(value)} (expected a number)")
    if isinstance(value, float) and not math.isfinite(value):
        raise RunFormatError(f"{doc_path}: {where} is {shown_value(value)} (expected a finite number)")
    if isinstance(value, int) and value > INT64_MAX:  # (pandas holds numbers in 64 bits)
        raise RunFormatError(f"{doc_path}: {where} is {shown_value(value)} (expected a number below 2^63)")
    if value < 0 or value > upper:
        bound = ">= 0" if math.isinf(upper) else f"between 0 and {upper:g}"
        raise RunFormatError(f"{doc_path}: {where} is {shown_value(value)} (expected a number {bound})")


def _check_step_number(doc_path: Path, where: str, value: Any, seen: dict[int, int], i: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise RunFormatError(f"{doc_path}: {where} is {shown_value(value)} (expected an integer step)")
    if not 0 <= value <= INT64_MAX:
        raise RunFormatError(f"{doc_path}: {where} is {shown_value(value)} (expected a step in 0..2^63-1)")
    if value in seen:
        first = seen[value]
        raise RunFormatError(
            f"{doc_path}: {where} is {value}, also the step of steps[{first}] (listed twice)"
        )
    seen[value] = i


def check_step(doc_path: Path, policy: str, i: int, entry: Any, seen: dict[int, int]) -> None:
    """One entry of a policy's `steps`: its step number and every metric the report reads."""
    at = f".steps[{i}]"
    if not isinstance(entry, dict):
        raise RunFormatError(
            f"{doc_path}: {field_path(policy, at)} is {shown_value(entry)} (expected an object)"
        )
    if "step" not in entry:
        raise RunFormatError(f"{doc_path}: {field_path(policy, at)} has no 'step'")
    _check_step_number(doc_path, field_path(policy, at, ".step"), entry["step"], seen, i)
    for key, required, nullable, upper in STEP_FIELDS:
        if key not in entry:
            if required:
                raise RunFormatError(f"{doc_path}: {field_path(policy, at)} has no '{key}'")
            continue
        if entry[key] is None and nullable:
            continue
        _check_number(doc_path, field_path(policy, at, f".{key}"), entry[key], upper)
    parts = entry.get("parts")
    if parts is None:
        return
    if not isinstance(parts, dict):
        where = field_path(policy, at, ".parts")
        raise RunFormatError(f"{doc_path}: {where} is {shown_value(parts)} (expected an object)")
    for key in PART_FIELDS:
        if key in parts:
            _check_number(doc_path, field_path(policy, at, f".parts.{key}"), parts[key], math.inf)


def check_policies(doc_path: Path, policies: object) -> None:
    """Every policy entry of run.json: an object whose `steps` (absent or [] for a policy
    that recorded none, which the report leaves out with a note) is a list of valid steps
    with distinct step numbers. Raises RunFormatError (one line) at the first bad value."""
    if not isinstance(policies, dict):  # (read_run_doc has refused this already)
        raise RunFormatError(f"{doc_path}: no 'policies' object (not a run document)")
    for policy, entry in policies.items():
        if not isinstance(entry, dict):
            raise RunFormatError(
                f"{doc_path}: {field_path(policy)} is {shown_value(entry)} (expected an object)"
            )
        steps = entry.get("steps")
        if steps is None:
            continue
        if not isinstance(steps, list):
            where = field_path(policy, ".steps")
            raise RunFormatError(f"{doc_path}: {where} is {shown_value(steps)} (expected a list of steps)")
        seen: dict[int, int] = {}
        for i, step in enumerate(steps):
            check_step(doc_path, policy, i, step, seen)
