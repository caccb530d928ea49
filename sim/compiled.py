"""The simulator's compiled kernels (sim.kernels, numba), loaded on first use.

numba is optional (the `fast` extra): without it, or with SIMCTL_NO_NUMBA=1 set, `kernels()`
is None and every caller runs its numpy form, which the tests hold to the same results.
Loaded lazily so that a replay that never needs a kernel never imports numba (about 0.2 s)
or loads its compiled code. The first use on a machine compiles them (a few seconds);
numba caches the result beside the module, or in its user cache where that is read-only.
"""

from __future__ import annotations

import importlib
import os
import warnings
from types import ModuleType

import numpy as np

_loaded: list[ModuleType | None] = []  # [sim.kernels, or None], once tried


def kernels() -> ModuleType | None:
    """sim.kernels, or None (numba is not installed, or SIMCTL_NO_NUMBA=1)."""
    if os.environ.get("SIMCTL_NO_NUMBA", "0") not in ("", "0"):
        return None
    if not _loaded:
        try:
            _loaded.append(importlib.import_module("simctl.sim.kernels"))
        except ImportError:
            _loaded.append(None)
        except Exception as exc:  # numba present but unusable (e.g. no writable cache dir)
            warnings.warn(f"numba kernels unavailable, using numpy: {exc}", RuntimeWarning, stacklevel=2)
            _loaded.append(None)
    return _loaded[0]


def warm() -> bool:
    """Load every kernel's compiled code now, for the argument types replays pass (numba
    loads, or compiles, each signature on its first call: about 0.4 s with numba's import,
    once per process). For measurements that time steps, not process start-up (bench/).
    False without the kernels."""
    k = kernels()
    if k is None:
        return False
    tokens = np.ones((1, 1), np.int16)
    for rem in (np.ones(1, np.int32), np.ones(1, np.int64)):
        k.block_counts(tokens, rem, True)
    table = (np.zeros(2, np.bool_), np.zeros(3, np.int64), np.zeros(1, np.int64), np.zeros(1, np.int32))
    seq = (np.zeros(1, np.int32), np.full(1, -1, np.int32))
    k.step_block(table, seq, np.zeros(1, np.int64), 1, 0, 0, 1, 1, 1)
    return True
