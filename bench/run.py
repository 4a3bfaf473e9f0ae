"""`python -m bench.run [--quick]`: every benchmark, its JSON under bench/results/, and docs/benchmarks.md.

The speed benches other parts of the project own (bench/planner_speed.py, bench/apiserver.py,
bench/manager_overhead.py, bench/scale.py, bench/demo_phases.py) each expose `main(quick: bool) -> dict`;
a missing module is skipped with a note.
A result dict with a "markdown" string is put in the report as is; any other dict is shown as a table.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SPEED_BENCHES = ("planner_speed", "apiserver", "manager_overhead", "scale", "demo_phases")


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = math.nan
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return {"cpu": cpu, "cores": cores, "memory_gib": memory, "python": platform.python_version(),
            "commit": commit()}


def commit() -> str:
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30,
                              check=False)
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "--short=12", "HEAD") or "no commit yet"
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return f"{head} + uncommitted changes" if dirty or head == "no commit yet" else head


def run_speed(quick: bool) -> tuple[dict[str, Any], list[str]]:
    results: dict[str, Any] = {}
    failures = []
    for name in SPEED_BENCHES:
        try:
            module = importlib.import_module(f"bench.{name}")
        except ModuleNotFoundError as err:
            if err.name != f"bench.{name}":
                raise
            print(f"note: bench/{name}.py is not there yet; skipped", flush=True)
            results[name] = {"skipped": f"bench/{name}.py does not exist yet"}
            continue
        print(f"speed: running bench/{name}.py", flush=True)
        started = time.monotonic()
        try:
            results[name] = module.main(quick)
        except Exception:  # a broken bench must not hide the others' numbers; the run still fails at the end
            failures.append(name)
            results[name] = {"failed": traceback.format_exc(limit=5)}
            print(f"speed: bench/{name}.py failed:\n{results[name]['failed']}", flush=True)
        print(f"speed: bench/{name}.py took {time.monotonic() - started:.1f} s", flush=True)
    return results, failures


def save_placement(out: Path, placement: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    (out / "placement_runs.json").write_text(json.dumps(placement["records"], indent=1))
    (out / "placement_summary.json").write_text(json.dumps(rows, indent=1))
    (out / "placement_fill.json").write_text(json.dumps(placement["fill"], indent=1))
    (out / "placement_series.json").write_text(json.dumps(placement["series"]))
    (out / "placement_meta.json").write_text(json.dumps(
        {"traces": placement["traces"], "jobs_simulated": placement["jobs_simulated"]}))


def load_results(out: Path) -> tuple[dict[str, Any] | None, dict[str, Any], dict[str, Any]]:
    """What an earlier run wrote to `out`: placement (or None), speed results, and the run's meta."""
    placement = None
    if (out / "placement_runs.json").exists():
        records = json.loads((out / "placement_runs.json").read_text())
        counts = json.loads((out / "placement_meta.json").read_text()) \
            if (out / "placement_meta.json").exists() else {}
        traces = {(r["cluster"], r["mix"], r["load"], r["span"], r["seed"]) for r in records}
        placement = {"records": records, "fill": json.loads((out / "placement_fill.json").read_text()),
                     "series": json.loads((out / "placement_series.json").read_text()),
                     "traces": counts.get("traces", len(traces)),
                     "jobs_simulated": counts.get("jobs_simulated") or _count_jobs(records)}
    speed = json.loads((out / "speed.json").read_text()) if (out / "speed.json").exists() else {}
    meta = json.loads((out / "summary.json").read_text())["meta"] if (out / "summary.json").exists() else {}
    return placement, speed, meta


def _count_jobs(records: list[dict[str, Any]]) -> int:
    """Jobs in the traces behind `records`, for results written before placement_meta.json existed."""
    from bench import model
    from bench.workload import make_cluster, make_trace

    cases = {(r["cluster"], r["mix"], r["load"], r["seed"], r["days"], r["warmup_days"]) for r in records}
    total = 0
    for cluster, mix, load, seed, days, warmup in cases:
        name, scale = cluster.split("-")
        total += len(make_trace(make_cluster(name, scale), model.MIXES[mix], load, seed, days=days,
                                warmup_days=warmup))
    return total


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a smoke run: small clusters, one seed (~1 min)")
    parser.add_argument("--out", type=Path, help="results directory (default bench/results, or "
                                                  "bench/results/quick with --quick)")
    parser.add_argument("--report", type=Path, help="the Markdown report (default docs/benchmarks.md, or "
                                                     "OUT/benchmarks.md with --quick or --out)")
    parser.add_argument("--workers", type=int, default=None, help="processes for the simulator (default 2)")
    parser.add_argument("--only", choices=("placement", "speed"), help="run one half only")
    parser.add_argument("--render-only", action="store_true",
                        help="rewrite the report and plots from the JSON an earlier run left in OUT")
    args = parser.parse_args(argv)
    out: Path = args.out or (ROOT / "bench" / "results" / ("quick" if args.quick else ""))
    # only the default full run writes docs/: a smoke run or a run elsewhere keeps its report beside its JSON
    beside = args.quick or args.out is not None
    doc: Path = args.report or (out / "benchmarks.md" if beside else ROOT / "docs" / "benchmarks.md")
    img = out / "img" if args.quick or args.out else ROOT / "docs" / "img" / "benchmarks"
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()

    # imported here so `--help` stays instant
    from bench import document, metrics, report
    from bench.experiment import run_all

    placement: dict[str, Any] | None = None
    speed: dict[str, Any] = {}
    failures: list[str] = []
    if args.render_only:
        placement, speed, meta = load_results(out)
        meta = {**machine(), "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC") + " (re-rendered)",
                "command": "python -m bench.run --render-only", "seconds": math.nan, **meta}
    else:
        if args.only != "speed":
            print("placement: simulating traces", flush=True)
            placement = run_all(args.quick, workers=args.workers)
            save_placement(out, placement, metrics.aggregate(placement["records"]))
            print(f"placement: done in {time.monotonic() - started:.0f} s", flush=True)
        if args.only != "placement":
            speed, failures = run_speed(args.quick)
            (out / "speed.json").write_text(json.dumps(speed, indent=1, default=str))
        meta = {**machine(), "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
                "command": "python -m bench.run" + (" --quick" if args.quick else ""),
                "seconds": time.monotonic() - started}
    rows = metrics.aggregate(placement["records"]) if placement is not None else []
    images: list[Path] = []
    if placement is not None:
        clusters = sorted({r["cluster"] for r in rows}, key=lambda c: (c.split("-")[1] != "small", c))
        images = report.write_plots(placement, rows, clusters, img)
    text, verdicts = document.render(doc=doc, meta=meta, placement=placement, rows=rows, images=images,
                                     speed=speed, quick=args.quick)
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text)
    (out / "summary.json").write_text(json.dumps({"meta": meta, "goals": verdicts}, indent=1, default=str))
    print(f"wrote {doc} and {out}/*.json in {time.monotonic() - started:.0f} s", flush=True)
    if failures:
        print(f"failed: {', '.join(failures)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
