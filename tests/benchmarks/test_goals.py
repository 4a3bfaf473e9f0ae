"""bench/report/goals.py: what counts as met, not met, a figure, or a sanity check."""

from __future__ import annotations

from typing import Any

import pytest
from bench.report import goals


def _row(policy: str, cluster: str = "C2-small", load: float = 0.9, **metrics: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"cluster": cluster, "mix": "helios", "load": load, "span": "derived",
                            "policy": policy, "beyond_fewest_jobs": 0, "beyond_empty_share_8plus": 0.5,
                            "jct_mean_8plus": 100.0, "jct_mean_8plus_vs_ideal": 1.2}
    return {**base, **metrics}


def _vs_bestfit(ratio: float) -> dict[str, Any]:
    return {"jct_mean_vs_bestfit": ratio, "jct_mean_8plus_vs_bestfit": ratio,
            "jct_mean_vs_bestfit_range": [ratio, ratio], "jct_mean_8plus_vs_bestfit_range": [ratio, ratio]}


def test_never_worse_than_bestfit_is_not_met_with_nothing_to_compare() -> None:
    judged = goals.judge([_row("ours")], ["C2-small"], "derived")
    assert judged["vs_bestfit"]["cells"] == 0
    assert judged["vs_bestfit"]["met"] is False
    check = goals.placement_checks(judged)[1]
    assert check["met"] is False and check["value"] == "nothing to compare"


@pytest.mark.parametrize(("ratio", "met"), [(1.0, True), (1.0099, True), (1.011, False)])
def test_never_worse_than_bestfit_is_judged_on_every_cell(ratio: float, met: bool) -> None:
    rows = [_row("ours", load=0.7, **_vs_bestfit(1.0)), _row("ours", **_vs_bestfit(ratio)), _row("bestfit")]
    judged = goals.judge(rows, ["C2-small"], "derived")
    assert judged["vs_bestfit"]["cells"] == 2
    assert judged["vs_bestfit"]["met"] is met


def test_fewest_nodes_at_that_moment_is_a_sanity_check_not_a_goal() -> None:
    judged = goals.judge([_row("ours", beyond_fewest_jobs=3)], ["C2-small"], "derived")
    assert "zero_beyond_fewest" not in judged
    assert judged["sanity_fewest_now"] == {"jobs_beyond": 3, "ok": False}
    # not among the checks the headline judges, and labelled as a sanity check in the goals table
    assert all("fewest possible at that moment" not in c["what"] for c in goals.placement_checks(judged))
    table, _ = goals.goals([_row("ours")], ["C2-small"])
    assert "sanity check, not a goal" in table


def test_share_of_big_jobs_on_the_empty_cluster_minimum_is_a_figure() -> None:
    rows = [_row("ours", beyond_empty_share_8plus=0.25), _row("bestfit", beyond_empty_share_8plus=0.2),
            _row("original", beyond_empty_share_8plus=0.99)]
    judged = goals.judge(rows, ["C2-small"], "derived")
    (share,) = judged["on_min_nodes_8plus"]["rows"]
    assert share == pytest.approx({"cluster": "C2-small", "ours": 0.75, "bestfit": 0.8, "original": 0.01})
    figure = goals.placement_checks(judged)[3]
    assert figure["met"] is None
    assert "ours 75.0% (BestFit 80.0%, original rule 1.0%)" in figure["value"]


def test_vs_original_and_gap_closed_are_not_met_without_data() -> None:
    judged = goals.judge([], ["C2-small"], "derived")
    assert judged["vs_original"]["met"] is False and judged["gap_closed"]["met"] is False
    assert judged["sanity_fewest_now"]["ok"] is False


def _scale_row(cold: float, warm: float, peak: float = 500.0, shape: str = "realistic") -> dict[str, Any]:
    return {"shape": shape, "nodes": 7500, "pods": 150_000, "peak_rss_mib": peak,
            "inventory_plus_plan_s": {"cold": cold, "warm_p50": warm, "max": max(cold, warm), "warm": [warm]}}


def test_scale_is_judged_on_the_cold_run_not_the_warm_median() -> None:
    checks = goals.scale_checks({"rows": [_scale_row(cold=4.0, warm=3.0), _scale_row(cold=6.0, warm=3.0)]})
    timed = [c for c in checks if "first inventory" in c["what"]]
    assert [c["met"] for c in timed] == [True, False]
    assert "6.00 s cold (warm median 3.00 s, max 6.00 s)" in timed[1]["value"]
    memory = [c for c in checks if "peak memory" in c["what"]]
    assert [c["met"] for c in memory] == [True, True]


def test_scale_without_a_cold_run_or_results_is_not_met() -> None:
    old = {"nodes": 7500, "pods": 150_000, "peak_rss_mib": 500.0,
           "inventory_plus_plan_s": {"p50": 4.4, "max": 9.9}}
    assert goals.scale_checks(old)[0]["met"] is False
    assert goals.scale_checks({"failed": "Traceback ..."})[0]["met"] is False
    assert goals.scale_checks(None)[0]["met"] is False


def test_apiserver_list_goal_needs_the_managers_own_list() -> None:
    summary = {"p50": 0.2, "p99": 0.3, "max": 0.3, "n": 10}
    old = {"nodes": 1000, "pods": 10_000, "list_all_pods_manager_k8s_py": summary,
           "watch_latency_seconds": {"p50": 0.005}, "server_rss_mib": {"peak": 400.0}}
    listed = goals.apiserver_checks(old)[0]
    assert listed["met"] is False and "not measured" in listed["value"]
    new = {**old, "list_as_manager": {**summary, "p50": 0.6}}
    assert [c["met"] for c in goals.apiserver_checks(new)] == [False, True, True]


def test_planner_goal_uses_the_largest_cluster_and_cpu_time() -> None:
    def row(nodes: int, cpu: float, wall: float, policy: str = "optimal") -> dict[str, Any]:
        return {"nodes": nodes, "mix": "8gpu", "policy": policy, "topology": "none", "cpu_p99_ms": cpu,
                "p99_ms": wall}

    result = {"rows": [row(100, 50.0, 50.0), row(10_000, 3.0, 25.0),
                       row(10_000, 30.0, 30.0, "largest-first")]}
    (check,) = goals.planner_checks(result)
    assert check["met"] is True and check["value"].startswith("3.00 ms")
    assert goals.planner_checks({})[0]["met"] is False
