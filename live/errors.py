"""The live executor's one-line errors, shared by the executor, its action handler and the
run drivers (kept apart so that none of them imports another just for an exception)."""

from __future__ import annotations


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message ("" when it has none)."""
    text = str(exc)
    return text.splitlines()[0] if text else ""


class LiveError(RuntimeError):
    """A live run that cannot go on; the message is one line."""


class WorkerCrashed(LiveError):
    """An engine raised in its step: the run stops, the completed steps are kept."""
