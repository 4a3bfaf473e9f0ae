"""A discrete-event simulator of one trace on one cluster under one placement policy.

Queueing is strict first-come-first-served: only the job at the head of the queue may start, and while it
cannot, everything behind it waits (head-of-line blocking, as a FIFO gang queue such as Kueue's StrictFIFO
does). Skipping ahead (backfilling) would help every policy alike and would hide the cost of fragmentation
behind reordering, so we do not.

Every policy here can place a job whenever enough GPUs are free in total (any split is allowed), so a policy
never delays a start by fragmenting; it pays instead in run time: a job spanning more nodes than its size
needs on an empty cluster runs slower (model.SpanCost), holds its GPUs longer, and so delays those queued
behind it. The ideal bound pools all GPUs and charges nothing for spanning; under strict FCFS it starts and
finishes every job no later than any policy does (tests/benchmarks/test_simulator.py checks it job by job).

Speed: a policy sees a node only through its free count, its capacity and, to break ties, its name; a job
never uses more than `gpus` nodes, and a policy that spans the fewest nodes k never more than k. So a policy
is shown only the first-named `gpus` (or k) nodes of each class of equal (capacity, free) and decides in
O(classes x k) instead of O(nodes), choosing exactly the nodes it would choose from the whole cluster
(tests/benchmarks/test_simulator.py compares the two on random states).
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from bench.sim.model import SPAN_COST, SpanCost
from bench.sim.policies import Allocation, PlaceFn, fgd_fragment_table
from bench.sim.workload import Cluster, Trace

SAMPLE_EVERY_S = 900.0


class Nodes:
    """Free GPUs per node, kept also as classes of interchangeable nodes and counts per free value."""

    def __init__(self, cluster: Cluster) -> None:
        self.names = cluster.names
        self.index = {name: i for i, name in enumerate(cluster.names)}
        self.cap = list(cluster.capacity)
        self.free = list(cluster.capacity)
        self.largest = max(self.cap)
        self.by_free = [0] * (self.largest + 1)  # how many nodes have exactly v free
        # (capacity, free) -> node indices in name order (names sort as their indices do)
        order = sorted(range(len(self.names)), key=self.names.__getitem__)
        self.rank = [0] * len(order)
        for position, i in enumerate(order):
            self.rank[i] = position
        self.by_rank = order
        self.members: dict[tuple[int, int], list[int]] = {}
        for position, i in enumerate(order):
            self.members.setdefault((self.cap[i], self.cap[i]), []).append(position)
            self.by_free[self.cap[i]] += 1
        self.total_free = sum(self.cap)
        self.capacity_total = self.total_free

    def view(self, per_class: int) -> dict[str, int]:
        """The first-named `per_class` nodes of every class with free GPUs (see the module docstring)."""
        out: dict[str, int] = {}
        names, by_rank = self.names, self.by_rank
        for (_, free), ranks in self.members.items():
            if free:
                for position in ranks[:per_class]:
                    out[names[by_rank[position]]] = free
        return out

    def _move(self, i: int, new_free: int) -> None:
        old = self.free[i]
        cap = self.cap[i]
        position = self.rank[i]
        ranks = self.members[(cap, old)]
        del ranks[bisect.bisect_left(ranks, position)]
        bisect.insort(self.members.setdefault((cap, new_free), []), position)
        self.by_free[old] -= 1
        self.by_free[new_free] += 1
        self.free[i] = new_free
        self.total_free += new_free - old

    def take(self, allocation: Allocation, gpus: int) -> list[tuple[int, int]]:
        if sum(take for _, take in allocation) != gpus:
            raise AssertionError(f"policy allocated {allocation} for a request of {gpus} GPU(s)")
        held = []
        for name, take in allocation:
            i = self.index[name]
            if not 0 < take <= self.free[i]:
                raise AssertionError(f"policy took {take} GPU(s) of {name}, which has {self.free[i]} free")
            self._move(i, self.free[i] - take)
            held.append((i, take))
        return held

    def give_back(self, held: list[tuple[int, int]]) -> None:
        for i, take in held:
            self._move(i, self.free[i] + take)

    def fewest_nodes(self, gpus: int) -> int:
        """The fewest nodes the request could span right now (largest free first)."""
        need, nodes = gpus, 0
        for v in range(self.largest, 0, -1):
            count = self.by_free[v]
            if v * count >= need:
                return nodes + math.ceil(need / v)
            need -= v * count
            nodes += count
        raise AssertionError(f"{gpus} GPU(s) asked with {self.total_free} free")

    def largest_free(self) -> int:
        return next((v for v in range(self.largest, 0, -1) if self.by_free[v]), 0)

    def fragmentation(self, table: list[float]) -> float:
        """Free GPUs the next job, drawn from the size mix, could not use on their node (FGD's expected
        fragmentation, summed over nodes), as a share of all the cluster's GPUs. Divided by the cluster's
        GPUs, not the free ones, so a nearly full cluster does not make a few stranded GPUs look huge."""
        return sum(self.by_free[v] * table[v] for v in range(1, self.largest + 1)) / self.capacity_total


@dataclass(frozen=True)
class RunResult:
    """Per job (trace order): start, end, nodes spanned, the fewest possible then, the fewest on an empty
    cluster. `samples` rows: time, largest free block, stranded share (Nodes.fragmentation), busy GPUs."""

    policy: str
    start: npt.NDArray[np.float64]
    end: npt.NDArray[np.float64]
    nodes: npt.NDArray[np.int64]
    fewest_then: npt.NDArray[np.int64]
    fewest_empty: npt.NDArray[np.int64]
    samples: npt.NDArray[np.float64]


def simulate(cluster: Cluster, trace: Trace, policy: str, place: PlaceFn | None, *,
             frag_table: list[float], span: SpanCost = SPAN_COST, fewest_only: bool = False) -> RunResult:
    """Replay `trace`; `place=None` is the ideal bound (pooled GPUs, no cost for spanning). `fewest_only`:
    the policy always spans the fewest nodes possible, so it needs to see fewer nodes."""
    n = len(trace)
    arrival = trace.arrival.tolist()
    gpus = trace.gpus.tolist()
    duration = trace.duration.tolist()
    empty_min = {g: cluster.min_nodes(g) for g in set(gpus)}
    start, end = [math.nan] * n, [math.nan] * n
    spanned, fewest = [0] * n, [0] * n
    nodes = Nodes(cluster)
    pooled_free = cluster.total_gpus
    held: dict[int, list[tuple[int, int]]] = {}
    running: list[tuple[float, int]] = []
    queue: deque[int] = deque()
    samples: list[tuple[float, int, float, int]] = []
    next_sample = 0.0
    nxt = 0
    inf = math.inf
    while nxt < n or running:
        t_arr = arrival[nxt] if nxt < n else inf
        t_end = running[0][0] if running else inf
        now = min(t_arr, t_end)
        while next_sample <= now:
            free_now = pooled_free if place is None else nodes.total_free
            if place is None:
                samples.append((next_sample, 0, 0.0, cluster.total_gpus - free_now))
            else:
                samples.append((next_sample, nodes.largest_free(), nodes.fragmentation(frag_table),
                                cluster.total_gpus - free_now))
            next_sample += SAMPLE_EVERY_S
        if t_end <= t_arr:
            _, job = heapq.heappop(running)
            if place is None:
                pooled_free += gpus[job]
            else:
                nodes.give_back(held.pop(job))
        else:
            queue.append(nxt)
            nxt += 1
        while queue:
            job = queue[0]
            g = gpus[job]
            if place is None:
                if pooled_free < g:
                    break
                pooled_free -= g
                spanned[job] = fewest[job] = empty_min[g]
                slowdown = 1.0
            else:
                if nodes.total_free < g:
                    break
                fewest[job] = nodes.fewest_nodes(g)
                allocation = place(nodes.view(fewest[job] if fewest_only else g), g)
                if allocation is None:
                    break
                held[job] = nodes.take(allocation, g)
                spanned[job] = len(allocation)
                slowdown = span.slowdown(len(allocation), empty_min[g])
            queue.popleft()
            start[job] = now
            end[job] = now + duration[job] * slowdown
            heapq.heappush(running, (end[job], job))
        if nxt >= n and not running and queue:
            raise AssertionError(f"{policy}: job {queue[0]} ({gpus[queue[0]]} GPUs) can never start")
    return RunResult(policy=policy, start=np.array(start), end=np.array(end), nodes=np.array(spanned),
                     fewest_then=np.array(fewest), fewest_empty=np.array([empty_min[g] for g in gpus]),
                     samples=np.array(samples, dtype=np.float64).reshape(-1, 4))


def fill_until_full(cluster: Cluster, sizes: npt.NDArray[np.int64], place: PlaceFn | None, *,
                    fewest_only: bool = False) -> float:
    """FGD's measure: jobs arrive and never leave until the GPUs they asked for add up to the cluster's; a job
    is admitted only on the fewest nodes its size needs on an empty cluster (else it counts as not
    allocated). Returns allocated GPUs / all GPUs."""
    nodes = Nodes(cluster)
    pooled_free = cluster.total_gpus
    arrived = 0
    empty_min = {g: cluster.min_nodes(g) for g in set(sizes.tolist())}
    for g in sizes.tolist():
        if arrived + g > cluster.total_gpus:
            break
        arrived += g
        if place is None:
            if pooled_free >= g:
                pooled_free -= g
            continue
        if nodes.total_free < g:
            continue
        allocation = place(nodes.view(nodes.fewest_nodes(g) if fewest_only else g), g)
        if allocation is None or len(allocation) > empty_min[g]:
            continue
        nodes.take(allocation, g)
    used = cluster.total_gpus - (pooled_free if place is None else nodes.total_free)
    return used / cluster.total_gpus


def frag_table_for(mix: Mapping[int, float], cluster: Cluster) -> list[float]:
    return fgd_fragment_table(mix, max(cluster.capacity))
