"""The throughput bench's pure parts: the split the planner made, node-link rates set from the in-node
all-reduce, the interleaved order of the runs, each cell's median and interquartile range, the span cost
fitted from the runs with its bootstrap interval, the model built from it, and the report's section rendered
from stored JSON. The jobs themselves run in `python -m bench.run --only throughput`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from bench import run
from bench.measure import throughput
from bench.report import throughput_section
from bench.sim import model
from bench.sim import span_calibration as sc

ROOT = Path(__file__).resolve().parents[2]
COMPUTE = 0.4
#: comm(k), the exposed share of compute on k nodes, at each link setting (both gradient sizes alike)
SHARE = {"unshaped": {1: 0.25, 2: 0.3, 3: 0.3, 4: 0.35, 8: 0.35}, "1:20": {1: 0.25, 2: 1.25, 3: 1.5, 4: 1.5,
                                                                             8: 1.75}}
SPLITS = {4: ((4,), (3, 1), (2, 2), (2, 1, 1), (1, 1, 1, 1)), 8: ((8,), (4, 4), (2, 2, 2, 2), (1,) * 8)}


def _size(share: float, compute: float = COMPUTE) -> dict[str, float]:
    step = compute * (1 + share)
    return {"steps": 10, "seconds": 10 * step, "steps_per_s": 1 / step, "step_s_median": step,
            "step_s_mean": step, "compute_s_median": compute, "allreduce_s_median": step - compute}


def _run(split: Sequence[int], link: str, repeat: int, share: float, jitter: float = 1.0) -> dict[str, Any]:
    return {"split": list(split), "link": link, "repeat": repeat, "load_average_1m": 0.5, "job_wall_s": 40.0,
            "sizes": {"25": _size(share * jitter), "100": _size(share * jitter)}}


def fake_result(repeats: int = 5) -> dict[str, Any]:
    """A current result: every cell `repeats` times, the comm share of repetition r scaled by 0.9..1.1."""
    jitter = [0.9, 1.0, 1.1, 0.95, 1.05][:repeats]
    runs = [_run((1,), "baseline", r, 0.0) for r in range(repeats)]
    runs += [_run(split, link, r, shares[len(split)], jitter[r]) for r in range(repeats)
             for link, shares in SHARE.items() for ranks in (4, 8) for split in SPLITS[ranks]]
    calibration = [{"split": [ranks], "link": "in-node", "repeat": 0,
                    "sizes": {"25": {**_size(0.25), "allreduce_s_median": 0.1},
                              "100": {**_size(0.25), "allreduce_s_median": 0.4 * ranks / 4}}}
                   for ranks in (4, 8)]
    return {"format": 2, "cores": 2, "ranks": [4, 8], "gradient_mb": [25, 100], "repeats": repeats,
            "in_node": {**sc.in_node_bus_bandwidth(calibration), "runs": calibration, "repeats": 1},
            "links": [{"name": "unshaped", "ratio": None, "payload_bytes_per_s": None, "node_link": ""},
                      {"name": "1:20", "ratio": 20, "payload_bytes_per_s": 1.5e7, "node_link": "126mbit"}],
            "every_run": runs, "seconds_per_size": 12.0, "fit_link": "1:20", "took_s": 9000.0, "work": 600}


# ---- what one job says -------------------------------------------------------------------------------------

def test_the_split_is_read_from_the_managers_plan_line() -> None:
    log = ("2026-11-24T12:28:23.001Z distributetrain: plan (attempt 1): 4 GPU(s) as 2 on node-3, "
           "1 on node-1, 1 on node-2; chief 1 on node-2\n")
    assert throughput.planned_split(log) == (2, 1, 1)
    with pytest.raises(RuntimeError, match="no plan line"):
        throughput.planned_split("nothing planned")


def test_a_node_link_carries_its_rate_as_tcp_payload() -> None:
    from localcluster import parse_node_link

    link = throughput.link_for(5.0e7)
    assert link == "418mbit"
    assert parse_node_link(link).payload_bytes_per_s == pytest.approx(5.0e7, rel=0.002)


def test_the_comm_share_is_exposed_time_over_compute_averaged_over_gradient_sizes() -> None:
    # the rank's own median of each step's remainder, not the difference of the two medians
    one = {"split": [2, 2], "link": "1:20",
           "sizes": {"25": {"step_s_median": 0.49, "compute_s_median": 0.4, "allreduce_s_median": 0.1},
                     "100": {"step_s_median": 1.2, "compute_s_median": 0.4, "allreduce_s_median": 0.8}}}
    assert sc.comm_share(one) == pytest.approx((0.25 + 2.0) / 2)


# ---- the links ---------------------------------------------------------------------------------------------

def test_links_are_set_from_the_slowest_in_node_all_reduce_not_from_tcp() -> None:
    # 4 ranks: 2*(3/4)*25e6/0.1 = 375 MB/s at 25 MB; 8 ranks at 100 MB: 2*(7/8)*100e6/0.8 = 219 MB/s
    def one_node(ranks: int, seconds: dict[str, float]) -> dict[str, Any]:
        return {"split": [ranks], "link": "in-node",
                "sizes": {mb: {"allreduce_s_median": s} for mb, s in seconds.items()}}

    runs = [one_node(4, {"25": 0.1, "100": 0.3}), one_node(4, {"25": 0.1, "100": 0.5}),
            one_node(4, {"25": 0.2, "100": 0.4}), one_node(8, {"25": 0.2, "100": 0.8})]
    found = sc.in_node_bus_bandwidth(runs)
    assert found["bytes_per_s"]["4"]["25"] == pytest.approx(375e6)   # median of 375, 375, 187.5
    assert found["bytes_per_s"]["4"]["100"] == pytest.approx(375e6)  # median of 500, 300, 375
    assert found["slowest_bytes_per_s"] == pytest.approx(2 * 7 / 8 * 100e6 / 0.8)
    links = sc.link_rates(found["slowest_bytes_per_s"], (None, 5, 20))
    assert [link["name"] for link in links] == ["unshaped", "1:5", "1:20"]
    assert links[0]["payload_bytes_per_s"] is None
    assert links[1]["payload_bytes_per_s"] == pytest.approx(found["slowest_bytes_per_s"] / 5)
    assert links[2]["payload_bytes_per_s"] == pytest.approx(found["slowest_bytes_per_s"] / 20)
    with pytest.raises(ValueError, match="one-node job of 2\\+ ranks"):
        sc.in_node_bus_bandwidth([one_node(1, {"25": 0.1})])


def test_a_failed_job_costs_its_cell_one_repetition_not_the_run(tmp_path: Path) -> None:
    calls: list[tuple[int, ...]] = []

    def job(split: tuple[int, ...], *, node_link: str, sizes: Sequence[float],
            seconds: float, work: int) -> dict[str, Any]:
        calls.append(split)
        if split == (2, 2) and calls.count(split) == 1:
            raise RuntimeError("the 4-GPU job on [2, 2] exited with 1")
        return {"split": list(split), "node_link": node_link, "job_wall_s": 1.0,
                "sizes": {"25": {**_size(0.5), "allreduce_s_median": 0.1}}}

    result = throughput.measure(splits={4: ((4,), (2, 2))}, ratios=(20,), sizes=(25,), seconds=1.0,
                                repeats=2, calibration_repeats=1, baseline=False, run=job,
                                progress=lambda _: None)
    assert [(f["split"], f["repeat"]) for f in result["failed_runs"]] == [([2, 2], 0)]
    assert [(r["split"], r["repeat"]) for r in result["every_run"]] == [([4], 0), ([2, 2], 1), ([4], 1)]
    section = _render(tmp_path, {**result, "cores": 2})
    assert "**Runs that failed** (1; their cells have fewer repetitions): 1:20 [2,2] repetition 1: the " \
        "4-GPU job on [2, 2] exited with 1." in section
    assert "| [2,2] | 1 |" in section


def test_measure_calibrates_first_then_sets_the_links_and_interleaves_the_cells() -> None:
    made: list[tuple[tuple[int, ...], str]] = []

    def job(split: tuple[int, ...], *, node_link: str, sizes: Sequence[float],
            seconds: float, work: int) -> dict[str, Any]:
        made.append((split, node_link))
        ranks = sum(split)
        allreduce = 0.0 if ranks == 1 else 2 * (ranks - 1) / ranks * 25e6 / (4e8 if ranks == 4 else 2e8)
        return {"split": list(split), "node_link": node_link, "job_wall_s": 1.0,
                "sizes": {"25": {**_size(0.5), "allreduce_s_median": allreduce}}}

    result = throughput.measure(splits={4: ((4,), (2, 2)), 8: ((8,),)}, ratios=(None, 20), sizes=(25,),
                                seconds=1.0, repeats=2, calibration_repeats=1, run=job,
                                progress=lambda _: None)
    assert made[:2] == [((4,), ""), ((8,), "")]  # the one-node jobs without a link come first
    assert result["in_node"]["slowest_bytes_per_s"] == pytest.approx(2e8)  # the 8 ranks' 200 MB/s
    shaped = result["links"][1]
    assert shaped["payload_bytes_per_s"] == pytest.approx(1e7)
    assert shaped["node_link"] == throughput.link_for(1e7)
    cells = [(tuple(r["split"]), r["link"]) for r in result["every_run"]]
    one_pass = [((1,), "baseline"), ((4,), "unshaped"), ((2, 2), "unshaped"), ((8,), "unshaped"),
                ((4,), "1:20"), ((2, 2), "1:20"), ((8,), "1:20")]
    assert cells == one_pass + one_pass[::-1]
    assert [r["repeat"] for r in result["every_run"]] == [0] * 7 + [1] * 7
    assert [node_link for split, node_link in made[2:]][4:7] == [shaped["node_link"]] * 3


# ---- the order of the runs, and a cell's spread -----------------------------------------------------------

def test_the_schedule_runs_every_cell_once_per_pass_alternating_direction() -> None:
    cells = ["a", "b", "c"]
    order = sc.schedule(cells, 5)
    assert order[:6] == [(0, "a"), (0, "b"), (0, "c"), (1, "c"), (1, "b"), (1, "a")]
    assert len(order) == 15
    for repeat in range(5):  # pass r holds every cell exactly once, and nothing of another pass
        assert sorted(c for r, c in order[3 * repeat:3 * repeat + 3] if r == repeat) == cells
    with pytest.raises(ValueError, match="at least 1"):
        sc.schedule(cells, 0)
    with pytest.raises(ValueError, match="appears twice"):
        sc.schedule(["a", "a"], 2)


def test_a_cell_is_its_median_and_quartiles_over_the_repetitions() -> None:
    assert sc.spread([5.0, 1.0, 4.0, 2.0, 3.0]) == sc.Spread(median=3.0, q1=2.0, q3=4.0, n=5)
    four = sc.spread([1.0, 2.0, 3.0, 4.0])
    assert (four.median, four.q1, four.q3, four.n) == (2.5, 1.75, 3.25, 4)
    assert four.iqr == pytest.approx(1.5)
    assert sc.spread([7.0]) == sc.Spread(7.0, 7.0, 7.0, 1)
    with pytest.raises(ValueError):
        sc.spread([])
    assert sc.percentile([0.0, 10.0, 20.0, 30.0, 40.0], 0.975) == pytest.approx(39.0)
    assert sc.percentile([3.0, 1.0, 2.0], 0.5) == 2.0


def test_cells_keep_every_repetition_not_the_fastest() -> None:
    result = fake_result()
    spreads = sc.cell_spreads(result["every_run"])
    cell = spreads[("1:20", (2, 2))]
    assert cell["comm_share"].n == 5
    assert cell["comm_share"].median == pytest.approx(1.25)  # jitter 0.9..1.1 around 1.25: its median
    assert cell["comm_share"].q1 == pytest.approx(1.25 * 0.95)
    assert cell["comm_share"].q3 == pytest.approx(1.25 * 1.05)
    assert cell["step_s"]["25"].median == pytest.approx(COMPUTE * 2.25)
    assert sc.pass_ratios(result["every_run"])[-1] == pytest.approx((1 + 1.75 * 1.1) / (1 + 1.75 * 0.9))


# ---- the fit -----------------------------------------------------------------------------------------------

def test_the_fit_gives_comm_per_node_count_and_the_slowdown_it_implies() -> None:
    found = sc.fit(fake_result()["every_run"], "1:20")
    assert sorted(found.comm) == [1, 2, 3, 4, 8]
    # both rank counts share SHARE: a one-node job's slowdown (1 + c(k)) / 1.25 where a rank count ran k
    # nodes; 3 nodes: the 4-rank job's 2.0 and the 8-rank job's 1.9 (between its 1.8 on 2 and 2.0 on 4);
    # 8 nodes: the 8-rank job's 2.2 and the 4-rank job's 2.0 held past its 4 nodes
    slowdown = {1: 1.0, 2: 1.8, 3: 1.95, 4: 2.0, 8: 2.1}
    for k, expected in slowdown.items():
        assert found.slowdown[k].median == pytest.approx(expected)
        comm = found.comm[k]
        assert comm.median == pytest.approx(1.25 * expected - 1)
        assert comm.median * 0.85 <= comm.low <= comm.median <= comm.high <= comm.median * 1.15 + 1e-9
    assert found.runs == {1: 10, 2: 15, 3: 5, 4: 10, 8: 5}  # [4] and [8]; [3,1], [2,2], [4,4]; ...
    assert found.repeats == (5, 5)
    assert sc.fit(fake_result()["every_run"], "1:20") == found  # seeded: the same runs, the same interval
    ends = {end: sc.fitted_comm(found, end) for end in ("low", "median", "high")}
    assert ends["low"][1] == ends["high"][1] == pytest.approx(0.25)
    assert ends["high"][2] == pytest.approx(1.25 * found.slowdown[2].high - 1)
    assert ends["median"][2] == pytest.approx(1.25)
    assert ends["low"][2] < ends["median"][2] < ends["high"][2]


def test_rank_counts_are_fitted_apart_so_their_mix_makes_no_dip() -> None:
    """A 4-rank job computes half what an 8-rank one does per rank and ran 1-4 nodes, the 8-rank one 1, 2, 4
    and 8: pooling both into one median per node count made a dip at 4 nodes (the 8-rank job's smaller
    shares outvote) and 8 (only 8-rank runs). Per rank count, then averaged, the profile rises."""
    four = {1: 0.04, 2: 1.04 * 1.916 - 1, 3: 1.04 * 2.107 - 1, 4: 1.04 * 2.203 - 1}
    eight = {1: 0.02, 2: 1.02 * 1.458 - 1, 4: 1.02 * 1.603 - 1, 8: 1.02 * 1.652 - 1}
    split = {(sum(s), len(s)): s for ranks in (4, 8) for s in SPLITS[ranks]}
    runs = [_run(split[ranks, k], "1:20", r, share) for ranks, shares in ((4, four), (8, eight))
            for k, share in shares.items() for r in range(5)]
    found = sc.fit(runs, "1:20")
    expected = {2: (1.916 + 1.458) / 2, 3: (2.107 + (1.458 + 1.603) / 2) / 2, 4: (2.203 + 1.603) / 2,
                8: (2.203 + 1.652) / 2}
    assert {k: found.slowdown[k].median for k in expected} == pytest.approx(expected, abs=1e-3)
    assert found.comm[1].median == pytest.approx(0.03)


def test_the_interval_resamples_repetitions_within_a_cell() -> None:
    """Of five repetitions one is an outlier: a resample's median is the outlier when 3+ of its 5 draws are
    (5.8% of resamples), so the 95% interval reaches it; of nine, 5+ of 9 draws (0.1%), so it does not."""
    def runs(n: int) -> list[dict[str, Any]]:
        values = [1.0] * (n - 1) + [5.0]
        return ([_run((4,), "1:20", r, 0.5) for r in range(n)]
                + [_run((2, 2), "1:20", r, v) for r, v in enumerate(values)])

    five = sc.fit(runs(5), "1:20").comm[2]
    assert (five.median, five.low, five.high) == pytest.approx((1.0, 1.0, 5.0))
    nine = sc.fit(runs(9), "1:20").comm[2]
    assert (nine.median, nine.low, nine.high) == pytest.approx((1.0, 1.0, 1.0))
    with pytest.raises(ValueError, match="needs one-node runs"):
        sc.fit([r for r in runs(5) if r["split"] != [4]], "1:20")
    with pytest.raises(ValueError, match="no run at link"):
        sc.fit(runs(5), "1:5")


def test_the_model_takes_comm_per_node_count_monotone_interpolated_and_flat_past_the_last() -> None:
    cost = model.span_cost_from_comm({1: 0.2, 2: 1.0, 3: 0.9, 4: 1.2, 8: 2.0})
    comm = [round(cost.comm(k), 6) for k in range(1, 11)]
    assert comm == [0.2, 1.0, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0, 2.0, 2.0]
    assert cost.slowdown(2, 1) == pytest.approx(2.0 / 1.2)
    assert cost.slowdown(4, 2) == pytest.approx(2.2 / 2.0)
    flat = model.span_cost_from_comm({1: 0.3, 2: 0.3})
    assert flat.slowdown(5, 1) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="on 1 and 2 nodes"):
        model.span_cost_from_comm({1: 0.3, 3: 0.5})
    assert model.monotone((0.2, 1.0, 0.97, 1.1)) == (0.2, 1.0, 1.0, 1.1)


def test_the_simulators_span_cost_is_the_stored_runs_fit() -> None:
    """bench/sim/model.py's FITTED_COMM is what the stored throughput run fits (re-measured: copy it)."""
    speed = ROOT / "bench" / "results" / "speed.json"
    result = json.loads(speed.read_text()).get("throughput") if speed.exists() else None
    if not result or "every_run" not in result:
        pytest.skip("no throughput run stored in bench/results/speed.json yet")
    found = sc.fit(result["every_run"], result.get("fit_link") or f"1:{model.FIT_LINK_RATIO}")
    for end in ("low", "median", "high"):
        fitted = sc.fitted_comm(found, end)
        assert sorted(fitted) == sorted(model.FITTED_COMM[end])
        assert [fitted[k] for k in sorted(fitted)] == pytest.approx(
            [model.FITTED_COMM[end][k] for k in sorted(fitted)], abs=0.0005)
    assert result.get("format") == 2  # repeated, interleaved runs, links from the in-node all-reduce
    assert model.SPAN_COST.slowdown(2, 1) == pytest.approx(found.slowdown[2].median, abs=0.001)
    low, high = (model.SPAN_COST_ENDS[end].slowdown(2, 1) for end in ("low", "high"))
    assert low <= model.SPAN_COST.slowdown(2, 1) <= high
    steps = [model.SPAN_COST.slowdown(k, 1) for k in range(1, 12)]
    assert steps[0] == 1.0 and steps[1] > 1.0 and all(b >= a for a, b in pairwise(steps))


def test_the_borrowed_and_the_2017_span_costs_are_kept_for_comparison() -> None:
    cost = model.DERIVED_2017_SPAN_COST
    assert cost.comm_cross == pytest.approx(((1 / 0.9 - 1) + (1 / 0.68 - 1)) / 2)
    assert cost.comm_cross / cost.comm_in == pytest.approx(230 / 74)
    assert [round(cost.slowdown(k, 1), 3) for k in (2, 3, 4)] == [1.18, 1.241, 1.271]
    borrowed = [round(model.BORROWED_SPAN_COST.slowdown(k, 1), 3) for k in (2, 3, 4, 8)]
    assert borrowed == [1.192, 1.192, 1.193, 1.193]


# ---- the report -------------------------------------------------------------------------------------------

def _render(tmp_path: Path, result: dict[str, Any]) -> str:
    (tmp_path / "speed.json").write_text(json.dumps({"throughput": result}))
    (tmp_path / "runs.json").write_text(json.dumps({"throughput": {
        "date": "2000-01-01 00:00 UTC", "commit": "abc", "command": "python -m bench.run --only throughput",
        "cpu": "x", "cores": 2, "load_average_1m": 0.4}}))
    assert run.main(["--render-only", "--out", str(tmp_path)]) == 0
    doc = (tmp_path / "benchmarks.md").read_text()
    assert "### throughput" not in doc  # its own section, not a speed bench's table
    section = doc.split(f"## {throughput_section.TITLE}\n", 1)[1]
    return section.split("\n## ", 1)[0]


def test_the_report_shows_median_iqr_and_n_the_links_and_the_fit(tmp_path: Path) -> None:
    section = _render(tmp_path, fake_result())
    # [2,2], 25 MB: steps/s 1/(0.4 (1 + share j)), j the repetitions' 0.9..1.1 (quartiles at 0.95 and 1.05)
    def cell(share: float) -> str:
        q3, median, q1 = (1 / (COMPUTE * (1 + share * j)) for j in (0.95, 1.0, 1.05))
        return f"{median:.2f} [{q1:.2f}-{q3:.2f}]"

    assert f"| [2,2] | 5 | {cell(0.3)} | {cell(0.3)} | {cell(1.25)} | {cell(1.25)} |" in section
    assert "| 0.30 [0.28-0.32] | 1.25 [1.19-1.31] |" in section  # the comm share, 0.3 and 1.25 x 0.95..1.05
    assert "| [1]x8 | 5 |" in section and "**8-rank job.**" in section
    assert "The slowest, 219 MB/s, sets the links: 1:20: 15 MB/s of TCP payload (`--node-link 126mbit`)" \
        in section
    assert "every cell ran 5 times, round robin" in section
    assert "2 nodes 1.250 [" in section and "(n=15)" in section
    assert "bench/sim/model.py holds other values" in section  # the fake fit is not the stored one
    assert "a fixed compute step (600 256x256 float32 matrix products" in section
    assert "on a gradient large enough for bandwidth, not latency, to set its time: 4 ranks" in section
    assert f"about {throughput_section.estimate_s() / 60:.0f} minutes" in section
    assert "![slowdown per split](img/throughput_slowdown.png)" in section
    assert (tmp_path / "img" / "throughput_slowdown.png").stat().st_size > 10_000


def test_the_full_run_estimate_counts_every_job() -> None:
    job = throughput_section.JOB_S
    four = job[(4, "unshaped")] + job[(4, "1:5")] + job[(4, "1:20")]
    eight = job[(8, "unshaped")] + job[(8, "1:5")] + job[(8, "1:20")]
    # 5 passes of the baseline, 5 four-rank and 4 eight-rank splits at 3 links; 3 calibration runs of [4], [8]
    calibration = 3 * (job[(4, "unshaped")] + job[(8, "unshaped")])
    expected = 5 * (job[(1, "baseline")] + 5 * four + 4 * eight) + calibration
    assert throughput_section.estimate_s() == pytest.approx(expected)


def test_quick_mode_and_a_non_root_run_skip_the_jobs() -> None:
    assert "skipped" in throughput.main(True)
