"""A running sweep point's progress, step by step, through a file beside its run directory.

A point of a long study runs for half an hour on one worker, and a progress bar that moved
only when whole points end would stand still that long. So each task appends every step
it has replayed to `DIR/points/<id>.steps` (one trace step per line, flushed), and the
driver reads what is new while it waits for points, and once more when a point ends,
before counting it done (the task wrote its last line before returning).

A file, not a queue: the driver needs the points' paths anyway (it builds the table from
their run directories), it works the same on the process pool and on Ray, and reading it
needs no call into Ray: a Ray queue actor polled by the driver made a SIGTERMed sweep leave
Ray's agents behind in about one run in six. Progress only: a line that cannot be written
or read changes nothing else, and the files go once their points are complete.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import IO

SUFFIX = ".steps"


def step_file(run_dir: Path) -> Path:
    """The progress file of the point whose run directory is `run_dir`."""
    return run_dir.with_name(run_dir.name + SUFFIX)


class StepLog:
    """The task's side: `step(n)` appends a line (never raises)."""

    def __init__(self, run_dir: Path) -> None:
        self._file: IO[str] | None = None
        with suppress(OSError):
            self._file = step_file(run_dir).open("w")  # (a rerun starts the file afresh)

    def step(self, step: int) -> None:
        if self._file is not None:
            with suppress(OSError, ValueError):
                self._file.write(f"{step}\n")
                self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            with suppress(OSError):
                self._file.close()


class StepWatch:
    """The driver's side: the steps each point's file holds that were not read yet."""

    def __init__(self, run_dirs: dict[str, Path]) -> None:
        self._paths = {pid: step_file(d) for pid, d in run_dirs.items()}
        self._read: dict[str, int] = {}  # point id -> bytes read (whole lines)

    def new_steps(self, point_ids: Iterable[str] | None = None) -> Iterator[tuple[str, int]]:
        """(point id, step) for each line written since the last call, of `point_ids`
        (default: every point still watched)."""
        for pid in list(self._paths) if point_ids is None else point_ids:
            path = self._paths.get(pid)
            if path is None:
                continue
            try:
                with path.open("rb") as f:
                    f.seek(self._read.get(pid, 0))
                    data = f.read()
            except OSError:  # not started yet, or gone
                continue
            end = data.rfind(b"\n") + 1  # a line being written is read next time
            if not end:
                continue
            self._read[pid] = self._read.get(pid, 0) + end
            for line in data[:end].split():
                with suppress(ValueError):
                    yield pid, int(line)

    def forget(self, point_id: str) -> None:
        """Stop watching a point that ended, and remove its file."""
        path = self._paths.pop(point_id, None)
        self._read.pop(point_id, None)
        if path is not None:
            with suppress(OSError):
                path.unlink()
