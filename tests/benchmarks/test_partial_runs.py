"""A partial run (`--only`, `--render-only`) updates its own sections and keeps every other one.

Small fake results in a temporary directory; the benches asked for are stand-in modules, so nothing heavy
runs.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from bench import run, store
from bench.sim import model

POLICIES = ("ideal", "ours", "bestfit", "original")


def _metrics(policy: str) -> dict[str, Any]:
    slower = {"ideal": 1.0, "ours": 1.1, "bestfit": 1.1, "original": 1.5}[policy]
    bucket = {"jobs": 10, "wait_mean": 60.0 * slower, "wait_p99": 600.0 * slower, "jct_mean": 3600.0 * slower}
    return {"jobs": 100, "beyond_fewest_jobs": 0, "beyond_fewest_max": 0, "beyond_empty_mean": 0.1,
            "beyond_empty_share_8plus": 0.3 if policy != "original" else 0.99,
            "jct_mean": 3600.0 * slower, "jct_mean_8plus": 7200.0 * slower, "slowdown_mean_8plus": slower,
            "wait_mean": 60.0 * slower, "wait_p99": 600.0 * slower,
            "by_bucket": {name: bucket for name, _, _ in model.BUCKETS},
            "largest_free_mean": 4.0, "fragmentation_mean": 0.05, "busy_share": 0.8}


def _fake_results(out: Path) -> None:
    records = [{"cluster": "C1-small", "scale": "small", "mix": "helios", "load": load, "seed": 0,
                "days": 2.0, "warmup_days": 0.5, "span": "derived", "policy": p, "metrics": _metrics(p)}
               for load in model.LOADS for p in POLICIES]
    fill = [{"cluster": "C1-small", "mix": mix, "seed": 0, "policy": p, "allocation_rate": 0.9}
            for mix in model.MIXES for p in POLICIES]
    placement = {"records": records, "fill": fill, "series": {}, "traces": 3, "jobs_simulated": 300}
    from bench.sim.metrics import aggregate

    store.save_placement(out, placement, aggregate(records))
    store.save_speed(out, {"planner_speed": {"markdown": "PLANNER-SPEED-KEPT"},
                           "apiserver": {"markdown": "APISERVER-OLD"}})
    store.save_runs(out, {name: {"date": "2000-01-01 00:00 UTC", "commit": "old", "command": "old run"}
                          for name in ("placement", "planner_speed", "apiserver")})


def _bench(monkeypatch: pytest.MonkeyPatch, name: str, result: dict[str, Any]) -> list[bool]:
    """A stand-in for bench/measure/<name>.py; returns the list its main() appends `quick` to when called."""
    calls: list[bool] = []
    module = types.ModuleType(f"bench.measure.{name}")

    def main(quick: bool) -> dict[str, Any]:
        calls.append(quick)
        return result

    module.main = main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, f"bench.measure.{name}", module)
    return calls


def _snapshot(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("placement_*.json"))}


def test_only_one_speed_bench_keeps_placement_and_the_other_benches(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_results(tmp_path)
    placement_before = _snapshot(tmp_path)
    calls = _bench(monkeypatch, "apiserver", {"markdown": "APISERVER-NEW"})
    untouched = {name: _bench(monkeypatch, name, {"markdown": "MUST-NOT-RUN"})
                 for name in store.SECTIONS if name not in ("apiserver", "placement")}

    assert run.main(["--only", "apiserver", "--out", str(tmp_path)]) == 0

    assert calls == [False]
    assert all(not c for c in untouched.values())
    speed = json.loads((tmp_path / "speed.json").read_text())
    assert speed == {"planner_speed": {"markdown": "PLANNER-SPEED-KEPT"},
                     "apiserver": {"markdown": "APISERVER-NEW"}}
    assert _snapshot(tmp_path) == placement_before
    runs = json.loads((tmp_path / "runs.json").read_text())
    assert runs["placement"]["commit"] == runs["planner_speed"]["commit"] == "old"
    assert runs["apiserver"]["command"] == f"python -m bench.run --only apiserver --out {tmp_path}"
    report = (tmp_path / "benchmarks.md").read_text()
    assert "## Placement quality: the goals" in report and "## Job completion time" in report
    assert "PLANNER-SPEED-KEPT" in report and "APISERVER-NEW" in report and "APISERVER-OLD" not in report
    assert report.index("## In short") < report.index("## Placement quality")
    assert "2000-01-01 00:00 UTC" in report  # each kept section still says when it was measured
    for image in ("jct_vs_load.png", "jct_at_0.9.png", "allocation_at_saturation.png", "wait_by_size.png"):
        assert (tmp_path / "img" / image).read_bytes()[:4] == b"\x89PNG"


def test_render_only_measures_nothing_and_keeps_every_section(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_results(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.glob("*.json") if p.name != "summary.json"}
    calls = {name: _bench(monkeypatch, name, {"markdown": "MUST-NOT-RUN"}) for name in store.SPEED_BENCHES}

    assert run.main(["--render-only", "--out", str(tmp_path)]) == 0

    assert all(not c for c in calls.values())
    after = {p.name: p.read_bytes() for p in tmp_path.glob("*.json") if p.name != "summary.json"}
    assert after == before
    report = (tmp_path / "benchmarks.md").read_text()
    assert "## Placement quality: the goals" in report and "PLANNER-SPEED-KEPT" in report
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert {"derived", "checks"} <= set(summary["goals"])


def test_only_placement_keeps_the_speed_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_results(tmp_path)
    speed_before = (tmp_path / "speed.json").read_bytes()
    simulated: list[bool] = []

    def run_all(quick: bool, *, workers: int | None = None, span_end: str = "median") -> dict[str, Any]:
        simulated.append(quick)
        return store.load(tmp_path).placement or {}

    monkeypatch.setattr("bench.sim.experiment.run_all", run_all)
    for name in store.SPEED_BENCHES:
        _bench(monkeypatch, name, {"markdown": "MUST-NOT-RUN"})

    assert run.main(["--only", "placement", "--out", str(tmp_path)]) == 0

    assert simulated == [False]
    assert (tmp_path / "speed.json").read_bytes() == speed_before
    assert "MUST-NOT-RUN" not in (tmp_path / "benchmarks.md").read_text()


@pytest.mark.parametrize(("values", "sections"), [
    (["scale"], ("scale",)),
    (["scale,apiserver"], ("apiserver", "scale")),
    (["scale", "placement"], ("placement", "scale")),
    (["speed"], store.SPEED_BENCHES),
    (["all"], store.SECTIONS),
])
def test_only_names_sections_and_groups(values: list[str], sections: tuple[str, ...]) -> None:
    assert store.parse_only(values) == sections


def test_only_refuses_an_unknown_section(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        run.main(["--only", "scael", "--out", "/nonexistent"])
    assert exit_.value.code == 2
    assert "unknown section 'scael'" in capsys.readouterr().err


def test_help_names_every_section(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name in (*store.SECTIONS, "speed", "--render-only"):
        assert name in text


def test_a_placement_run_at_an_end_of_the_span_interval_keeps_the_median_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--span-cost low` stores that end's goals beside the stored run (simulated at the median), which stays,
    and the report shows the verdicts at both."""
    _fake_results(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.glob("placement_*")}
    ends: list[str] = []

    def run_all(quick: bool, *, workers: int | None = None, span_end: str = "median") -> dict[str, Any]:
        ends.append(span_end)
        placement = dict(store.load(tmp_path).placement or {})
        return {**placement, "span_cost": {**model.SPAN_COST_ENDS[span_end].summary(), "end": span_end}}

    monkeypatch.setattr("bench.sim.experiment.run_all", run_all)
    assert run.main(["--only", "placement", "--span-cost", "low", "--out", str(tmp_path)]) == 0

    assert ends == ["low"]
    assert {p.name: p.read_bytes() for p in tmp_path.glob("placement_*") if p.name != store.SPAN_ENDS_FILE} \
        == before
    stored = json.loads((tmp_path / store.SPAN_ENDS_FILE).read_text())
    assert stored["low"]["span_cost"]["end"] == "low"
    assert {c["what"] for c in stored["low"]["checks"]} >= {
        "BestFit's gap to the ideal bound that we close (8+ GPU jobs, C2 and C3, load 0.9)"}
    report = (tmp_path / "benchmarks.md").read_text()
    low = model.SPAN_COST_ENDS["low"].slowdown(2, 1)
    assert f"| low end ({low:.3f}x on 2 nodes;" in report
