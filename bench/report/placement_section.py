"""The placement sections' tables and plots, from the simulation's records and their aggregates over seeds."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.report import plots
from bench.report.markdown import table
from bench.sim import model
from bench.sim.metrics import pick
from bench.sim.policies import label

Row = Mapping[str, Any]


def _f(x: float, digits: int = 2) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _one(rows: Sequence[Row], **where: Any) -> Row | None:
    got = pick(rows, **where)
    return got[0] if got else None


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


PLOTS = ("jct_vs_load.png", "jct_at_0.9.png", "allocation_at_saturation.png", "state_over_time.png",
         "wait_by_size.png")
ALWAYS_DRAWN = tuple(p for p in PLOTS if p != "state_over_time.png")  # that one needs a C2 or C3 series


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


def agreement_table(records: Sequence[Row], clusters: Sequence[str], compared: Sequence[str]) -> str:
    """Share of ours' decisions (seed 0, load 0.9) another policy would have made differently."""
    body = []
    for mix, cluster in ((m, c) for m in model.MIXES for c in clusters):
        found = [r["metrics"]["agreement"] for r in records
                 if r["cluster"] == cluster and r["policy"] == "ours" and r["mix"] == mix
                 and r["load"] == 0.9 and r["span"] == "derived" and "agreement" in r["metrics"]]
        if not found:
            continue
        counts = found[0]
        one, multi = counts["decisions"]["one_node"], counts["decisions"]["multi_node"]
        cells = []
        for key in compared:
            differ = counts["differ"].get(key)
            if differ is None:
                cells.append("")
                continue
            cells.append(f"{100 * differ['one_node'] / max(one, 1):.1f}% / "
                         f"{100 * differ['multi_node'] / max(multi, 1):.1f}%")
        body.append([mix, cluster, f"{one:,} / {multi:,}", *cells])
    return table(["mix", "cluster", "decisions (one-node / multi-node jobs)", *[label(k) for k in compared]],
                 body)
