"""simctl: simulate RL rollout designs on a GPU cluster, run them live, and compare.

The one importable package of the distribution. Its layers live in the repository's
top-level folders (``sim/``, ``live/``, ``policies/``, ``traces/``, ``reports/``), mapped
onto ``simctl.sim``, ``simctl.live``, ... by ``package-dir`` in ``pyproject.toml``; this
folder holds the composition root (the ``simctl`` command in :mod:`simctl.cli`) and the
Python API (``simctl.load_trace``, ``simctl.replay``, ``simctl.sweep``,
``simctl.estimate_sweep``: :mod:`simctl.api`).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("simctl")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

# The Python API (simctl/api.py), imported on first use so that `import simctl` stays
# light (no pandas, simulator or report code until a name is asked for).
_API = ("load_trace", "replay", "Result", "sweep", "Sweep", "estimate_sweep")

__all__ = ["Result", "Sweep", "__version__", "estimate_sweep", "load_trace", "replay", "sweep"]


def __getattr__(name: str) -> object:
    if name in _API:
        from simctl import api

        return getattr(api, name)
    raise AttributeError(f"module 'simctl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
