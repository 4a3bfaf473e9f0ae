"""Every goal the benchmarks judge, in one place: placement (issue 8) and speed.

A goal is met only by a measurement that shows it: nothing to compare, or nothing measured, is "not met".
A check that a correct planner passes by construction (no job on more nodes than the fewest possible at that
moment: the planner computes exactly that) is a sanity check, never a goal. Figures without a goal carry
`met: None`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bench.report.markdown import table
from bench.sim.metrics import pick

Row = Mapping[str, Any]
Check = dict[str, Any]  # {"what", "value", "goal", "met": bool | None}
SPANS = (("derived", "the simulator's span cost (5 seeds, all loads and mixes)"),
         ("rough", "the issue's rough 30% per extra node (3 seeds, load 0.9)"))
#: speed goals: scale.py's and apiserver.py's docstrings, docs/planner.md
MANAGER_SECONDS, MANAGER_MIB = 5.0, 1024.0
PLANNER_CPU_P99_MS = 10.0
LIST_P50_S, WATCH_P50_S, SERVER_MIB = 0.5, 0.020, 1024.0


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
    vs_original, gap, on_min = [], [], []
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
        if mine and "beyond_empty_share_8plus" in mine:
            found = (("ours", mine), ("bestfit", bf), ("original", orig))
            on_min.append({"cluster": cluster,
                           **{p: 1 - r["beyond_empty_share_8plus"] for p, r in found if r}})
    return {
        "runs": len(ours),
        # the planner takes the fewest nodes possible at that moment by construction: only a bug fails this
        "sanity_fewest_now": {"jobs_beyond": beyond, "ok": bool(ours) and beyond == 0},
        "vs_bestfit": {"worst_ratio": worst[0], "where": worst[1], "seed_range": worst[2], "cells": cells,
                       "cells_over_1pct": cells_over, "met": cells > 0 and cells_over == 0},
        "vs_original": {"ratios": vs_original, "met": bool(vs_original) and all(r <= 1 / 1.5
                                                                                 for _, r in vs_original)},
        "gap_closed": {"rows": gap, "met": bool(gap) and all(c >= 0.5 for *_, c in gap)},
        # what fragmentation costs big jobs: on the fewest nodes their size needs on an empty cluster, or not
        "on_min_nodes_8plus": {"rows": on_min},
    }


def _verdict(ok: bool | None) -> str:
    return "figure (no goal)" if ok is None else "**met**" if ok else "**not met**"


def _pct_range(values: Sequence[float]) -> str:
    if not values:
        return "n/a"
    low, high = min(values), max(values)
    return f"{100 * low:.1f}%" if round(100 * low, 1) == round(100 * high, 1) else \
        f"{100 * low:.1f}-{100 * high:.1f}%"


def placement_checks(g: Mapping[str, Any]) -> list[Check]:
    """The goals (and the figure) of one span model, as checks; the sanity check is left to the table."""
    b, orig, gap = g["vs_bestfit"], g["vs_original"]["ratios"], g["gap_closed"]["rows"]
    closed = [c for *_, c in gap]
    on_min = g.get("on_min_nodes_8plus", {}).get("rows", [])
    shares = {p: [r[p] for r in on_min if p in r] for p in ("ours", "bestfit", "original")}
    return [
        {"what": "JCT of 8+ GPU jobs at load 0.9, ours / the original rule's",
         "value": (f"{min(r for _, r in orig):.3f}-{max(r for _, r in orig):.3f} on {len(orig)} clusters"
                   if orig else "nothing to compare"),
         "goal": "at most 0.667 on every cluster", "met": g["vs_original"]["met"]},
        {"what": "mean JCT, ours / Kueue BestFit's (all jobs and 8+ GPU jobs)",
         "value": (f"worst {b['worst_ratio']:.3f} ({b['where']}); {b['cells_over_1pct']} of {b['cells']} "
                   "cells over 1.01" if b["cells"] else "nothing to compare"),
         "goal": "at most 1.01 in every cluster, load and mix", "met": b["met"]},
        {"what": "BestFit's gap to the ideal bound that we close (8+ GPU jobs, C2 and C3, load 0.9)",
         "value": (f"{100 * min(closed):+.0f}% to {100 * max(closed):+.0f}%" if closed
                   else "nothing to compare"),
         "goal": "at least 50% on each", "met": g["gap_closed"]["met"]},
        {"what": "8+ GPU jobs placed on the fewest nodes their size needs on an empty cluster (load 0.9)",
         "value": (f"ours {_pct_range(shares['ours'])} (BestFit {_pct_range(shares['bestfit'])}, original "
                   f"rule {_pct_range(shares['original'])}) over {len(on_min)} clusters"
                   if shares["ours"] else "not in the results"),
         "goal": "none set; BestFit's share for reference", "met": None},
    ]


def _goal_cells(g: Mapping[str, Any]) -> list[str]:
    b = g["vs_bestfit"]
    spread = f"{b['seed_range'][0]:.2f}-{b['seed_range'][1]:.2f}" if b["seed_range"] else "n/a"
    on_min = g.get("on_min_nodes_8plus", {}).get("rows", [])
    sanity = g["sanity_fewest_now"]
    return [
        (f"{b['cells_over_1pct']} of {b['cells']} cells more than 1% worse; worst ours/BestFit "
         f"{b['worst_ratio']:.3f} ({b['where']}; geometric mean over seeds, single seeds {spread})"
         if b["cells"] else "no cell to compare") + ": " + _verdict(b["met"]),
        (", ".join(f"{c}: {r:.3f}" for c, r in g["vs_original"]["ratios"]) or "nothing to compare") + ": "
        + _verdict(g["vs_original"]["met"]),
        ("; ".join(f"{c}: BestFit {b_:.3f}x, ours {o:.3f}x, closed {100 * closed:.0f}%"
                   for c, b_, o, closed in g["gap_closed"]["rows"]) or "nothing to compare") + ": "
        + _verdict(g["gap_closed"]["met"]),
        ("; ".join(f"{r['cluster']}: ours {100 * r['ours']:.1f}%"
                   + (f", BestFit {100 * r['bestfit']:.1f}%" if "bestfit" in r else "")
                   + (f", original {100 * r['original']:.1f}%" if "original" in r else "") for r in on_min)
         or "not in the results") + ": " + _verdict(None),
        f"{sanity['jobs_beyond']} job(s) on more nodes than the fewest possible at that moment: "
        + ("passed" if sanity["ok"] else "**failed**"),
    ]


GOALS = ("goal: never more than 1% worse than BestFit (mean JCT of all jobs and of 8+ GPU jobs, every "
         "cluster, load and mix)",
         "goal: JCT of 8+ GPU jobs at load 0.9 at most 1/1.5 (0.667) of the original rule's",
         "goal: close at least half of BestFit's gap to the ideal bound (JCT of 8+ GPU jobs) on C2 and C3 at "
         "load 0.9",
         "figure: share of 8+ GPU jobs placed on the fewest nodes their size needs on an empty cluster, "
         "load 0.9 (Helios mix)",
         "sanity check, not a goal: no job on more nodes than the fewest possible at that moment (the "
         "planner computes exactly that, so only a bug fails it)")


def goals(rows: Sequence[Row], clusters: Sequence[str]) -> tuple[str, dict[str, Any]]:
    judged = {span: judge(rows, clusters, span) for span, _ in SPANS}
    shown = [(span, title) for span, title in SPANS if judged[span]["runs"]]
    body = [[goal, *[_goal_cells(judged[span])[i] for span, _ in shown]] for i, goal in enumerate(GOALS)]
    return table(["", *[title for _, title in shown]], body), judged


# ---- speed ----

def _not_measured(what: str, goal: str, why: str = "not measured") -> Check:
    return {"what": what, "value": why, "goal": goal, "met": False}


def scale_checks(result: Mapping[str, Any] | None) -> list[Check]:
    """The manager's inventory + plan on the big cluster: judged on the cold first run of a fresh process
    (what a real manager does, once), with the warm median and the slowest run beside it."""
    rows = _rows(result)
    if not rows:
        return [_not_measured("the manager's inventory + plan at scale", f"under {MANAGER_SECONDS:g} s")]
    checks = []
    for row in rows:
        where = (f"{row['nodes']:,} nodes, {row['pods']:,} {row.get('shape', 'minimal')} pods")
        timing = row["inventory_plus_plan_s"]
        if "cold" in timing:
            value = (f"{timing['cold']:.2f} s cold (warm median {timing['warm_p50']:.2f} s, "
                     f"max {timing['max']:.2f} s)")
            checks.append({"what": f"the manager's first inventory + plan in a fresh process, {where}",
                           "value": value, "goal": f"under {MANAGER_SECONDS:g} s",
                           "met": timing["cold"] < MANAGER_SECONDS})
        else:
            checks.append(_not_measured(f"the manager's first inventory + plan in a fresh process, {where}",
                                        f"under {MANAGER_SECONDS:g} s",
                                        f"cold run not measured (warm median {timing['p50']:.2f} s, "
                                        f"max {timing['max']:.2f} s)"))
        checks.append({"what": f"the manager's peak memory, {where}",
                       "value": f"{row['peak_rss_mib']:.0f} MiB", "goal": f"under {MANAGER_MIB / 1024:g} GiB",
                       "met": row["peak_rss_mib"] < MANAGER_MIB})
    return checks


def _rows(result: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    if not result or "failed" in result or "skipped" in result:
        return []
    return list(result["rows"]) if "rows" in result else [result]


def planner_checks(result: Mapping[str, Any] | None) -> list[Check]:
    goal = f"under {PLANNER_CPU_P99_MS:g} ms"
    rows = [r for r in (result or {}).get("rows", []) if r["policy"] == "optimal" and r["topology"] == "none"]
    if not rows:
        return [_not_measured("one planner decision, CPU p99", goal)]
    nodes = max(r["nodes"] for r in rows)
    at = [r for r in rows if r["nodes"] == nodes]
    cpu, wall = max(r["cpu_p99_ms"] for r in at), max(r["p99_ms"] for r in at)
    return [{"what": f"one planner decision at {nodes:,} nodes (optimal, no topology), CPU p99, worst mix",
             "value": f"{cpu:.2f} ms (wall p99 {wall:.2f} ms on the shared machine)", "goal": goal,
             "met": cpu < PLANNER_CPU_P99_MS}]


def apiserver_checks(result: Mapping[str, Any] | None) -> list[Check]:
    result = result or {}
    size = f"{result['nodes']:,} nodes, {result['pods']:,} pods" if "nodes" in result else ""
    listed = result.get("list_as_manager")
    what = f"the local API server: the manager's inventory lists (k8s.list_nodes_and_pods), p50, {size}"
    checks = [
        {"what": what, "value": f"{listed['p50']:.3f} s", "goal": f"under {LIST_P50_S:g} s",
         "met": listed["p50"] < LIST_P50_S} if listed else
        _not_measured(what, f"under {LIST_P50_S:g} s", "not measured with the manager's decoder"),
    ]
    watch = result.get("watch_latency_seconds") or {}
    what, goal = "the local API server: watch event latency, p50", f"under {1000 * WATCH_P50_S:g} ms"
    checks.append({"what": what, "value": f"{1000 * watch['p50']:.1f} ms", "goal": goal,
                   "met": watch["p50"] < WATCH_P50_S} if watch else _not_measured(what, goal))
    rss = (result.get("server_rss_mib") or {}).get("peak")
    what, goal = f"the local API server's peak memory, {size}", f"under {SERVER_MIB / 1024:g} GiB"
    checks.append({"what": what, "value": f"{rss:.0f} MiB", "goal": goal, "met": rss < SERVER_MIB}
                  if rss is not None else _not_measured(what, goal))
    return checks


def speed_checks(speed: Mapping[str, Any]) -> list[Check]:
    """Checks for the speed benches present in `speed` (a bench not in it is not judged at all)."""
    out: list[Check] = []
    if "scale" in speed:
        out += scale_checks(speed["scale"])
    if "planner_speed" in speed:
        out += planner_checks(speed["planner_speed"])
    if "apiserver" in speed:
        out += apiserver_checks(speed["apiserver"])
    return out


def checks_table(checks: Sequence[Check]) -> str:
    return table(["", "measured", "goal", ""],
                 [[c["what"], c["value"], c["goal"], _verdict(c["met"])] for c in checks])
