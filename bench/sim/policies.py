"""The placement policies the benchmark compares, each a function (free, gpus) -> allocation or None.

`free` maps node name -> free GPUs; an allocation is ((node, GPUs taken), ...). Policies that score nodes by
their size get the cluster's capacities (and FGD the workload's size mix) when they are made. Ties between
equal nodes go by name; the simulator names nodes in a shuffled order, standing in for the random pick the
Kubernetes scheduler makes among equal scores.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from distributetrain.errors import CannotPlace
from distributetrain.placement.planner import plan

Allocation = tuple[tuple[str, int], ...]
PlaceFn = Callable[[Mapping[str, int], int], "Allocation | None"]
Score = Callable[[str, int, int], float]  # (node, its free GPUs, the pod's GPUs) -> higher is better


@dataclass(frozen=True)
class Context:
    """What a policy may know beyond the free counts: node capacities and the workload's size mix."""

    capacity: Mapping[str, int]
    mix: Mapping[int, float]


def _desc(free: Mapping[str, int]) -> list[tuple[int, str]]:
    return sorted(((count, name) for name, count in free.items() if count > 0), key=lambda x: (-x[0], x[1]))


def _merge(pairs: list[tuple[str, int]]) -> Allocation:
    """One entry per node (per-pod policies may put two pods of a job on one node), largest first."""
    per_node: dict[str, int] = {}
    for name, take in pairs:
        per_node[name] = per_node.get(name, 0) + take
    return tuple(sorted(per_node.items(), key=lambda x: (-x[1], x[0])))


# ---- ours: the planner -------------------------------------------------------------------------------------

def planner_policy(name: str) -> PlaceFn:
    """A policy of distributetrain.placement.planner by its registry name ("optimal", "largest-first",
    ...)."""

    def place(free: Mapping[str, int], gpus: int) -> Allocation | None:
        try:
            chosen = plan(free, gpus, policy=name)
        except CannotPlace:
            return None
        return tuple((entry.node, entry.gpus) for entry in chosen.allocation)

    return place


def planner_small_nodes_first(ctx: Context) -> PlaceFn:
    """A proposal for the planner's rule 4: the same free counts as "optimal", but among nodes with equal
    free counts take the ones with the fewest GPUs in all (smallest allocatable), so the big nodes stay
    whole when their own jobs end. Rules 1-3 look at free counts only, so this never changes how many nodes
    a job spans or which free counts remain."""
    base = planner_policy("optimal")
    capacity = ctx.capacity

    def place(free: Mapping[str, int], gpus: int) -> Allocation | None:
        chosen = base(free, gpus)
        if chosen is None:
            return None
        takes: dict[int, list[int]] = {}
        for name, take in chosen:
            takes.setdefault(free[name], []).append(take)
        out: list[tuple[str, int]] = []
        for value, amounts in takes.items():
            nodes = sorted((n for n, f in free.items() if f == value), key=lambda n: (capacity[n], n))
            out += zip(nodes, sorted(amounts, reverse=True), strict=False)
        return _merge(out)

    return place


# ---- the design's original rule, and per-pod scoring by the Kubernetes scheduler ---------------------------

def largest_first_counts(free: Mapping[str, int], gpus: int) -> list[int] | None:
    """The design's split: counts taken from the largest free nodes down (6 over [5, 3, 2] -> [5, 1]). The
    same as the planner's "largest-first" (a test holds them equal), without building a Plan on each call."""
    counts: list[int] = []
    need = gpus
    for count in sorted((c for c in free.values() if c > 0), reverse=True):
        counts.append(min(count, need))
        need -= count
        if need <= 0:
            return counts
    return None


def bind_pods(free: Mapping[str, int], pods: list[int], score: Score) -> Allocation | None:
    """Bind pods one at a time in the given order (the scheduler's queue order for pods created in that
    order), each to the feasible node with the highest score; all or nothing, as a gang scheduler would."""
    left = {name: count for name, count in free.items() if count > 0}
    bound: list[tuple[str, int]] = []
    for pod in pods:
        best: tuple[float, str] | None = None
        for name, count in left.items():
            if count >= pod:
                key = (-score(name, count, pod), name)
                if best is None or key < best:
                    best = key
        if best is None:
            return None
        left[best[1]] -= pod
        bound.append((best[1], pod))
    return _merge(bound)


def scheduler_pods(ctx: Context, *, most_allocated: bool) -> PlaceFn:
    """Largest-first counts become pods without a node; NodeResourcesFit binds each: LeastAllocated (the
    default scheduler, spreading) or MostAllocated (bin-packing). The real scorer looks at cpu and memory;
    we assume a worker asks for them in proportion to its GPUs, so GPUs stand in for both."""
    capacity = ctx.capacity

    def least_allocated(name: str, count: int, pod: int) -> float:
        return (count - pod) / capacity[name]

    def most(name: str, count: int, pod: int) -> float:
        return (capacity[name] - count + pod) / capacity[name]

    score = most if most_allocated else least_allocated

    def place(free: Mapping[str, int], gpus: int) -> Allocation | None:
        counts = largest_first_counts(free, gpus)
        return None if counts is None else bind_pods(free, counts, score)

    return place


# ---- Kueue Topology Aware Scheduling, at the hostname level ------------------------------------------------

def kueue_best_fit(free: Mapping[str, int], gpus: int) -> Allocation | None:
    """Nodes from most free down; the last one is the tightest node that still covers the remainder.
    [3, 3, 2, 1] free, 7 -> 3 + 3 + 1 (KEP-2724, findLevelWithFitDomains with BestFit)."""
    nodes = _desc(free)
    if sum(count for count, _ in nodes) < gpus:
        return None
    out: list[tuple[str, int]] = []
    need = gpus
    for i, (count, name) in enumerate(nodes):
        if count >= need:
            fit = min((c, n) for c, n in nodes[i:] if c >= need)  # tightest; equal counts by name
            out.append((fit[1], need))
            break
        out.append((name, count))
        need -= count
    return _merge(out)


def kueue_least_free(free: Mapping[str, int], gpus: int) -> Allocation | None:
    """Kueue's LeastFreeCapacity (default for unconstrained pod sets since v0.15): the least-free node that
    holds the whole request; when none does, take nodes from the least free up until the request is met."""
    nodes = sorted((count, name) for name, count in free.items() if count > 0)
    if sum(count for count, _ in nodes) < gpus:
        return None
    for count, name in nodes:
        if count >= gpus:
            return ((name, gpus),)
    out: list[tuple[str, int]] = []
    need = gpus
    for count, name in nodes:
        take = min(count, need)
        out.append((name, take))
        need -= take
        if need == 0:
            break
    return _merge(out)


# ---- FGD: fragmentation gradient descent (Weng et al., ATC'23), simplified to whole GPUs -------------------

def fgd_fragment_table(mix: Mapping[int, float], largest_node: int) -> list[float]:
    """Expected GPUs a node with f free GPUs strands: f x P(the next task needs more than f). Tasks are the
    workload's sizes, cut at the largest node (a 16-GPU job arrives at a node as 8-GPU pieces)."""
    total = sum(mix.values())
    table = []
    for f in range(largest_node + 1):
        too_big = sum(share for size, share in mix.items() if min(size, largest_node) > f) / total
        table.append(f * too_big)
    return table


def fgd(ctx: Context) -> PlaceFn:
    """A job that fits one node goes to the node whose expected fragmentation grows least (FGD's rule, with
    whole GPUs only, so a node's fragment is all its free GPUs when the task does not fit, else none). A
    job too big for any node takes the largest nodes whole until the rest fits one node, and the rest is
    placed by the same rule; FGD itself schedules single-node tasks only, this is our extension."""
    largest = max(ctx.capacity.values())
    table = fgd_fragment_table(ctx.mix, largest)

    def place(free: Mapping[str, int], gpus: int) -> Allocation | None:
        nodes = _desc(free)
        if sum(count for count, _ in nodes) < gpus:
            return None
        out: list[tuple[str, int]] = []
        need, i = gpus, 0
        while need > nodes[i][0]:
            out.append((nodes[i][1], nodes[i][0]))
            need -= nodes[i][0]
            i += 1
        best = min(((table[c - need] - table[c], c, n) for c, n in nodes[i:] if c >= need))
        out.append((best[2], need))
        return _merge(out)

    return place


# ---- the registry the simulator and the report use ---------------------------------------------------------

#: policy key -> (label in the report, factory). "ideal" is not here: the simulator models it directly.
#: Every policy but LeastFreeCapacity spans exactly the fewest nodes possible (tests check it); the simulator
#: uses that to show them fewer nodes (bench/sim/simulator.py).
POLICIES: dict[str, tuple[str, Callable[[Context], PlaceFn]]] = {
    "ours": ("ours (planner optimal)", lambda ctx: planner_policy("optimal")),
    "ours-smallfirst": ("ours + small nodes first on ties (proposal)", planner_small_nodes_first),
    "original": ("original rule + default spreading", lambda ctx: scheduler_pods(ctx, most_allocated=False)),
    "bestfit": ("Kueue TAS BestFit", lambda ctx: kueue_best_fit),
    "leastfree": ("Kueue TAS LeastFreeCapacity", lambda ctx: kueue_least_free),
    "mostalloc": ("MostAllocated per pod", lambda ctx: scheduler_pods(ctx, most_allocated=True)),
    "fgd": ("FGD (whole-GPU)", fgd),
}
SPANS_MORE_THAN_FEWEST = frozenset({"leastfree"})
IDEAL = "ideal"
IDEAL_LABEL = "ideal bound (pooled GPUs, no span cost)"


def label(key: str) -> str:
    return IDEAL_LABEL if key == IDEAL else POLICIES[key][0]
