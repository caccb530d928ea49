"""The benchmark script still runs (tiny size): synthesised run dir -> report within budget."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_smoke(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import bench_report
    finally:
        sys.path.remove(str(ROOT / "bench"))
    assert bench_report.main(["--steps", "2", "--policies", "2", "--keep", str(tmp_path)]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["within_budget"] and result["figures"] >= 8
    meta = json.loads((tmp_path / "report" / "report.json").read_text())
    assert meta["left_out"] == [] and meta["warnings"] == []


def test_study_projection(capsys):
    """The 200-step study is projected from CPU per step: 200 x the six policies' sum,
    over 1, 2 and 64 workers, flagged when 2 workers would take over 10 minutes."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import bench_sim_speed
    finally:
        sys.path.remove(str(ROOT / "bench"))
    cpu = dict.fromkeys(bench_sim_speed.STUDY, 0.5)  # 6 x 0.5 s x 200 steps = 600 s
    bench_sim_speed.study_projection(cpu)
    line = capsys.readouterr().out.strip()
    assert "1 workers   10.0 min" in line and "2 workers    5.0 min" in line and not line.endswith("*")
    bench_sim_speed.study_projection({**cpu, "composite": 6.0})  # 200 x 8.5 s / 2 = 850 s
    assert capsys.readouterr().out.strip().endswith("*")
    bench_sim_speed.study_projection({"verl": 1.0})
    assert "not projected" in capsys.readouterr().out
