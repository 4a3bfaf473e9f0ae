"""docs/benchmarks.md's section on training throughput per placement (bench/measure/throughput.py's result),
rendered from the JSON at report time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bench.report.markdown import table
from bench.sim import model
from bench.sim.span_calibration import exposure_profile, rows

Result = Mapping[str, Any]
TITLE = "Training throughput per placement, over emulated node links"


def _split(split: Sequence[int]) -> str:
    return "[" + ",".join(str(n) for n in split) + "]"


def _link_title(link: Mapping[str, Any], intra: float) -> str:
    if not link["node_link"]:
        return "no node link"
    return f"{link['name']} ({link['node_link']}, {intra / link['ratio'] / 1e6:,.0f} MB/s)"


def _usable(result: Result) -> bool:
    return isinstance(result, Mapping) and "runs" in result and "skipped" not in result \
        and "failed" not in result


def section(result: Result | None, provenance: str, image: str | None) -> str:
    """The section's Markdown (without its heading)."""
    if result is None:
        return "Not measured yet: `python -m bench.run --only throughput` (root, a quiet machine, ~30 min).\n"
    if "skipped" in result:
        return f"Not run: {result['skipped']}\n"
    if "failed" in result:
        return f"**Failed:**\n\n```\n{result['failed']}\n```\n"
    intra = float(result["intra_node"]["bytes_per_s"])
    links = list(result["links"])
    sizes = [f"{mb:g}" for mb in result["gradient_mb"]]
    measured = rows(result)
    baseline = result["baseline"]["sizes"]
    parts = [provenance, "", _setup(result, intra), ""]

    parts += ["Steps per second of the 4-rank job, and in brackets its scaling efficiency against one "
              "process (steps per second over the 1-GPU job's: 4 ranks doing 4 times the work of one; on "
              f"{result['cores']} cores at most {min(1.0, result['cores'] / 4):.2f} from the cores alone):",
              ""]
    header = ["split", *[f"{_link_title(link, intra)}, {mb} MB" for link in links for mb in sizes]]
    body = [["[1] (one process)", *[f"{baseline[mb]['steps_per_s']:.2f}" for _ in links for mb in sizes]]]
    for split in _splits(result):
        cells = []
        for link in links:
            for mb in sizes:
                row = _row(measured, link["name"], split, mb)
                cells.append("" if row is None else f"{row['steps_per_s']:.2f} ({row['efficiency']:.2f})")
        body.append([_split(split), *cells])
    parts += [table(header, body), ""]

    parts += ["The slowdown of each split: its median step over the one-node job's ([4]) at the same link, "
              "beside what the simulator charges for as many nodes: the model before this measurement (2017 "
              "Horovod efficiencies, A100 bus bandwidths, a hierarchical shape) and the calibrated one "
              "(below). The measured column is this machine's workload (its own share of communication); "
              "the model columns are what a GPU job is charged.", ""]
    header = ["split", "nodes", *[f"measured, {link['name']}, {mb} MB" for link in links for mb in sizes],
              "model before", "model now"]
    body = []
    for split in _splits(result):
        cells = []
        for link in links:
            for mb in sizes:
                row = _row(measured, link["name"], split, mb)
                cells.append("" if row is None or row["slowdown"] is None else f"{row['slowdown']:.2f}x")
        nodes = len(split)
        body.append([_split(split), str(nodes), *cells,
                     f"{model.DERIVED_2017_SPAN_COST.slowdown(nodes, 1):.3f}x",
                     f"{model.SPAN_COST.slowdown(nodes, 1):.3f}x"])
    parts += [table(header, body), ""]
    noise = _noise(result, intra)
    if noise:
        parts += [noise, ""]
    if image:
        parts += [f"![slowdown per split]({image})", ""]
    parts += [_calibration(result), ""]
    return "\n".join(parts)


def _noise(result: Result, intra: float) -> str:
    """What the tables above cannot tell apart: how far the two passes of one cell differ, and whether a
    link is slower than the in-node all-reduce at all (else its column does not measure the network)."""
    steps: dict[tuple[str, tuple[int, ...], str], list[float]] = {}
    busbw: list[float] = []
    for run in result.get("every_run", []):
        for mb, size in run["sizes"].items():
            steps.setdefault((run["link"], tuple(run["split"]), mb), []).append(size["step_s_median"])
            if len(run["split"]) == 1 and run["split"][0] > 1 and size.get("allreduce_s_median"):
                ranks = run["split"][0]  # a ring's bus bandwidth: 2(n-1)/n of the size per all-reduce time
                busbw.append(2 * (ranks - 1) / ranks * float(mb) * 1e6 / size["allreduce_s_median"])
    ratios = sorted(max(v) / min(v) for v in steps.values() if len(v) > 1)
    if not ratios:
        return ""
    text = (f"**How much of this is noise.** Between the passes, the median step of one and the same cell "
            f"differs by a median {ratios[len(ratios) // 2]:.2f}x and up to {ratios[-1]:.2f}x ({len(ratios)} "
            "cells, two passes each, on a shared machine): differences between splits smaller than that are "
            "not measured differences, and the tables take each cell from one pass, with no interval.")
    if busbw:
        inside = sorted(busbw)[len(busbw) // 2]
        slower = [link for link in result["links"] if link["ratio"] and intra / link["ratio"] > inside]
        text += (f" The one-node job's all-reduce runs at {inside / 1e6:,.0f} MB/s of bus bandwidth (median "
                 "of its runs, 4 ranks on 2 cores)")
        text += ("; a node link faster than that - " + ", ".join(
            f"{link['name']} ({intra / link['ratio'] / 1e6:,.0f} MB/s)" for link in slower)
            + " - is not the bottleneck, so its column does not measure the network." if slower else ".")
    return text


def _splits(result: Result) -> list[list[int]]:
    seen: list[list[int]] = []
    for run in result["runs"]:
        if list(run["split"]) not in seen:
            seen.append(list(run["split"]))
    return seen


def _row(measured: Sequence[Mapping[str, Any]], link: str, split: Sequence[int],
         mb: str) -> Mapping[str, Any] | None:
    return next((r for r in measured if r["link"] == link and r["split"] == list(split)
                 and r["gradient_mb"] == mb), None)


def _setup(result: Result, intra: float) -> str:
    links = ", ".join(f"{link['name']}: `--node-link {link['node_link']}`" for link in result["links"]
                      if link["node_link"])
    loads = [r.get("load_average_1m") for r in result["runs"] if r.get("load_average_1m") is not None]
    spread = sorted({min(loads), max(loads)}) if loads else []
    load = f"; 1-minute load average {'-'.join(map(str, spread))} at the runs' starts" if loads else ""
    return (
        "Each run is a local cluster of real processes (`localcluster`, process runtime) whose nodes hold "
        "exactly the split's GPUs, and a 4-GPU job placed on it by the product's own `distributetrain run` "
        "(the planner's split, checked), with sshd workers and a chief running horovodrun over Gloo, in the "
        "demo's namespace (Pod Security restricted, the job's NetworkPolicy). Every rank runs "
        "bench/measure/throughput_rank.py: a fixed compute step (256x256 float32 matrix products, no sleep) "
        "then "
        f"`hvd.allreduce` of a {' and a '.join(f'{mb:g} MB' for mb in result['gradient_mb'])} gradient, "
        f"{result['seconds_per_size']:g} s of steps per size after two warm-up steps; every job ran "
        f"{_times(result.get('repeats', 1))}, the second pass in the opposite order, and each size's numbers "
        "are from the run with the shortest median step (other work on this shared machine only ever "
        "lengthens a step). This machine has "
        f"{result['cores']} cores: rank r is pinned to core r % {result['cores']}, so two ranks share each "
        "core in every split alike and the splits differ only in the network between them. Node links are "
        f"set from the TCP bandwidth between two pods of one node, {intra / 1e6:,.0f} MB/s here (the best "
        f"of {len(result['intra_node'].get('each', [])) or 'several'} transfers): {links}, each carrying "
        "that fraction of it as TCP payload; only the rate is emulated (no netem on this kernel). The "
        f"whole measurement took {result['took_s'] / 60:.0f} min"
        f"{load}.")


def _times(repeats: int) -> str:
    return {1: "once", 2: "twice"}.get(repeats, f"{repeats} times")


def _calibration(result: Result) -> str:
    link = f"1:{model.MEASURED_LINK_RATIO}"
    try:
        profile = exposure_profile(result, link)
    except (KeyError, ValueError) as error:
        return f"The calibration needs every split at {link}: {error}."
    stored = ", ".join(f"{p:.3f}" for p in model.MEASURED_PROFILE)
    fresh = ", ".join(f"{p:.3f}" for p in profile)
    same = all(abs(a - b) < 0.0005 for a, b in zip(profile, model.MEASURED_PROFILE, strict=True))
    match = "" if same else (
        f" **bench/sim/model.py still holds ({stored}): copy these numbers there and re-run the placement "
        "comparison.**")
    cost, old = model.SPAN_COST, model.DERIVED_2017_SPAN_COST
    steps = "; ".join(f"{k} nodes {old.slowdown(k, 1):.3f}x before, {cost.slowdown(k, 1):.3f}x now"
                      for k in (2, 3, 4, 8))
    return (
        f"**The simulator's span cost, calibrated** (bench/sim/model.py, `calibrated_span_cost`): at {link} "
        "the "
        f"exposed communication (step minus compute) on 1, 2, 3 and 4 nodes is ({fresh}) times the "
        f"2-node one, the mean over both gradient sizes.{match} What this measures is the shape - flat "
        "past 2 nodes - not the magnitude: the simulator charges 2 nodes "
        f"{cost.comm_cross:.3f} of compute, a figure borrowed, not measured: the mean of 1/0.9-1 and "
        "1/0.68-1, from the Horovod paper's (Sergeev and Del Balso, 2017) 90% and 68% scaling efficiency on "
        "512 GPUs - many nodes, a 2017 network, other models - and the 2-node slowdowns above move between "
        "passes by as much as they differ between splits. It distributes that figure as measured: "
        f"{cost.comm_in:.3f} inside one node (before: "
        f"{old.comm_in:.3f}, from A100 bus bandwidths); a value below the one before it is held at it (more "
        "nodes never communicate less: the difference is noise between runs), and past 4 nodes the 4-node "
        "value (a ring crosses each node's link once per direction however many nodes it spans; before: a "
        f"hierarchical all-reduce's 2(k-1)/k). A one-node job spread over: {steps}."
    )


def plot_rows(result: Result) -> list[dict[str, Any]]:
    """What bench/plots.throughput draws; empty when the result cannot be drawn."""
    return rows(result) if _usable(result) else []
