"""docs/benchmarks.md from the results: goals first, then tables, plots, method, and the speed benches."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import model, plots
from bench.metrics import pick
from bench.policies import label

Row = Mapping[str, Any]


def _f(x: float, digits: int = 2) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _one(rows: Sequence[Row], **where: Any) -> Row | None:
    got = pick(rows, **where)
    return got[0] if got else None


def goals(rows: Sequence[Row], clusters: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """The four goals of the issue, each with its numbers and a plain verdict."""
    out: dict[str, Any] = {}
    ours = pick(rows, policy="ours")
    beyond = sum(r["beyond_fewest_jobs"] for r in ours)
    out["zero_beyond_fewest"] = {"jobs_beyond": beyond, "met": beyond == 0}

    worst: tuple[float, str] = (0.0, "")
    for r in ours:
        bf = _one(rows, cluster=r["cluster"], mix=r["mix"], load=r["load"], span=r["span"], policy="bestfit")
        if bf is None or r["span"] != "derived":
            continue
        for key in ("jct_mean_vs_ideal", "jct_mean_8plus_vs_ideal"):
            ratio = r[key] / bf[key]
            if ratio > worst[0]:
                what = key.replace("_vs_ideal", "")
                worst = (ratio, f"{r['cluster']} {r['mix']} load {r['load']} ({what})")
    out["vs_bestfit"] = {"worst_ratio": worst[0], "where": worst[1], "met": worst[0] <= 1.01}

    vs_original, gap = [], []
    for cluster in clusters:
        mine = _one(rows, cluster=cluster, mix="helios", load=0.9, span="derived", policy="ours")
        orig = _one(rows, cluster=cluster, mix="helios", load=0.9, span="derived", policy="original")
        bf = _one(rows, cluster=cluster, mix="helios", load=0.9, span="derived", policy="bestfit")
        if mine and orig:
            vs_original.append((cluster, mine["jct_mean_8plus"] / orig["jct_mean_8plus"]))
        if mine and bf and not cluster.startswith("C1"):
            bf_gap = bf["jct_mean_8plus_vs_ideal"] - 1
            gain = bf["jct_mean_8plus_vs_ideal"] - mine["jct_mean_8plus_vs_ideal"]
            closed = gain / bf_gap if bf_gap > 0 else 0.0
            gap.append((cluster, bf["jct_mean_8plus_vs_ideal"], mine["jct_mean_8plus_vs_ideal"], closed))
    out["vs_original"] = {"ratios": vs_original, "met": all(r <= 1 / 1.5 for _, r in vs_original)}
    out["gap_closed"] = {"rows": gap, "met": all(c >= 0.5 for *_, c in gap)}

    def verdict(ok: bool) -> str:
        return "**met**" if ok else "**not met**"

    lines = [
        table(["goal", "result", "verdict"], [
            ["zero nodes beyond the fewest possible, for every job we place",
             f"{beyond} job(s) over all runs spanned more nodes than the fewest possible",
             verdict(beyond == 0)],
            ["never more than 1% worse than BestFit (mean JCT, all jobs and 8+ GPUs), any cluster/load/mix",
             f"worst: ours/BestFit = {_f(worst[0], 3)} ({worst[1]})", verdict(out["vs_bestfit"]["met"])],
            ["JCT of 8+ GPU jobs at load 0.9 at most 1/1.5 (0.667) of the original rule's",
             ", ".join(f"{c}: {_f(r, 3)}" for c, r in vs_original), verdict(out["vs_original"]["met"])],
            ["close at least half of BestFit's gap to the ideal bound (8+ GPU JCT) on C2/C3 at load 0.9",
             ", ".join(f"{c}: BestFit {_f(b, 3)}x, ours {_f(o, 3)}x, closed {_f(100 * c2, 0)}%"
                       for c, b, o, c2 in gap), verdict(out["gap_closed"]["met"])],
        ]),
    ]
    return "\n".join(lines), out


def jct_table(rows: Sequence[Row], clusters: Sequence[str], policies: Sequence[str], metric: str,
              mix: str = "helios", loads: Sequence[float] = model.LOADS, span: str = "derived") -> str:
    header = ["cluster", "load", *[label(p) for p in policies]]
    body = []
    for cluster in clusters:
        for load in loads:
            cells = []
            for p in policies:
                r = _one(rows, cluster=cluster, mix=mix, load=load, span=span, policy=p)
                if r is None:
                    cells.append("")
                elif p == "ideal":
                    cells.append(f"1 ({_f(r[metric] / 3600, 1)} h)")
                else:
                    lo, hi = r[f"{metric}_vs_ideal_range"]
                    cells.append(f"{_f(r[f'{metric}_vs_ideal'], 3)} [{_f(lo, 2)}-{_f(hi, 2)}]")
            body.append([cluster, str(load), *cells])
    return table(header, body)


def load_table(rows: Sequence[Row], clusters: Sequence[str], policies: Sequence[str], fmt: Any,
               mix: str = "helios", loads: Sequence[float] = model.LOADS) -> str:
    """One row per cluster and load, one formatted cell per policy."""
    body = []
    for cluster in clusters:
        for load in loads:
            cells = []
            for p in policies:
                r = _one(rows, cluster=cluster, mix=mix, load=load, span="derived", policy=p)
                cells.append("" if r is None else fmt(r))
            body.append([cluster, str(load), *cells])
    return table(["cluster", "load", *[label(p) for p in policies]], body)


def simple_table(rows: Sequence[Row], clusters: Sequence[str], policies: Sequence[str], metric: str,
                 fmt: Any, load: float = 0.9, mix: str = "helios") -> str:
    body = []
    for cluster in clusters:
        cells = []
        for p in policies:
            r = _one(rows, cluster=cluster, mix=mix, load=load, span="derived", policy=p)
            cells.append("" if r is None else fmt(r))
        body.append([cluster, *cells])
    return table(["cluster", *[label(p) for p in policies]], body)


def fill_table(fill: Sequence[Row], clusters: Sequence[str], policies: Sequence[str]) -> str:
    body = []
    for mix in model.MIXES:
        for cluster in clusters:
            cells = []
            for p in policies:
                got = [r["allocation_rate"] for r in fill if r["cluster"] == cluster and r["mix"] == mix
                       and r["policy"] == p]
                cells.append(f"{100 * sum(got) / len(got):.1f}%" if got else "")
            body.append([mix, cluster, *cells])
    return table(["mix", "cluster", *[label(p) for p in policies]], body)


def wait_table(rows: Sequence[Row], cluster: str, policies: Sequence[str]) -> str:
    body = []
    for p in policies:
        r = _one(rows, cluster=cluster, mix="helios", load=0.9, span="derived", policy=p)
        if r is None:
            continue
        cells = [f"{_f(r['by_bucket'][b]['wait_mean'] / 60, 1)} / {_f(r['by_bucket'][b]['wait_p99'] / 60, 0)}"
                 for b, _, _ in model.BUCKETS]
        body.append([label(p), *cells])
    return table(["policy", *[f"{b} GPUs: mean / p99 (min)" for b, _, _ in model.BUCKETS]], body)


def speed_section(speed: Mapping[str, Any]) -> str:
    parts = []
    for name, result in speed.items():
        parts.append(f"### {name}\n")
        if isinstance(result, Mapping) and "skipped" in result:
            parts.append(f"Not run: {result['skipped']}\n")
            continue
        if isinstance(result, Mapping) and isinstance(result.get("markdown"), str):
            parts.append(result["markdown"] + "\n")
            continue
        flat = _flatten(result)
        parts.append(table(["measure", "value"], [[k, v] for k, v in flat]) + "\n")
    return "\n".join(parts)


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(value, Mapping):
        out = []
        for k, v in value.items():
            out += _flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    if isinstance(value, float):
        return [(prefix, f"{value:.4g}")]
    text = json.dumps(value) if isinstance(value, list | tuple) else str(value)
    return [(prefix, text if len(text) < 200 else text[:200] + "...")]


def write_plots(placement: Mapping[str, Any], rows: Sequence[Row], clusters: Sequence[str],
                img: Path) -> list[Path]:
    img.mkdir(parents=True, exist_ok=True)
    made = [plots.jct_vs_load(rows, clusters, img / "jct_vs_load.png"),
            plots.excess_bars(rows, clusters, "jct_mean_8plus_vs_ideal",
                              "JCT of 8+ GPU jobs above the ideal, %", img / "jct_at_0.9.png"),
            plots.fill_bars(placement["fill"], clusters, img / "allocation_at_saturation.png")]
    scale = clusters[-1].split("-")[1]  # the largest scale run
    shown = {c: placement["series"][c] for c in (f"C2-{scale}", f"C3-{scale}") if c in placement["series"]}
    if shown:
        made.append(plots.state_over_time(shown, img / "state_over_time.png"))
    showcase = next((c for c in ("C2-large", "C2-small") if c in clusters), clusters[0])
    made.append(plots.wait_by_bucket(rows, showcase, img / "wait_by_size.png"))
    return made
