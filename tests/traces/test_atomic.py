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


def test_a_fifo_or_broken_link_is_never_replaced(tmp_path: Path) -> None:
    """Renaming a file over a FIFO, a device or a broken link would replace it (as root,
    `-o /dev/null` replaced the machine's /dev/null): refused by the output check, one line,
    and by atomic_write itself, which every writer goes through."""
    import os

    from click.testing import CliRunner

    from simctl.cli import main

    fifo, broken = tmp_path / "fifo", tmp_path / "broken"
    os.mkfifo(fifo)
    broken.symlink_to(tmp_path / "nowhere")
    for target, words in ((fifo, "not a regular file"), (broken, "broken symbolic link")):
        res = CliRunner().invoke(
            main, ["trace", "gen", "--preset", "efficientrollout-qwen7b-8k", "-o", str(target)]
        )
        (line,) = res.output.strip().splitlines()
        assert res.exit_code == 1 and words in line, res.output
        with pytest.raises(OSError, match="not a regular file"):
            atomic_write(target, lambda tmp: tmp.write_text("x"))
    assert (
        fifo.is_fifo()
        and broken.is_symlink()
        and sorted(p.name for p in tmp_path.iterdir())
        == [
            "broken",
            "fifo",
        ]
    )
