"""simctl: simulate RL rollout designs on a GPU cluster, run them live, and compare.

The one importable package of the distribution. Its layers live in the repository's
top-level folders (``sim/``, ``live/``, ``policies/``, ``traces/``, ``reports/``), mapped
onto ``simctl.sim``, ``simctl.live``, ... by ``package-dir`` in ``pyproject.toml``; this
folder holds only the composition root (the ``simctl`` command in :mod:`simctl.cli`).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("simctl")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
