"""Each peer policy does what its source describes, on small hand-made clusters."""

from __future__ import annotations

import random
from collections.abc import Mapping

import pytest
from bench.sim.policies import (
    POLICIES,
    Context,
    fgd,
    fgd_fragment_table,
    kueue_best_fit,
    kueue_least_free,
    largest_first_counts,
    planner_policy,
    planner_small_nodes_first,
    scheduler_pods,
)


def fewest(free: Mapping[str, int], gpus: int) -> int:
    nodes, need = 0, gpus
    for count in sorted(free.values(), reverse=True):
        if need <= 0:
            break
        need -= count
        nodes += 1
    return nodes


def test_best_fit_takes_most_free_then_the_tightest_for_the_rest() -> None:
    # the example of KEP-2724 / ANCHORS.md: [3, 3, 2, 1] free, 7 pods -> 3 + 3 + 1
    assert kueue_best_fit({"a": 3, "b": 3, "c": 2, "d": 1}, 7) == (("a", 3), ("b", 3), ("d", 1))
    assert kueue_best_fit({"a": 8, "b": 3, "c": 2}, 2) == (("c", 2),)
    assert kueue_best_fit({"a": 7, "b": 4, "c": 4, "d": 4}, 8) == (("a", 7), ("b", 1))
    assert kueue_best_fit({"a": 1}, 2) is None


def test_least_free_capacity_prefers_the_fullest_node_that_fits_else_fills_from_the_fullest_up() -> None:
    assert kueue_least_free({"a": 8, "b": 3, "c": 2}, 3) == (("b", 3),)
    assert kueue_least_free({"a": 1, "b": 2, "c": 3, "d": 8}, 9) == (("c", 3), ("d", 3), ("b", 2), ("a", 1))


def test_original_rule_splits_largest_first_and_the_default_scheduler_spreads_the_pods() -> None:
    caps = {"a": 8, "b": 8, "c": 8}
    spread = scheduler_pods(Context(caps, {1: 1.0}), most_allocated=False)
    # the design's example: 6 over [5, 3, 2] -> counts [5, 1]; the 1-GPU pod goes to the emptiest node
    assert largest_first_counts({"a": 5, "b": 3, "c": 2}, 6) == [5, 1]
    assert spread({"a": 5, "b": 3, "c": 2}, 6) == (("a", 5), ("b", 1))
    # a 1-GPU job lands on a whole free node rather than on the nearly full one: fragmentation
    assert spread({"a": 8, "b": 8, "c": 1}, 1) == (("a", 1),)


def test_original_counts_are_the_planners_largest_first() -> None:
    rng = random.Random(3)
    for _ in range(300):
        free = {f"n{i:02d}": rng.randint(0, 8) for i in range(rng.randint(1, 10))}
        gpus = rng.randint(1, 40)
        planned = planner_policy("largest-first")(free, gpus)
        expected = None if planned is None else sorted((take for _, take in planned), reverse=True)
        assert largest_first_counts(free, gpus) == expected, (free, gpus)


def test_most_allocated_bin_packs_each_pod_by_the_share_of_its_node_in_use() -> None:
    caps = {"a": 8, "b": 2, "c": 8}
    pack = scheduler_pods(Context(caps, {1: 1.0}), most_allocated=True)
    # 8-GPU node with 4 free: (4 + 1) / 8 in use after; whole 2-GPU node: 1 / 2; the 8-GPU node wins
    assert pack({"a": 4, "b": 2, "c": 8}, 1) == (("a", 1),)
    assert pack({"a": 8, "b": 2, "c": 8}, 9) == (("a", 8), ("b", 1))


def test_fgd_puts_a_job_where_expected_fragmentation_grows_least() -> None:
    table = fgd_fragment_table({1: 0.5, 8: 0.5}, 8)
    assert table[8] == 0 and table[2] == pytest.approx(1.0) and table[1] == pytest.approx(0.5)
    place = fgd(Context({"a": 8, "b": 8, "c": 8}, {1: 0.5, 8: 0.5}))
    # taking 1 of 8 strands 7 x 0.5; of 2 it lowers fragmentation by 0.5, of 1 by 0.5: tie -> the tighter
    assert place({"a": 8, "b": 2, "c": 1}, 1) == (("c", 1),)
    # too big for one node: the largest whole, the rest by the same rule
    assert place({"a": 8, "b": 2, "c": 1}, 9) == (("a", 8), ("c", 1))


def test_ours_is_the_planner() -> None:
    assert planner_policy("optimal")({"a": 7, "b": 4, "c": 4, "d": 4}, 8) == (("b", 4), ("c", 4))
    assert planner_policy("optimal")({"a": 1}, 2) is None


def test_the_proposal_keeps_the_planners_free_counts_but_fills_small_nodes_first() -> None:
    caps = {"a": 8, "b": 2, "c": 8, "d": 4}
    free = {"a": 2, "b": 2, "c": 8, "d": 4}
    small_first = planner_small_nodes_first(Context(caps, {1: 1.0}))
    assert planner_policy("optimal")(free, 2) == (("a", 2),)
    assert small_first(free, 2) == (("b", 2),)  # the 8-GPU node keeps its 2 for when its jobs end
    assert small_first(free, 10) == (("c", 8), ("b", 2))


@pytest.mark.parametrize("key", sorted(POLICIES))
def test_every_policy_allocates_exactly_what_is_asked_from_free_gpus(key: str) -> None:
    rng = random.Random(7)
    for _ in range(300):
        caps = {f"n{i:02d}": rng.choice([1, 2, 4, 8]) for i in range(rng.randint(1, 12))}
        free = {name: rng.randint(0, cap) for name, cap in caps.items()}
        total = sum(free.values())
        if total == 0:
            continue
        gpus = rng.randint(1, total)
        place = POLICIES[key][1](Context(caps, {1: 0.7, 2: 0.1, 8: 0.2}))
        got = place(free, gpus)
        assert got is not None, (key, free, gpus)
        assert sum(take for _, take in got) == gpus
        assert all(0 < take <= free[name] for name, take in got)
        assert len({name for name, _ in got}) == len(got)
        if key != "leastfree":  # LeastFreeCapacity spans extra nodes by design
            assert len(got) == fewest(free, gpus), (key, free, gpus, got)
