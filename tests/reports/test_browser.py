"""The page in a real browser: every image decodes and the headline table is there.

Headless Chromium loads index.html from disk (file://, no network); the page's own
self-check script writes the image count into the DOM, which --dump-dom returns. A
screenshot is kept as an artifact for a human to look at.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ARTIFACTS = Path(__file__).resolve().parents[2] / "reports" / "_artifacts"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--virtual-time-budget=10000",
)


@pytest.fixture(scope="module")
def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    reason = "chromium not installed (apt-get update && apt-get install -y chromium)"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must run the browser check")
    pytest.skip(reason)


def _run(chromium: str, tmp: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp / "profile"
    profile.mkdir(exist_ok=True)
    return subprocess.run(
        [chromium, *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def _selfcheck(dom: str) -> dict[str, str]:
    m = re.search(r'<div id="selfcheck"([^>]*)>([^<]*)</div>', dom)
    assert m, "self-check element missing from the dumped DOM"
    attrs = dict(re.findall(r'(data-[a-z]+)="([^"]*)"', m.group(1)))
    attrs["text"] = m.group(2)
    return attrs


def test_page_renders_in_chromium(chromium, report, tmp_path):
    res = _run(chromium, tmp_path, "--dump-dom", report.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    check = _selfcheck(res.stdout)
    n_img = len(re.findall(r"<img ", report.read_text()))
    assert n_img > 0
    assert check.get("data-images") == str(n_img), check
    assert check.get("data-broken") == "0", check
    assert check.get("data-headline") == "yes" and check["text"] == "ok"
    assert 'id="headline-table"' in res.stdout

    shot = tmp_path / "report.png"
    res = _run(chromium, tmp_path, f"--screenshot={shot}", "--window-size=1400,3000", report.as_uri())
    assert res.returncode == 0 and shot.is_file() and shot.stat().st_size > 20_000, res.stderr[-2000:]
    if os.environ.get("SIMCTL_KEEP_ARTIFACTS"):
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, ARTIFACTS / "report.png")


def test_selfcheck_catches_a_missing_figure(chromium, report, tmp_path):
    """The check must be able to fail: delete one figure and it reports it."""
    copy = Path(shutil.copytree(report.parent, tmp_path / "broken"))
    (copy / "figures" / "steps.png").unlink()
    res = _run(chromium, tmp_path, "--dump-dom", (copy / "index.html").as_uri())
    check = _selfcheck(res.stdout)
    assert check.get("data-broken") == "1", check
    assert "figures/steps.png" in check["text"]


@pytest.fixture(scope="module")
def reproduce_page(tmp_path_factory) -> Path:
    """The reproduction page of one small paper in quick mode, one seed."""
    from simctl.reports.reproduce_page import build_reproduce_page
    from simctl.reproduce_runner import run_experiments
    from simctl.sim.experiments import experiments_of

    results = run_experiments(experiments_of("tlt"), quick=True, seeds=1)
    return build_reproduce_page(results, tmp_path_factory.mktemp("reproduce") / "page", {"mode": "quick"})


def test_reproduce_page_renders_in_chromium(chromium, reproduce_page, tmp_path):
    res = _run(chromium, tmp_path, "--dump-dom", reproduce_page.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    check = _selfcheck(res.stdout)
    n_img = len(re.findall(r"<img ", reproduce_page.read_text()))
    assert n_img == 1  # one figure per paper
    assert check.get("data-images") == str(n_img), check
    assert check.get("data-broken") == "0", check
    assert check.get("data-headline") == "yes" and check["text"] == "ok"
    assert 'id="headline-table"' in res.stdout and "tlt/e2e-vs-verl" in res.stdout
