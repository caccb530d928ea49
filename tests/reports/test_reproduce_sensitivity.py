"""The reproduction page's sensitivity section, from hand-made results (no simulation)."""

from __future__ import annotations

from pathlib import Path

from simctl.reports.reproduce_page import build_reproduce_page, reach_line
from simctl.sim.experiments import experiments_of
from simctl.sim.reproduce_stats import Result, Summary
from simctl.sim.sensitivity import Curve


def _curve(values: tuple[float, ...], metric: tuple[float, ...], at: float | None) -> Curve:
    return Curve(
        "accept:eagle", "eagle acceptance", 0.665, values, metric, at, 1, (1, 2, 3), "Table 6 (§6.3)."
    )


def _results() -> list[Result]:
    e2e, t3 = experiments_of("tlt")
    below = Summary(1.4, 1.3, 1.5, 3)
    reached = _curve((0.55, 0.665, 0.8), (1.3, 1.44, 1.8), 0.7357)
    return [
        Result(e2e, "quick", ((0, 1, 1.4),), below, "below", sensitivity=reached),
        Result(
            t3, "quick", ((0, 1, 1.4),), below, "below", sensitivity=_curve((0.55, 0.665), (1.3, 1.4), None)
        ),
    ]


def test_reach_lines_name_the_input_and_the_calibrated_value() -> None:
    assert reach_line(_curve((0.5, 0.9), (1.0, 2.0), 0.7)) == (
        "reaches the paper's range at eagle = 0.7 (calibrated: 0.665)"
    )
    assert reach_line(_curve((0.5, 0.9), (1.0, 1.1), None)) == (
        "not reached on the grid eagle = 0.5 .. 0.9 (calibrated: 0.665)"
    )
    assert "cannot move" in reach_line(_curve((), (), None))


def test_page_has_one_sensitivity_figure_per_swept_miss(tmp_path: Path) -> None:
    index = build_reproduce_page(_results(), tmp_path / "page", {"mode": "quick"})
    html = index.read_text()
    for slug in ("tlt-e2e-vs-verl", "tlt-table3-32b-8-nodes"):
        assert (
            f'<figure id="sens-{slug}" class="sensitivity"><img src="figures/sensitivity/{slug}.png"' in html
        )
        assert (index.parent / "figures" / "sensitivity" / f"{slug}.png").stat().st_size > 5000
    assert "reaches the paper&#x27;s range at eagle = 0.7357 (calibrated: 0.665)" in html
    assert "not reached on the grid eagle = 0.55 .. 0.665" in html
    assert html.count("Why this input: Table 6 (§6.3).") == 2


def test_a_curve_nothing_reads_gets_a_line_but_no_figure(tmp_path: Path) -> None:
    (e2e, _) = experiments_of("tlt")
    flat = Result(
        e2e, "quick", ((0, 1, 1.4),), Summary(1.4, 1.3, 1.5, 3), "below", sensitivity=_curve((), (), None)
    )
    index = build_reproduce_page([flat], tmp_path / "page", {"mode": "quick"})
    html = index.read_text()
    assert '<figure id="sens-tlt-e2e-vs-verl" class="sensitivity"><figcaption>' in html
    assert not (index.parent / "figures" / "sensitivity").exists()
