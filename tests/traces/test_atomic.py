"""atomic_write: the result appears whole or not at all, and an error names the user's file."""

from __future__ import annotations

from pathlib import Path

import pytest

from simctl.traces.atomic import atomic_write


def test_a_failed_write_names_the_file_asked_for_and_leaves_nothing(tmp_path: Path) -> None:
    """An OSError on the hidden temporary is reported on the path the user gave (its
    `.name.tmp-PID-N` sibling means nothing to them), and no temporary is left."""
    target = tmp_path / "out.json"

    def writer(tmp: Path) -> None:
        (tmp.parent / "missing" / "x").write_text("")  # (an OSError naming another file)

    with pytest.raises(FileNotFoundError) as other:
        atomic_write(target, writer)
    assert other.value.filename.endswith("missing/x")  # not the temporary's: left as it is

    def failing(tmp: Path) -> None:
        tmp.mkdir()
        raise IsADirectoryError(21, "Is a directory", str(tmp))

    with pytest.raises(IsADirectoryError) as own:
        atomic_write(target, failing)
    assert own.value.filename == str(target) and "tmp-" not in str(own.value)
    assert list(tmp_path.iterdir()) == []
