"""Fewer cyclic-garbage collections while a step's event loop runs (`fewer_collections`).

A replay allocates millions of short-lived Python objects per step (events, views, the
policies' per-request tuples and lists), and CPython's collector runs a young-generation
pass every 700 net allocations and a full pass, over every live object, every hundred
of those. The objects of a replay are reclaimed by reference counting, not by the
collector (it finds a few thousand objects in cycles per step at 512 GPUs), so nearly
all of that work is spent proving that nothing is garbage. The full passes grow with
what the process holds (the trace, the policy's evidence, the memos), and so with the
cluster: measured with `gc.callbacks` on the bundled dapo-32b-20k sample (both steps,
h100x512), collections took 4.2% of TLT's simulator time at 512 GPUs and 4.6% at 4,096
(from 0.4 s to 4.5 s, with 8x the events), and 5.7% of composite's (3.0 s, 2.4 s of it
in nine full passes).

Spacing the passes out (a young pass every `YOUNG` allocations, the older ones after 50
of the generation below) leaves the garbage the same and only collects it later: what a
step creates in cycles is at most tens of megabytes. The thresholds are restored when the
step's loop ends, whatever happens in it, so a process that embeds simctl keeps its own
settings between calls. Collection timing cannot change a replay's results: nothing in the
simulator or the policies observes when an object is freed (memos keyed by `id` hold the
objects they key, so an id is never reused while keyed).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG = 50_000  # allocations between young-generation passes (CPython's default: 700)
OLDER = 50  # passes of the generation below between passes of the next (default: 10)


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Raise the collector's thresholds to (YOUNG, OLDER, OLDER) for the block, never
    lower than they already are, and restore them after it. A disabled collector stays
    disabled (the thresholds change nothing then)."""
    before = gc.get_threshold()
    young, mid, old = before
    gc.set_threshold(max(young, YOUNG), max(mid, OLDER), max(old, OLDER))
    try:
        yield
    finally:
        gc.set_threshold(*before)
