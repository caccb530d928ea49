"""A sweep on a Ray cluster whose nodes do not share the driver's files.

`simctl sweep --ray-address` joins a cluster the sweep did not start, and its nodes may not
see the driver's paths: the trace may be missing there, or be another file under the same
name, and a run directory written there would never reach the sweep directory. So on a
joined cluster:

- the trace goes through Ray's object store as well: the driver puts each trace file's
  bytes there once, with their SHA-256, and a task reads the file at the driver's path only
  when it is there with that digest (a shared file system); otherwise it writes the bytes
  it got to a cache file of its node, named by the digest, and reads that;
- so does a plug-in policy's file (`--plugin file.py:Class`), the same way: its source
  text, as the user wrote it (never a pickled object), loaded on the node from the cache
  copy where the node does not have the driver's file. A plug-in module
  (`--plugin pkg.module:Class`) is not sent: like simctl itself, it is installed on every
  node;
- a task writes into the sweep directory only when it sees it: the sweep's `sweep.json`
  there holds the token of this very run (`run_token`). Otherwise it builds the run
  directory in a temporary folder of its node and returns its files (`RunFiles`), which
  the driver writes into the sweep directory, all or nothing, as a task on its own node
  would have. Such a point keeps no checkpoint (a rerun may land on another node) and
  reports no step progress (the driver cannot read its node's files): it resumes, and
  moves the progress bar, as a whole point.

A run directory is flat (run.json and one parquet file per table), so its files travel as
a name -> bytes mapping, and the driver refuses a name that is not a plain file name.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from simctl.traces.atomic import atomic_write, replace_dir
from simctl.traces.plugins import plugin_file

#: A run directory's files as a task returns them: plain file name -> contents.
RunFiles = dict[str, bytes]

_CHUNK = 1 << 20
_DIGESTS: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256, per process


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes (hex), memoised per process while its size and
    modification time stay."""
    stat = os.stat(path)
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    got = _DIGESTS.get(key)
    if got is None:
        sha = hashlib.sha256()
        with open(path, "rb") as fh:
            while chunk := fh.read(_CHUNK):
                sha.update(chunk)
        got = _DIGESTS[key] = sha.hexdigest()
    return got


def trace_cache_dir() -> Path:
    """Where a node keeps the traces sent to it: a folder of the temporary directory, per
    user, made private (PermissionError, one line, where another user owns that name)."""
    path = Path(tempfile.gettempdir()) / f"simctl-sweep-traces-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    if path.is_symlink() or path.stat().st_uid != os.getuid():
        raise PermissionError(f"{path}: not this user's own folder; not keeping traces in it")
    return path


def local_trace(
    path: str, digest: str | None, fetch: Callable[[], bytes] | None, suffix: str = ".parquet"
) -> Path:
    """The file to read a task's trace (or plug-in file: `suffix` ".py") from on this node:
    the driver's `path` where it holds the bytes of `digest` (or no digest was given: a
    local sweep), else the cache file of the bytes the driver sent (`fetch` gets them from
    the object store, only when needed). FileNotFoundError, one line, with neither."""
    here = Path(path)
    if digest is None or (here.is_file() and file_digest(here) == digest):
        return here
    if fetch is None:
        raise FileNotFoundError(f"{path}: not on this node with the driver's contents, and not sent")
    cached = trace_cache_dir() / f"{digest}{suffix}"
    if cached.is_file() and file_digest(cached) == digest:
        return cached
    sent = fetch()
    got = hashlib.sha256(sent).hexdigest()
    if got != digest:
        raise ValueError(f"{path}: the bytes sent have SHA-256 {got[:12]}, not the driver's {digest[:12]}")
    atomic_write(cached, lambda tmp: tmp.write_bytes(sent))
    return cached


def local_policy_spec(policy_spec: str, digest: str | None, fetch: Callable[[], bytes] | None) -> str:
    """`policy_spec` with its plug-in file replaced by this node's copy (`local_trace`)
    where the node does not have the driver's."""
    path = plugin_file(policy_spec)
    if path is None or digest is None:
        return policy_spec
    here = local_trace(path, digest, fetch, ".py")
    return str(here) + policy_spec[len(path) :]


def sees_sweep_dir(run_dir: Path, manifest: str, token: str | None) -> bool:
    """Whether this node sees the driver's sweep directory (that of `run_dir`, a point's
    run directory in it): its manifest holds this run's `token` (None: a local sweep,
    which always does)."""
    if token is None:
        return True
    try:
        doc = json.loads((run_dir.parent.parent / manifest).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and doc.get("run_token") == token


def read_run_files(run_dir: Path) -> RunFiles:
    """The files of a run directory this task wrote, to send to the driver."""
    return {p.name: p.read_bytes() for p in sorted(run_dir.iterdir()) if p.is_file()}


def write_run_files(run_dir: Path, files: RunFiles) -> None:
    """Write a run directory a task sent, all or nothing (replacing what is there); every
    name must be a plain file name (ValueError otherwise, before anything is written)."""
    for name in files:
        if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
            raise ValueError(f"run directory sent with file name {name!r}: not a plain file name")

    def fill(tmp: Path) -> None:
        for name, data in files.items():
            (tmp / name).write_bytes(data)

    replace_dir(run_dir, fill)


def scratch_dir() -> tempfile.TemporaryDirectory[str]:
    """A task's own temporary folder on its node (run directory built there, step log)."""
    return tempfile.TemporaryDirectory(prefix="simctl-point-")
