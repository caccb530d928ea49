"""How much memory an input may ask for before simctl refuses it up front.

A generated trace and a simulated cluster both cost memory in proportion to their size;
both are estimated from counts before any work, and refused where the estimate exceeds
half of this machine's memory (the rest is for Python, the policies and the outputs).
"""

from __future__ import annotations

import os

#: Share of the machine's memory an input may take.
MEMORY_SHARE = 0.5


def physical_memory_bytes() -> int:
    """This machine's memory (POSIX); a large constant where the OS does not say."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return 1 << 40


def fits_in_memory(need_bytes: float, memory_bytes: int | None = None) -> tuple[bool, int]:
    """(whether `need_bytes` fits in the allowed share, the machine's memory in bytes)."""
    have = physical_memory_bytes() if memory_bytes is None else memory_bytes
    return need_bytes <= have * MEMORY_SHARE, have
