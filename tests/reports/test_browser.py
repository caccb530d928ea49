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

from simctl.traces.presets import EAGLE_ACCEPT_TLT

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
    "--enable-logging=stderr",  # the page's console messages, as ':CONSOLE' lines
    "--v=0",
)
NEW_FIGURES = ("makespan-breakdown", "step-breakdown", "gpu-busy", "request-times")


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


def _console(stderr: str) -> list[str]:
    """What the page wrote to the console (errors, uncaught exceptions): nothing, for ours."""
    return [line for line in stderr.splitlines() if re.search(r":CONSOLE[:(]", line)]


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
    assert _console(res.stderr) == []
    for name in NEW_FIGURES:
        assert f'<figure id="fig-{name}">' in res.stdout, name
    assert 'id="breakdown-table"' in res.stdout and 'id="references"' in res.stdout

    shot = tmp_path / "report.png"
    res = _run(chromium, tmp_path, f"--screenshot={shot}", "--window-size=1400,3000", report.as_uri())
    assert res.returncode == 0 and shot.is_file() and shot.stat().st_size > 20_000, res.stderr[-2000:]
    if os.environ.get("SIMCTL_KEEP_ARTIFACTS"):
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, ARTIFACTS / "report.png")


def test_folded_worker_timelines_decode_in_chromium(chromium, wide_report, tmp_path):
    """128 workers: the sample in view, every worker folded behind <details>; the folded
    images load too (eager), so opening the control shows them at once."""
    res = _run(chromium, tmp_path, "--dump-dom", wide_report.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    check = _selfcheck(res.stdout)
    page = wide_report.read_text()
    n_img = len(re.findall(r"<img ", page))
    assert page.count('<details class="more">') == 2  # one per policy
    assert check.get("data-images") == str(n_img), check
    assert check.get("data-broken") == "0", check
    assert _console(res.stderr) == []


def test_console_check_can_fail(chromium, report, tmp_path):
    """The console check must be able to fail: a page that throws is caught."""
    copy = Path(shutil.copytree(report.parent, tmp_path / "throws"))
    index = copy / "index.html"
    index.write_text(index.read_text().replace("</body>", "<script>notDefinedAnywhere();</script></body>"))
    res = _run(chromium, tmp_path, "--dump-dom", index.as_uri())
    assert any("notDefinedAnywhere" in line for line in _console(res.stderr))


def test_selfcheck_catches_a_missing_figure(chromium, report, tmp_path):
    """The check must be able to fail: delete one figure and it reports it."""
    copy = Path(shutil.copytree(report.parent, tmp_path / "broken"))
    (copy / "figures" / "steps.png").unlink()
    res = _run(chromium, tmp_path, "--dump-dom", (copy / "index.html").as_uri())
    check = _selfcheck(res.stdout)
    assert check.get("data-broken") == "1", check
    assert "figures/steps.png" in check["text"]


@pytest.fixture(scope="module")
def reproduce_results() -> list:
    """One small paper in quick mode, one seed: its misses carry sensitivity curves."""
    from simctl.reproduce_runner import run_experiments
    from simctl.sim.experiments import experiments_of

    return run_experiments(experiments_of("tlt"), quick=True, seeds=1)


@pytest.fixture(scope="module")
def reproduce_page(tmp_path_factory, reproduce_results) -> Path:
    """The reproduction page of those results."""
    from simctl.reports.reproduce_page import build_reproduce_page

    return build_reproduce_page(
        reproduce_results, tmp_path_factory.mktemp("reproduce") / "page", {"mode": "quick"}
    )


def test_reproduce_page_renders_in_chromium(chromium, reproduce_page, reproduce_results, tmp_path):
    res = _run(chromium, tmp_path, "--dump-dom", reproduce_page.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    check = _selfcheck(res.stdout)
    n_img = len(re.findall(r"<img ", reproduce_page.read_text()))
    misses = [r for r in reproduce_results if r.verdict in ("below", "above")]
    assert misses, "the quick TLT run no longer misses: pick a paper with a miss for this test"
    assert n_img == 1 + len(misses)  # one figure per paper, one sensitivity curve per miss
    assert check.get("data-images") == str(n_img), check
    assert check.get("data-broken") == "0", check
    assert check.get("data-headline") == "yes" and check["text"] == "ok"
    assert 'id="headline-table"' in res.stdout and "tlt/e2e-vs-verl" in res.stdout
    assert 'id="sensitivity"' in res.stdout
    for r in misses:
        slug = r.experiment.id.replace("/", "-")
        assert f'<figure id="sens-{slug}" class="sensitivity"><img src="figures/sensitivity/{slug}.png"' in (
            res.stdout
        )
    assert "accept:eagle" in res.stdout and f"(calibrated: {EAGLE_ACCEPT_TLT:.4g})" in res.stdout
