"""`python -m bench.run [--quick] [--only SECTIONS] [--render-only]`: the benchmarks, their JSON under
bench/results/, and docs/benchmarks.md.

Sections: `placement` (the trace simulation, bench/sim/), six speed benches (bench/measure/: planner_speed,
apiserver, manager_overhead, scale, demo_phases, preflight), `throughput` (bench/measure/throughput.py:
Horovod jobs on the local cluster's node links, about an hour, root; it fits the simulator's span cost,
bench/sim/model.py), `recovery` (bench/measure/recovery.py: a worker lost from an elastic and from a restart
job, 10 faults each, ~20 min, root) and `capacity` (bench/measure/capacity.py: a GPU pool that scales from
zero, ~1 min, root; two jobs through one Kueue queue); each measured section is a module bench/measure/NAME.py
exposing `main(quick: bool) -> dict`. A run measures the sections asked for, merges their results into the
results directory section by section (bench/store.py; the others stay as earlier runs left them; runs.json
says when each was measured), then renders the whole report from every section there (bench/report/): a speed
bench's result by bench/report/speed_section.py, the throughput section by bench/report/throughput_section.py;
a bench without a renderer is shown by the "markdown" string it returns, else as a table.

Examples:
  python -m bench.run                               # everything
  python -m bench.run --only scale,apiserver        # re-measure two speed benches, keep the rest
  python -m bench.run --only speed                  # the six speed benches, keep placement
  python -m bench.run --only throughput             # Horovod over node links (quiet machine, root, ~1 h)
  python -m bench.run --only placement --span-cost low  # the goals at the low end of the span interval
  python -m bench.run --only recovery               # lost workers: elastic and restart jobs (root)
  python -m bench.run --render-only                 # measure nothing, re-render from bench/results
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
THROUGHPUT_PLOT = "throughput_slowdown.png"
MEASURES = "bench.measure"  # the package of the measured sections: bench/measure/NAME.py, main(quick) -> dict


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
    # what a run writes itself (its results, the report and its plots) does not make the tree it ran "dirty"
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)bench/results",
                ":(exclude)docs/benchmarks.md", ":(exclude)docs/img")
    return f"{head} + uncommitted changes" if dirty or head == "no commit yet" else head


def run_speed(quick: bool, names: Sequence[str]) -> tuple[dict[str, Any], dict[str, float], list[str]]:
    """Run these speed benches: their results, the seconds each took, and the names of those that failed."""
    results: dict[str, Any] = {}
    took: dict[str, float] = {}
    failures = []
    for name in names:
        try:
            module = importlib.import_module(f"{MEASURES}.{name}")
        except ModuleNotFoundError as err:
            if err.name != f"{MEASURES}.{name}":
                raise
            print(f"note: bench/measure/{name}.py is not there yet; skipped", flush=True)
            results[name] = {"skipped": f"bench/measure/{name}.py does not exist yet"}
            continue
        print(f"speed: running bench/measure/{name}.py", flush=True)
        started = time.monotonic()
        try:
            results[name] = module.main(quick)
        except Exception:  # a broken bench must not hide the others' numbers; the run still fails at the end
            failures.append(name)
            results[name] = {"failed": traceback.format_exc(limit=5)}
            print(f"speed: bench/measure/{name}.py failed:\n{results[name]['failed']}", flush=True)
        took[name] = time.monotonic() - started
        print(f"speed: bench/measure/{name}.py took {took[name]:.1f} s", flush=True)
    return results, took, failures


def _run_meta(command: str, seconds: float) -> dict[str, Any]:
    """When, where and how a section was measured (runs.json)."""
    return {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), **machine(), "command": command,
            "seconds": round(seconds, 1), "load_average_1m": round(os.getloadavg()[0], 1)}


def render(out: Path, doc: Path, img: Path, *, quick: bool, redraw: bool,
           docs_root: Path | None) -> dict[str, Any]:
    """docs/benchmarks.md (or `doc`) from every section's results in `out`, whichever runs wrote them; with
    `docs_root`, also the measured blocks of docs/planner.md and docs/manager.md. Plots are redrawn only with
    `redraw` or when one is missing. Returns the goals' verdicts (also written to summary.json)."""
    from bench import store
    from bench.report import docblocks, document, placement_section, plots, throughput_section
    from bench.sim import metrics

    results = store.load(out)
    rows = metrics.aggregate(results.placement["records"]) if results.placement is not None else []
    images: list[Path] = []
    if results.placement is not None:
        clusters = sorted({r["cluster"] for r in rows}, key=lambda c: (c.split("-")[1] != "small", c))
        images = [img / name for name in placement_section.PLOTS if (img / name).exists()]
        if redraw or not all((img / name).exists() for name in placement_section.ALWAYS_DRAWN):
            images = placement_section.write_plots(results.placement, rows, clusters, img)
    throughput_rows = throughput_section.plot_rows(results.speed.get(store.THROUGHPUT) or {})
    if throughput_rows:
        img.mkdir(parents=True, exist_ok=True)
        images.append(plots.throughput(throughput_rows, img / THROUGHPUT_PLOT))
    rendered = {**machine(), "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}
    text, verdicts = document.render(doc=doc, rendered=rendered, placement=results.placement, rows=rows,
                                     images=images, speed=results.speed, runs=results.runs, quick=quick,
                                     span_ends=results.span_ends)
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text)
    if docs_root is not None:
        for path in docblocks.update(docs_root, results.speed, results.runs):
            print(f"rendered the measured blocks of {path}", flush=True)
    (out / "summary.json").write_text(json.dumps({"rendered": rendered, "goals": verdicts}, indent=1,
                                                 default=str))
    return verdicts


def span_end_record(placement: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """What a placement run at one end of the span cost's interval is kept as: the span cost it ran under,
    its goals' verdicts (the report's placement checks), and when and how it ran."""
    from bench.report.goals import goals, placement_checks
    from bench.sim import metrics

    rows = metrics.aggregate(placement["records"])
    clusters = sorted({r["cluster"] for r in rows}, key=lambda c: (c.split("-")[1] != "small", c))
    _, verdicts = goals(rows, clusters, placement["records"])
    return {"span_cost": placement.get("span_cost"), "checks": placement_checks(verdicts["derived"]),
            "run": meta}


ONLY_HELP = ("run only these sections, comma-separated or repeated: placement (the trace simulation), "
             "planner_speed, apiserver, manager_overhead, scale, demo_phases, preflight, throughput (Horovod "
             "jobs over node links), recovery (lost workers, elastic and restart), capacity (a pool that "
             "scales from zero, a Kueue queue), survival (API outages, drains, elastic start-up losses, "
             "image pulls); `speed` stands for the "
             "six speed benches. The other sections' results already in OUT are kept, and the report is "
             "rendered from all of them. Default: every section")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run: small clusters, one seed (~1 min)")
    parser.add_argument("--out", type=Path, help="results directory (default bench/results, or "
                                                  "bench/results/quick with --quick)")
    parser.add_argument("--report", type=Path, help="the Markdown report (default docs/benchmarks.md, or "
                                                     "OUT/benchmarks.md with --quick or --out)")
    parser.add_argument("--workers", type=int, default=None, help="processes for the simulator (default 2)")
    parser.add_argument("--span-cost", choices=("low", "median", "high"), default="median",
                        help="placement only: simulate under the fitted span cost's median (default) or "
                             "the low or high end of its 95%% interval (bench/sim/model.py, "
                             "SPAN_COST_ENDS); at an end, only its goals' verdicts are stored "
                             "(placement_span_ends.json), beside the median's run, which stays")
    parser.add_argument("--only", action="append", metavar="SECTION[,SECTION...]", help=ONLY_HELP)
    parser.add_argument("--render-only", action="store_true",
                        help="measure nothing: rewrite the report (and the blocks in docs/planner.md and "
                             "docs/manager.md) from the JSON earlier runs left in OUT; plots are redrawn")
    args = parser.parse_args(argv)

    from bench import store

    try:
        sections = store.parse_only(args.only) if args.only else store.SECTIONS
    except ValueError as err:
        parser.error(f"--only: {err}")
    if args.render_only and args.only:
        parser.error("--render-only measures nothing; it cannot be combined with --only")
    out: Path = args.out or (ROOT / "bench" / "results" / ("quick" if args.quick else ""))
    # only the default full run writes docs/: a smoke run or a run elsewhere keeps its report beside its JSON
    beside = args.quick or args.out is not None
    doc: Path = args.report or (out / "benchmarks.md" if beside else ROOT / "docs" / "benchmarks.md")
    img = out / "img" if beside else ROOT / "docs" / "img" / "benchmarks"
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    command = "python -m bench.run" + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))

    failures: list[str] = []
    if not args.render_only:
        metas: dict[str, dict[str, Any]] = {}
        if store.PLACEMENT in sections:
            from bench.sim import metrics
            from bench.sim.experiment import run_all

            print("placement: simulating traces", flush=True)
            placement = run_all(args.quick, workers=args.workers, span_end=args.span_cost)
            if args.span_cost != "median":
                # an end of the interval: its verdicts beside the stored median run, which stays
                store.save_span_end(out, args.span_cost, span_end_record(
                    placement, _run_meta(command, time.monotonic() - started)))
            else:
                store.save_placement(out, placement, metrics.aggregate(placement["records"]))
                metas[store.PLACEMENT] = _run_meta(command, time.monotonic() - started)
            print(f"placement: done in {time.monotonic() - started:.0f} s", flush=True)
        names = [s for s in sections if s in store.MEASURED]
        if names:
            speed, took, failures = run_speed(args.quick, names)
            store.save_speed(out, speed)
            metas.update({name: _run_meta(command, took.get(name, 0.0)) for name in speed})
        store.save_runs(out, metas)
    render(out, doc, img, quick=args.quick, redraw=args.render_only or store.PLACEMENT in sections,
           docs_root=None if beside else ROOT)
    print(f"wrote {doc} and {out}/*.json in {time.monotonic() - started:.0f} s", flush=True)
    if failures:
        print(f"failed: {', '.join(failures)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
