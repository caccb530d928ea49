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

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any

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


class SweepTally:
    """What a running sweep has done, for its progress bar: points, and their estimated
    work (`work`: point id -> cost, simctl.sweep_order.point_work), of which a running
    point has done its replayed steps' share by requests (`step_requests`: point id ->
    step -> requests). `running`: the run directories of the points to run, whose step
    files it reads. `progress(points done, points, work done, work)` after each point and
    each step read (and once at the start)."""

    def __init__(
        self,
        work: Mapping[str, float],
        step_requests: Mapping[str, Mapping[int, int]],
        running: Mapping[str, Path],
        progress: Callable[[int, int, float, float], None] | None,
    ) -> None:
        self.work, self.step_requests, self.progress = work, step_requests, progress
        self.total = sum(work.values())
        self.points = len(work) - len(running)  # complete already
        self.work_done = self.total - sum(work[p] for p in running)
        self.partial: dict[str, float] = {}  # running point -> work of its replayed steps
        self.failed: list[Mapping[str, Any]] = []
        self._ended: set[str] = set()
        self._watch = StepWatch(dict(running))
        self._lock = threading.Lock()  # (a watcher thread reads steps, the executor ends points)
        self._report()

    def _report(self) -> None:
        if self.progress:
            self.progress(
                self.points, len(self.work), self.work_done + sum(self.partial.values()), self.total
            )

    def _read_steps(self, point_ids: Iterable[str] | None = None) -> None:
        for point_id, step in self._watch.new_steps(point_ids):
            counts = self.step_requests.get(point_id)
            if point_id in self._ended or not counts or point_id not in self.work:
                continue
            cost = self.work[point_id]
            share = counts.get(step, 0) / max(1, sum(counts.values()))
            self.partial[point_id] = min(cost, self.partial.get(point_id, 0.0) + cost * share)
            self._report()

    def done(self, result: Mapping[str, Any]) -> None:
        """A point ended (`result`: its point_id, and its error or None): its last steps
        are read first (it wrote them before returning), and its step file removed."""
        point_id = result["point_id"]
        with self._lock:
            self._read_steps([point_id])
            self._watch.forget(point_id)
            self._ended.add(point_id)
            self.partial.pop(point_id, None)
            self.points += 1
            self.work_done += self.work[point_id]
            if result["error"]:
                self.failed.append(result)
            self._report()

    @contextmanager
    def watching(self, every_s: float | None) -> Iterator[None]:
        """Read the running points' steps every `every_s` seconds (None: never) on a
        thread of its own while the block runs: the executors wait for points in one
        blocking call (a Ray driver that polled in a loop was SIGTERMed inside Ray's calls
        more often, and more often aborted by Ray: simctl.ray_guard)."""
        stop = threading.Event()

        def watch() -> None:
            while every_s is not None and not stop.wait(every_s):
                with self._lock:
                    self._read_steps()

        thread = threading.Thread(target=watch, name="simctl-sweep-steps", daemon=True)
        if every_s is not None:
            thread.start()
        try:
            yield
        finally:
            stop.set()
            if thread.is_alive():
                thread.join()
