"""Which of the step's requests sit on each worker (waiting or running).

The policies' view answers `worker_requests(w)` from this index in time proportional to
that worker's requests, rather than by scanning the step. The engine keeps it in step
with the request state: a request is placed when it is queued on a worker (assignment,
migration) and unplaced when it leaves it (dispatch end, migration, deferral,
cancellation). Fastest-of-N replica rows (ids >= the step's request count) are not
requests and are never listed.
"""

from __future__ import annotations


class Placement:
    def __init__(self, workers: int, n_requests: int) -> None:
        self._on: list[set[int]] = [set() for _ in range(workers)]
        self._n = n_requests

    def place(self, row: int, worker: int) -> None:
        if row < self._n:
            self._on[worker].add(row)

    def unplace(self, row: int, worker: int) -> None:
        if row < self._n:
            self._on[worker].discard(row)

    def on(self, worker: int) -> tuple[int, ...]:
        """The requests on `worker`, ascending."""
        return tuple(sorted(self._on[worker]))
