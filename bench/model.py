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
    """Slowdown of a job's run time per node it spans beyond the fewest its size needs on an empty cluster.

    comm_cross: communication time / compute time when the ring crosses nodes; comm_in: the same traffic at
    in-node bandwidth. Crossing one boundary turns comm_in into comm_cross; we charge that same step for
    every further extra node, linearly. A ring's bus bandwidth barely changes with the number of nodes once
    it crosses one, so linear overstates the cost of a third or fourth node, while uneven splits (one node
    holding a single GPU) make stragglers we do not model; the per-node figure is the simplest honest
    reading of the bandwidth numbers we have.
    """

    comm_cross: float
    comm_in: float

    @property
    def per_extra_node(self) -> float:
        return (1 + self.comm_cross) / (1 + self.comm_in) - 1

    def slowdown(self, extra_nodes: int) -> float:
        return 1.0 + self.per_extra_node * max(0, extra_nodes)


def derived_span_cost() -> SpanCost:
    comm_cross = sum(1 / e - 1 for e in HOROVOD_EFFICIENCIES) / len(HOROVOD_EFFICIENCIES)
    ratio = BUS_BW_IN_NODE_GBPS / BUS_BW_CROSS_NODE_GBPS
    return SpanCost(comm_cross=comm_cross, comm_in=comm_cross / ratio)


SPAN_COST = derived_span_cost()  # ~18% per extra node

# ---- size buckets for the per-size tables ------------------------------------------------------------------

BUCKETS: tuple[tuple[str, int, int], ...] = (
    ("1", 1, 1), ("2-7", 2, 7), ("8-15", 8, 15), ("16+", 16, 1 << 30))


def bucket_of(gpus: int) -> str:
    for name, low, high in BUCKETS:
        if low <= gpus <= high:
            return name
    raise ValueError(f"no bucket for {gpus} GPU(s)")
