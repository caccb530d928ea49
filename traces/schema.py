"""Trace schema v1: one Parquet row per response, provenance in the file metadata.

The schema is the seam between generators, live recordings and the simulator, so it is
declared once here (column names, Arrow types, meaning, unit) and `traces/SCHEMA.md`
is checked against it by a test.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, astuple, dataclass, field
from typing import Any

import pyarrow as pa

from simctl.policies.draft_methods import DraftMethod

SCHEMA_VERSION = 1
# Key of the JSON blob in the Parquet key/value metadata.
METADATA_KEY = b"simctl.trace"

FINISH_REASONS = ("stop", "length")


@dataclass(frozen=True)
class Column:
    """One trace column: Arrow type, unit and meaning (the text SCHEMA.md carries)."""

    name: str
    type: pa.DataType
    unit: str
    meaning: str
    required: bool = False


REQUIRED_COLUMNS: tuple[Column, ...] = (
    Column("step", pa.int32(), "-", "RL training step (iteration) the response belongs to", True),
    Column("prompt_id", pa.int64(), "-", "prompt identity = the GRPO group; stable across epochs", True),
    Column("sample", pa.int32(), "-", "index of the response within its group, 0..G-1", True),
    Column("prompt_len", pa.int32(), "tokens", "prompt length", True),
    Column("response_len", pa.int32(), "tokens", "generated tokens, 1..max_tokens", True),
    Column("max_tokens", pa.int32(), "tokens", "generation budget of the request", True),
    Column(
        "finish_reason",
        pa.string(),
        "-",
        "'stop' (EOS before the budget) or 'length' (clipped at max_tokens)",
        True,
    ),
)

OPTIONAL_COLUMNS: tuple[Column, ...] = (
    Column("epoch", pa.int32(), "-", "pass over the prompt set; the same prompt recurs once per epoch"),
    Column("reward", pa.float32(), "-", "scalar reward of the response (verifier/reward model)"),
    Column("prompt_tokens", pa.list_(pa.int32()), "token ids", "prompt token ids"),
    Column(
        "response_tokens",
        pa.list_(pa.int32()),
        "token ids",
        "generated token ids (length == response_len); enables exact replay of model-free drafters",
    ),
    Column("worker", pa.int32(), "-", "live runs: rollout worker that served the request"),
    Column("submit_s", pa.float64(), "s", "live runs: submission time, from step start"),
    Column("first_token_s", pa.float64(), "s", "live runs: first generated token, from step start"),
    Column("finish_s", pa.float64(), "s", "live runs: completion time, from step start"),
)

# Per-draft-method acceptance: `accept_<method>` is the per-token probability that a
# drafted token is accepted (mean over the response); `accept_<method>_buckets` optionally
# refines it by response position in buckets of `accept_bucket_tokens` tokens.
ACCEPT_PREFIX = "accept_"
BUCKET_SUFFIX = "_buckets"
METHOD_RE = re.compile(r"^[a-z][a-z0-9_]*$")
# Draft methods the generators emit; others are allowed if they match METHOD_RE.
# Every drafting method, from the one list (policies/draft_methods.py).
KNOWN_METHODS: dict[str, str] = {m.value: m.description for m in DraftMethod}


# `draft_fill_<method>`: fraction of the gamma draft slots the drafter actually filled
# (model-free drafters propose nothing when no n-gram matches); verification costs only the
# filled slots. Absent means 1.
FILL_PREFIX = "draft_fill_"
# `draft_hit_<method>`: fraction of the request's verify iterations in which the drafter
# proposed anything; an iteration in which no request of the batch drafted is a plain decode
# step. Absent means 1.
HIT_PREFIX = "draft_hit_"


def fill_column(method: str) -> str:
    return f"{FILL_PREFIX}{method}"


def hit_column(method: str) -> str:
    return f"{HIT_PREFIX}{method}"


def accept_column(method: str) -> str:
    return f"{ACCEPT_PREFIX}{method}"


def bucket_column(method: str) -> str:
    return f"{ACCEPT_PREFIX}{method}{BUCKET_SUFFIX}"


def acceptance_methods(column_names: list[str]) -> list[str]:
    """Draft methods with a scalar acceptance column, in column order."""
    out = []
    for name in column_names:
        if name.startswith(ACCEPT_PREFIX) and not name.endswith(BUCKET_SUFFIX):
            out.append(name[len(ACCEPT_PREFIX) :])
    return out


def column_type(name: str) -> pa.DataType | None:
    """Arrow type a column must have, or None for a column the schema does not know."""
    for col in REQUIRED_COLUMNS + OPTIONAL_COLUMNS:
        if col.name == name:
            return col.type
    if name.startswith((FILL_PREFIX, HIT_PREFIX)):
        return pa.float32()
    if name.startswith(ACCEPT_PREFIX):
        if name.endswith(BUCKET_SUFFIX):
            return pa.list_(pa.float32())
        return pa.float32()
    return None


@dataclass
class StepTiming:
    """Non-rollout time of one RL step, used for end-to-end step time."""

    reward_s: float | None = None
    train_s: float | None = None
    weight_sync_s: float | None = None


@dataclass
class TraceMeta:
    """File-level provenance. Every generated trace names its preset and seed."""

    schema_version: int = SCHEMA_VERSION
    model: str = "unknown"
    hardware: str = "unknown"
    temperature: float = 1.0
    group_size: int = 1
    preset: str | None = None
    seed: int | None = None
    source: str = "generated"  # generated | live | converted
    accept_bucket_tokens: int | None = None
    # Cluster spec of the paper's layout (traces/layouts.py), scaled with the trace; `simctl
    # replay` uses it when no --cluster is given. None: unknown or not expressible.
    cluster: str | None = None
    # Default per-step timing, and per-step overrides keyed by step number.
    timing: StepTiming = field(default_factory=StepTiming)
    step_timing: dict[int, StepTiming] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)
    # A model outside the simulator's catalogue: the fields of its HF config.json that
    # price it (sim/model_config.py), `model` then being its name. None: `model` is a
    # catalogue name. (Left out of the file when None, so older readers see no change.)
    model_config: dict[str, Any] | None = None

    def to_json(self) -> str:
        d = asdict(self)
        d["step_timing"] = {str(k): v for k, v in d["step_timing"].items()}
        if d["model_config"] is None:
            del d["model_config"]
        return json.dumps(d, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TraceMeta:
        d = json.loads(text)
        if not isinstance(d, dict):
            raise ValueError("trace metadata is not a JSON object")
        for key in ("timing", "step_timing", "notes"):
            if d.get(key) is not None and not isinstance(d[key], dict):
                raise ValueError(f"field {key!r} is not a JSON object")
        d["timing"] = _step_timing(d.get("timing") or {}, "timing")
        d["step_timing"] = {
            int(k): _step_timing(v, f"step_timing.{k}") for k, v in (d.get("step_timing") or {}).items()
        }
        d["notes"] = d.get("notes") or {}
        known = {f for f in cls.__dataclass_fields__}
        extra = {k: d.pop(k) for k in list(d) if k not in known}
        meta = cls(**d)
        meta.notes.update(extra)
        return meta

    def timing_for(self, step: int) -> StepTiming:
        """The step's timing: its override's fields where it gives them, `timing`'s for
        the rest (an override of the reward alone keeps the default training and sync)."""
        own = self.step_timing.get(step)
        if own is None:
            return self.timing
        return StepTiming(
            *(o if o is not None else d for o, d in zip(astuple(own), astuple(self.timing), strict=True))
        )


def _step_timing(value: Any, key: str) -> StepTiming:
    """A StepTiming from metadata field `key` (ValueError naming the field otherwise)."""
    if not isinstance(value, dict):
        raise ValueError(f"field {key!r} is not a JSON object")
    known = set(StepTiming.__dataclass_fields__)
    unknown = sorted(set(value) - known)
    if unknown:
        raise ValueError(f"field {key!r} has unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})")
    return StepTiming(**value)
