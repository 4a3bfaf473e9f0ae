"""The numbers the placement simulator rests on, each with where it comes from (../shared/ANCHORS.md).

Nothing here is tuned to make any policy look good: change a number only when its source says otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

# ---- job sizes ---------------------------------------------------------------------------------------------

#: SenseTime Helios (SC'21): share of jobs by GPUs requested.
HELIOS_MIX: Mapping[int, float] = MappingProxyType(
    {1: 0.67, 2: 0.03, 4: 0.07, 8: 0.16, 16: 0.04, 32: 0.02, 64: 0.01})

#: The stress variant moves 10% of jobs to sizes that fit no power-of-two slot.
STRESS_SIZES = (3, 5, 6, 12)
STRESS_SHARE = 0.10


def stress_mix(base: Mapping[int, float] = HELIOS_MIX) -> Mapping[int, float]:
    """`base` scaled to 90%, plus 2.5% each for 3, 5, 6 and 12 GPUs."""
    mix = {size: share * (1 - STRESS_SHARE) for size, share in base.items()}
    for size in STRESS_SIZES:
        mix[size] = mix.get(size, 0.0) + STRESS_SHARE / len(STRESS_SIZES)
    return MappingProxyType(dict(sorted(mix.items())))


MIXES: Mapping[str, Mapping[int, float]] = MappingProxyType({"helios": HELIOS_MIX, "stress": stress_mix()})

# ---- durations ---------------------------------------------------------------------------------------------

DURATION_MEDIAN_S = 300.0
DURATION_P90_S = 15_000.0
Z90 = 1.2815515655446004  # the standard normal's 90th percentile
DURATION_SIGMA = math.log(DURATION_P90_S / DURATION_MEDIAN_S) / Z90  # about 3.05
#: Durations are clipped to one day. With sigma ~3.05 the untruncated mean would be ~31,700 s (one job in a
#: thousand would run 43 days); clipped at a day the mean is ~6,400 s, close to Helios' published 6,652 s.
DURATION_CAP_S = 86_400.0
DURATION_FLOOR_S = 1.0


def mean_duration_s() -> float:
    """E[min(max(D, floor), cap)] for the log-normal D above, in closed form (the floor's effect is ~0)."""
    mu, sigma, cap = math.log(DURATION_MEDIAN_S), DURATION_SIGMA, DURATION_CAP_S
    z = (math.log(cap) - mu) / sigma
    below = math.exp(mu + sigma * sigma / 2) * _phi(z - sigma)
    return below + cap * (1 - _phi(z))


def _phi(x: float) -> float:
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))


# ---- arrivals ----------------------------------------------------------------------------------------------

DAY_S = 86_400.0
#: Poisson arrivals whose rate swings 2:1 between day peak and night trough:
#: rate(t) = mean * (1 + A sin(2 pi t / day)), with (1 + A) / (1 - A) = 2.
DAY_NIGHT_AMPLITUDE = 1.0 / 3.0
LOADS = (0.7, 0.9, 1.1)

# ---- the cost of spanning nodes ----------------------------------------------------------------------------

#: A100 all-reduce bus bandwidth inside one node, and across two nodes (ANCHORS: ~230 GB/s vs 57-91 GB/s).
#: The 2017-derived model below rests on their ratio; the fitted one replaces it by the measured runs.
BUS_BW_IN_NODE_GBPS = 230.0
BUS_BW_CROSS_NODE_GBPS = (57.0 + 91.0) / 2
#: Horovod's published scaling efficiency on 512 GPUs (Sergeev and Del Balso, 2017; necessarily across many
#: nodes): 90% for Inception V3 and ResNet-101, 68% for VGG-16. Exposed communication at cross-node
#: bandwidth, as a share of compute, is 1/E - 1: 0.11 and 0.47; their mean, 0.291, is a borrowed figure (many
#: nodes, not two; a 2017 network; other models). The 2017-derived and the borrowed models below charge it
#: for two nodes; the fitted model (SPAN_COST) replaces it by what the throughput runs measure.
HOROVOD_EFFICIENCIES = (0.90, 0.68)


@dataclass(frozen=True)
class SpanCost:
    """How much longer a job runs on `nodes` nodes than on the fewest its size needs on an empty cluster.

    A data-parallel step is compute plus exposed all-reduce, `comm(k)` as a share of compute on k nodes:
    `comm_in` inside one node, `comm_cross` on two, and beyond two
        comm(k) = comm_in + (comm_cross - comm_in) * shape(k),
    where shape(k) is `beyond_two[k - 3]` (measured; held at its last value past the nodes measured), or, with
    no `beyond_two`, 2(k-1)/k: the traffic per node of an all-reduce between k nodes after reducing inside
    each (a hierarchical all-reduce; Horovod's default ring is not one). The slowdown is
    (1 + comm(nodes)) / (1 + comm(fewest)). `linear_per_node` replaces all this with a flat charge per extra
    node (the issue's rough 30%), for the sensitivity run.
    """

    comm_cross: float
    comm_in: float
    linear_per_node: float | None = None
    beyond_two: tuple[float, ...] = ()

    def shape(self, nodes: int) -> float:
        """The cross-node part of comm(nodes) relative to two nodes' (0 on one node)."""
        if nodes <= 1:
            return 0.0
        if nodes == 2:
            return 1.0
        if self.beyond_two:
            return self.beyond_two[min(nodes - 3, len(self.beyond_two) - 1)]
        return 2 * (nodes - 1) / nodes

    def comm(self, nodes: int) -> float:
        return self.comm_in + (self.comm_cross - self.comm_in) * self.shape(nodes)

    def slowdown(self, nodes: int, fewest: int) -> float:
        if nodes <= fewest:
            return 1.0
        if self.linear_per_node is not None:
            return 1.0 + self.linear_per_node * (nodes - fewest)
        return (1 + self.comm(nodes)) / (1 + self.comm(fewest))

    @property
    def first_extra_node(self) -> float:
        """The extra run time of a one-node job split over two nodes."""
        return self.slowdown(2, 1) - 1

    def summary(self) -> dict[str, Any]:
        """What a placement run was simulated under (placement_meta.json): the slowdown of a one-node job on
        1..8 nodes, rounded."""
        return {"one_node_job_on": {str(k): round(self.slowdown(k, 1), 4) for k in range(1, 9)}}


def horovod_comm_cross() -> float:
    return sum(1 / e - 1 for e in HOROVOD_EFFICIENCIES) / len(HOROVOD_EFFICIENCIES)


def derived_span_cost() -> SpanCost:
    """The model before it was measured (2017 Horovod efficiencies, A100 bus bandwidths, a hierarchical
    shape): +18% for the first extra node of a one-node job, then +24%, +27%, ... in all."""
    comm_cross = horovod_comm_cross()
    ratio = BUS_BW_IN_NODE_GBPS / BUS_BW_CROSS_NODE_GBPS
    return SpanCost(comm_cross=comm_cross, comm_in=comm_cross / ratio)


def span_cost_from_comm(comm: Mapping[int, float]) -> SpanCost:
    """The span cost whose exposed communication on k nodes is `comm[k]` (a share of compute; k = 1 and 2
    at least), made monotone over k (a job on more nodes never communicates less: a measured dip is noise
    between runs), linear between node counts not measured, and flat past the last one (a ring crosses each
    node's link once per direction however many nodes it spans)."""
    if 1 not in comm or 2 not in comm:
        raise ValueError(f"comm needs values on 1 and 2 nodes, has {sorted(comm)}")
    nodes = sorted(comm)
    rising = dict(zip(nodes, monotone(tuple(comm[k] for k in nodes)), strict=True))
    inside, cross = rising[1], rising[2]
    if not cross > inside:
        return SpanCost(comm_cross=cross, comm_in=inside)  # spanning costs nothing measurable
    full = [(interpolated(rising, k) - inside) / (cross - inside) for k in range(3, nodes[-1] + 1)]
    return SpanCost(comm_cross=cross, comm_in=inside, beyond_two=tuple(full) or (1.0,))


def interpolated(profile: Mapping[int, float], k: int) -> float:
    """A profile measured at some node counts, at k: linear between the two measured around it, the last
    value past the last one (a ring crosses each node's link once per direction however many it spans)."""
    nodes = sorted(profile)
    if k >= nodes[-1]:
        return profile[nodes[-1]]
    below, above = max(n for n in nodes if n <= k), min(n for n in nodes if n >= k)
    if below == above:
        return profile[k]
    return profile[below] + (profile[above] - profile[below]) * (k - below) / (above - below)


def monotone(profile: tuple[float, ...]) -> tuple[float, ...]:
    """Each value at least the one before: a job on more nodes never communicates less (the ring's traffic
    per node does not shrink), so a measured dip is noise between runs, not a saving."""
    out: list[float] = []
    for value in profile:
        out.append(max(value, out[-1]) if out else value)
    return tuple(out)


#: Fitted by bench/sim/span_calibration.fit from the throughput run stored in bench/results/speed.json
#: (section `throughput`; `python -m bench.run --only throughput`, when and on which commit in
#: bench/results/runs.json): 4- and 8-rank Horovod jobs on 1, 2, 3, 4 and 8 nodes, 5 interleaved
#: repetitions per cell, node links at 1/20 of the in-node all-reduce's bus bandwidth, a workload sized as a
#: GPU job's (its in-node all-reduce a few percent of a step: bench/measure/throughput.py). At link 1:20, per
#: rank count, the median share of compute rank 0 spends outside compute on k nodes gives a one-node job's
#: slowdown on k nodes; the slowdowns are averaged over the rank counts (span_calibration.profile), and
#: comm(k) = (1 + comm(1)) x slowdown(k) - 1, comm(1) the rank counts' mean. "low" and "high" hold comm(1)
#: at its median and give comm(k) the ends of the slowdown's 95% bootstrap interval (2,000 resamples of each
#: cell's repetitions). A new run replaces these: copy `fitted_comm` of its fit here (the report says when
#: they differ); tests/benchmarks/test_throughput.py checks they are what
#: the stored run fits. The magnitude is this workload's over these links, not every model's
#: (docs/benchmarks.md, "Training throughput per placement"). The first workload's fit (25-100 MB per ~0.2 s
#: of CPU compute, two passes, links from raw TCP: 1.822x on 2 nodes) measured the CPU's all-reduce.
FIT_LINK_RATIO = 20
FITTED_COMM: Mapping[str, Mapping[int, float]] = MappingProxyType({
    "low": MappingProxyType({1: 0.0449, 2: 0.3304, 3: 0.3329, 4: 0.3356, 8: 0.341}),
    "median": MappingProxyType({1: 0.0449, 2: 0.3488, 3: 0.3509, 4: 0.3529, 8: 0.3578}),
    "high": MappingProxyType({1: 0.0449, 2: 0.3609, 3: 0.3627, 4: 0.366, 8: 0.3702}),
})
#: The throughput bench's first measured shape (2026-11-24, exposed communication on 1-4 nodes over the
#: 2-node one at the TCP-derived 1:20 link), which spread the borrowed magnitude before the fit.
FIRST_MEASURED_SHAPE = (0.2848, 1.0, 0.9412, 1.0047)


def fitted_span_cost(end: str = "median") -> SpanCost:
    """The span cost fitted from the throughput runs (FITTED_COMM), at the median or one end ("low",
    "high") of its interval."""
    return span_cost_from_comm(FITTED_COMM[end])


def borrowed_span_cost() -> SpanCost:
    """The model before the fit: the Horovod paper's cross-node exposure (HOROVOD_EFFICIENCIES: 512 GPUs,
    2017, a borrowed figure) on two nodes, spread over 1, 3 and 4 nodes by FIRST_MEASURED_SHAPE."""
    cross = horovod_comm_cross()
    return span_cost_from_comm({k: cross * p for k, p in enumerate(FIRST_MEASURED_SHAPE, start=1)})


DERIVED_2017_SPAN_COST = derived_span_cost()  # before any measurement: +18% for the first extra node
BORROWED_SPAN_COST = borrowed_span_cost()      # the Horovod paper's magnitude, the first measured shape
SPAN_COST = fitted_span_cost()                # what the simulator charges ("derived" in its records)
SPAN_COST_ENDS: Mapping[str, SpanCost] = MappingProxyType({end: fitted_span_cost(end) for end in FITTED_COMM})
ROUGH_SPAN_COST = SpanCost(comm_cross=0.0, comm_in=0.0, linear_per_node=0.30)


# ---- size buckets for the per-size tables ------------------------------------------------------------------

BUCKETS: tuple[tuple[str, int, int], ...] = (
    ("1", 1, 1), ("2-7", 2, 7), ("8-15", 8, 15), ("16+", 16, 1 << 30))


def bucket_of(gpus: int) -> str:
    for name, low, high in BUCKETS:
        if low <= gpus <= high:
            return name
    raise ValueError(f"no bucket for {gpus} GPU(s)")
