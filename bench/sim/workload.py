"""Clusters and job traces: what the simulator replays.

A trace is a pure function of (cluster capacity, size mix, offered load, seed, days): the same arguments give
the same jobs, so every policy replays exactly the same arrivals, sizes and durations.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from bench.sim import model

# ---- clusters ----------------------------------------------------------------------------------------------

#: name -> scale -> {GPUs per node: how many nodes}. C2 large is the Alibaba 2023 trace's own node list
#: (617 x 8, 518 x 2, 54 x 4, 24 x 1); C2 small keeps its 51/43/4/2% shares on 100 nodes.
CLUSTER_SHAPES: Mapping[str, Mapping[str, Mapping[int, int]]] = {
    "C1": {"small": {8: 64}, "large": {8: 750}},
    "C2": {"small": {8: 51, 2: 43, 4: 4, 1: 2}, "large": {8: 617, 2: 518, 4: 54, 1: 24}},
    "C3": {"small": {8: 43, 4: 42}, "large": {8: 500, 4: 500}},
}
CLUSTER_TITLES: Mapping[str, str] = {
    "C1": "all 8-GPU nodes",
    "C2": "Alibaba 2023 mix (51% 8-GPU, 43% 2-GPU, 4% 4-GPU, 2% 1-GPU)",
    "C3": "half 8-GPU, half 4-GPU (Philly-like)",
}


@dataclass(frozen=True)
class Cluster:
    """Nodes by position; `names[i]` has `capacity[i]` GPUs."""

    key: str  # e.g. "C2-large"
    names: tuple[str, ...]
    capacity: tuple[int, ...]

    @property
    def total_gpus(self) -> int:
        return sum(self.capacity)

    def capacity_map(self) -> dict[str, int]:
        return dict(zip(self.names, self.capacity, strict=True))

    def min_nodes(self, gpus: int) -> int:
        """The fewest nodes a job of `gpus` GPUs needs on the empty cluster: the largest nodes first."""
        need, nodes = gpus, 0
        for cap in sorted(self.capacity, reverse=True):
            if need <= 0:
                break
            need -= cap
            nodes += 1
        if need > 0:
            raise ValueError(f"{gpus} GPU(s) do not fit {self.key} ({self.total_gpus} GPUs)")
        return nodes


def make_cluster(name: str, scale: str) -> Cluster:
    """Node capacities in a fixed shuffled order, so that name order (the policies' last tie-break) does
    not line up with node size."""
    shape = CLUSTER_SHAPES[name][scale]
    caps = [cap for cap, count in sorted(shape.items(), reverse=True) for _ in range(count)]
    order = np.random.default_rng(20230710).permutation(len(caps))
    width = len(str(len(caps)))
    capacity = tuple(caps[i] for i in order)
    names = tuple(f"node-{i:0{width}d}" for i in range(len(caps)))
    return Cluster(key=f"{name}-{scale}", names=names, capacity=capacity)


# ---- traces ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Trace:
    """Jobs in arrival order: arrival time (s), GPUs, run time (s) when placed on the fewest nodes."""

    arrival: npt.NDArray[np.float64]
    gpus: npt.NDArray[np.int64]
    duration: npt.NDArray[np.float64]
    measure_from: float  # jobs arriving earlier warm the cluster up and are left out of the metrics
    horizon: float

    def __len__(self) -> int:
        return len(self.arrival)


def mean_gpus(mix: Mapping[int, float]) -> float:
    return sum(size * share for size, share in mix.items())


def arrival_rate(total_gpus: int, mix: Mapping[int, float], load: float) -> float:
    """Mean arrivals per second that offer `load` x the cluster's GPU-seconds (at no slowdown)."""
    return load * total_gpus / (mean_gpus(mix) * model.mean_duration_s())


def sample_sizes(rng: np.random.Generator, mix: Mapping[int, float], n: int) -> npt.NDArray[np.int64]:
    sizes = np.array(list(mix), dtype=np.int64)
    shares = np.array(list(mix.values()), dtype=np.float64)
    out: npt.NDArray[np.int64] = rng.choice(sizes, size=n, p=shares / shares.sum())
    return out


def sample_durations(rng: np.random.Generator, n: int) -> npt.NDArray[np.float64]:
    raw = np.exp(math.log(model.DURATION_MEDIAN_S) + model.DURATION_SIGMA * rng.standard_normal(n))
    out: npt.NDArray[np.float64] = np.clip(raw, model.DURATION_FLOOR_S, model.DURATION_CAP_S)
    return out


def sample_arrivals(rng: np.random.Generator, mean_rate: float, horizon: float) -> npt.NDArray[np.float64]:
    """Non-homogeneous Poisson arrivals by thinning: rate(t) = mean (1 + A sin(2 pi t / day))."""
    amp = model.DAY_NIGHT_AMPLITUDE
    peak = mean_rate * (1 + amp)
    expected = peak * horizon
    times = np.cumsum(rng.exponential(1 / peak, size=int(expected + 6 * math.sqrt(expected) + 16)))
    while times[-1] < horizon:  # practically never: the draw above covers 6 standard deviations
        more = times[-1] + np.cumsum(rng.exponential(1 / peak, size=len(times)))
        times = np.concatenate([times, more])
    times = times[times < horizon]
    keep = rng.random(len(times)) < (1 + amp * np.sin(2 * math.pi * times / model.DAY_S)) / (1 + amp)
    out: npt.NDArray[np.float64] = times[keep]
    return out


def make_trace(cluster: Cluster, mix: Mapping[int, float], load: float, seed: int, *, days: float,
               warmup_days: float) -> Trace:
    rng = np.random.default_rng(seed)
    horizon = days * model.DAY_S
    arrival = sample_arrivals(rng, arrival_rate(cluster.total_gpus, mix, load), horizon)
    n = len(arrival)
    return Trace(arrival=arrival, gpus=sample_sizes(rng, mix, n), duration=sample_durations(rng, n),
                 measure_from=warmup_days * model.DAY_S, horizon=horizon)
