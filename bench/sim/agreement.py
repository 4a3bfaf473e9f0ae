"""How often another policy, asked in the very same state, would have chosen differently from ours.

Placement quality differences between good policies are small and noisy end to end (a different choice
today changes every later state), so this looks at single decisions instead: for each job ours places, the
other policies are asked too, on the same free GPUs, and we count the decisions where they would leave a
different set of free counts behind (which nodes by name does not matter; how many GPUs stay free where
does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.sim.policies import Allocation, PlaceFn


def _footprint(free: Mapping[str, int], allocation: Allocation) -> list[tuple[int, int]]:
    return sorted((free[name], take) for name, take in allocation)


def comparing(main: PlaceFn, others: Mapping[str, PlaceFn]) -> tuple[PlaceFn, dict[str, Any]]:
    """`main`, unchanged, plus counters filled while it runs: decisions by one-node / multi-node jobs (as
    ours placed them), and for each other policy how many of those it would have made differently."""
    counts: dict[str, Any] = {"decisions": {"one_node": 0, "multi_node": 0},
                              "differ": {key: {"one_node": 0, "multi_node": 0} for key in others}}

    def place(free: Mapping[str, int], gpus: int) -> Allocation | None:
        chosen = main(free, gpus)
        if chosen is None:
            return None
        kind = "one_node" if len(chosen) == 1 else "multi_node"
        counts["decisions"][kind] += 1
        mine = _footprint(free, chosen)
        for key, other in others.items():
            theirs = other(free, gpus)
            if theirs is None or _footprint(free, theirs) != mine:
                counts["differ"][key][kind] += 1
        return chosen

    return place, counts
