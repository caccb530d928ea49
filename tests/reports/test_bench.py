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
