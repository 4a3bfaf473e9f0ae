"""The report's pictures (matplotlib, no display needed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import ScalarFormatter

from bench.sim.metrics import pick
from bench.sim.model import BUCKETS, LOADS
from bench.sim.policies import label

ORDER = ("ideal", "ours", "ours-smallfirst", "bestfit", "fgd", "mostalloc", "leastfree", "original")
COLORS = {"ideal": "#000000", "ours": "#d62728", "ours-smallfirst": "#e377c2", "bestfit": "#1f77b4",
          "fgd": "#2ca02c",
          "mostalloc": "#9467bd", "leastfree": "#8c564b", "original": "#ff7f0e"}


def ordered(policies: Sequence[str]) -> list[str]:
    known = [p for p in ORDER if p in policies]
    return known + sorted(p for p in policies if p not in ORDER)


def _color(policy: str) -> str:
    return COLORS.get(policy, "#7f7f7f")


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def jct_vs_load(rows: Sequence[Mapping[str, Any]], clusters: Sequence[str], out: Path) -> Path:
    """Mean JCT of jobs of 8+ GPUs as a multiple of the ideal bound, by load, one panel per cluster."""
    cols = 3
    nrows = (len(clusters) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(13, 3.6 * nrows), squeeze=False)
    policies = ordered(sorted({r["policy"] for r in rows}))
    for ax, cluster in zip(axes.flat, clusters, strict=False):
        for policy in policies:
            if policy == "ideal":
                continue
            ys, lows, highs = [], [], []
            for load in LOADS:
                row = pick(rows, cluster=cluster, mix="helios", load=load, span="derived", policy=policy)
                ys.append(row[0]["jct_mean_8plus_vs_ideal"] if row else float("nan"))
                lows.append(row[0]["jct_mean_8plus_vs_ideal_range"][0] if row else float("nan"))
                highs.append(row[0]["jct_mean_8plus_vs_ideal_range"][1] if row else float("nan"))
            ax.plot(LOADS, ys, marker="o", color=_color(policy), label=label(policy),
                    linewidth=2.5 if policy == "ours" else 1.4)
            ax.fill_between(LOADS, lows, highs, color=_color(policy), alpha=0.08)
        ax.axhline(1.0, color="black", linewidth=1, linestyle="--")
        ax.set_title(cluster)
        ax.set_xlabel("offered load")
        ax.set_ylabel("JCT (8+ GPUs) / ideal")
        ax.set_xticks(LOADS)
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(clusters):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=9)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def excess_bars(rows: Sequence[Mapping[str, Any]], clusters: Sequence[str], metric: str, ylabel: str,
                out: Path, *, load: float = 0.9, mix: str = "helios") -> Path:
    """How far above the ideal bound each policy is, in percent on a log scale (so 0.5% and 150% both show):
    one group of bars per cluster, one bar per policy."""
    policies = [p for p in ordered(sorted({r["policy"] for r in rows})) if p != "ideal"]
    fig, ax = plt.subplots(figsize=(12, 5.2))
    width = 0.8 / len(policies)
    excess: dict[str, list[float]] = {}
    for policy in policies:
        excess[policy] = []
        for cluster in clusters:
            row = pick(rows, cluster=cluster, mix=mix, load=load, span="derived", policy=policy)
            excess[policy].append(100 * (row[0][metric] - 1) if row else float("nan"))
    positive = [v for values in excess.values() for v in values if v > 0]
    floor = min(positive) / 2 if positive else 0.01
    for i, policy in enumerate(policies):
        xs = [c + (i - (len(policies) - 1) / 2) * width for c in range(len(clusters))]
        ax.bar(xs, [max(floor, v) for v in excess[policy]], width=width, color=_color(policy),
               label=label(policy))
    ax.set_xticks(range(len(clusters)))
    ax.set_xticklabels(clusters)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.set_ylim(bottom=floor)
    ax.set_ylabel(ylabel)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.set_title(f"{ylabel} at load {load} ({mix} mix); lower is better, 0 is the bound")
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def fill_bars(fill_rows: Sequence[Mapping[str, Any]], clusters: Sequence[str], out: Path) -> Path:
    policies = ordered(sorted({r["policy"] for r in fill_rows}))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4), sharey=True)
    for ax, mix in zip(axes, ("helios", "stress"), strict=True):
        width = 0.8 / len(policies)
        for i, policy in enumerate(policies):
            values = []
            for cluster in clusters:
                got = [r["allocation_rate"] for r in fill_rows
                       if r["cluster"] == cluster and r["mix"] == mix and r["policy"] == policy]
                values.append(100 * sum(got) / len(got) if got else float("nan"))
            xs = [c + (i - (len(policies) - 1) / 2) * width for c in range(len(clusters))]
            ax.bar(xs, values, width=width, color=_color(policy), label=label(policy))
        ax.set_xticks(range(len(clusters)))
        ax.set_xticklabels(clusters)
        lowest = min((r["allocation_rate"] for r in fill_rows), default=0.6)
        ax.set_ylim(max(0.0, 100 * lowest - 5), 100.5)
        ax.set_title(f"GPU allocation rate when arrived demand = capacity ({mix} mix)")
        ax.set_ylabel("% of GPUs allocated")
        ax.grid(True, axis="y", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def state_over_time(series: Mapping[str, Mapping[str, Mapping[str, list[float]]]], out: Path) -> Path:
    """Per showcased cluster: largest free block, stranded free GPUs, GPUs in use, hour by hour."""
    clusters = sorted(series)
    fig, axes = plt.subplots(len(clusters), 3, figsize=(15, 3.6 * len(clusters)), squeeze=False)
    for row, cluster in enumerate(clusters):
        runs = series[cluster]
        total = None
        for policy in ordered(list(runs)):
            data = runs[policy]
            width = 2.2 if policy == "ours" else 1.0
            style = {"color": _color(policy), "label": label(policy), "linewidth": width}
            if policy == "ideal":
                total = data
                continue
            axes[row][0].plot(data["t_hours"], data["largest_free"], drawstyle="steps-post", **style)
            axes[row][1].plot(data["t_hours"], [100 * f for f in data["fragmentation"]], **style)
            axes[row][2].plot(data["t_hours"], data["busy"], **style)
        if total is not None:
            axes[row][2].plot(total["t_hours"], total["busy"], color="black", linestyle="--", linewidth=1,
                              label=label("ideal"))
        axes[row][0].set_title(f"{cluster}, load 0.9, seed 0: largest free block")
        axes[row][0].set_ylabel("GPUs free on one node")
        axes[row][1].set_title(f"{cluster}: stranded free GPUs")
        axes[row][1].set_ylabel("% of the cluster's GPUs")
        axes[row][2].set_title(f"{cluster}: GPUs in use")
        axes[row][2].set_ylabel("GPUs")
        for ax in axes[row]:
            ax.set_xlabel("hours")
            ax.grid(True, alpha=0.3)
    handles, labels = axes[0][2].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def wait_by_bucket(rows: Sequence[Mapping[str, Any]], cluster: str, out: Path) -> Path:
    policies = ordered(sorted({r["policy"] for r in rows}))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4))
    names = [name for name, _, _ in BUCKETS]
    for ax, stat, title in zip(axes, ("wait_mean", "wait_p99"), ("mean", "99th percentile"), strict=True):
        width = 0.8 / len(policies)
        for i, policy in enumerate(policies):
            row = pick(rows, cluster=cluster, mix="helios", load=0.9, span="derived", policy=policy)
            values = [row[0]["by_bucket"][name][stat] / 3600 if row else float("nan") for name in names]
            xs = [c + (i - (len(policies) - 1) / 2) * width for c in range(len(names))]
            ax.bar(xs, values, width=width, color=_color(policy), label=label(policy))
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels([f"{n} GPUs" for n in names])
        ax.set_ylabel("hours")
        ax.set_title(f"{cluster}, load 0.9: queueing delay, {title}")
        ax.grid(True, axis="y", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def throughput(rows: Sequence[Mapping[str, Any]], out: Path) -> Path:
    """bench/measure/throughput.py's slowdowns (each cell's median step over the one-node job's of as many
    ranks at the same link): one panel per gradient size, a group of bars per split (one bar per link
    setting), the span cost before the fit (the Horovod paper's borrowed magnitude) and the fitted one as
    markers."""
    from bench.sim.model import BORROWED_SPAN_COST, SPAN_COST

    sizes = list(dict.fromkeys(r["gradient_mb"] for r in rows))
    links = list(dict.fromkeys(r["link"] for r in rows))
    splits = list(dict.fromkeys(tuple(r["split"]) for r in rows))
    shades = ["#9ecae1", "#4292c6", "#08306b", "#6baed6", "#2171b5"]
    fig, axes = plt.subplots(1, len(sizes), figsize=(6.5 * len(sizes), 4.4), squeeze=False, sharey=True)
    width = 0.8 / max(1, len(links))
    for ax, size in zip(axes[0], sizes, strict=True):
        for i, link in enumerate(links):
            values = []
            for split in splits:
                found = [r["slowdown"] for r in rows if r["gradient_mb"] == size and r["link"] == link
                         and tuple(r["split"]) == split and r["slowdown"] is not None]
                values.append(found[0] if found else float("nan"))
            xs = [c + (i - (len(links) - 1) / 2) * width for c in range(len(splits))]
            ax.bar(xs, values, width=width, color=shades[i % len(shades)], label=f"measured, {link}")
        for cost, marker, color, name in ((BORROWED_SPAN_COST, "x", "#000000", "model before (borrowed)"),
                                          (SPAN_COST, "o", "#d62728", "model now (fitted)")):
            ax.plot(range(len(splits)), [cost.slowdown(len(s), 1) for s in splits], linestyle="none",
                    marker=marker, markersize=9, color=color, label=name)
        ax.axhline(1.0, color="black", linewidth=1, linestyle="--")
        ax.set_xticks(range(len(splits)))
        ax.set_xticklabels(["[" + ",".join(map(str, s)) + "]" if len(s) <= 4 else f"[{s[0]}]x{len(s)}"
                            for s in splits], fontsize=8)
        ax.set_xlabel("GPUs per node")
        ax.set_ylabel("step time / one node's")
        ax.set_title(f"{size} MB gradient: median step against one node's")
        ax.grid(True, axis="y", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
