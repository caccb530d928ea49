"""All-or-nothing outputs: a file or a whole directory appears complete, or not at all.

Files are written to a temporary sibling and renamed over their target (one rename is
atomic on POSIX). A run directory is several files, so it is built whole in a temporary
sibling directory and then swapped with the old one by one ``renameat2(RENAME_EXCHANGE)``
on Linux: a reader, or a process killed at any instant, sees the old directory or the new
one, never a mix. Where the kernel or file system cannot exchange, two renames are used
(the old directory is moved aside first), which leaves a moment without the directory but
still never a mixed one.

Temporaries are named ``.NAME.tmp-PID-N``. They are removed when the write fails, when
the process gets SIGINT (KeyboardInterrupt) or SIGTERM (:func:`exit_on_sigterm` turns it
into SystemExit, so the cleanup runs), and, for a process killed by SIGKILL, at the next
write beside them once their process is gone. Outputs follow the user's umask (they are
created by ordinary ``open``, not ``mkstemp``'s private mode).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import itertools
import os
import shutil
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

_COUNTER = itertools.count()
_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


def temp_sibling(path: Path) -> Path:
    """A fresh name beside `path`, marked with this process's id."""
    return path.parent / f".{path.name}.tmp-{os.getpid()}-{next(_COUNTER)}"


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temporaries(path: Path) -> list[Path]:
    """Remove temporaries of `path` left by processes that no longer run (SIGKILL)."""
    removed: list[Path] = []
    if not path.parent.is_dir():
        return removed
    prefix = f".{path.name}.tmp-"
    for candidate in path.parent.iterdir():
        if not candidate.name.startswith(prefix):
            continue
        pid_text = candidate.name[len(prefix) :].split("-", 1)[0]
        if pid_text.isdigit() and not _pid_alive(int(pid_text)):
            _remove(candidate)
            removed.append(candidate)
    return removed


def atomic_write(path: Path, writer: Callable[[Path], object]) -> None:
    """Run ``writer(tmp)`` then rename the result over `path`; nothing is left on failure."""
    path = Path(path)
    if os.path.lexists(path) and not path.is_file():  # (a FIFO, device, broken link, loop)
        # renaming over it would replace it with a file: /dev/null, as root
        raise OSError(errno.EEXIST, "exists and is not a regular file; not replacing it", str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    tmp = temp_sibling(path)
    try:
        writer(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        _remove(tmp)
        if exc.filename not in (str(tmp), tmp):
            raise
        # (name the file the user asked for, not its hidden temporary)
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    except BaseException:
        _remove(tmp)
        raise


def _libc_renameat2() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_RENAMEAT2 = _libc_renameat2()


def exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths in one atomic step; False where this system cannot."""
    if _RENAMEAT2 is None:
        return False
    rc = _RENAMEAT2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: not supported here
        return False
    raise OSError(err, os.strerror(err), str(b))


def replace_dir(out: Path, fill: Callable[[Path], object]) -> None:
    """Build a directory with ``fill(tmp_dir)`` and put it at `out` in one step.

    `out` may not exist, or be a directory (it is replaced whole: the caller checks it is
    one it may replace)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(out)
    tmp = temp_sibling(out)
    tmp.mkdir()
    try:
        fill(tmp)
        if not out.exists():
            os.rename(tmp, out)
        elif exchange(tmp, out):
            _remove(tmp)  # now holds the old directory
        else:
            aside = temp_sibling(out)
            os.rename(out, aside)
            os.rename(tmp, out)
            _remove(aside)
    except BaseException:
        _remove(tmp)
        raise


def _raise_exit(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


@contextmanager
def exit_on_sigterm() -> Iterator[None]:
    """SIGTERM raises SystemExit(143) while inside, so `finally`/`except` cleanups run."""
    try:
        previous = signal.signal(signal.SIGTERM, _raise_exit)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
