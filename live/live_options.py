"""`simctl live`'s options, grouped by what they configure: the workload, the engines and
the output files. The click command builds one `LiveOptions` from its parameters and hands
it on, instead of two dozen loose arguments."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from simctl.traces.cli_options import WorkerFault


@dataclass(frozen=True)
class WorkloadOptions:
    """What to generate: prompts (a file or the bundled ones) or a trace's workload."""

    prompts_path: Path | None = None
    trace_path: Path | None = None
    steps_text: str | None = None  # prompts: number of steps; trace: N or A:B
    prompts_per_step: int | None = None
    group_size: int = 4
    max_tokens: int = 256
    trace_scale: float = 1.0  # trace lengths x this on this machine (>= 1 token each)
    trace_requests: int | None = None  # first N requests of each step (whole groups)


@dataclass(frozen=True)
class EngineOptions:
    """Which engines run it, and how."""

    backend: str = "torch"
    model: str = "smollm2"
    draft_model: str | None = None
    device: str = "cpu"
    threads: int = 1
    seed: int = 0
    temperature: float = 1.0
    max_num_seqs: int = 256
    kv_budget_gib: float | None = None  # None: models.DEFAULT_KV_BUDGET_GIB
    use_ray: bool = False
    ray_address: str | None = None
    lockstep: bool = False  # step engines one at a time in virtual-clock order (deterministic)


@dataclass(frozen=True)
class OutputOptions:
    """Where the results go (all optional: the trace has a default path)."""

    record_path: Path | None = None
    json_path: Path | None = None
    out: Path | None = None
    chrome_trace: Path | None = None  # Chrome/Perfetto trace of the worker timeline


@dataclass(frozen=True)
class LiveOptions:
    policies: tuple[str, ...]
    workers: int
    profile: Path | None
    fail_workers: tuple[WorkerFault, ...]
    workload: WorkloadOptions
    engine: EngineOptions
    output: OutputOptions

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> LiveOptions:
        """From the click command's parameters (named as its options' destinations)."""

        def pick(group: type) -> dict[str, Any]:
            return {f.name: params[f.name] for f in fields(group)}

        return cls(
            policies=tuple(params["policies"]),
            workers=params["workers"],
            profile=params["profile"],
            fail_workers=tuple(params["fail_workers"]),
            workload=WorkloadOptions(**pick(WorkloadOptions)),
            engine=EngineOptions(**pick(EngineOptions)),
            output=OutputOptions(**pick(OutputOptions)),
        )
