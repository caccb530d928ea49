"""One look for every figure: fonts, colours per series, and the PNG writer.

A series keeps its colour *and* line style/marker in every figure, so a reader can
follow a policy across the page and tell lines apart on a greyscale printout. Past the ten
colours the line style changes with the colour's round, so every (colour, line style) pair
is distinct up to 60 series; legends sit outside the axes, where no line hides them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")  # before pyplot: reports render on headless machines
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

# Okabe-Ito (colour-blind safe), then two of Paul Tol's muted set (wine, teal) for a tenth
# colour; distinct in greyscale with the dashes.
PALETTE = (
    "#0072B2",
    "#D55E00",
    "#009E73",
    "#CC79A7",
    "#E69F00",
    "#56B4E9",
    "#000000",
    "#F0E442",
    "#882255",
    "#44AA99",
)
DASHES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1)), (0, (3, 1, 1, 1, 1, 1)))
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")

ROLE_COLORS = {
    "drafter": "#E69F00",
    "verifier": "#CC79A7",
    "spot-trainer": "#009E73",
    "trainer": "#D55E00",
    "idle": "#BBBBBB",
}
DPI = 100
WIDTH_IN = 11.0

RC: dict[RcKeyType, Any] = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "axes.grid": True,
    "grid.color": "#DDDDDD",
    "grid.linewidth": 0.6,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.edgecolor": "#444444",
    "lines.linewidth": 1.5,
    "savefig.facecolor": "white",
    "figure.facecolor": "white",
    "path.simplify": True,
    "agg.path.chunksize": 20000,
}


@dataclass(frozen=True)
class LineStyle:
    color: str
    linestyle: object
    marker: str

    def kw(self, markers: bool = False) -> dict:
        kw = {"color": self.color, "linestyle": self.linestyle}
        if markers:
            kw |= {"marker": self.marker, "markersize": 3.5}
        return kw


def series_styles(labels: Sequence[str]) -> dict[str, LineStyle]:
    """Series i: colour i mod 10; line style shifted by one each time the colours wrap
    (i + i // 10, mod 6), so two series of one colour never share a line style (up to 60)."""
    n = len(PALETTE)
    return {
        lab: LineStyle(PALETTE[i % n], DASHES[(i + i // n) % len(DASHES)], MARKERS[i % len(MARKERS)])
        for i, lab in enumerate(labels)
    }


def new_figure(height_in: float, width_in: float = WIDTH_IN) -> Figure:
    with plt.rc_context(RC):
        return Figure(figsize=(width_in, height_in), dpi=DPI, layout="constrained")


def subplots(nrows: int = 1, ncols: int = 1, height_in: float = 3.6, **kw):
    """Figure objects without pyplot's global registry: no leaks over hundreds of figures."""
    with plt.rc_context(RC):
        fig = new_figure(height_in)
        axes = fig.subplots(nrows, ncols, squeeze=False, **kw)
    return fig, axes


def save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with plt.rc_context(RC):
        fig.savefig(path, dpi=DPI)
    return path


def step_axis(ax) -> None:
    """Steps are integers; the default locator would print 0.25-step ticks for short runs."""
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step")


LEGEND_ROWS = 18  # entries per legend column


def legend(ax, where: str = "figure", **kw) -> None:
    """The legend outside the axes, where no line hides it; more columns past LEGEND_ROWS
    entries. `where`: "figure" (right of the whole figure: one legend of the series every
    panel shares) or "axes" (right of this axes: a legend of its own lines)."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    ncols = 1 + (len(handles) - 1) // LEGEND_ROWS
    if where == "figure":
        ax.figure.legend(handles, labels, loc="outside right upper", frameon=False, ncols=ncols, **kw)
    else:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, ncols=ncols, **kw)
