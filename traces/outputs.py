"""Output paths checked before any work: a command that will fail to write its result says
so at once, in one line, instead of after a long simulation (or by overwriting its input).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path


class OutputPathError(ValueError):
    """An output path that cannot or must not be written; the message is one line."""


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def _nearest_existing(path: Path) -> Path:
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    return parent


def check_name(path: Path) -> None:
    """A name the run's JSON documents can record (Linux allows bytes that are not UTF-8)."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        raise OutputPathError(f"{os.fsencode(path)!r}: file name is not valid UTF-8") from None


def check_writable_parent(path: Path) -> None:
    """The nearest existing ancestor of `path` is a directory this process may write in."""
    parent = _nearest_existing(path)
    if not parent.is_dir():
        raise OutputPathError(f"{path}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputPathError(f"{path}: cannot write in {parent} (permission denied)")
    # Permission bits are not the whole story (/proc, a read-only mount, root on a
    # immutable folder): create and remove a file there, as the write will.
    try:
        fd, probe = tempfile.mkstemp(prefix=".simctl-probe-", dir=parent)
    except OSError as exc:
        raise OutputPathError(f"{path}: cannot write in {parent} ({exc.strerror})") from None
    os.close(fd)
    os.unlink(probe)


#: How the start of an existing file shows it is of the kind about to replace it.
_MAGIC = {"json": (b"{", b"["), "parquet": (b"PAR1",)}


def _is_kind(path: Path, kind: str) -> bool:
    with path.open("rb") as f:
        head = f.read(64).lstrip()
    return not head or head.startswith(_MAGIC[kind])


def check_regular(path: Path, what: str) -> None:
    """An existing output is a regular file (a link to one included): the write renames a
    new file over the path, which would replace a FIFO, a device (/dev/null, as root) or a
    broken link or link loop with a file, silently."""
    if path.is_symlink() and not path.exists():
        raise OutputPathError(
            f"{path}: is a broken symbolic link or a link loop; not writing the {what} there"
        )
    if path.exists() and not path.is_file():
        raise OutputPathError(
            f"{path}: exists and is not a regular file (a device, FIFO or socket); not the {what}"
        )


#: The files of a run directory (traces/run_format.py: run.json and its tables), which
#: a single-file output must not replace.
RUN_DIR_FILES = frozenset(
    {"run.json", "requests.parquet", "timeline.parquet", "roles.parquet", "iterations.parquet"}
)


def is_run_dir(path: Path) -> bool:
    """A run directory: run.json beside its tables (a --json file named run.json in a
    plain folder is not one)."""
    return (path / "run.json").is_file() and (path / "requests.parquet").is_file()


def check_output_file(
    path: Path,
    inputs: Iterable[Path] = (),
    suffixes: Iterable[str] | None = None,
    what: str = "output",
    kind: str | None = None,
) -> None:
    """A file to be written: not an input, not a directory, in a writable place, (when
    `suffixes` is given) with one of those endings, and (when `kind` is "json" or "parquet")
    replacing only an empty file or one of the same kind: a mistyped `--json` never
    overwrites a trace or anything else."""
    check_name(path)
    for source in inputs:
        if _same(path, source):
            raise OutputPathError(f"{path}: is the input {source}; the {what} would overwrite it")
    if path.is_dir():
        raise OutputPathError(f"{path}: is a directory, expected a file for the {what}")
    if path.name in RUN_DIR_FILES and is_run_dir(path.parent):
        raise OutputPathError(
            f"{path}: is part of the run directory {path.parent}; the {what} would replace it"
        )
    check_regular(path, what)
    if suffixes is not None:
        allowed = sorted(suffixes)
        if path.suffix.lower() not in allowed:
            raise OutputPathError(
                f"{path}: unknown {what} type '{path.suffix}'; use one of {', '.join(allowed)}"
            )
    if kind is not None and path.is_file() and not _is_kind(path, kind):
        raise OutputPathError(f"{path}: exists and is not a {kind} file; not overwriting it with the {what}")
    check_writable_parent(path)


def check_distinct(outputs: Mapping[str, Path | None]) -> None:
    """Outputs of one command (what each is -> its path; None: not asked for) are not the
    same path, and none is a directory holding another (each is written whole, so the
    later would replace the earlier or erase it): one line naming both, before any work."""
    given = [(what, p) for what, p in outputs.items() if p is not None]
    for i, (what, path) in enumerate(given):
        for other, other_path in given[i + 1 :]:
            if _same(path, other_path):
                raise OutputPathError(f"{path}: given as the {what} and the {other}; give each its own path")
            for outer, outer_what, inner, inner_what in (
                (path, what, other_path, other),
                (other_path, other, path, what),
            ):
                if _inside(inner, outer):
                    raise OutputPathError(
                        f"{inner}: the {inner_what} is inside the {outer_what} {outer} (written whole)"
                    )


def _inside(inner: Path, outer: Path) -> bool:
    try:
        return outer.resolve() in inner.resolve().parents
    except OSError:
        return False


def check_output_dir(path: Path, inputs: Iterable[Path] = (), what: str = "output directory") -> None:
    """A directory to be written whole: not an input, not a file, in a writable place."""
    check_name(path)
    for source in inputs:
        # (the directory is written whole: an input inside it would be replaced with it)
        if _same(path, source) or _inside(source, path):
            raise OutputPathError(f"{path}: would overwrite the input {source}")
    if path.exists() and not path.is_dir():
        raise OutputPathError(f"{path}: exists and is not a directory ({what})")
    check_writable_parent(path)
