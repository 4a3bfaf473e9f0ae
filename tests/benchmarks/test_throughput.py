"""The throughput bench's pure parts: the split the planner made, node-link rates, what a result says (steps
per second, efficiency, slowdown, the exposure profile), the span cost calibrated from it, and the report's
section rendered from stored JSON. The jobs themselves run in `python -m bench.run --only throughput`."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from bench import run
from bench.measure import throughput
from bench.sim import model, span_calibration

ROOT = Path(__file__).resolve().parents[2]
#: exposed seconds per step on 1..4 nodes at each link setting, for the 25 MB gradient (100 MB: 4 times)
EXPOSED = {"unshaped": (0.10, 0.12, 0.12, 0.13), "1:20": (0.10, 0.50, 0.55, 0.60)}
SPLITS = ([4], [3, 1], [2, 2], [2, 1, 1], [1, 1, 1, 1])
COMPUTE = 0.4


def _size(exposed: float) -> dict[str, float]:
    step = COMPUTE + exposed
    return {"steps": 10, "seconds": 10 * step, "steps_per_s": 1 / step, "step_s_median": step,
            "step_s_mean": step, "compute_s_median": COMPUTE, "allreduce_s_median": exposed}


def fake_result() -> dict[str, Any]:
    runs = [{"split": split, "link": link, "node_link": "" if link == "unshaped" else "84mbit",
             "load_average_1m": 0.5, "sizes": {"25": _size(exposed[len(split) - 1]),
                                               "100": _size(4 * exposed[len(split) - 1])}}
            for link, exposed in EXPOSED.items() for split in SPLITS]
    return {"cores": 2, "intra_node": {"bytes_per_s": 2.0e8, "each": [2.0e8]}, "gradient_mb": [25, 100],
            "links": [{"name": "unshaped", "ratio": None, "node_link": ""},
                      {"name": "1:20", "ratio": 20, "node_link": "84mbit"}],
            "baseline": {"sizes": {"25": _size(0.0), "100": _size(0.0)}}, "runs": runs,
            "seconds_per_size": 12.0, "took_s": 1500.0}


def test_the_split_is_read_from_the_managers_plan_line() -> None:
    log = ("2026-11-24T12:28:23.001Z distributetrain: plan (attempt 1): 4 GPU(s) as 2 on node-3, "
           "1 on node-1, 1 on node-2; chief 1 on node-2\n")
    assert throughput.planned_split(log) == (2, 1, 1)
    with pytest.raises(RuntimeError, match="no plan line"):
        throughput.planned_split("nothing planned")


def test_a_node_link_carries_its_fraction_of_the_intra_node_bandwidth_as_tcp_payload() -> None:
    from localcluster import parse_node_link

    link = throughput.link_for(1.0e9, 20)
    assert link == "418mbit"
    assert parse_node_link(link).payload_bytes_per_s == pytest.approx(1.0e9 / 20, rel=0.002)


def test_rows_give_steps_efficiency_and_slowdown_against_one_node_at_the_same_link() -> None:
    rows = span_calibration.rows(fake_result())
    row = next(r for r in rows if r["link"] == "1:20" and r["split"] == [2, 2] and r["gradient_mb"] == "100")
    assert row["steps_per_s"] == pytest.approx(1 / (COMPUTE + 2.0))
    assert row["efficiency"] == pytest.approx(COMPUTE / (COMPUTE + 2.0))
    assert row["slowdown"] == pytest.approx((COMPUTE + 2.0) / (COMPUTE + 0.4))
    assert row["model_old"] == pytest.approx(model.DERIVED_2017_SPAN_COST.slowdown(2, 1))
    assert [r["slowdown"] for r in rows if r["split"] == [4]] == [1.0] * 4


def test_the_exposure_profile_is_relative_to_two_nodes_and_calibrates_the_span_cost() -> None:
    profile = span_calibration.exposure_profile(fake_result(), "1:20")
    assert profile == pytest.approx((0.2, 1.0, 1.1, 1.2))
    cost = model.span_cost_from_profile(profile, comm_cross=0.3)
    assert [cost.comm(k) for k in (1, 2, 3, 4, 16)] == pytest.approx([0.06, 0.3, 0.33, 0.36, 0.36])
    assert cost.first_extra_node == pytest.approx(1.3 / 1.06 - 1)
    assert model.monotone((0.2, 1.0, 0.97, 1.1)) == (0.2, 1.0, 1.0, 1.1)
    with pytest.raises(ValueError, match="one node communicates no less than two"):
        model.span_cost_from_profile((1.0, 1.0, 1.0, 1.0), comm_cross=0.3)


def test_the_span_cost_before_the_measurement_followed_from_the_bandwidth_figures() -> None:
    cost = model.DERIVED_2017_SPAN_COST
    assert cost.comm_cross == pytest.approx(((1 / 0.9 - 1) + (1 / 0.68 - 1)) / 2)
    assert cost.comm_cross / cost.comm_in == pytest.approx(230 / 74)
    assert [round(cost.slowdown(k, 1), 3) for k in (2, 3, 4)] == [1.18, 1.241, 1.271]


def test_the_simulators_span_cost_is_the_stored_measurement() -> None:
    """bench/sim/model.py's profile is what the stored throughput run says (re-measured: copy it there)."""
    speed = ROOT / "bench" / "results" / "speed.json"
    result = json.loads(speed.read_text()).get("throughput") if speed.exists() else None
    if not result or "runs" not in result:
        pytest.skip("no throughput run stored in bench/results/speed.json yet")
    measured = span_calibration.exposure_profile(result, f"1:{model.MEASURED_LINK_RATIO}")
    assert pytest.approx(measured, abs=0.0005) == model.MEASURED_PROFILE
    cost = model.SPAN_COST
    assert cost.comm_cross == pytest.approx(model.horovod_comm_cross())
    assert cost.comm_in == pytest.approx(cost.comm_cross * model.monotone(model.MEASURED_PROFILE)[0])
    steps = [cost.slowdown(k, 1) for k in range(1, 12)]
    assert steps[0] == 1.0 and steps[1] > 1.0 and all(b >= a for a, b in pairwise(steps))


def test_the_report_renders_the_section_and_its_plot_from_stored_json(tmp_path: Path) -> None:
    (tmp_path / "speed.json").write_text(json.dumps({"throughput": fake_result()}))
    (tmp_path / "runs.json").write_text(json.dumps({"throughput": {
        "date": "2000-01-01 00:00 UTC", "commit": "abc", "command": "python -m bench.run --only throughput",
        "cpu": "x", "cores": 2, "load_average_1m": 0.4}}))
    assert run.main(["--render-only", "--out", str(tmp_path)]) == 0
    doc = (tmp_path / "benchmarks.md").read_text()
    section = doc.split("## Training throughput per placement, over emulated node links\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    assert "| [1] (one process) | 2.50 | 2.50 | 2.50 | 2.50 |" in section
    assert "| [2,2] | 2 | 1.04x | 1.10x | 1.80x | 3.00x | 1.180x |" in section
    assert "| [2,2] | 1.92 (0.77) | 1.14 (0.45) | 1.11 (0.44) | 0.42 (0.17) |" in section
    assert "(0.200, 1.000, 1.100, 1.200) times the 2-node one" in section
    assert "bench/sim/model.py still holds" in section  # the fake profile is not the stored one
    assert "![slowdown per split](img/throughput_slowdown.png)" in section
    assert (tmp_path / "img" / "throughput_slowdown.png").stat().st_size > 10_000
    assert "### throughput" not in doc  # its own section, not a speed bench's table


def test_quick_mode_and_a_non_root_run_skip_the_jobs() -> None:
    assert "skipped" in throughput.main(True)
