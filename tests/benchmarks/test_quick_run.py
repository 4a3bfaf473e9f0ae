"""`python -m bench.run --quick` runs end to end and writes its results and report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quick_bench_writes_json_report_and_plots(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "bench.run", "--quick", "--out", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((tmp_path / "placement_summary.json").read_text())
    policies = {row["policy"] for row in summary}
    assert {"ideal", "ours", "original", "bestfit", "leastfree", "mostalloc", "fgd"} <= policies
    assert {row["cluster"] for row in summary} == {"C1-small", "C2-small", "C3-small"}
    ours = [row for row in summary if row["policy"] == "ours"]
    assert all(row["beyond_fewest_jobs"] == 0 for row in ours)
    assert all(row["jct_mean_vs_ideal"] >= 1.0 for row in summary)
    verdicts = json.loads((tmp_path / "summary.json").read_text())["goals"]
    goals = verdicts["derived"]
    assert {"sanity_fewest_now", "vs_bestfit", "vs_original", "gap_closed",
            "on_min_nodes_8plus"} <= set(goals)
    assert goals["sanity_fewest_now"]["ok"] is True
    assert goals["vs_bestfit"]["cells"] > 0
    checks = {c["what"]: c for c in verdicts["checks"]}
    assert any("fresh process" in what and "realistic pods" in what for what in checks)
    assert any("k8s.list_nodes_and_pods" in what for what in checks)
    report = (tmp_path / "benchmarks.md").read_text()
    assert report.index("## In short") < report.index("## Placement quality: the goals")
    assert "Machine:" in report and "## Where the numbers come from" in report
    for image in ("jct_vs_load.png", "jct_at_0.9.png", "allocation_at_saturation.png", "state_over_time.png",
                  "wait_by_size.png"):
        assert (tmp_path / "img" / image).read_bytes()[:4] == b"\x89PNG", image
        assert f"img/{image}" in report
    speed = json.loads((tmp_path / "speed.json").read_text())
    assert [row["shape"] for row in speed["scale"]["rows"]] == ["minimal", "realistic"]
    assert speed["apiserver"]["list_as_manager"]["call"] == "k8s.list_nodes_and_pods"
    runs = json.loads((tmp_path / "runs.json").read_text())
    assert set(runs) == {"placement", "planner_speed", "apiserver", "manager_overhead", "scale",
                         "demo_phases", "preflight", "throughput", "recovery", "capacity", "survival"}
    # quick mode queues two jobs through one Kueue queue (simulated pods), and skips the pool's scale-up
    assert speed["capacity"]["queue"]["second_held_gpus_while_queued"] == 0
    assert "scale_from_zero" not in speed["capacity"]
    assert speed["survival"]["skipped"].startswith("quick mode")
    # the throughput jobs are not a smoke run's: skipped, and said so in their own section
    assert "skipped" in speed["throughput"]
    section = report.split("## Training throughput per placement, over emulated node links\n", 1)[1]
    assert section.lstrip().startswith("Not run: quick mode")
