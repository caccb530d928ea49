"""Small pieces whose arithmetic the figures rely on."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from simctl.reports.context import sum_on_grid
from simctl.reports.fig_dynamics import cdf_points
from simctl.reports.fig_timeline import merge_segments, role_intervals


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 100), st.floats(0.01, 50), st.integers(1, 64)), min_size=1, max_size=40)
)
def test_sum_on_grid_matches_brute_force(segs):
    t0 = np.array([s[0] for s in segs])
    t1 = t0 + np.array([s[1] for s in segs])
    v = np.array([s[2] for s in segs], dtype=float)
    grid = np.linspace(0, 160, 97)
    brute = np.array([v[(t0 <= g) & (g < t1)].sum() for g in grid])
    np.testing.assert_allclose(sum_on_grid(t0, t1, v, grid), brute, atol=1e-6)


def test_cdf_counts_unfinished_in_denominator():
    x, y = cdf_points(np.array([1.0, 2.0, np.nan, 3.0]), 4)
    assert y[-1] == 0.75 and x[-1] == 3.0 and x[0] == 0.0


def test_merge_segments_keeps_busy_time_and_bounds_rows():
    n = 20000
    t = np.linspace(0, 100, n + 1)
    df = pd.DataFrame(
        {"worker": 0, "t0_s": t[:-1], "t1_s": t[1:], "batch": 8, "gamma_mean": 0.0, "iterations": 1}
    )
    out = merge_segments(df, 100.0, bins=500)
    assert len(out) <= 501
    assert (out["t1_s"] - out["t0_s"]).sum() == np.float64(100.0) or np.isclose(
        (out["t1_s"] - out["t0_s"]).sum(), 100.0
    )
    assert np.allclose(out["batch"], 8)


def test_role_intervals_end_at_makespan():
    roles = pd.DataFrame(
        {"worker": [0, 0, 1], "time_s": [0.0, 5.0, 0.0], "role": ["rollout", "trainer", "rollout"]}
    )
    iv = role_intervals(roles, 9.0).sort_values(["worker", "t0_s"]).reset_index(drop=True)
    assert iv[["t0_s", "t1_s"]].values.tolist() == [[0.0, 5.0], [5.0, 9.0], [0.0, 9.0]]
    assert list(iv["role"]) == ["rollout", "trainer", "rollout"]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 6), st.floats(0, 100), st.floats(0.01, 20), st.integers(1, 64), st.booleans()
        ),
        min_size=1,
        max_size=30,
    )
)
def test_timeline_bars_are_the_segments_on_their_worker_rows(segs):
    """The worker timeline draws one rectangle per segment (all workers in one collection)
    on the row of its worker, `broken_barh`'s rectangles: x from t0 to t1, 0.76 rows tall,
    purple where it speculated; replica work hatched over it."""
    from matplotlib.colors import Normalize

    from simctl.reports.fig_timeline import SPEC_CMAP, _draw_segments
    from simctl.reports.style import subplots

    df = pd.DataFrame(segs, columns=["worker", "t0_s", "dt", "batch", "spec"])
    df = df.assign(t1_s=df.t0_s + df.dt, gamma_mean=df.spec * 3.0, replicas=(df.batch % 5 == 0).astype(int))
    ypos = {w: i for i, w in enumerate(sorted(set(df.worker)))}
    _, axes = subplots(1, 1)
    ax = axes[0][0]
    norm = Normalize(0, 64)
    hatched = _draw_segments(ax, df, norm, ypos)
    bars = ax.collections[0]
    assert len(ax.collections) == 1 + hatched and hatched == bool((df.replicas > 0).any())
    paths = bars.get_paths()
    assert len(paths) == len(df)
    for path, (_, seg) in zip(paths, df.iterrows(), strict=True):
        xs, ys = path.vertices[:4, 0], path.vertices[:4, 1]
        assert (xs.min(), xs.max()) == (seg.t0_s, seg.t1_s)
        np.testing.assert_allclose((ys.min(), ys.max()), (ypos[seg.worker] - 0.38, ypos[seg.worker] + 0.38))
    colors = bars.get_facecolors()
    spec = df.spec.to_numpy()
    np.testing.assert_allclose(colors[spec], SPEC_CMAP(norm(df.batch.to_numpy()[spec])))
    if hatched:  # replica segments hatched as the union of each worker's (none left out)
        boxes = [p.vertices[:4] for p in ax.collections[1].get_paths()]
        assert len(boxes) <= int((df.replicas > 0).sum())
        for _, seg in df[df.replicas > 0].iterrows():
            y = ypos[seg.worker]
            assert any(
                b[:, 0].min() <= seg.t0_s and seg.t1_s <= b[:, 0].max() and b[:, 1].min() < y < b[:, 1].max()
                for b in boxes
            )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.floats(0, 50), st.floats(0.0, 5)), min_size=1, max_size=25),
    st.floats(0, 2),
)
def test_joined_spans_cover_the_same_time_per_worker(spans, gap):
    """Joining a worker's intervals less than `gap` apart covers every instant they covered,
    and adds only gaps shorter than `gap`."""
    from simctl.reports.fig_timeline import joined_spans

    df = pd.DataFrame(spans, columns=["worker", "t0_s", "dt"]).assign(t1_s=lambda d: d.t0_s + d.dt)
    out = joined_spans(df, gap)
    for w, g in df.groupby("worker"):
        mine = out[out.worker == w].sort_values("t0_s")
        assert all(((mine.t0_s <= r.t0_s) & (r.t1_s <= mine.t1_s)).any() for _, r in g.iterrows())
        assert (mine.t0_s.to_numpy()[1:] - mine.t1_s.to_numpy()[:-1] >= gap - 1e-12).all()  # kept apart
        assert mine.t0_s.min() == g.t0_s.min() and mine.t1_s.max() == g.t1_s.max()
