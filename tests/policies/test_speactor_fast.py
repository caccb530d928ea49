"""SpecActor's model functions after the speed work (issue #17) equal their direct forms:
`reconfigure` (costs computed once per laws) equals `best_window` over `tgs_coupled` /
`tgs_decoupled`, `taus_decoupled` equals the summed window distribution, and
`fastest_of_n` (which stops scanning once nothing can be placed) equals the full scan."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from simctl.policies.speactor_model import (
    Affine,
    CostLaws,
    accept_distribution,
    best_window,
    fastest_of_n,
    reconfigure,
    taus_decoupled,
    tgs_coupled,
    tgs_decoupled,
)

probability = st.floats(0.0, 1.0, allow_nan=False)
seconds = st.floats(1e-6, 1e-1, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(probability, st.integers(1, 24))
def test_taus_decoupled_equal_the_summed_distribution(p: float, max_window: int) -> None:
    for w, tau in enumerate(taus_decoupled(p, max_window), start=1):
        probs = accept_distribution(p, w)
        want = sum(probs[a] * (a + 1) / 2.0 for a in range(w)) + w * probs[w]
        assert tau == want  # the same float: summed in the same order


@settings(max_examples=300, deadline=None)
@given(probability, seconds, seconds, seconds, seconds, st.integers(1, 8), st.integers(1, 16))
def test_reconfigure_equals_best_window_of_the_tgs_laws(
    p: float, d_slope: float, d_int: float, v_slope: float, v_int: float, gpus: int, max_window: int
) -> None:
    laws = CostLaws(
        draft=Affine(d_slope, d_int),
        verify=lambda w: Affine(v_slope * w, v_int * (1 + 0.1 * w)),
        decode=Affine(v_slope, v_int),
    )
    w_c, t_c = best_window(lambda w: tgs_coupled(laws, p, w, 1.0), max_window)
    w_d, t_d = best_window(lambda w: tgs_decoupled(laws, p, w, 1.0, gpus), max_window)
    want = ("decoupled", w_d, t_d) if t_d > t_c else ("coupled", w_c, t_c)
    assert reconfigure(laws, p, gpus, max_window) == want


def _full_scan(requests, methods, assigned, workers_by_method, free_workers, load, max_batch):
    """Algorithm 3 as first written: every (request, method) pair is looked at."""
    out = []
    free = list(free_workers)
    for rid, _acc in sorted(requests, key=lambda x: (x[1], x[0])):
        for m in methods:
            if (rid, m) in assigned:
                continue
            pool = [w for w in workers_by_method.get(m, []) if load.get(w, 0) < max_batch]
            if not pool and free:
                w_new = free.pop(0)
                workers_by_method.setdefault(m, []).append(w_new)
                pool = [w_new]
            if not pool:
                continue
            w = min(pool, key=lambda x: (load.get(x, 0), x))
            assigned[(rid, m)] = w
            load[w] = load.get(w, 0) + 1
            out.append((rid, m, w))
    return out


@st.composite
def fon_inputs(draw: st.DrawFn):
    methods = ["a", "b", "c"][: draw(st.integers(1, 3))]
    n = draw(st.integers(0, 40))
    requests = [(r, draw(st.sampled_from([0.0, 0.3, 0.5, 0.9]))) for r in range(n)]
    dedicated = draw(st.lists(st.integers(0, 5), max_size=6, unique=True))
    workers_by_method: dict[str, list[int]] = {}
    for w in dedicated:
        workers_by_method.setdefault(draw(st.sampled_from(methods)), []).append(w)
    load = {w: draw(st.integers(0, 6)) for w in dedicated}
    free = draw(st.lists(st.integers(10, 15), max_size=4, unique=True))
    assigned = {(r, m): 99 for r, _ in requests for m in methods if draw(st.integers(0, 3)) == 0}
    return requests, methods, assigned, workers_by_method, free, load, draw(st.integers(1, 6))


@settings(max_examples=400, deadline=None)
@given(fon_inputs())
def test_fastest_of_n_equals_the_full_scan(args) -> None:
    mine, ref = copy.deepcopy(args), copy.deepcopy(args)
    assert fastest_of_n(*mine) == _full_scan(*ref)
    assert mine == ref  # the same bookkeeping left behind (assigned, workers, loads)
