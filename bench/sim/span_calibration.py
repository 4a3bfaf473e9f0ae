"""What the throughput bench's runs (bench/measure/throughput.py) say, and the span cost they calibrate
(pure).

A step of a data-parallel job is compute plus exposed all-reduce. Per run, rank 0 reports the median step and
the median compute part of it; their difference is the exposed communication (waiting for the slowest rank
included). `rows` turns a result into the report's table: steps per second, scaling efficiency against one
process, and each split's slowdown against the one-node placement at the same node link, beside what the
simulator's span costs (bench/sim/model.py) predict for as many nodes. `exposure_profile` is what calibrates
the model: exposed communication on k nodes relative to 2 nodes, at one link ratio, averaged over gradient
sizes.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from bench.sim import model

Result = Mapping[str, Any]
ONE_NODE = [4]


def _run(result: Result, link: str, split: Sequence[int]) -> Result | None:
    return next((r for r in result["runs"] if r["link"] == link and list(r["split"]) == list(split)), None)


def exposed(size: Mapping[str, Any]) -> float:
    """Seconds per step not spent computing (all-reduce, waiting for the other ranks)."""
    return max(0.0, float(size["step_s_median"]) - float(size["compute_s_median"]))


def rows(result: Result, *, old: model.SpanCost = model.DERIVED_2017_SPAN_COST,
         new: model.SpanCost = model.SPAN_COST) -> list[dict[str, Any]]:
    """One row per link setting, split and gradient size, in the order measured."""
    out = []
    baseline = result["baseline"]["sizes"]
    for run in result["runs"]:
        one = _run(result, run["link"], ONE_NODE)
        nodes = len(run["split"])
        for mb, size in run["sizes"].items():
            base = (one or {}).get("sizes", {}).get(mb)
            out.append({
                "link": run["link"], "node_link": run.get("node_link", ""), "split": list(run["split"]),
                "nodes": nodes, "gradient_mb": mb, "steps_per_s": size["steps_per_s"],
                "step_s": size["step_s_median"], "compute_s": size["compute_s_median"],
                "exposed_s": exposed(size),
                "efficiency": size["steps_per_s"] / baseline[mb]["steps_per_s"] if mb in baseline else None,
                "slowdown": size["step_s_median"] / base["step_s_median"] if base else None,
                "model_old": old.slowdown(nodes, 1), "model_new": new.slowdown(nodes, 1),
                "load_average_1m": run.get("load_average_1m"),
            })
    return out


def exposure_by_nodes(result: Result, link: str) -> dict[int, float]:
    """Exposed seconds per step on 1, 2, 3, 4 nodes at this link setting: per gradient size the mean over
    the splits with that many nodes, then each size's value relative to its 2-node one, averaged, times the
    mean 2-node exposure (so sizes weigh alike)."""
    sizes = sorted({mb for run in result["runs"] for mb in run["sizes"]}, key=float)
    by_size: dict[str, dict[int, float]] = {}
    for mb in sizes:
        found: dict[int, list[float]] = {}
        for run in result["runs"]:
            if run["link"] == link and mb in run["sizes"]:
                found.setdefault(len(run["split"]), []).append(exposed(run["sizes"][mb]))
        by_size[mb] = {k: statistics.fmean(v) for k, v in found.items()}
    usable = [mb for mb in sizes if by_size[mb].get(2, 0.0) > 0]
    if not usable:
        raise ValueError(f"no 2-node run with exposed communication at link {link!r}")
    two = statistics.fmean(by_size[mb][2] for mb in usable)
    nodes = sorted({k for mb in usable for k in by_size[mb]})
    return {k: two * statistics.fmean(by_size[mb][k] / by_size[mb][2] for mb in usable if k in by_size[mb])
            for k in nodes}


def exposure_profile(result: Result, link: str) -> tuple[float, ...]:
    """Exposed communication on 1, 2, 3, 4 nodes relative to 2 nodes (so the second value is 1)."""
    found = exposure_by_nodes(result, link)
    missing = [k for k in (1, 2, 3, 4) if k not in found]
    if missing:
        raise ValueError(f"link {link!r}: no run on {missing} node(s)")
    return tuple(found[k] / found[2] for k in (1, 2, 3, 4))
