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


def _record(policy: str, seed: int, jct: float, cluster: str = "C2-small", load: float = 0.9
            ) -> dict[str, Any]:
    return {"cluster": cluster, "mix": "helios", "load": load, "span": "derived", "policy": policy,
            "seed": seed, "metrics": {"jct_mean": jct, "jct_mean_8plus": jct}}


def _paired(ours: list[float], bestfit: list[float]) -> list[dict[str, Any]]:
    return [_record("ours", s, a) for s, a in enumerate(ours)] + \
        [_record("bestfit", s, b) for s, b in enumerate(bestfit)]


def test_never_worse_than_bestfit_is_not_met_with_nothing_to_compare() -> None:
    judged = goals.judge([_row("ours")], ["C2-small"], "derived")
    assert judged["vs_bestfit"]["paired"]["intervals"] == []
    assert judged["vs_bestfit"]["met"] is False
    check = goals.placement_checks(judged)[1]
    assert check["met"] is False and check["value"] == "nothing to compare (no paired seeds)"


def test_the_paired_interval_is_students_t_over_the_seeds_log_ratios() -> None:
    ratio, low, high = goals.paired_interval([101.0, 99.0, 100.0], [100.0, 100.0, 100.0]) or (0, 0, 0)
    assert ratio == pytest.approx(1.0, abs=1e-4)
    # log ratios 0.00995, -0.01005, 0: sd 0.01, t(2) 4.303, half width 4.303 * 0.01 / sqrt(3)
    assert (low, high) == pytest.approx((0.9755, 1.0251), abs=1e-3)
    assert goals.paired_interval([1.0], [1.0]) is None


@pytest.mark.parametrize(("ours", "verdict", "met"), [
    ([100.0, 100.2, 99.9, 100.1, 100.0], "within", True),      # tight around 1.00: shown within 1%
    ([97.0, 102.0, 99.0, 101.5, 100.0], "open", False),        # mean under 1.01, seeds 0.97-1.02: not shown
    ([103.0, 103.2, 102.9, 103.1, 103.0], "worse", False),     # shown 3% worse
])
def test_bestfit_equivalence_is_judged_on_the_whole_interval(ours: list[float], verdict: str,
                                                             met: bool) -> None:
    judged = goals.judge([_row("ours")], ["C2-small"], "derived", _paired(ours, [100.0] * 5))
    paired = judged["vs_bestfit"]["paired"]
    assert {i["verdict"] for i in paired["intervals"]} == {verdict}
    assert judged["vs_bestfit"]["met"] is met
    shown = goals.placement_checks(judged)[1]
    assert (shown["verdict"] or "").startswith("**not shown**") is (verdict == "open")


def test_the_achievable_gain_is_the_share_of_the_gap_from_the_original_rule_to_the_ideal_bound() -> None:
    rows = [_row("original", jct_mean_8plus=200.0), _row("ours", jct_mean_8plus=150.0),
            _row("ideal", jct_mean_8plus=100.0)]
    records = [_record(p, s, j) for s, (o, u, i) in enumerate([(200.0, 140.0, 100.0), (200.0, 160.0, 100.0)])
               for p, j in (("original", o), ("ours", u), ("ideal", i))]
    judged = goals.judge(rows, ["C2-small"], "derived", records)
    (row,) = judged["achievable_gain"]["rows"]
    assert row["share"] == pytest.approx(0.5) and row["seed_range"] == pytest.approx([0.4, 0.6])
    assert row["ideal_vs_original"] == pytest.approx(0.5)
    assert judged["achievable_gain"]["met"] is True
    rows[1] = _row("ours", jct_mean_8plus=160.0)
    assert goals.judge(rows, ["C2-small"], "derived", records)["achievable_gain"]["met"] is False
    # the ratio to the original rule stays as a figure
    assert goals.judge(rows, ["C2-small"], "derived")["vs_original"]["met"] is None


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


def test_achievable_gain_and_gap_closed_are_not_met_without_data() -> None:
    judged = goals.judge([], ["C2-small"], "derived")
    assert judged["achievable_gain"]["met"] is False and judged["gap_closed"]["met"] is False
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


def test_scale_names_the_managers_own_cpu_beside_the_wall_time() -> None:
    row = {**_scale_row(cold=6.0, warm=3.0), "cold": {"total": {"wall": 6.0, "cpu": 2.4, "server_cpu": 4.5}}}
    (timed, _) = goals.scale_checks({"rows": [row]})
    assert timed["value"].endswith("; the manager's own CPU 2.40 s of it") and timed["met"] is False


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


@pytest.mark.parametrize(("ours", "bare", "met"), [
    ([14.0, 14.5, 16.0], [12.0, 12.5, 13.0], True),     # 1.16x and under 15 s
    ([21.0, 21.3, 23.0], [18.5, 18.6, 20.0], False),    # 1.15x, but over 15 s
    ([14.0, 14.9, 15.0], [10.0, 11.0, 11.5], False),    # under 15 s, but 1.35x
])
def test_start_up_is_judged_against_bare_horovodrun_and_the_clock(ours: list[float], bare: list[float],
                                                                  met: bool) -> None:
    (check,) = goals.startup_checks({"first_step_s": ours, "bare_first_step_s": bare})
    assert check["met"] is met
    assert goals.startup_checks({"first_step_s": [20.0]})[0]["met"] is False  # no bare run beside it
