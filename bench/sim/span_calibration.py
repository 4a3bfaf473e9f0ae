"""What the throughput bench's runs (bench/measure/throughput.py) say, and the span cost they fit (pure).

A step of a data-parallel job is compute plus exposed all-reduce. Per run, rank 0 reports per gradient size
the median compute part of a step and the median of the rest, the exposed communication (waiting for the
slowest rank included); its share of compute is what the simulator's span cost is made of
(bench/sim/model.py: comm(k) on k nodes). Everything here works on the bench's list of runs (`every_run`),
each tagged with its cell (link setting, split) and its repetition:

- `schedule`: the order runs are made in - round robin over the cells, repetition by repetition, so a busy
  spell of the shared machine falls on every cell alike, not on one cell's repetitions;
- `spread`: a cell as median and interquartile range over its repetitions, with n (no "best pass");
- `in_node_bus_bandwidth` and `link_rates`: node links set from the one-node job's measured all-reduce bus
  bandwidth, so every shaped link is slower than the in-node path and a shaped column measures the network;
- `fit`: the slowdown of a one-node job spread over k nodes at one link setting - per rank count, then
  averaged over the rank counts - and comm(k), the exposed-communication share it implies, with bootstrap
  intervals over the repetitions.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from bench.sim import model

Run = Mapping[str, Any]
Cell = tuple[str, tuple[int, ...]]  # (link name, split)
T = TypeVar("T")

#: The cell of the one-process job every efficiency is relative to.
BASELINE = "baseline"
#: Bootstrap resamples behind every interval; seeded, so a stored result always gives the same interval.
RESAMPLES = 2000
SEED = 29
CONFIDENCE = 0.95


def schedule(cells: Sequence[T], repeats: int) -> list[tuple[int, T]]:
    """(repetition, cell) in the order to run them: pass r runs every cell once, forwards on even passes and
    backwards on odd ones, so no cell's (r+1)-th run comes before every cell's r-th, and a cell early in one
    pass is late in the next (a slow drift of the machine's load then hits every cell alike)."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    if len(set(cells)) != len(cells):
        raise ValueError(f"a cell appears twice in {list(cells)}")
    order: list[tuple[int, T]] = []
    for repeat in range(repeats):
        ordered = cells if repeat % 2 == 0 else list(reversed(cells))
        order += [(repeat, cell) for cell in ordered]
    return order


@dataclass(frozen=True)
class Spread:
    """A cell's repetitions: median and quartiles (`statistics.quantiles`, inclusive method: the quartiles of
    the values themselves, so with 5 runs q1 and q3 are the 2nd and 4th), and how many."""

    median: float
    q1: float
    q3: float
    n: int

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    def scaled(self, factor: float) -> Spread:
        return Spread(self.median * factor, self.q1 * factor, self.q3 * factor, self.n)


def spread(values: Sequence[float]) -> Spread:
    if not values:
        raise ValueError("no values to summarise")
    if len(values) == 1:
        return Spread(values[0], values[0], values[0], 1)
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return Spread(median, q1, q3, len(values))


def percentile(values: Sequence[float], share: float) -> float:
    """The `share` quantile of `values`, interpolated linearly between order statistics (numpy's default)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    at = share * (len(ordered) - 1)
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


# ---- the runs ----------------------------------------------------------------------------------------------

def cell_of(run: Run) -> Cell:
    return str(run["link"]), tuple(int(n) for n in run["split"])


def by_cell(runs: Sequence[Run]) -> dict[Cell, list[Run]]:
    """The runs of each cell, in the order measured (a cell's order of first appearance kept)."""
    out: dict[Cell, list[Run]] = {}
    for run in runs:
        out.setdefault(cell_of(run), []).append(run)
    return out


def exposed(size: Mapping[str, Any]) -> float:
    """Seconds per step not spent computing (all-reduce, waiting for the other ranks): the median over the
    steps of each step's own remainder, which the rank measures (never negative, and steadier than the
    difference of two medians when it is a few percent of the step)."""
    return float(size["allreduce_s_median"])


def comm_share(run: Run) -> float:
    """One run's exposed communication as a share of its compute, the mean over its gradient sizes (`fit`
    takes comm(k) from the medians over runs). Each run is its own reference (its compute ran under the
    same load as its all-reduce), so a busy machine that slows both moves the share less than the step."""
    shares = [exposed(size) / float(size["compute_s_median"]) for size in run["sizes"].values()
              if float(size["compute_s_median"]) > 0]
    if not shares:
        raise ValueError(f"run {cell_of(run)} has no gradient size with compute time")
    return statistics.fmean(shares)


def bus_bandwidth(ranks: int, megabytes: float, seconds: float) -> float:
    """A ring all-reduce's bus bandwidth, bytes per second: each rank sends and receives 2(n-1)/n of the
    gradient (nccl-tests' definition, comparable with a link's rate)."""
    return 2 * (ranks - 1) / ranks * megabytes * 1e6 / seconds


def in_node_bus_bandwidth(runs: Sequence[Run]) -> dict[str, Any]:
    """From one-node runs without a node link: per rank count and gradient size the median bus bandwidth of
    the all-reduce over the runs, and the slowest of those medians, which node links are set from: a link
    below it is slower than the in-node path for every job and size measured."""
    found: dict[int, dict[str, list[float]]] = {}
    for run in runs:
        split = [int(n) for n in run["split"]]
        if len(split) != 1 or split[0] < 2:
            raise ValueError(f"in-node bandwidth needs a one-node job of 2+ ranks, got {split}")
        for mb, size in run["sizes"].items():
            seconds = float(size["allreduce_s_median"])
            if seconds > 0:
                found.setdefault(split[0], {}).setdefault(mb, []).append(
                    bus_bandwidth(split[0], float(mb), seconds))
    if not found:
        raise ValueError("no one-node run with an all-reduce time")
    medians = {str(ranks): {mb: statistics.median(v) for mb, v in sizes.items()}
               for ranks, sizes in sorted(found.items())}
    slowest = min(value for sizes in medians.values() for value in sizes.values())
    return {"bytes_per_s": medians, "slowest_bytes_per_s": slowest}


def link_name(ratio: int | None) -> str:
    return "unshaped" if ratio is None else f"1:{ratio}"


def link_rates(in_node_bytes_per_s: float, ratios: Sequence[int | None]) -> list[dict[str, Any]]:
    """Each link setting's TCP payload rate: `1/ratio` of the in-node all-reduce bus bandwidth (None: no
    node link, the pods' own veth pairs)."""
    return [{"name": link_name(r), "ratio": r,
             "payload_bytes_per_s": None if r is None else in_node_bytes_per_s / r} for r in ratios]


# ---- the fit -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Interval:
    median: float
    low: float
    high: float


@dataclass(frozen=True)
class Fit:
    """At one link setting: the slowdown of a one-node job on k nodes (the quantity the placement simulator
    uses) and comm(k), the exposed-communication share it implies, (1 + comm(1)) x slowdown(k) - 1, each
    with its bootstrap interval. See `profile` for how rank counts and node counts combine."""

    link: str
    comm: Mapping[int, Interval]
    slowdown: Mapping[int, Interval]
    runs: Mapping[int, int]
    repeats: tuple[int, int]  # the fewest and most repetitions of a cell in the fit
    resamples: int


def profile(cells: Mapping[Cell, Sequence[float]]) -> tuple[float, dict[int, float]]:
    """comm(1) and the slowdown of a one-node job on k nodes, from the comm shares of each cell's runs.

    Per rank count r (a 4- and an 8-rank job compute and communicate different amounts, and do not run on
    the same node counts: 3 nodes only 4 ranks, 8 only 8): c_r(k), the median share over its runs on k nodes
    (its splits pooled), and its slowdown (1 + c_r(k)) / (1 + c_r(1)), held rising (a job on more nodes
    never communicates less: a dip is noise between runs). The slowdown on k nodes is the mean over the rank
    counts of each one's, interpolated between the node counts it ran and held past its last; comm(1) the
    mean of the c_r(1). A rank count with no one-node runs, or none on more nodes, is left out."""
    pooled: dict[int, dict[int, list[float]]] = {}
    for (_, split), shares in cells.items():
        pooled.setdefault(sum(split), {}).setdefault(len(split), []).extend(shares)
    ones: list[float] = []
    rising: list[dict[int, float]] = []
    for _, by_nodes in sorted(pooled.items()):
        if 1 not in by_nodes or len(by_nodes) < 2:
            continue
        comm = {k: statistics.median(v) for k, v in sorted(by_nodes.items())}
        slowdown = model.monotone(tuple((1 + c) / (1 + comm[1]) for c in comm.values()))
        ones.append(comm[1])
        rising.append(dict(zip(comm, slowdown, strict=True)))
    if not rising:
        raise ValueError("no rank count has one-node runs and runs on 2+ nodes")
    nodes = sorted({k for held in rising for k in held})
    return statistics.fmean(ones), {k: statistics.fmean(model.interpolated(held, k) for held in rising)
                                    for k in nodes}


def fit(runs: Sequence[Run], link: str, *, resamples: int = RESAMPLES, seed: int = SEED,
        confidence: float = CONFIDENCE) -> Fit:
    """The slowdown and comm(k) (`profile`) from the runs at `link`; each interval resamples each cell's
    repetitions with replacement (a cell keeps its n), `resamples` times, recomputes the whole profile, and
    takes the central `confidence` of each node count's values. Every resampled profile rises with k, so
    each end does too; the ends are per node count, not one resample's profile."""
    shares = {cell: [comm_share(r) for r in found]
              for cell, found in by_cell(runs).items() if cell[0] == link}
    if not shares:
        raise ValueError(f"no run at link {link!r}")
    try:
        one, point = profile(shares)
    except ValueError as error:
        raise ValueError(f"link {link!r}: the fit needs one-node runs and runs on 2+ nodes of one rank "
                         f"count ({error}); has splits {sorted({split for _, split in shares})}") from None
    rng = random.Random(seed)
    drawn: dict[int, list[float]] = {k: [] for k in point}
    slow: dict[int, list[float]] = {k: [] for k in point}
    for _ in range(resamples):
        again_one, again = profile({cell: rng.choices(v, k=len(v)) for cell, v in shares.items()})
        for k, value in again.items():
            slow[k].append(value)
            drawn[k].append((1 + again_one) * value - 1)
    tail = (1 - confidence) / 2

    def interval(center: float, values: Sequence[float]) -> Interval:
        return Interval(center, percentile(values, tail), percentile(values, 1 - tail))

    counts: dict[int, int] = {}
    for (_, split), v in shares.items():
        counts[len(split)] = counts.get(len(split), 0) + len(v)
    ns = [len(v) for v in shares.values()]
    return Fit(link=link, comm={k: interval((1 + one) * point[k] - 1, drawn[k]) for k in point},
               slowdown={k: interval(point[k], slow[k]) for k in point},
               runs=dict(sorted(counts.items())), repeats=(min(ns), max(ns)), resamples=resamples)


def fitted_comm(found: Fit, end: str) -> dict[int, float]:
    """comm(k) for the simulator at one end of the interval ("low", "median", "high"): comm(1) is the
    median, and comm(k) on more nodes gives that end's slowdown of a one-node job over k nodes. A job whose
    size needs k0 >= 2 nodes is charged the ratio of two such ends, which is not an end of its own
    interval (the ends are per node count, not one resample's profile)."""
    one = found.comm[1].median
    return {k: one if k == 1 else (1 + one) * getattr(found.slowdown[k], end) - 1 for k in found.comm}


# ---- the report's view -------------------------------------------------------------------------------------

def rank_counts(runs: Sequence[Run]) -> list[int]:
    return sorted({sum(int(n) for n in r["split"]) for r in runs if r["link"] != BASELINE})


def cell_spreads(runs: Sequence[Run]) -> dict[Cell, dict[str, Any]]:
    """Per cell: steps per second and median step per gradient size, and the comm share, as `Spread`s."""
    out: dict[Cell, dict[str, Any]] = {}
    for cell, found in by_cell(runs).items():
        sizes = list(found[0]["sizes"])

        def each(mb: str, key: str, found: Sequence[Run] = found) -> Spread:
            return spread([float(r["sizes"][mb][key]) for r in found if mb in r["sizes"]])

        out[cell] = {
            "steps_per_s": {mb: each(mb, "steps_per_s") for mb in sizes},
            "step_s": {mb: each(mb, "step_s_median") for mb in sizes},
            "comm_share": spread([comm_share(r) for r in found]) if cell[0] != BASELINE else None,
        }
    return out


def slowdown_rows(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """Per cell and gradient size, the median step over the median step of the one-node job of as many
    ranks at the same link (what the plot draws)."""
    spreads = cell_spreads(runs)
    out = []
    for (link, split), cell in spreads.items():
        if link == BASELINE:
            continue
        one = spreads.get((link, (sum(split),)))
        for mb, step in cell["step_s"].items():
            base = one["step_s"].get(mb) if one else None
            out.append({"link": link, "split": list(split), "nodes": len(split), "ranks": sum(split),
                        "gradient_mb": mb, "slowdown": step.median / base.median if base else None})
    return out


def pass_ratios(runs: Sequence[Run]) -> list[float]:
    """Per cell and gradient size with 2+ runs, the slowest run's median step over the fastest's, sorted:
    how far repetitions of one and the same cell disagree."""
    steps: dict[tuple[Cell, str], list[float]] = {}
    for run in runs:
        for mb, size in run["sizes"].items():
            steps.setdefault((cell_of(run), mb), []).append(float(size["step_s_median"]))
    return sorted(max(v) / min(v) for v in steps.values() if len(v) > 1)
