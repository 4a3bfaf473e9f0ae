"""What one simulated run is worth, in numbers: per-run summaries and their aggregation over seeds."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.sim.model import BUCKETS
from bench.sim.simulator import RunResult
from bench.sim.workload import Trace

Summary = dict[str, Any]


def _mean(values: npt.NDArray[np.float64]) -> float:
    return float(values.mean()) if len(values) else float("nan")


def _p99(values: npt.NDArray[np.float64]) -> float:
    return float(np.percentile(values, 99)) if len(values) else float("nan")


def summarize(trace: Trace, run: RunResult, total_gpus: int) -> Summary:
    """Metrics over the jobs that arrived after the warm-up, and the cluster's state over the same time."""
    measured = trace.arrival >= trace.measure_from
    gpus = trace.gpus[measured]
    wait = (run.start - trace.arrival)[measured]
    jct = (run.end - trace.arrival)[measured]
    beyond_then = (run.nodes - run.fewest_then)[measured]
    beyond_empty = (run.nodes - run.fewest_empty)[measured]
    big = gpus >= 8
    by_bucket: dict[str, dict[str, float]] = {}
    for name, low, high in BUCKETS:
        mask = (gpus >= low) & (gpus <= high)
        by_bucket[name] = {"jobs": int(mask.sum()), "wait_mean": _mean(wait[mask]),
                           "wait_p99": _p99(wait[mask]), "jct_mean": _mean(jct[mask])}
    window = (run.samples[:, 0] >= trace.measure_from) & (run.samples[:, 0] < trace.horizon)
    state = run.samples[window]
    return {
        "jobs": int(measured.sum()),
        "beyond_fewest_jobs": int((beyond_then > 0).sum()),
        "beyond_fewest_max": int(beyond_then.max()) if len(beyond_then) else 0,
        "beyond_empty_mean": _mean(beyond_empty.astype(np.float64)),
        "beyond_empty_share_8plus": _mean((beyond_empty[big] > 0).astype(np.float64)),
        "jct_mean": _mean(jct),
        "jct_mean_8plus": _mean(jct[big]),
        # run time over the nominal duration: what placement costs before any queueing feedback
        "slowdown_mean_8plus": _mean(((run.end - run.start) / trace.duration)[measured][big]),
        "wait_mean": _mean(wait),
        "wait_p99": _p99(wait),
        "by_bucket": by_bucket,
        "largest_free_mean": _mean(state[:, 1]),
        "fragmentation_mean": _mean(state[:, 2]),
        "busy_share": _mean(state[:, 3]) / total_gpus,
    }


#: the scalar metrics averaged over seeds; ratios to the ideal bound are taken per seed first
SCALARS = ("jct_mean", "jct_mean_8plus", "slowdown_mean_8plus", "wait_mean", "wait_p99",
           "beyond_empty_mean", "beyond_empty_share_8plus", "largest_free_mean", "fragmentation_mean",
           "busy_share")
RATIOS = ("jct_mean", "jct_mean_8plus")


def aggregate(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Group per-run records by (cluster, mix, load, span, policy); average over seeds; add ratios to the
    ideal run of the same trace, with their range over seeds."""
    records = list(records)
    ideal = {(r["cluster"], r["mix"], r["load"], r["span"], r["seed"]): r["metrics"] for r in records
             if r["policy"] == "ideal"}
    bestfit = {(r["cluster"], r["mix"], r["load"], r["span"], r["seed"]): r["metrics"] for r in records
               if r["policy"] == "bestfit"}
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["cluster"], r["mix"], r["load"], r["span"], r["policy"]), []).append(r)
    out = []
    for (cluster, mix, load, span, policy), runs in sorted(groups.items(), key=lambda kv: str(kv[0])):
        row: dict[str, Any] = {"cluster": cluster, "mix": mix, "load": load, "span": span, "policy": policy,
                               "seeds": len(runs)}
        for key in SCALARS:
            row[key] = float(np.mean([run["metrics"][key] for run in runs]))
        row["beyond_fewest_jobs"] = int(sum(run["metrics"]["beyond_fewest_jobs"] for run in runs))
        row["beyond_fewest_max"] = int(max(run["metrics"]["beyond_fewest_max"] for run in runs))
        row["jobs"] = int(sum(run["metrics"]["jobs"] for run in runs))
        for key in RATIOS:
            bound = [ideal[(cluster, mix, load, span, run["seed"])][key] for run in runs]
            ratios = [run["metrics"][key] / b for run, b in zip(runs, bound, strict=True)]
            row[f"{key}_vs_ideal"] = float(np.mean(ratios))
            row[f"{key}_vs_ideal_range"] = [float(min(ratios)), float(max(ratios))]
            # paired with BestFit on the same trace; a geometric mean, as ratios above and below 1 balance
            paired = [run["metrics"][key] / bestfit[(cluster, mix, load, span, run["seed"])][key]
                      for run in runs if (cluster, mix, load, span, run["seed"]) in bestfit]
            if paired:
                row[f"{key}_vs_bestfit"] = float(np.exp(np.mean(np.log(paired))))
                row[f"{key}_vs_bestfit_range"] = [float(min(paired)), float(max(paired))]
        row["by_bucket"] = {
            name: {stat: float(np.mean([run["metrics"]["by_bucket"][name][stat] for run in runs]))
                   for stat in ("wait_mean", "wait_p99", "jct_mean")}
            for name, _, _ in BUCKETS}
        out.append(row)
    return out


def pick(rows: Sequence[Mapping[str, Any]], **where: Any) -> list[Mapping[str, Any]]:
    return [row for row in rows if all(row.get(k) == v for k, v in where.items())]
