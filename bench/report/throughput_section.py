"""docs/benchmarks.md's section on training throughput per placement (bench/measure/throughput.py's result),
rendered from the JSON at report time: each cell as median [interquartile range] over its repetitions with n,
the node links and how they were set, and the span cost fitted from the runs with its interval
(bench/sim/span_calibration.py)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from bench.report.markdown import table
from bench.sim import model
from bench.sim import span_calibration as sc

Result = Mapping[str, Any]
TITLE = "Training throughput per placement, over emulated node links"
COMMAND = "python -m bench.run --only throughput"
#: One job's wall time (seconds) by rank count and link setting, for the full run's estimate: the medians of
#: the 2026-11-26 run (the GPU-sized workload, 6 s of steps of a 2 MB gradient after two warm-up steps; load
#: average 3-9 from its own ranks): 4 ranks 15-23 s, 8 ranks 27-38 s, whatever the link (a step over a 1:20
#: link is still well under a second), the 1-GPU job 12 s; 146 runs took 58 min with the clusters' starts.
JOB_S = {(1, "baseline"): 12.0, (4, "unshaped"): 18.0, (4, "1:5"): 18.5, (4, "1:20"): 18.5,
         (8, "unshaped"): 31.0, (8, "1:5"): 31.0, (8, "1:20"): 31.0}
#: the cells of the full run by rank count: bench/measure/throughput.SPLITS
SPLITS_PER_RANKS = {4: 5, 8: 4}
REPEATS, CALIBRATION_REPEATS = 5, 3
#: what the first throughput run (2026-11-24: 25 and 100 MB gradients, two passes, links from raw TCP) fitted
#: for a one-node job on 2 nodes, with its 95% bootstrap interval; the simulator charged it until the run of
#: the GPU-sized workload replaced it
FIRST_WORKLOAD_SLOWDOWN = "1.822x [1.690-1.953]"

def _split(split: Sequence[int]) -> str:
    if len(split) > 4 and len(set(split)) == 1:
        return f"[{split[0]}]x{len(split)}"
    return "[" + ",".join(str(n) for n in split) + "]"


def _usable(result: Result) -> bool:
    return isinstance(result, Mapping) and "every_run" in result and "skipped" not in result \
        and "failed" not in result


def _mbps(value: float) -> str:
    return f"{value / 1e6:,.0f} MB/s"


def _cell(s: sc.Spread, digits: int = 2) -> str:
    if s.n == 1:
        return f"{s.median:.{digits}f} (n=1)"
    return f"{s.median:.{digits}f} [{s.q1:.{digits}f}-{s.q3:.{digits}f}]"


def _runs(result: Result) -> list[Mapping[str, Any]]:
    """Every run of every cell; an older result's baseline runs are in `every_run` too."""
    return list(result["every_run"])


def section(result: Result | None, provenance: str, image: str | None) -> str:
    """The section's Markdown (without its heading)."""
    if result is None:
        return f"Not measured yet: `{COMMAND}` (root, a quiet machine, {_estimate_text()}).\n"
    if "skipped" in result:
        return f"Not run: {result['skipped']}\n"
    if "failed" in result:
        return f"**Failed:**\n\n```\n{result['failed']}\n```\n"
    runs = _runs(result)
    spreads = sc.cell_spreads(runs)
    sizes = [f"{mb:g}" for mb in result["gradient_mb"]]
    links = [str(link["name"]) for link in result["links"]]
    parts = [provenance, "", _setup(result), "", _links(result), ""]
    baseline = spreads.get((sc.BASELINE, (1,)))
    for ranks in sc.rank_counts(runs):
        parts += [f"**{ranks}-rank job.** Steps per second, median [interquartile range] over the "
                  "repetitions of each cell (n per row), and the exposed-communication share of compute "
                  "(rank 0's median time per step outside compute over its median compute, the mean over "
                  "the gradient sizes; the fit below is made of these):", ""]
        header = ["split", "n", *[f"{link}, {mb} MB, steps/s" for link in links for mb in sizes],
                  *[f"{link}, comm share" for link in links]]
        body = []
        if baseline is not None:
            body.append(["[1] (one process)", _n([baseline]),
                         *[_cell(baseline["steps_per_s"][mb]) for _ in links for mb in sizes],
                         *["" for _ in links]])
        for split in _splits(runs, ranks):
            cells = [spreads.get((link, split)) for link in links]
            body.append([_split(split), _n([c for c in cells if c]),
                         *[_cell(c["steps_per_s"][mb]) if c else "" for c in cells for mb in sizes],
                         *[_cell(c["comm_share"]) if c and c["comm_share"] else "" for c in cells]])
        parts += [table(header, body), ""]
    failed = result.get("failed_runs") or []
    if failed:
        parts += [f"**Runs that failed** ({len(failed)}; their cells have fewer repetitions): " + "; ".join(
            f"{f['link']} {_split(f['split'])} repetition {f['repeat'] + 1}: {f['error'][-160:]}"
            for f in failed) + ".", ""]
    noise = _noise(result, runs)
    if noise:
        parts += [noise, ""]
    if image:
        parts += [f"![slowdown per split]({image})", ""]
    parts += [_fit(result, runs), "", _estimate(), ""]
    return "\n".join(parts)


def _n(cells: Sequence[Mapping[str, Any]]) -> str:
    ns = sorted({s.n for c in cells for s in c["steps_per_s"].values()})
    return "" if not ns else str(ns[0]) if len(ns) == 1 else f"{ns[0]}-{ns[-1]}"


def _splits(runs: Sequence[Mapping[str, Any]], ranks: int) -> list[tuple[int, ...]]:
    seen: list[tuple[int, ...]] = []
    for run in runs:
        split = tuple(int(n) for n in run["split"])
        if sum(split) == ranks and run["link"] != sc.BASELINE and split not in seen:
            seen.append(split)
    return sorted(seen, key=len)


def _setup(result: Result) -> str:
    runs = _runs(result)
    loads = [r["load_average_1m"] for r in runs if r.get("load_average_1m") is not None]
    load = f"; 1-minute load average {min(loads)}-{max(loads)} at the runs' starts" if loads else ""
    how = (f"every cell ran {result['repeats']} times, round robin (pass by pass, every cell once per pass, "
           "alternate passes backwards, so a busy spell of this shared machine falls on every cell alike), "
           "and every run is kept")
    ranks = " and ".join(f"{r}-rank" for r in sc.rank_counts(runs))
    sized = (" The workload is sized as a GPU job's, not a CPU one's: its in-node all-reduce is a few "
             "percent of a step, as NVLink's is of a GPU's step (ResNet-50's 100 MB gradient at ~130 GB/s "
             "of bus bandwidth is ~1.4 ms of a ~0.2 s step), where the bench's first workload (25 and 100 MB "
             "per ~0.2 s of compute) spent 35-87% of a step in it and so measured the CPU's all-reduce, not "
             "the network (bench/measure/throughput.py says how the size was chosen).")
    return (
        "Each run is a local cluster of real processes (`localcluster`, process runtime) whose nodes hold "
        f"exactly the split's GPUs, and a {ranks} job placed on it by the product's own `distributetrain "
        "run` (the planner's split, checked), with sshd workers and a chief running horovodrun over Gloo, in "
        "the demo's namespace (Pod Security restricted, the job's NetworkPolicy). Every rank runs "
        f"bench/measure/throughput_rank.py: a fixed compute step ({result['work']} 256x256 float32 matrix "
        "products, no sleep) then `hvd.allreduce` of a "
        f"{' and a '.join(f'{mb:g} MB' for mb in result['gradient_mb'])} "
        f"gradient, {result['seconds_per_size']:g} s of steps per size after two warm-up steps; {how}."
        f"{sized} This "
        f"machine has {result['cores']} cores: rank r is pinned to core r % {result['cores']}, so ranks "
        "share each core in every split of a job alike and the splits differ only in the network between "
        f"them. The whole measurement took {result['took_s'] / 60:.0f} min{load}.")


def _links(result: Result) -> str:
    inside = result["in_node"]  # the calibration runs' bus bandwidth
    shaped = [link for link in result["links"] if link.get("ratio")]
    per = "; ".join(f"{ranks} ranks " + ", ".join(f"{_mbps(v)} at {mb} MB" for mb, v in sizes.items())
                    for ranks, sizes in inside["bytes_per_s"].items())
    rates = ", ".join(f"{link['name']}: {_mbps(link['payload_bytes_per_s'])} of TCP payload "
                      f"(`--node-link {link['node_link']}`)" for link in shaped)
    each = inside.get("repeats", "?")
    return (f"**Node links, and how they were set.** First, in the same run, the one-node jobs without a "
            f"node link ({each} run(s) of each) measured their all-reduce's bus bandwidth"
            " (2(n-1)/n of the gradient over the all-reduce time, median over the runs) on a gradient large "
            f"enough for bandwidth, not latency, to set its time: {per}. The slowest, "
            f"{_mbps(inside['slowest_bytes_per_s'])}, sets the links: {rates}; so every shaped link is "
            "slower than the in-node path, and a shaped column measures the network. Only the rate is "
            "emulated (no netem on this kernel).")


def _noise(result: Result, runs: Sequence[Mapping[str, Any]]) -> str:
    ratios = sc.pass_ratios(runs)
    if not ratios:
        return ""
    iqr = sorted(c["step_s"][mb].iqr / c["step_s"][mb].median for c in sc.cell_spreads(runs).values()
                 for mb in c["step_s"] if c["step_s"][mb].n > 1 and c["step_s"][mb].median > 0)
    return (f"**How much of this is noise.** Within one cell, the slowest repetition's median step over the "
            f"fastest's is {statistics.median(ratios):.2f}x at the median and up to "
            f"{ratios[-1]:.2f}x "
            f"({len(ratios)} cells and gradient sizes); the interquartile range is a median "
            f"{100 * statistics.median(iqr):.0f}% of the cell's median step. Two splits whose ranges "
            "overlap are "
            "not told apart by these runs.")


def _fit(result: Result, runs: Sequence[Mapping[str, Any]]) -> str:
    link = str(result.get("fit_link") or sc.link_name(model.FIT_LINK_RATIO))
    try:
        found = sc.fit(runs, link)
    except (KeyError, ValueError) as error:
        return f"The span cost's fit needs one-node and multi-node runs at {link}: {error}."
    nodes = sorted(found.comm)
    ranks = " and ".join(f"{r}-rank" for r in sc.rank_counts([r for r in runs if r["link"] == link]))
    comm = "; ".join(f"{k} node{'s' if k > 1 else ''} {c.median:.3f} [{c.low:.3f}, {c.high:.3f}] "
                     f"(n={found.runs[k]})" for k, c in found.comm.items())
    slow = "; ".join(f"{k} nodes {s.median:.3f}x [{s.low:.3f}, {s.high:.3f}]"
                     for k, s in found.slowdown.items() if k > 1)
    stored = {end: {k: round(v, 4) for k, v in sc.fitted_comm(found, end).items()}
              for end in ("low", "median", "high")}
    held = {end: dict(model.FITTED_COMM[end]) for end in ("low", "median", "high")}
    same = all(abs(stored[e].get(k, 1e9) - held[e][k]) < 0.0005 and set(stored[e]) == set(held[e])
               for e in held for k in held[e])
    match = ("bench/sim/model.py holds these values (FITTED_COMM), and the simulator charges them." if same
             else f"**bench/sim/model.py holds other values ({held['median']}): copy FITTED_COMM = {stored} "
                  "there, and re-run the placement comparison at the median "
                  "and both ends (`python -m bench.run --only placement`, then the same with `--span-cost "
                  "low` and `--span-cost high`).**")
    cost = model.SPAN_COST
    repeats = (f"{found.repeats[0]}" if found.repeats[0] == found.repeats[1]
               else f"{found.repeats[0]}-{found.repeats[1]}")
    return (
        f"**The simulator's span cost, fitted** (bench/sim/span_calibration.fit, bench/sim/model.py "
        f"FITTED_COMM). At {link}, per rank count ({ranks} jobs): the median exposed-communication share "
        "of compute over its runs on k nodes, and a one-node job's slowdown on k nodes, (1 + share(k)) / "
        "(1 + share(1)), held rising; then the mean over the rank counts, each interpolated between the "
        "node counts it ran and held past its last (3 nodes were run only by 4-rank jobs, 8 only by 8-rank "
        "ones, and an 8-rank job's share is smaller: pooling both into one median made dips that were the "
        f"mix, not the network). With 95% bootstrap intervals ({found.resamples:,} resamples of each "
        f"cell's {repeats} repetitions, the whole profile recomputed each time): slowdown {slow}; comm(k), "
        f"the share that implies, (1 + comm(1)) x slowdown - 1: {comm}. {match} Past {nodes[-1]} nodes the "
        "model holds the last value (a ring crosses each node's link once per direction however many "
        "nodes it spans). The ends are per node count, not one joint band: a job whose size needs 2+ nodes "
        "is charged the ratio of two ends, which is not an end of that ratio's own interval. The simulator "
        f"charges a one-node job on 2 nodes {cost.slowdown(2, 1):.3f}x (interval ends "
        f"{model.SPAN_COST_ENDS['low'].slowdown(2, 1):.3f}x and "
        f"{model.SPAN_COST_ENDS['high'].slowdown(2, 1):.3f}x), where it charged "
        f"{model.BORROWED_SPAN_COST.slowdown(2, 1):.3f}x before: the Horovod paper's figure (Sergeev and Del "
        "Balso, 2017: 90% and 68% scaling efficiency on 512 GPUs, a 2017 network, other models; comm = "
        f"{model.horovod_comm_cross():.3f} of compute), a borrowed figure, and then "
        f"{FIRST_WORKLOAD_SLOWDOWN}, fitted from this bench's first workload (25 and 100 MB of gradient per "
        "~0.2 s of compute, two passes per cell, links from raw TCP): that workload's all-reduce took most "
        "of a step inside one node, so it measured the CPU's all-reduce, not the network. What the fitted "
        f"magnitude is now: a job whose in-node all-reduce costs {100 * found.comm[1].median:.0f}% of its "
        f"compute (comm(1)), over node links at {link} of the in-node bus bandwidth. A GPU job with a "
        "smaller in-node share, or a faster network, spans nodes more cheaply; one with a larger gradient "
        "per step of compute, or a slower network, more dearly: the interval is this workload's, not every "
        "model's.")


def estimate_s() -> float:
    """The full run's duration (seconds) at bench/measure/throughput.py's defaults: every cell's job time
    (JOB_S) times the repetitions, plus the one-node calibration runs."""
    one_pass = JOB_S[(1, "baseline")] + sum(
        splits * sum(JOB_S[(ranks, link)] for link in ("unshaped", "1:5", "1:20"))
        for ranks, splits in SPLITS_PER_RANKS.items())
    calibration = CALIBRATION_REPEATS * sum(JOB_S[(ranks, "unshaped")] for ranks in SPLITS_PER_RANKS)
    return REPEATS * one_pass + calibration


def _estimate_text() -> str:
    return f"about {estimate_s() / 60:.0f} minutes"


def _estimate() -> str:
    return (f"**The full run** (`{COMMAND}`, root; the lock other heavy runs use, as it loads both cores): "
            f"{_estimate_text()} - {REPEATS} repetitions of 28 cells (the baseline, 5 four-rank and 4 "
            f"eight-rank splits at 3 link settings) plus {2 * CALIBRATION_REPEATS} calibration runs, from "
            "each kind's job time (bench/report/throughput_section.py, JOB_S); each job's wall time is its "
            "cluster's start, the ranks' start-up and 6 s of steps after two warm-up steps (more where a "
            "step is slow, as at least 4 are measured). `python -m bench.measure.throughput --smoke` checks "
            "the path in a few minutes.")


def plot_rows(result: Result) -> list[dict[str, Any]]:
    """What bench/plots.throughput draws; empty when the result cannot be drawn."""
    return sc.slowdown_rows(_runs(result)) if _usable(result) else []
