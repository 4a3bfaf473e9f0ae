"""Counting the decisions where another policy, in the same state, would choose differently."""

from __future__ import annotations

from bench.sim.agreement import comparing
from bench.sim.policies import Context, kueue_best_fit, planner_policy, scheduler_pods


def test_counts_only_choices_that_leave_different_free_counts() -> None:
    caps = {"a": 8, "b": 8, "c": 8, "d": 8}
    spread = scheduler_pods(Context(caps, {1: 1.0}), most_allocated=False)
    ours = planner_policy("optimal")
    place, counts = comparing(ours, {"bestfit": kueue_best_fit, "original": spread, "itself": ours})
    # one GPU: ours and BestFit take the fullest node, the default scheduler the emptiest
    assert place({"a": 8, "b": 8, "c": 1, "d": 3}, 1) == (("c", 1),)
    # 8 GPUs over {7, 4, 4, 4}: ours 4 + 4 (the 7 stays whole), BestFit and the original 7 + 1
    assert place({"a": 7, "b": 4, "c": 4, "d": 4}, 8) == (("b", 4), ("c", 4))
    assert counts["decisions"] == {"one_node": 1, "multi_node": 1}
    assert counts["differ"]["itself"] == {"one_node": 0, "multi_node": 0}
    assert counts["differ"]["bestfit"] == {"one_node": 0, "multi_node": 1}
    assert counts["differ"]["original"] == {"one_node": 1, "multi_node": 1}


def test_a_choice_among_equal_nodes_is_not_a_different_choice() -> None:
    ours = planner_policy("optimal")

    def other_name(free: dict[str, int], gpus: int) -> tuple[tuple[str, int], ...]:
        return (("b", gpus),)  # same free count as "a", another node

    place, counts = comparing(ours, {"other": other_name})  # type: ignore[dict-item]
    assert place({"a": 4, "b": 4}, 2) == (("a", 2),)
    assert counts["differ"]["other"] == {"one_node": 0, "multi_node": 0}
