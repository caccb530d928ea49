"""Importers for the rollout dumps RL frameworks write (`simctl trace import`).

One module per format reads that framework's files into rows (`common.RowSet`), following
the upstream code that writes them (each module's docstring names the repository, file and
commit); `common.build_trace` turns rows into a schema-v1 trace the same way for all.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from simctl.traces.importers import areal, nemo_rl, roll, slime, table, verl
from simctl.traces.importers.common import FormatFacts, Imported, ImportOptions, RowSet, build_trace

Reader = Callable[[tuple[Path, ...], ImportOptions], tuple[RowSet, FormatFacts]]

#: Format name -> (reader, the upstream code it follows).
FORMATS: dict[str, tuple[Reader, str]] = {
    "verl": (verl.read, verl.UPSTREAM),
    "areal": (areal.read, areal.UPSTREAM),
    "nemo-rl": (nemo_rl.read, nemo_rl.UPSTREAM),
    "roll": (roll.read, roll.UPSTREAM),
    "slime": (slime.read, slime.UPSTREAM),
    "table": (table.read, table.UPSTREAM),
}


def import_dump(fmt: str, paths: tuple[Path, ...], opts: ImportOptions) -> Imported:
    """Read a dump of format `fmt` and build its trace (checked, not yet written)."""
    reader, upstream = FORMATS[fmt]
    rows, facts = reader(paths, opts)
    return build_trace(rows, opts, facts, fmt, upstream)
