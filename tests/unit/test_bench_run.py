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
    goals = json.loads((tmp_path / "summary.json").read_text())["goals"]["derived"]
    assert {"zero_beyond_fewest", "vs_bestfit", "vs_original", "gap_closed"} <= set(goals)
    assert goals["zero_beyond_fewest"]["met"] is True
    report = (tmp_path / "benchmarks.md").read_text()
    assert "## Placement quality: the goals" in report and "Commit:" in report and "Machine:" in report
    for image in ("jct_vs_load.png", "jct_at_0.9.png", "allocation_at_saturation.png", "state_over_time.png",
                  "wait_by_size.png"):
        assert (tmp_path / "img" / image).read_bytes()[:4] == b"\x89PNG", image
        assert f"img/{image}" in report
    assert (tmp_path / "speed.json").exists()
