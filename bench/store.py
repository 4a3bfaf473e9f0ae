"""The results directory, one section at a time: a run writes only the sections it ran and keeps the others.

Sections: `placement` (the trace simulation: placement_*.json), each speed bench, `throughput` (training
throughput per placement over node links) and `recovery` (what a lost worker costs an elastic or restart job);
one key of speed.json each.
The raw per-run records of the placement simulation (every trace x policy, ~1.4 MB of JSON) are kept gzipped,
placement_runs.json.gz, written byte for byte the same for the same records (no time in the gzip header), so
git stores a small file that changes only when the numbers do; the rest is plain JSON.
runs.json says, per section, when, on which commit and by which command its numbers were measured, so a
report that merges sections from different runs can say where each came from.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PLACEMENT = "placement"
RUNS_FILE = "placement_runs.json.gz"
#: what placement runs were stored as before they were gzipped; still read
PLAIN_RUNS_FILE = "placement_runs.json"
SPEED_BENCHES = ("planner_speed", "apiserver", "manager_overhead", "scale", "demo_phases", "preflight")
THROUGHPUT = "throughput"
RECOVERY = "recovery"
CAPACITY = "capacity"
SURVIVAL = "survival"
#: every section measured by a module bench/measure/<name>.py, whose main(quick) returns its result
#: (speed.json)
MEASURED = (*SPEED_BENCHES, THROUGHPUT, RECOVERY, CAPACITY, SURVIVAL)
SECTIONS = (PLACEMENT, *MEASURED)
#: names standing for several sections in --only
GROUPS = {"speed": SPEED_BENCHES, "all": SECTIONS}


def parse_only(values: Iterable[str]) -> tuple[str, ...]:
    """`--only` values (repeatable, comma-separated, groups allowed) as sections in report order."""
    wanted: set[str] = set()
    for value in values:
        for name in (part.strip() for part in value.split(",")):
            if not name:
                continue
            if name in GROUPS:
                wanted.update(GROUPS[name])
            elif name in SECTIONS:
                wanted.add(name)
            else:
                known = ", ".join((*SECTIONS, *GROUPS))
                raise ValueError(f"unknown section {name!r}; known: {known}")
    if not wanted:
        raise ValueError("no section named")
    return tuple(s for s in SECTIONS if s in wanted)


@dataclass
class Results:
    """Everything an earlier run (or several) left in a results directory."""

    placement: dict[str, Any] | None = None
    speed: dict[str, Any] = field(default_factory=dict)
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the placement goals re-judged at the ends of the span cost's interval (SPAN_ENDS_FILE), by end
    span_ends: dict[str, Any] = field(default_factory=dict)


def save_placement(out: Path, placement: Mapping[str, Any], rows: list[dict[str, Any]]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    _write_gzipped_json(out / RUNS_FILE, placement["records"])
    (out / PLAIN_RUNS_FILE).unlink(missing_ok=True)  # one copy: a stale plain file would never be read
    (out / "placement_summary.json").write_text(json.dumps(rows, indent=1))
    (out / "placement_fill.json").write_text(json.dumps(placement["fill"], indent=1))
    (out / "placement_series.json").write_text(json.dumps(placement["series"]))
    (out / "placement_meta.json").write_text(json.dumps(
        {"traces": placement["traces"], "jobs_simulated": placement["jobs_simulated"],
         "span_cost": placement.get("span_cost")}))


SPAN_ENDS_FILE = "placement_span_ends.json"


def save_span_end(out: Path, end: str, record: Mapping[str, Any]) -> None:
    """Keep the placement goals' verdicts of a run at one end of the fitted span cost's interval (`bench.run
    --only placement --span-cost low|high`) beside the stored median run, which it does not replace."""
    path = out / SPAN_ENDS_FILE
    ends: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    ends[end] = dict(record)
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dict(sorted(ends.items())), indent=1, default=str))


def save_speed(out: Path, results: Mapping[str, Any]) -> dict[str, Any]:
    """Merge these speed benches' results into speed.json, keeping every other bench's; returns the whole."""
    path = out / "speed.json"
    merged: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    merged.update(results)
    ordered = {name: merged[name] for name in MEASURED if name in merged}
    ordered.update({k: v for k, v in merged.items() if k not in ordered})
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(ordered, indent=1, default=str))
    return ordered


def save_runs(out: Path, metas: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Record when and how these sections were measured in runs.json, keeping the other sections' records."""
    path = out / "runs.json"
    runs: dict[str, dict[str, Any]] = json.loads(path.read_text()) if path.exists() else {}
    runs.update({name: dict(meta) for name, meta in metas.items()})
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({s: runs[s] for s in sorted(runs, key=_order)}, indent=1, default=str))
    return runs


def _order(section: str) -> tuple[int, str]:
    return (SECTIONS.index(section) if section in SECTIONS else len(SECTIONS), section)


def load(out: Path) -> Results:
    """What earlier runs wrote to `out`: placement (or None), the speed benches' results, and runs.json."""
    placement = None
    records = _read_runs(out)
    if records is not None:
        counts = json.loads((out / "placement_meta.json").read_text()) \
            if (out / "placement_meta.json").exists() else {}
        traces = {(r["cluster"], r["mix"], r["load"], r["span"], r["seed"]) for r in records}
        placement = {"records": records, "fill": json.loads((out / "placement_fill.json").read_text()),
                     "series": json.loads((out / "placement_series.json").read_text()),
                     "traces": counts.get("traces", len(traces)),
                     "jobs_simulated": counts.get("jobs_simulated") or _count_jobs(records),
                     "span_cost": counts.get("span_cost")}
    speed = json.loads((out / "speed.json").read_text()) if (out / "speed.json").exists() else {}
    runs = json.loads((out / "runs.json").read_text()) if (out / "runs.json").exists() else {}
    ends = json.loads((out / SPAN_ENDS_FILE).read_text()) if (out / SPAN_ENDS_FILE).exists() else {}
    return Results(placement=placement, speed=speed, runs=runs, span_ends=ends)


def _write_gzipped_json(path: Path, value: Any) -> None:
    with path.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as zipped:
        zipped.write(json.dumps(value, separators=(",", ":")).encode())


def _read_runs(out: Path) -> list[dict[str, Any]] | None:
    """The placement runs' records: gzipped, or plain JSON as written before; None when there are none."""
    if (out / RUNS_FILE).exists():
        with gzip.open(out / RUNS_FILE, "rt") as text:
            records: list[dict[str, Any]] = json.load(text)
        return records
    if (out / PLAIN_RUNS_FILE).exists():
        plain: list[dict[str, Any]] = json.loads((out / PLAIN_RUNS_FILE).read_text())
        return plain
    return None


def _count_jobs(records: list[dict[str, Any]]) -> int:
    """Jobs in the traces behind `records`, for results written before placement_meta.json existed."""
    from bench.sim import model
    from bench.sim.workload import make_cluster, make_trace

    cases = {(r["cluster"], r["mix"], r["load"], r["seed"], r["days"], r["warmup_days"]) for r in records}
    total = 0
    for cluster, mix, load_, seed, days, warmup in cases:
        name, scale = cluster.split("-")
        total += len(make_trace(make_cluster(name, scale), model.MIXES[mix], load_, seed, days=days,
                                warmup_days=warmup))
    return total
