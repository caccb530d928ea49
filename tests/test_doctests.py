"""Every docstring example in the package runs and holds.

Modules are imported by their installed names (``simctl.sim.engine``), so each example
runs against the same objects as users' code; modules that need an optional extra that
is not installed here (vLLM, Ray) are skipped by name, never silently.
"""

from __future__ import annotations

import doctest
import importlib
from types import ModuleType

import pytest

from tests.layout import module_files

OPTIONAL = ("vllm", "ray", "torch", "transformers", "gguf")
#: Examples known to exist when this was written; fewer means examples were lost.
MIN_EXAMPLES = 14


def package_modules() -> list[str]:
    return sorted(name for name in module_files() if name != "simctl.__main__")


def examples(module: ModuleType) -> list[doctest.DocTest]:
    finder = doctest.DocTestFinder(exclude_empty=True)
    return [t for t in finder.find(module, module.__name__) if t.examples]


def load(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        missing = (exc.name or "").split(".")[0]
        if missing in OPTIONAL:
            pytest.skip(f"{name} needs the optional {missing}")
        raise


@pytest.mark.parametrize("name", package_modules())
def test_docstring_examples(name: str) -> None:
    module = load(name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in examples(module):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"


def test_the_examples_are_found() -> None:
    """Guards the test above against finding nothing (a renamed package, a finder change)."""
    total = 0
    for name in package_modules():
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        total += sum(len(t.examples) for t in examples(module))
    assert total >= MIN_EXAMPLES
