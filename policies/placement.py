"""Static group placement: veRL's baseline (each prompt group goes to one worker up front)."""

from __future__ import annotations

from collections import OrderedDict

from simctl.policies.contract import Action, Assign, ClusterView, Event, Policy, StepStarted


def contiguous_chunks(n_items: int, n_bins: int) -> list[int]:
    """Bin of each item when `n_items` in order are split into `n_bins` contiguous chunks of
    near-equal size, as veRL splits a batch across data-parallel rollout workers.

    >>> contiguous_chunks(5, 2)
    [0, 0, 0, 1, 1]
    """
    assert n_bins >= 1
    return [i * n_bins // n_items for i in range(n_items)] if n_items else []


class StaticGroupPlacement(Policy):
    """Whole groups, in batch order, dealt to workers in contiguous chunks at step start.

    No load awareness: the long tail of a worker with an unlucky group is the inefficiency
    every paper in this field starts from.
    """

    name = "static-group"

    def on_event(self, event: Event, view: ClusterView) -> list[Action]:
        if not isinstance(event, StepStarted):
            return []
        groups: OrderedDict[int, list[int]] = OrderedDict()
        for rid in event.requests:
            groups.setdefault(view.request(rid).prompt_id, []).append(rid)
        bins = contiguous_chunks(len(groups), view.num_workers)
        return [
            Assign(request=rid, worker=w)
            for w, rids in zip(bins, groups.values(), strict=True)
            for rid in rids
        ]
