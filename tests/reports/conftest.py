"""Fixtures: real run directories from the real producer (sim.replay + run_format.write_run_dir).

Built once per session on a tiny trace (2 steps, 96 requests, 4 workers) so the tests
exercise what `simctl replay --out` actually writes, not a hand-made imitation.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from simctl.reports.build import build_report

POLICIES = ("verl", "ngram", "rlhfuse")
LIVE_SLOWDOWN = 1.1  # the fake "measured" run is 10% slower than the simulation


def make_run(out: Path, *, preset: str = "tiny", seed: int = 0, steps: int = 2, policies=POLICIES) -> Path:
    from simctl.replay_cmd import run_document
    from simctl.sim.cluster import parse_cluster
    from simctl.sim.cost_model import RooflineCostModel
    from simctl.sim.models import get_model
    from simctl.sim.replay import ReplaySetup, replay, run_tables
    from simctl.traces.io import Trace
    from simctl.traces.run_format import write_run_dir
    from simctl.traces.schema import TraceMeta

    rng = np.random.default_rng(seed)
    groups, g = 12, 4
    frames = []
    for s in range(steps):
        n = groups * g
        lens = np.minimum(np.exp(rng.normal(5.5, 0.8, n)).astype(int) + 1, 2000)
        frames.append(
            pd.DataFrame(
                {
                    "step": s,
                    "prompt_id": np.repeat(np.arange(groups), g),
                    "sample": np.tile(np.arange(g), groups),
                    "prompt_len": 100,
                    "response_len": lens,
                    "max_tokens": 2000,
                    "finish_reason": np.where(lens >= 2000, "length", "stop"),
                    "accept_ngram": rng.beta(2, 6, n).astype("float32"),
                    "accept_draft_small": rng.beta(7, 3, n).astype("float32"),
                }
            )
        )
    trace = Trace(
        df=pd.concat(frames, ignore_index=True),
        meta=TraceMeta(model="qwen2.5-7b", group_size=g, preset=preset, seed=seed),
    )
    cluster = parse_cluster("h100x16")
    model = get_model(trace.meta.model)
    setup = ReplaySetup(
        trace=trace,
        cluster=cluster,
        model=model,
        cost=RooflineCostModel(model, cluster.gpu, cluster.tp),
        steps=list(range(steps)),
        seed=seed,
    )
    runs = replay(setup, list(policies))
    write_run_dir(out, run_document(setup, runs, Path(f"{preset}-{seed}.parquet")), run_tables(runs))
    return out


def make_live_copy(sim_dir: Path, out: Path, slowdown: float = LIVE_SLOWDOWN) -> Path:
    """A stand-in for a `simctl live` run: the simulation with every time scaled."""
    shutil.copytree(sim_dir, out)
    doc = json.loads((out / "run.json").read_text())
    doc["provenance"]["source"] = "live"
    doc["provenance"]["cost_model"] = "measured"
    for pol in doc["policies"].values():
        for st in pol["steps"]:
            for k in ("rollout_makespan_s", "step_time_s", "tail_time_s"):
                st[k] *= slowdown
            st["throughput_tok_s"] /= slowdown
        pol["mean_rollout_makespan_s"] *= slowdown
        pol["mean_step_time_s"] *= slowdown
    (out / "run.json").write_text(json.dumps(doc))
    _scale(out / "timeline.parquet", ["t0_s", "t1_s", "prefill_s", "recompute_s", "draft_s"], slowdown)
    _scale(out / "requests.parquet", ["finish_s"], slowdown)
    return out


def _scale(path: Path, columns: list[str], factor: float) -> None:
    """Multiply columns of a Parquet table, keeping its schema (the run format's)."""
    table = pq.read_table(path)
    for c in columns:
        i = table.schema.get_field_index(c)
        table = table.set_column(i, table.schema.field(i), pc.multiply(table.column(c), factor))
    pq.write_table(table, path)


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory) -> Path:
    return make_run(tmp_path_factory.mktemp("runs") / "sim")


@pytest.fixture(scope="session")
def report(run_dir, tmp_path_factory) -> Path:
    """index.html of the report over the one complete run."""
    return build_report([run_dir], tmp_path_factory.mktemp("report") / "out")


@pytest.fixture
def fresh_run(run_dir, tmp_path) -> Path:
    """A private copy a test may damage."""
    return Path(shutil.copytree(run_dir, tmp_path / "copy"))


SAMPLE_TRACE = (
    Path(__file__).resolve().parents[2] / "traces" / "samples" / "efficientrollout-qwen7b-8k-6steps.parquet"
)


@pytest.fixture(scope="session")
def wide_report(tmp_path_factory) -> Path:
    """index.html over `simctl replay` of a bundled trace on 512 H100s (128 workers), one step:
    more workers than a timeline shows at once."""
    from click.testing import CliRunner

    from simctl.cli import main

    root = tmp_path_factory.mktemp("wide")
    args = [
        "replay",
        str(SAMPLE_TRACE),
        "--cluster",
        "h100x512",
        "--steps",
        "0",
        "--policy",
        "verl",
        "--policy",
        "ngram",
    ]
    res = CliRunner().invoke(main, [*args, "--out", str(root / "run")])
    assert res.exit_code == 0, res.output
    return build_report([root / "run"], root / "report")


@pytest.fixture(scope="session")
def live_run(tmp_path_factory) -> Path:
    """A real `simctl live` run directory: torch engine, random tiny model, 2 workers, 2 steps."""
    import os

    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from click.testing import CliRunner

    from simctl.cli import main

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    out = tmp_path_factory.mktemp("live") / "run"
    tiny = ["--model", "random:tiny", "--prompts-per-step", "3", "--group-size", "2", "--max-tokens", "16"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        args = ["live", *tiny, "--backend", "torch", "--workers", "2", "--steps", "2", "--policy", "verl"]
        res = CliRunner().invoke(main, [*args, "--policy", "ngram:gamma=3", "--out", str(out)])
    finally:
        torch.set_num_threads(threads)
    assert res.exit_code == 0, res.output
    return out
