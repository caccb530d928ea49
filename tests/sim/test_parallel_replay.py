"""`simctl replay --jobs N`: policies replayed in separate processes give exactly the
results (metrics and every table) of the serial replay, in the order given, with a
plug-in policy from a file loaded in its child process."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from simctl.sim.cluster import parse_cluster
from simctl.sim.cost_model import load_cost_model
from simctl.sim.engine import SimError
from simctl.sim.models import get_model
from simctl.sim.replay import ReplaySetup, replay, run_tables
from simctl.traces.run_format import FORMAT_VERSION, TABLES, run_id, table_from_frames
from simctl.traces.validate import load_valid_trace

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "traces/samples/efficientrollout-qwen7b-8k-6steps.parquet"
PLUGIN = str(ROOT / "docs/examples/shortest_first.py") + ":ShortestFirst"


def _setup() -> ReplaySetup:
    trace = load_valid_trace(SAMPLE)
    model = get_model(trace.meta.model)
    spec = parse_cluster("a100x8:tp1")
    return ReplaySetup(
        trace=trace, cluster=spec, model=model, cost=load_cost_model(model, spec), steps=[0, 1]
    )


def test_parallel_replay_equals_serial() -> None:
    specs = ["verl", "ngram:gamma=3", PLUGIN, "efficientrollout"]
    serial = replay(_setup(), specs)
    seen: list[tuple[str, int]] = []
    parallel = replay(_setup(), specs, lambda name, step: seen.append((name, step)), jobs=2)
    assert list(parallel) == list(serial) == ["verl", "ngram:gamma=3", "shortest-first", "efficientrollout"]
    for name in serial:
        assert [s.__dict__ for s in parallel[name].steps] == [s.__dict__ for s in serial[name].steps]
        assert parallel[name].counters == serial[name].counters
    a, b = run_tables(serial), run_tables(parallel)
    for table in a:
        left = pd.concat(a[table], ignore_index=True) if a[table] else pd.DataFrame()
        right = pd.concat(b[table], ignore_index=True) if b[table] else pd.DataFrame()
        pd.testing.assert_frame_equal(left, right)
    # ... and so the same run id, which hashes the tables by value (it hashed Arrow's
    # buffers, which differed for the frames a child process sent back)
    doc = {"format_version": FORMAT_VERSION, "trace": "t", "cluster": "c", "seed": 0}
    ids = [run_id(doc, {k: table_from_frames(TABLES[k], v) for k, v in t.items()}) for t in (a, b)]
    assert ids[0] == ids[1]
    assert sorted(seen) == sorted((s, step) for s in specs for step in (0, 1))


def test_a_failing_policy_fails_the_parallel_replay_as_it_does_serially() -> None:
    setup = _setup()
    setup.trace.df = setup.trace.df.drop(
        columns=[c for c in setup.trace.df.columns if c.startswith("accept_")]
    )
    setup.trace.lists.pop("response_tokens", None)
    with pytest.raises(SimError, match="ngram"):
        replay(setup, ["verl", "ngram"], jobs=2)


def test_policies_start_in_the_order_asked_and_return_in_the_given_order(monkeypatch) -> None:
    """`order` decides which policy the pool starts first (`simctl replay --jobs` starts the
    costliest first); results come back in the order the specs were given."""
    from concurrent.futures import Future

    import simctl.sim.parallel_replay as parallel_replay

    started: list[str] = []

    class InlinePool:  # runs each submission at once, recording the order
        def __init__(self, **_: object) -> None:
            pass

        def __enter__(self) -> InlinePool:
            return self

        def __exit__(self, *_: object) -> None:
            return None

        def submit(self, fn, setup, spec):
            started.append(spec)
            fut: Future = Future()
            fut.set_result(fn(setup, spec))
            return fut

    monkeypatch.setattr(parallel_replay, "ProcessPoolExecutor", InlinePool)
    specs = ["verl", "ngram:gamma=3", "composite", "seer"]
    runs = parallel_replay.replay_parallel(lambda _, s: s.upper(), None, specs, 2, order=[2, 3, 1, 0])
    assert started == ["composite", "seer", "ngram:gamma=3", "verl"]
    assert runs == ["VERL", "NGRAM:GAMMA=3", "COMPOSITE", "SEER"]


def test_replay_cmd_starts_the_costliest_first() -> None:
    from simctl.sweep_order import costliest_first

    assert costliest_first(["verl", "composite", "speactor", "seer", PLUGIN]) == [1, 3, 2, 0, 4]
