"""The order a sweep hands out its points (simctl.sweep_order): costliest first, stable."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from simctl.policies.registry import REGISTRY
from simctl.sweep_order import RELATIVE_COST, longest_first, relative_cost


def test_relative_costs_name_registered_policies() -> None:
    """A renamed policy would silently fall back to verl's cost: every entry is a policy."""
    assert set(RELATIVE_COST) <= set(REGISTRY)
    assert relative_cost("composite") > relative_cost("seer") > relative_cost("ngram") > relative_cost("verl")
    assert relative_cost("a-plug-in") == 1.0


@given(st.lists(st.integers(0, 5).map(float), max_size=30))
def test_longest_first_is_a_stable_descending_order(costs: list[float]) -> None:
    order = longest_first(costs)
    assert sorted(order) == list(range(len(costs)))
    for a, b in itertools.pairwise(order):
        assert costs[a] > costs[b] or (costs[a] == costs[b] and a < b)
