"""The four goals of issue 8, judged under the derived span cost and under the issue's rough 30% model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bench.metrics import pick
from bench.report import table

Row = Mapping[str, Any]
SPANS = (("derived", "derived span cost (5 seeds, all loads and mixes)"),
         ("rough", "the issue's rough 30% per extra node (3 seeds, load 0.9)"))


def _one(rows: Sequence[Row], **where: Any) -> Row | None:
    got = pick(rows, **where)
    return got[0] if got else None


def judge(rows: Sequence[Row], clusters: Sequence[str], span: str) -> dict[str, Any]:
    ours = pick(rows, policy="ours", span=span)
    beyond = sum(r["beyond_fewest_jobs"] for r in ours)
    worst: tuple[float, str, list[float]] = (0.0, "", [])
    cells = cells_over = 0
    for r in ours:
        if "jct_mean_vs_bestfit" not in r:
            continue
        cells += 1
        ratios = {key: r[f"{key}_vs_bestfit"] for key in ("jct_mean", "jct_mean_8plus")}
        cells_over += any(ratio > 1.01 for ratio in ratios.values())
        for key, ratio in ratios.items():
            if ratio > worst[0]:
                jobs = "8+ GPU jobs" if "8plus" in key else "all jobs"
                worst = (ratio, f"{r['cluster']} {r['mix']} load {r['load']}, {jobs}",
                         r[f"{key}_vs_bestfit_range"])
    vs_original, gap = [], []
    for cluster in clusters:
        at = {"cluster": cluster, "mix": "helios", "load": 0.9, "span": span}
        mine, orig, bf = (_one(rows, policy=p, **at) for p in ("ours", "original", "bestfit"))
        if mine and orig:
            vs_original.append((cluster, mine["jct_mean_8plus"] / orig["jct_mean_8plus"]))
        if mine and bf and not cluster.startswith("C1"):
            bf_gap = bf["jct_mean_8plus_vs_ideal"] - 1
            gain = bf["jct_mean_8plus_vs_ideal"] - mine["jct_mean_8plus_vs_ideal"]
            gap.append((cluster, bf["jct_mean_8plus_vs_ideal"], mine["jct_mean_8plus_vs_ideal"],
                        gain / bf_gap if bf_gap > 0 else 0.0))
    return {
        "runs": len(ours),
        "zero_beyond_fewest": {"jobs_beyond": beyond, "met": beyond == 0},
        "vs_bestfit": {"worst_ratio": worst[0], "where": worst[1], "seed_range": worst[2], "cells": cells,
                       "cells_over_1pct": cells_over, "met": cells_over == 0},
        "vs_original": {"ratios": vs_original, "met": bool(vs_original) and all(r <= 1 / 1.5
                                                                                 for _, r in vs_original)},
        "gap_closed": {"rows": gap, "met": bool(gap) and all(c >= 0.5 for *_, c in gap)},
    }


def _verdict(ok: bool) -> str:
    return "**met**" if ok else "**not met**"


def _cells(g: Mapping[str, Any]) -> list[str]:
    b = g["vs_bestfit"]
    spread = f"{b['seed_range'][0]:.2f}-{b['seed_range'][1]:.2f}" if b["seed_range"] else "n/a"
    return [
        f"{g['zero_beyond_fewest']['jobs_beyond']} job(s) spanned more nodes than the fewest possible: "
        + _verdict(g["zero_beyond_fewest"]["met"]),
        f"{b['cells_over_1pct']} of {b['cells']} cells more than 1% worse; worst ours/BestFit "
        f"{b['worst_ratio']:.3f} ({b['where']}; geometric mean over seeds, single seeds {spread}): "
        + _verdict(b["met"]),
        ", ".join(f"{c}: {r:.3f}" for c, r in g["vs_original"]["ratios"]) + ": "
        + _verdict(g["vs_original"]["met"]),
        "; ".join(f"{c}: BestFit {b_:.3f}x, ours {o:.3f}x, closed {100 * closed:.0f}%"
                  for c, b_, o, closed in g["gap_closed"]["rows"]) + ": " + _verdict(g["gap_closed"]["met"]),
    ]


GOALS = ("zero nodes beyond the fewest possible, for every job we place",
         "never more than 1% worse than BestFit (mean JCT of all jobs and of 8+ GPU jobs, every cluster, "
         "load and mix)",
         "JCT of 8+ GPU jobs at load 0.9 at most 1/1.5 (0.667) of the original rule's",
         "close at least half of BestFit's gap to the ideal bound (JCT of 8+ GPU jobs) on C2 and C3 at "
         "load 0.9")


def goals(rows: Sequence[Row], clusters: Sequence[str]) -> tuple[str, dict[str, Any]]:
    judged = {span: judge(rows, clusters, span) for span, _ in SPANS}
    shown = [(span, title) for span, title in SPANS if judged[span]["runs"]]
    body = [[goal, *[_cells(judged[span])[i] for span, _ in shown]] for i, goal in enumerate(GOALS)]
    return table(["goal", *[title for _, title in shown]], body), judged
