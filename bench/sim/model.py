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
#: The 2017-derived model below rests on their ratio; the calibrated one replaces it by the measured runs.
BUS_BW_IN_NODE_GBPS = 230.0
BUS_BW_CROSS_NODE_GBPS = (57.0 + 91.0) / 2
#: Horovod's published scaling efficiency on 512 GPUs (necessarily across nodes): 90% for Inception V3 and
#: ResNet-101, 68% for VGG-16. Exposed communication at cross-node bandwidth, as a share of compute, is
#: 1/E - 1: 0.11 and 0.47; we take their mean. Both models keep it as the cost of communication across nodes.
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


def span_cost_from_profile(profile: tuple[float, ...], *, comm_cross: float) -> SpanCost:
    """The span cost whose exposed communication on 1, 2, 3, ... nodes is `profile` times the two-node one,
    with `comm_cross` (a share of compute) on two nodes."""
    inside = profile[0]
    if not inside < 1:
        raise ValueError(f"exposure profile {profile}: one node communicates no less than two; nothing to "
                         "calibrate a cost of spanning nodes from")
    return SpanCost(comm_cross=comm_cross, comm_in=comm_cross * inside,
                    beyond_two=tuple((p - inside) / (1 - inside) for p in profile[2:]))


#: Measured by bench/measure/throughput.py on 2026-11-24 13:05-13:31 UTC (2 cores, 1-minute load average
#: 1.5-7.2 at the runs' starts, the best of two passes; the run is in bench/results/speed.json, section
#: `throughput`, runs.json says how it was run; docs/benchmarks.md, "Training throughput per placement"):
#: exposed communication per step (median step minus median compute, rank 0) of a 4-GPU Horovod job (Gloo's
#: ring, hvd.allreduce of 25 and 100 MB gradients) placed on 1, 2, 3 and 4 nodes, relative to 2 nodes, with
#: node links carrying 1/20 of the TCP bandwidth between two pods of one node (1220mbit against 2.9 GB/s) -
#: the issue's 10-20x between NVLink (~230-476 GB/s) and one NIC (12-50 GB/s; NVIDIA/nccl-tests #29, #175,
#: #290). In seconds: 0.226 on one node, 0.794 on two, 0.748 on three, 0.798 on four. An earlier pass with a
#: slower link (555mbit against a noisier 1.3 GB/s) gave (0.152, 1, 0.983, 1.054): the same flat shape.
#: bench/sim/span_calibration.exposure_profile computes it from that file; tests/benchmarks/test_throughput.py
#: checks these numbers still match it.
MEASURED_LINK_RATIO = 20
MEASURED_PROFILE = (0.2848, 1.0, 0.9412, 1.0047)


def monotone(profile: tuple[float, ...]) -> tuple[float, ...]:
    """Each value at least the one before: a job on more nodes never communicates less (the ring's traffic
    per node does not shrink), so a measured dip is noise between runs, not a saving."""
    out: list[float] = []
    for value in profile:
        out.append(max(value, out[-1]) if out else value)
    return tuple(out)


def calibrated_span_cost() -> SpanCost:
    """Horovod's published cross-node exposure on two nodes (HOROVOD_EFFICIENCIES), distributed over 1, 2, 3
    and 4 nodes as measured here (MEASURED_PROFILE, made monotone); past 4 nodes held at the 4-node value (a
    ring crosses each node's link once per direction however many nodes it spans)."""
    return span_cost_from_profile(monotone(MEASURED_PROFILE), comm_cross=horovod_comm_cross())


DERIVED_2017_SPAN_COST = derived_span_cost()  # before the measurement: +18% for the first extra node
SPAN_COST = calibrated_span_cost()            # what the simulator charges ("derived" in its records)
ROUGH_SPAN_COST = SpanCost(comm_cross=0.0, comm_in=0.0, linear_per_node=0.30)


# ---- size buckets for the per-size tables ------------------------------------------------------------------

BUCKETS: tuple[tuple[str, int, int], ...] = (
    ("1", 1, 1), ("2-7", 2, 7), ("8-15", 8, 15), ("16+", 16, 1 << 30))


def bucket_of(gpus: int) -> str:
    for name, low, high in BUCKETS:
        if low <= gpus <= high:
            return name
    raise ValueError(f"no bucket for {gpus} GPU(s)")
