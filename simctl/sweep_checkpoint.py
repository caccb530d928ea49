"""Checkpoints of a sweep point between its steps: a killed sweep resumes a long point from
its last checkpoint, not from its first step.

A point runs all its steps on one worker, and in the six-policy dapo study composite's
200 steps take half an hour; a crash, a Ctrl-C or a lost Ray node at minute 29 used to cost
all of it. Resuming mid-point is exact: what one step hands the next is a
`simctl.sim.replay.ReplayState` (the policy object, the run so far, the simulator's
carry-over), and every step's simulation is seeded afresh from the setup, so a run resumed
from a checkpoint equals the uninterrupted one (tests/test_sweep_checkpoint.py checks
every registered policy).

Layout, beside the point's run directory `DIR/points/<id>/`, in `DIR/points/<id>.partial/`:
- `step-NNNNN.pkl`: one replayed step's metrics and tables, written once;
- `state.pkl`: a JSON header line (format, the point, the code's fingerprint) and then the
  pickled state without its tables; replaced atomically, after the step files it counts.
A checkpoint is written once `every_s` seconds have passed since the point started or
last wrote one (points shorter than that never write one), and removed once the point's
run directory is written.

A checkpoint is used only where its header names this very point (with the SHA-256 of
its input files' contents, as its run.json will: simctl.sweep_runner.checkpoint_key) and
the same simulator,
policy and trace code (a hash of their sources), and only for registered policies: a
plug-in's code is the user's and may change between the kill and the rerun. Anything else
(another point, changed code, a torn or unreadable file) discards it and the point starts
over. Checkpoints are pickles: like any pickle they must come from a sweep directory you
wrote yourself.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import pickle
import shutil
import time
from contextlib import suppress
from functools import cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simctl.traces.atomic import atomic_write, remove_stale_temporaries

if TYPE_CHECKING:  # (the simulator is imported where a checkpoint is read: the CLI stays light)
    from simctl.sim.replay import ReplayState

FORMAT = "simctl-point-checkpoint/1"
STATE = "state.pkl"
#: Seconds between two checkpoints of a point (the first comes that long after its start).
CHECKPOINT_S = 60.0
_TABLES = ("steps", "requests", "timeline", "roles")


def checkpoint_dir(run_dir: Path) -> Path:
    """Where the checkpoint of the point whose run directory is `run_dir` lives."""
    return run_dir.with_name(run_dir.name + ".partial")


@cache
def code_fingerprint() -> str:
    """A hash of the sources a replay runs (the simulator, the policies, the trace layer and
    this package): a checkpoint taken with other code is not resumed."""
    import simctl.policies
    import simctl.sim
    import simctl.traces

    digest = hashlib.sha256()
    # (this package's folder from this file: importing `simctl` here would close an import
    # cycle through the Python API, which runs sweeps)
    roots = [("simctl", Path(__file__).parent)]
    layers = (simctl.sim, simctl.policies, simctl.traces)
    roots += [(m.__name__, Path(str(m.__file__)).parent) for m in layers]
    for name, root in roots:
        for path in sorted(root.rglob("*.py")):
            digest.update(f"{name}/{path.relative_to(root).as_posix()}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _step_file(folder: Path, index: int) -> Path:
    return folder / f"step-{index:05d}.pkl"


class PointCheckpoint:
    """The checkpoint of one point: `load` what an earlier run left, `save` as `run_policy`'s
    `after_step` (every `every_s` seconds), `discard` once the point is complete."""

    def __init__(self, run_dir: Path, point: dict[str, Any], every_s: float = CHECKPOINT_S) -> None:
        self.folder = checkpoint_dir(Path(run_dir))
        self.header = {"format": FORMAT, "point": point, "code": code_fingerprint()}
        self.every_s = every_s
        self._last = time.monotonic()
        self._written = 0  # steps whose file this process wrote or found

    # ------------------------------------------------------------------------ saving
    def save(self, state: ReplayState) -> None:
        """Checkpoint `state` if `every_s` has passed since the last one. A checkpoint that
        cannot be written (a full disk, a state that does not pickle) only ends this
        point's checkpoints: the point itself goes on."""
        if time.monotonic() - self._last < self.every_s:
            return
        try:
            self.write(state)
        except Exception:
            self.every_s = math.inf
            self.discard()
        self._last = time.monotonic()

    def write(self, state: ReplayState) -> None:
        """The step files not written yet, then the state that counts them."""
        run = state.run
        for index in range(self._written, state.done):
            tables = tuple(getattr(run, name)[index] for name in _TABLES)
            atomic_write(_step_file(self.folder, index), partial(_dump, obj=tables))
        self._written = state.done
        bare = dataclasses.replace(run, steps=[], requests=[], timeline=[], roles=[])
        payload = pickle.dumps(dataclasses.replace(state, run=bare), protocol=pickle.HIGHEST_PROTOCOL)
        head = json.dumps(self.header, sort_keys=True).encode() + b"\n"
        atomic_write(self.folder / STATE, lambda tmp: tmp.write_bytes(head + payload))

    # ----------------------------------------------------------------------- loading
    def load(self) -> ReplayState | None:
        """The state an earlier run of this point left, its tables put back; None (and the
        checkpoint discarded) when there is none this run may use."""
        path = self.folder / STATE
        remove_stale_temporaries(path)
        if self.folder.is_symlink() or not path.is_file():  # (never read through a link)
            if self.folder.exists():
                self.discard()
            return None
        try:
            state = self._read(path)
        except Exception:  # another point, other code, a torn or unreadable file: start over
            state = None
        if state is None:
            self.discard()
            return None
        self._written = state.done
        return state

    def _read(self, path: Path) -> ReplayState | None:
        from simctl.sim.replay import PolicyRun, ReplayState

        with path.open("rb") as f:
            head = json.loads(f.readline())
            if head != json.loads(json.dumps(self.header, sort_keys=True)):
                return None
            state = pickle.load(f)
        if not isinstance(state, ReplayState) or not isinstance(state.run, PolicyRun):
            return None
        for index in range(state.done):
            step = _step_file(self.folder, index)
            remove_stale_temporaries(step)
            with step.open("rb") as f:
                tables = pickle.load(f)
            for name, table in zip(_TABLES, tables, strict=True):
                getattr(state.run, name).append(table)
        return state

    def discard(self) -> None:
        """Remove the checkpoint (whatever sits at its path: a file or a link there is not
        ours to write through)."""
        if self.folder.is_symlink() or self.folder.is_file():
            with suppress(OSError):
                self.folder.unlink()
        else:
            shutil.rmtree(self.folder, ignore_errors=True)
        self._written = 0


def _dump(path: Path, obj: object) -> None:
    with path.open("wb") as f:
        pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
