"""The handful of numbers a reader should leave with, each computed from the report's own tables."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bench.report.goals import bestfit_equivalence
from bench.sim.metrics import pick
from bench.sim.policies import label

Row = Mapping[str, Any]


def _one(rows: Sequence[Row], **where: Any) -> Row | None:
    got = pick(rows, span="derived", mix="helios", **where)
    return got[0] if got else None


def _vs_original(rows: Sequence[Row], clusters: Sequence[str]) -> str | None:
    ratios, bound, shares = [], [], []
    for c in clusters:
        mine, orig, ideal = (_one(rows, cluster=c, load=0.9, policy=p) for p in ("ours", "original", "ideal"))
        if mine and orig:
            ratios.append(mine["jct_mean_8plus"] / orig["jct_mean_8plus"])
        if mine and orig and ideal and orig["jct_mean_8plus"] > ideal["jct_mean_8plus"]:
            bound.append(ideal["jct_mean_8plus"] / orig["jct_mean_8plus"])
            shares.append((c, (orig["jct_mean_8plus"] - mine["jct_mean_8plus"])
                           / (orig["jct_mean_8plus"] - ideal["jct_mean_8plus"])))
    if not ratios:
        return None
    text = (f"- Against the design's original rule (largest-first split, pods spread by the default "
            f"scheduler): at load 0.9 our jobs of 8+ GPUs finish in {min(ratios):.2f}-{max(ratios):.2f} of "
            f"its mean completion time on the {len(ratios)} clusters")
    if not shares:
        return text + "."
    return (text + f"; the ideal bound, which no placement can beat, in {min(bound):.2f}-{max(bound):.2f}. "
            "Of that achievable gain we close " + ", ".join(f"{c} {100 * x:.0f}%" for c, x in shares) + ".")


def _differ_range(records: Sequence[Row]) -> tuple[float, float, float] | None:
    """Over the decision-by-decision comparisons at load 0.9: the most one-node decisions BestFit would make
    otherwise, and the fewest and most multi-node ones, in percent."""
    one, multi = [], []
    for r in records:
        counts = r["metrics"].get("agreement") if r["policy"] == "ours" and r["load"] == 0.9 else None
        if counts and "bestfit" in counts["differ"]:
            decided, differ = counts["decisions"], counts["differ"]["bestfit"]
            one.append(100 * differ["one_node"] / max(decided["one_node"], 1))
            multi.append(100 * differ["multi_node"] / max(decided["multi_node"], 1))
    return (max(one), min(multi), max(multi)) if one else None


def _vs_bestfit(rows: Sequence[Row], records: Sequence[Row]) -> str | None:
    cells = [r for r in pick(rows, span="derived", policy="ours") if "jct_mean_vs_bestfit" in r]
    if not cells:
        return None
    paired = [r["jct_mean_vs_bestfit"] for r in cells]
    both_ways = sum(1 for r in cells
                    if r["jct_mean_vs_bestfit_range"][0] < 1 < r["jct_mean_vs_bestfit_range"][1])
    equivalence = bestfit_equivalence(records, "derived")
    shown = ""
    if equivalence["intervals"]:
        shown = (f" With the seeds paired (the same traces under both), the 95% interval of the ratio lies "
                 f"wholly at or under 1.01 in {equivalence['within']} of {len(equivalence['intervals'])} "
                 f"cell means (all jobs, 8+ GPU jobs), wholly above it in {equivalence['worse']}; the other "
                 f"{equivalence['open']} these seeds cannot tell from 1% worse, nor from 1% better.")
    return (f"- Against Kueue's BestFit: ours/BestFit mean JCT (geometric mean over seeds) is "
            f"{min(paired):.3f}-{max(paired):.3f} over the {len(cells)} cluster, load and mix cells; in "
            f"{both_ways} of them single seeds fall on both sides of 1." + shown + " Both span the fewest "
            "nodes and fill the tightest node last" + _same_choice(records) + ".")


def _same_choice(records: Sequence[Row]) -> str:
    found = _differ_range(records)
    if found is None:
        return ""
    one, low, high = found
    return (f"; asked in the same state at load 0.9, BestFit would choose other free counts for at most "
            f"{one:.1f}% of one-node jobs and for {low:.0f}-{high:.0f}% of multi-node ones, with no "
            "end-to-end effect we can tell from noise")


def _vs_ideal(rows: Sequence[Row], clusters: Sequence[str]) -> str | None:
    gaps, closed = [], []
    for c in clusters:
        mine, bf = _one(rows, cluster=c, load=0.9, policy="ours"), _one(rows, cluster=c, load=0.9,
                                                                       policy="bestfit")
        if mine and bf:
            ours_x, bf_x = mine["jct_mean_8plus_vs_ideal"], bf["jct_mean_8plus_vs_ideal"]
            gaps.append(f"{c} {ours_x:.2f}x (BestFit {bf_x:.2f}x)")
            if bf_x > 1.005:
                closed.append((bf_x - ours_x) / (bf_x - 1))
    if not gaps:
        return None
    verdict = (f"Of BestFit's gap to the bound we close {100 * min(closed):+.0f}% to "
               f"{100 * max(closed):+.0f}% where there is a gap." if closed
               else "There is no gap to close at this scale.")
    return ("- Against the ideal bound (all GPUs pooled, no cost for spanning), mean JCT of 8+ GPU jobs at "
            "load 0.9: " + "; ".join(gaps) + ". " + verdict)


def _proposal(rows: Sequence[Row], clusters: Sequence[str]) -> str | None:
    changes = []
    for c in clusters:
        new, mine = _one(rows, cluster=c, load=0.9, policy="ours-smallfirst"), _one(rows, cluster=c, load=0.9,
                                                                                     policy="ours")
        if new and mine and not c.startswith("C1"):
            changes.append(f"{c} {100 * (new['jct_mean_8plus'] / mine['jct_mean_8plus'] - 1):+.1f}%")
    if not changes:
        return None
    return ("- The proposal for the planner's tie-break (same free counts, smaller nodes first among equal "
            "ones) changes mean JCT of 8+ GPU jobs at load 0.9 against ours by: " + ", ".join(changes) + ".")


def _saturation(fill: Sequence[Row], clusters: Sequence[str]) -> str | None:
    cluster = next((c for c in reversed(clusters) if c.startswith("C2")), None)
    rates = {p: [f["allocation_rate"] for f in fill if f["cluster"] == cluster and f["mix"] == "helios"
                 and f["policy"] == p] for p in ("ideal", "ours", "bestfit", "fgd", "original")}
    if cluster is None or not all(rates.values()):
        return None
    text = ", ".join(f"{label(p).split(' (')[0]} {100 * sum(v) / len(v):.1f}%" for p, v in rates.items())
    return f"- GPU allocation at saturation (FGD's measure) on {cluster}: {text}."


def headline(rows: Sequence[Row], fill: Sequence[Row], clusters: Sequence[str],
             records: Sequence[Row] = ()) -> str:
    lines = [_vs_original(rows, clusters), _vs_bestfit(rows, records), _vs_ideal(rows, clusters),
             _proposal(rows, clusters), _saturation(fill, clusters)]
    return "\n".join(line for line in lines if line) + "\n"
