"""The package's modules by installed name, read from the source folders.

pyproject.toml maps each layer's folder onto a subpackage (``sim/`` -> ``simctl.sim``), so
the installed package cannot be walked from ``simctl.__path__`` alone (an editable install
resolves the subpackages through an import hook); the tests walk the folders instead.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Folder -> package name, as pyproject.toml's package-dir maps them.
LAYERS: dict[str, str] = {
    "policies": "simctl.policies",
    "traces": "simctl.traces",
    "sim": "simctl.sim",
    "live": "simctl.live",
    "reports": "simctl.reports",
    "simctl": "simctl",
}
ORDER = list(LAYERS.values())


def module_files() -> dict[str, Path]:
    """Every module of the package by its installed name."""
    out: dict[str, Path] = {}
    for folder, package in LAYERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([package, *parts])] = path
    return out
