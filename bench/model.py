"""The numbers the placement simulator rests on, each with where it comes from (../shared/ANCHORS.md).

Nothing here is tuned to make any policy look good: change a number only when its source says otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

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
BUS_BW_IN_NODE_GBPS = 230.0
BUS_BW_CROSS_NODE_GBPS = (57.0 + 91.0) / 2
#: Horovod's published scaling efficiency on 512 GPUs (necessarily across nodes): 90% for Inception V3 and
#: ResNet-101, 68% for VGG-16. Exposed communication at cross-node bandwidth, as a share of compute, is
#: 1/E - 1: 0.11 and 0.47; we take their mean.
HOROVOD_EFFICIENCIES = (0.90, 0.68)


@dataclass(frozen=True)
class SpanCost:
    """How much longer a job runs on `nodes` nodes than on the fewest its size needs on an empty cluster.

    Derived (the default): a data-parallel step is compute plus exposed all-reduce. Inside one node the
    all-reduce runs at in-node bus bandwidth (`comm_in`, as a share of compute). Across k nodes it is
    hierarchical - reduce inside each node, then all-reduce between nodes, whose traffic per node grows as
    2(k-1)/k - calibrated so that two nodes cost `comm_cross`, the cross-node figure:
        comm(1) = comm_in,  comm(k) = comm_in + (comm_cross - comm_in) * 2(k-1)/k.
    The slowdown is (1 + comm(nodes)) / (1 + comm(fewest)): +18% for the first extra node of a job that
    fits one node, then less for each further node (+24%, +27%, ... in all); a 64-GPU job on 16 nodes
    instead of 8 pays about 2%. `linear_per_node` replaces this with a flat charge per extra node (the
    issue's rough 30%), for the sensitivity run.
    """

    comm_cross: float
    comm_in: float
    linear_per_node: float | None = None

    def comm(self, nodes: int) -> float:
        if nodes <= 1:
            return self.comm_in
        return self.comm_in + (self.comm_cross - self.comm_in) * 2 * (nodes - 1) / nodes

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


def derived_span_cost() -> SpanCost:
    comm_cross = sum(1 / e - 1 for e in HOROVOD_EFFICIENCIES) / len(HOROVOD_EFFICIENCIES)
    ratio = BUS_BW_IN_NODE_GBPS / BUS_BW_CROSS_NODE_GBPS
    return SpanCost(comm_cross=comm_cross, comm_in=comm_cross / ratio)


SPAN_COST = derived_span_cost()  # +18% for the first extra node of a one-node job
ROUGH_SPAN_COST = SpanCost(comm_cross=0.0, comm_in=0.0, linear_per_node=0.30)


# ---- size buckets for the per-size tables ------------------------------------------------------------------

BUCKETS: tuple[tuple[str, int, int], ...] = (
    ("1", 1, 1), ("2-7", 2, 7), ("8-15", 8, 15), ("16+", 16, 1 << 30))


def bucket_of(gpus: int) -> str:
    for name, low, high in BUCKETS:
        if low <= gpus <= high:
            return name
    raise ValueError(f"no bucket for {gpus} GPU(s)")
