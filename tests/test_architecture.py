"""The package's shape, checked from the source: one importable name, layers that only
import downwards, no import cycles, small rooms, and a policy layer free of simulator,
torch and I/O.

The layer order (README "Architecture"): policies -> traces -> sim -> live -> reports ->
simctl (the composition root: the `simctl` command). A module may import its own layer or
the layers to its left. Imports inside functions count (they run too); imports guarded by
``if TYPE_CHECKING:`` do not (they never run).
"""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.layout import LAYERS, ORDER, ROOT, module_files

BARE_NAMES = {"sim", "live", "policies", "traces", "reports"}
MAX_FUNCTION_LINES = 80
MAX_CLASS_LINES = 400


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported_names(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of every import that runs, relative ones resolved."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            yield node.lineno, base
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"
        stack.extend(ast.iter_child_nodes(node))


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        for _, target in imported_names(tree, name, path.name == "__init__.py"):
            if target in files and target != name:
                graph[name].add(target)
    return graph


def layer_of(module: str) -> int:
    """Index in ORDER of the most specific layer package containing `module`."""
    matches = [p for p in ORDER if module == p or module.startswith(p + ".")]
    return ORDER.index(max(matches, key=len))


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_cycle_finder_finds_a_planted_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_no_import_runs_up_the_layers() -> None:
    upward = [
        f"{a} -> {b}"
        for a, targets in sorted(import_graph().items())
        for b in sorted(targets)
        if layer_of(b) > layer_of(a)
    ]
    assert upward == []


def test_layer_of_reads_the_order() -> None:
    assert layer_of("simctl.policies.contract") < layer_of("simctl.traces.io") < layer_of("simctl.sim.engine")
    assert layer_of("simctl.live.executor") < layer_of("simctl.reports.build") < layer_of("simctl.cli")


@pytest.mark.parametrize(
    "folder", ["policies", "traces", "sim", "live", "reports", "simctl", "tests", "bench"]
)
def test_only_the_package_name_is_imported(folder: str) -> None:
    """`import sim` would work from a checkout and fail once installed: only `simctl.*`."""
    bad = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for line, name in imported_names(ast.parse(path.read_text()), "x", False):
            if name.split(".")[0] in BARE_NAMES:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert bad == []


def test_policies_import_no_simulator_torch_or_io() -> None:
    """Policies run unchanged in the simulator and live: no simpy, torch, files or sockets."""
    forbidden = {
        "simpy",
        "torch",
        "vllm",
        "ray",
        "pandas",
        "pyarrow",
        "io",
        "os",
        "pathlib",
        "socket",
        "shutil",
    }
    bad = []
    for path in sorted((ROOT / "policies").rglob("*.py")):
        for line, name in imported_names(ast.parse(path.read_text()), "simctl.policies.x", False):
            if name.split(".")[0] in forbidden or (name.startswith("simctl.") and layer_of(name) > 0):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
        source = path.read_text()
        if "open(" in source.replace("_open(", ""):
            bad.append(f"{path.relative_to(ROOT)} calls open()")
    assert bad == []


def oversized() -> list[str]:
    out = []
    for folder in LAYERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    lines = (node.end_lineno or node.lineno) - node.lineno + 1
                    limit = MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else MAX_FUNCTION_LINES
                    if lines > limit:
                        out.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} has {lines} lines")
    return out


def test_no_function_over_80_lines_no_class_over_400() -> None:
    assert oversized() == []


@pytest.mark.slow
def test_wheel_installs_exactly_one_top_level_name(tmp_path: Path) -> None:
    """Built like a release: the wheel's top_level.txt names only `simctl`, and every file
    in it lies under simctl/ (or its dist-info)."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("simctl-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        assert zf.read(top_level).decode().split() == ["simctl"]
    roots = {n.split("/")[0] for n in names}
    assert {r for r in roots if not r.endswith(".dist-info")} == {"simctl"}
    for expected in (
        "simctl/cli.py",
        "simctl/sim/engine.py",
        "simctl/live/executor.py",
        "simctl/policies/contract.py",
        "simctl/traces/samples/dapo-32b-20k-2steps.parquet",
        "simctl/live/prompts/math_prompts.jsonl",
    ):
        assert expected in names
