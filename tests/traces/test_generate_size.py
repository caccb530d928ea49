"""`trace gen` refuses, before any work, a trace that cannot fit in memory (it used to run
for a minute and die in a MemoryError traceback)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from simctl.cli import main
from simctl.traces.generate import PEAK_BYTES_PER_ROW, check_size
from simctl.traces.presets import get_preset


def test_estimate_counts_requests_and_refuses_past_half_the_memory() -> None:
    p = get_preset("dapo-32b-20k")
    rows = p.prompts_per_step * p.group_size
    assert check_size(p, 1, 1.0, memory_bytes=1 << 40) == rows
    assert check_size(p, 2, 0.5, memory_bytes=1 << 40) == rows
    fits = 2 * rows * PEAK_BYTES_PER_ROW
    assert check_size(p, 1, 1.0, memory_bytes=fits) == rows
    with pytest.raises(ValueError, match=r"16,384 requests.*use fewer --steps"):
        check_size(p, 1, 1.0, memory_bytes=fits - 2)


def test_cli_refuses_at_once_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "huge.parquet"
    args = ["trace", "gen", "--preset", "dapo-32b-20k", "--steps", "10000000", "-o", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    assert len(result.output.strip().splitlines()) == 1
    assert "163,840,000,000 requests" in result.output
    assert not out.exists()
