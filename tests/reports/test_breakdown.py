"""Where the time goes: the makespan and step breakdowns add up to what the run measured,
requests carry their start and first-token times, many series and workers stay readable."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from simctl.reports.breakdown import _live_busy
from simctl.reports.build import build_report
from simctl.reports.page import REFERENCES
from simctl.reports.style import PALETTE, legend, series_styles, subplots


def _steps(run_dir) -> dict[str, dict[int, dict]]:
    doc = json.loads((run_dir / "run.json").read_text())
    return {p: {e["step"]: e for e in v["steps"]} for p, v in doc["policies"].items()}


def test_makespan_breakdown_adds_up_and_matches_the_idle_metric(report, run_dir):
    """Phases sum to makespan x GPUs; idle over the total is the run's own gpu_idle_fraction."""
    table = json.loads((report.parent / "tables" / "breakdown.json").read_text())
    steps = _steps(run_dir)
    meta = json.loads((report.parent / "report.json").read_text())
    assert {r["policy"] for r in table["rows"]} == {"verl", "ngram", "rlhfuse"}
    for row in table["rows"]:
        entry = steps[row["policy"]][meta["step"]]
        assert row["gpus"] == 16  # h100x16: 4 workers x tp4
        assert row["makespan_s"] == pytest.approx(entry["rollout_makespan_s"], rel=1e-12)
        parts = [row[k] for k in _phases(table)]
        total = sum(v for v in parts if v is not None)
        assert total == pytest.approx(row["makespan_s"] * 16, rel=1e-9)
        assert row["idle"] / total == pytest.approx(entry["gpu_idle_fraction"], rel=1e-9, abs=1e-12)
        assert all(v is None or v >= 0 for v in parts)
        assert row["not_recorded"] == ""  # the simulator records every phase it priced
        assert "speculative (draft + verify)" not in row  # split into draft and verify
        assert row["prefill"] > 0  # every request's prompt was prefilled
    verl = next(r for r in table["rows"] if r["policy"] == "verl")
    ngram = next(r for r in table["rows"] if r["policy"] == "ngram")
    assert verl["draft"] == 0 and verl["verify"] == 0 and verl["decode"] > 0
    assert ngram["draft"] > 0 and ngram["verify"] > ngram["draft"]
    # the same prompts on the same workers: the same prefill whatever the policy decodes with
    assert ngram["prefill"] == pytest.approx(verl["prefill"], rel=1e-9)


def test_run_without_phase_columns_shows_the_old_split(fresh_run, tmp_path, report):
    """A simulated run written before the timeline split its phases still loads: decode and
    speculative (draft + verify), the rest 'not recorded', adding up as before."""
    path = fresh_run / "timeline.parquet"
    table = pq.read_table(path)
    pq.write_table(table.drop_columns(["prefill_s", "recompute_s", "draft_s"]), path)
    index = build_report([fresh_run], tmp_path / "out")
    old = json.loads((index.parent / "tables" / "breakdown.json").read_text())
    split_table = json.loads((report.parent / "tables" / "breakdown.json").read_text())
    new = {r["policy"]: r for r in split_table["rows"]}
    for row in old["rows"]:
        assert row["not_recorded"] == "prefill, draft vs verify, preemption recompute"
        assert "prefill" not in row and "draft" not in row
        split = new[row["policy"]]
        busy = sum(split[k] for k in ("prefill", "preemption recompute", "decode", "draft", "verify"))
        assert row["decode"] + row["speculative (draft + verify)"] == pytest.approx(busy, rel=1e-9)
        assert row["idle"] == pytest.approx(split["idle"], rel=1e-12)


def _phases(table: dict) -> set[str]:
    return {c["key"] for c in table["columns"]} - {
        "policy",
        "step",
        "makespan_s",
        "gpus",
        "total_gpu_s",
        "idle_fraction",
        "not_recorded",
    }


def test_step_parts_add_up_to_the_step_time(run_dir):
    for policy, steps in _steps(run_dir).items():
        for entry in steps.values():
            p = entry["parts"]
            assert p["rollout_s"] == entry["rollout_makespan_s"]
            total = p["rollout_s"] + p["reward_s"] + p["train_s"] + p["weight_sync_s"]
            assert total == pytest.approx(entry["step_time_s"], rel=1e-12), policy
            assert min(p["reward_s"], p["train_s"], p["weight_sync_s"]) >= 0
            assert p["source"] == "model"  # the tiny trace records no timing
            if policy == "verl":  # no overlap: all of training follows the rollout
                assert p["train_s"] > 0


def test_requests_record_start_and_first_token(run_dir):
    req = pd.read_parquet(run_dir / "requests.parquet")
    done = req[req["finish_s"].notna()]
    assert len(done) == len(req)  # nothing deferred on this trace
    assert (done["start_s"] >= 0).all()
    assert (done["first_token_s"] > done["start_s"]).all()  # prefill + one iteration take time
    assert (done["finish_s"] >= done["first_token_s"]).all()
    # the first batch is admitted at the step start; with 48 requests on 4 workers, all of it
    assert (req.groupby(["policy", "step"])["start_s"].min() == 0).all()


def test_live_breakdown_splits_engine_iterations():
    """Hand-made iterations of one worker over a 10 s makespan: each phase from its rows."""
    it = pd.DataFrame(
        {
            "worker": [0, 0, 0, 0],
            "t0_s": [0.0, 1.0, 3.0, 9.5],
            "engine_s": [1.0, 2.0, 2.0, 1.0],  # the last ends past the makespan: half counts
            "draft_s": [0.0, 0.0, 0.5, 0.0],
            "drafted": [0, 0, 4, 0],
            "prefill_tokens": [100, 0, 0, 0],
        }
    )
    out = _live_busy(it, busy=np.array([6.0]), mk=10.0, n=1, g=1.0)
    assert out == pytest.approx(
        {"prefill + decode": 1.0, "decode": 2.5, "verify": 1.5, "draft": 0.5, "executor / policy": 0.5}
    )
    it.loc[1, "draft_s"] = 0.25  # drafting that proposed nothing is drafting time all the same
    out = _live_busy(it, busy=np.array([6.0]), mk=10.0, n=1, g=1.0)
    assert out["draft"] == pytest.approx(0.75) and out["decode"] == pytest.approx(2.25)


def test_run_without_start_columns_is_read_and_says_not_recorded(fresh_run, tmp_path):
    """A run written before start_s/first_token_s existed: the figure is left out, saying why."""
    path = fresh_run / "requests.parquet"
    table = pq.read_table(path)
    pq.write_table(table.drop_columns(["start_s", "first_token_s"]), path)
    index = build_report([fresh_run], tmp_path / "out")
    meta = json.loads((index.parent / "report.json").read_text())
    assert meta["warnings"] == []
    why = {w: y for w, y in (d.values() for d in meta["left_out"])}
    assert "does not record start_s / first_token_s" in why["request start / first token of verl"]
    assert not (index.parent / "figures" / "request-times.png").exists()


def test_many_workers_show_a_sample_and_every_worker_behind_a_control(wide_report):
    page = wide_report.read_text()
    figures = wide_report.parent / "figures"
    for i, policy in enumerate(("verl", "ngram")):
        assert (figures / f"gantt-{i:02d}-{policy}-sample.png").is_file()
        fold = re.search(
            rf'<details class="more"><summary>Show all 128 workers of {policy}</summary>'
            rf'<figure id="fig-gantt-{i:02d}-{policy}">',
            page,
        )
        assert fold, policy
        assert f'<figure id="fig-gantt-{i:02d}-{policy}-sample">' in page  # in view, not folded
    assert "(16 of 128 shown, spread evenly" in page


def test_series_styles_stay_distinct_beyond_ten_series():
    labels = [f"policy-{i}" for i in range(60)]
    styles = series_styles(labels)
    pairs = {(s.color, str(s.linestyle)) for s in styles.values()}
    assert len(pairs) == 60
    assert len({styles[lab].color for lab in labels[:10]}) == len(PALETTE) == 10


def test_legend_is_outside_every_axes():
    fig, axes = subplots(1, 2)
    for i in range(25):
        axes[0][0].plot([0, 1], [i, i], label=f"s{i}")
    legend(axes[0][0])
    assert axes[0][0].get_legend() is None and len(fig.legends) == 1
    assert fig.legends[0]._ncols == 2  # more than LEGEND_ROWS entries: a second column


def test_page_cites_the_papers_by_title_and_arxiv_id(report):
    page = report.read_text()
    assert "<section id='references'>" in page
    for _, _, title, arxiv in REFERENCES:
        assert title.split(" (")[0] in page
        if arxiv:
            assert f"<i>{title}</i>, arXiv:{arxiv}." in page


def test_live_run_breakdown_adds_up_and_matches_the_idle_metric(live_run, tmp_path):
    """A real live run: engine iterations split the busy time; idle is the run's own metric."""
    index = build_report([live_run], tmp_path / "out")
    table = json.loads((index.parent / "tables" / "breakdown.json").read_text())
    step = json.loads((index.parent / "report.json").read_text())["step"]
    steps = _steps(live_run)
    for row in table["rows"]:
        entry = steps[row["policy"]][step]
        total = sum(row[k] for k in _phases(table) if row[k] is not None)
        assert row["gpus"] == 2  # two workers, one device each
        assert total == pytest.approx(entry["rollout_makespan_s"] * 2, rel=1e-9)
        assert row["idle"] / total == pytest.approx(entry["gpu_idle_fraction"], rel=1e-9, abs=1e-12)
        assert row["decode"] + row["prefill + decode"] > 0 and row["not_recorded"] == "preemption recompute"
        assert "parts" not in entry  # live does not split the step: one 'after rollout' part
    req = pd.read_parquet(live_run / "requests.parquet")
    done = req[req["finish_s"].notna()]
    assert (done["start_s"] >= 0).all() and (done["start_s"] < done["first_token_s"]).all()
    assert (done["first_token_s"] <= done["finish_s"]).all()
    assert (index.parent / "figures" / "request-times.png").is_file()
