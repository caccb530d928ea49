"""The simulator core's seams: sim modules import each other without cycles, drafters are
keyed by the one method list, and the acceptance source is an injected object."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from simctl.policies.draft_methods import DraftMethod
from simctl.policies.registry import make_policy
from simctl.sim.acceptance_source import AcceptanceSource, Draw, SampledAcceptance
from simctl.sim.engine import DRAFTERS, EngineConfig, StepSimulation
from simctl.sim.state import StepState
from simctl.sim.token_replay import StepReplay
from tests.factories import LinearCost, make_frame

SIM = Path(__file__).resolve().parents[2] / "sim"


def _sim_imports(path: Path) -> set[str]:
    """sim modules a module imports anywhere (module level, in functions, under
    TYPE_CHECKING)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("simctl.sim."):
                out.add(node.module.split(".")[2])
            elif node.module == "simctl.sim":
                out.update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[2] for a in node.names if a.name.startswith("simctl.sim."))
    return out


def test_sim_modules_import_each_other_without_cycles() -> None:
    graph = {p.stem: _sim_imports(p) for p in SIM.glob("*.py")}
    done: set[str] = set()

    def visit(mod: str, path: list[str]) -> None:
        if mod in path:
            cycle = [*path[path.index(mod) :], mod]
            pytest.fail(f"import cycle: {' -> '.join(cycle)}")
        if mod in done:
            return
        for dep in sorted(graph.get(mod, ())):
            visit(dep, [*path, mod])
        done.add(mod)

    for mod in sorted(graph):
        visit(mod, [])
    assert "engine" not in graph["worker"] | graph["view"] | graph["token_replay"]


def test_drafters_are_keyed_by_the_draft_methods() -> None:
    assert set(DRAFTERS) == set(DraftMethod)
    assert all(isinstance(m, DraftMethod) for m in DRAFTERS)
    assert DRAFTERS["w4_self"] == DRAFTERS[DraftMethod.W4_SELF] == "w4-self"  # names look up directly


def _simulate(source: Callable[[StepState], AcceptanceSource | None], seed: int = 3) -> StepSimulation:
    lengths = np.random.default_rng(seed).integers(50, 900, 32)
    state = StepState.from_frame(make_frame(lengths, accept={"draft_small": 0.7, "ngram": 0.5}), 0)
    policy = make_policy("spec-coupled")
    config = EngineConfig()
    sim = StepSimulation(state, policy, LinearCost(), [(0, 1)] * 4, config, seed, acceptance=source(state))
    sim.run()
    return sim


def test_the_acceptance_source_is_injected_and_defaults_to_sampling() -> None:
    default = _simulate(lambda state: None)
    sampled = _simulate(lambda state: SampledAcceptance())
    # a replay without token ids and without a rule for the method samples as the default
    replay = _simulate(lambda state: StepReplay(state, np.arange(state.n), None))
    assert isinstance(default.acceptance, SampledAcceptance)
    assert default.makespan == sampled.makespan == replay.makespan > 0
    assert default.counters == sampled.counters == replay.counters
    assert default.counters["blocks"] > 0


def test_a_draw_is_a_frozen_answer() -> None:
    rng = np.random.default_rng(0)
    draw = SampledAcceptance().draw(
        rng, np.arange(3), np.zeros(3, np.int64), np.full(3, 0.5), np.full(3, 4), 1, 10
    )
    assert (
        isinstance(draw, Draw) and draw.tokens.shape == (3, 10) and draw.slots is None and draw.probe is None
    )
    assert ((draw.tokens >= 1) & (draw.tokens <= 5)).all()
    with pytest.raises(AttributeError):
        draw.tokens = draw.tokens  # type: ignore[misc]


def test_step_cpu_is_split_by_step():
    """A run keeps its simulator CPU step by step (what the speed benchmark compares the
    costliest step by), and the steps add up to the run's total."""
    from tests.factories import make_trace, random_lengths, run_one

    frames = [make_frame(random_lengths(s, 32), step=s, accept={"ngram": 0.6}) for s in range(3)]
    run = run_one(make_trace(frames), "ngram")
    assert len(run.step_cpu_s) == 3
    assert all(c > 0.0 for c in run.step_cpu_s)
    assert sum(run.step_cpu_s) == pytest.approx(run.sim_cpu_s)
