"""Where the workers of a job go: split a GPU request over the free GPUs of eligible nodes.

The default policy, "optimal", chooses by these rules, in order:

1. with a topology (node -> domain, e.g. a rack), span the fewest domains;
2. span the fewest nodes;
3. leave the biggest free blocks: the free counts of all eligible nodes afterwards, sorted descending, are
   lexicographically largest;
4. break the remaining ties by node and domain name, so any input order gives the same plan.

Why it is exact and fast (the proof is in docs/planner.md): with the fewest nodes k, whatever is left over on
the chosen nodes is smaller than the smallest chosen node (else k-1 nodes would do), so it fits on one node as
one block. Rule 3 then reduces to choosing the multiset of k free counts whose count vector, read from the
largest free count down, is lexicographically smallest - "take as few big nodes as you can". That is decided
value by value over counts-of-counts, never node by node, so a decision costs O(nodes) to bucket plus
O(distinct free counts^2) to choose.

"largest-first" is the design document's original rule: sort the free counts descending and take from the
largest until the request is met, the last node partially.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress, repeat
from types import MappingProxyType

from distributetrain.errors import CannotPlace, InvalidInput
from distributetrain.placement.fabric import Share
from distributetrain.placement.packing import DomainSearch, fewest_nodes, lexmin_choice


@dataclass(frozen=True)
class Entry:
    """One pod of the plan: `gpus` GPUs on `node`, and with a fabric its share of the node's devices."""

    node: str
    gpus: int
    fabric: Share | None = None


@dataclass(frozen=True)
class Plan:
    """A placement: `allocation` largest first; the last (smallest) entry is the chief, the others workers."""

    requested: int
    allocation: tuple[Entry, ...]
    free_after: Mapping[str, int] = field(compare=False, hash=False)
    policy: str
    domains: tuple[str, ...] = ()  # topology domains spanned, sorted; empty without a topology

    @property
    def nodes_spanned(self) -> int:
        return len(self.allocation)

    @property
    def chief(self) -> Entry:
        return self.allocation[-1]

    @property
    def workers(self) -> tuple[Entry, ...]:
        return self.allocation[:-1]


class InsufficientGpus(CannotPlace):
    """Fewer GPUs are free on the eligible nodes, in total, than were requested."""

    def __init__(self, *, requested: int, free_total: int, eligible_nodes: int,
                 largest: tuple[str, int] | None, detail: str = "") -> None:
        self.requested = requested
        self.free_total = free_total
        self.eligible_nodes = eligible_nodes
        self.largest = largest
        where = (f"the largest eligible node is {largest[0]} with {largest[1]} free" if largest
                 else "there is no eligible node")
        super().__init__(
            f"cannot place {requested} GPU(s): the eligible nodes allow to fit only {free_total} out of "
            f"{requested} ({free_total} free in total on {eligible_nodes} eligible node(s); {where}). "
            f"Ask for at most {free_total} GPU(s), wait for running pods to finish, or make more nodes "
            "eligible (--toleration, --node-selector)" + (f". {detail}" if detail else ""))


Topology = Mapping[str, str]
Policy = Callable[[Mapping[str, int], int, "Topology | None"], Plan]


def _validate(free: Mapping[str, int], gpus: int) -> None:
    if type(gpus) is not int or gpus <= 0:
        raise InvalidInput(f"the number of GPUs must be a positive whole number, got {gpus!r}")
    # C-level scans first: this runs on every decision over every eligible node
    if set(map(type, free.values())) - {int} or (free and min(free.values()) < 0):
        for name, count in free.items():
            if type(count) is not int or count < 0:
                raise InvalidInput(f"node {name!r}: free GPUs must be a whole number >= 0, got {count!r}")


def _check_enough(free: Mapping[str, int], gpus: int) -> None:
    total = sum(free.values())
    if total >= gpus:
        return
    largest = min(free.items(), key=lambda item: (-item[1], item[0])) if free else None
    raise InsufficientGpus(requested=gpus, free_total=total, eligible_nodes=len(free), largest=largest)


def _finish(free: Mapping[str, int], gpus: int, chosen: Iterable[tuple[str, int]], policy: str,
            domains: tuple[str, ...] = ()) -> Plan:
    """Turn (node, GPUs taken) into a Plan; entries sorted largest first, then by name."""
    allocation = tuple(sorted((Entry(node, take) for node, take in chosen), key=lambda e: (-e.gpus, e.node)))
    after = dict(free)
    for entry in allocation:
        after[entry.node] -= entry.gpus
    return Plan(requested=gpus, allocation=allocation, free_after=MappingProxyType(after), policy=policy,
                domains=domains)


def _names_with(free: Mapping[str, int], values: Iterable[int], names: Iterable[str] | None = None,
                ) -> dict[int, list[str]]:
    """The nodes (of `names`, default all) whose free count is one of `values`."""
    out: dict[int, list[str]] = {value: [] for value in values}
    for name in free if names is None else names:
        bucket = out.get(free[name])
        if bucket is not None:
            bucket.append(name)
    return out


def _realise(gpus: int, buckets: Mapping[int, list[str]], values: Sequence[int],
             taken: Sequence[int]) -> list[tuple[str, int]]:
    """Name the nodes: among equal free counts the smallest names; the leftover stays on the last one taken,
    which has the smallest free count (as the design's "last element partial")."""
    chosen: list[tuple[str, int]] = []
    for value, how_many in zip(values, taken, strict=True):
        if how_many:
            chosen.extend((name, value) for name in heapq.nsmallest(how_many, buckets[value]))
    leftover = sum(take for _, take in chosen) - gpus
    if leftover:
        name, value = chosen[-1]
        chosen[-1] = (name, value - leftover)
    return chosen


def _counts_of_counts(free: Mapping[str, int]) -> tuple[list[int], list[int]]:
    pairs = sorted(((value, n) for value, n in Counter(free.values()).items() if value > 0), reverse=True)
    return [value for value, _ in pairs], [count for _, count in pairs]


# ---- the original rule ---------------------------------------------------------------------------

def largest_first(free: Mapping[str, int], gpus: int, topology: Topology | None = None) -> Plan:
    """The design document's rule: take the largest free counts first, the last one partially; equal counts
    in name order. It ignores `topology`; it is kept so users and the benchmarks can compare."""
    _validate(free, gpus)
    _check_enough(free, gpus)
    values, counts = _counts_of_counts(free)
    taken: list[int] = []
    need = gpus
    for value, count in zip(values, counts, strict=True):
        if need <= 0:
            break
        taken.append(min(count, -(-need // value)))
        need -= taken[-1] * value
    values = values[:len(taken)]
    chosen = _realise(gpus, _names_with(free, values), values, taken)
    return _finish(free, gpus, chosen, "largest-first")


# ---- the optimal rule ----------------------------------------------------------------------------

def optimal(free: Mapping[str, int], gpus: int, topology: Topology | None = None) -> Plan:
    """Fewest domains, then fewest nodes, then the biggest free blocks left; ties by name."""
    _validate(free, gpus)
    _check_enough(free, gpus)
    if gpus <= max(free.values()):
        # one node holds it (most requests): the smallest free count that does, then by (domain, node) name
        value = min(filter(gpus.__le__, free.values()))
        names = compress(free, map(value.__eq__, free.values()))
        if topology is None:
            return _finish(free, gpus, [(min(names), gpus)], "optimal")
        node = min(names, key=lambda name: (domain_of(name, topology), name))
        return _finish(free, gpus, [(node, gpus)], "optimal", (domain_of(node, topology),))
    if topology is not None:
        return _optimal_in_domains(free, gpus, topology)
    values, counts = _counts_of_counts(free)
    nodes = fewest_nodes(values, counts, gpus)
    assert nodes is not None  # enough GPUs were checked above
    taken = lexmin_choice(values, counts, nodes, gpus)
    assert taken is not None  # the largest-first choice is always one
    buckets = _names_with(free, [value for value, n in zip(values, taken, strict=True) if n])
    return _finish(free, gpus, _realise(gpus, buckets, values, taken), "optimal")


def domain_of(node: str, topology: Topology) -> str:
    """A node without a domain label is a domain of its own (it shares no rack with anyone)."""
    domain = topology.get(node)
    return domain if domain is not None else f"(no label: {node})"


def _optimal_in_domains(free: Mapping[str, int], gpus: int, topology: Topology) -> Plan:
    # counts-of-counts per domain, by C-level counting of (domain, free count) pairs
    per_domain: dict[str, dict[int, int]] = {}
    pairs = zip(map(topology.get, free), free.values(), strict=True)
    for (domain, value), count in Counter(pairs).items():
        if domain is not None and value > 0:
            per_domain.setdefault(domain, {})[value] = count
    unlabelled = free.keys() - topology.keys()
    for name in unlabelled:
        if free[name] > 0:
            per_domain[domain_of(name, topology)] = {free[name]: 1}
    values = sorted({value for counts in per_domain.values() for value in counts}, reverse=True)
    kinds: dict[tuple[int, ...], list[str]] = {}
    for domain, counts in per_domain.items():
        kinds.setdefault(tuple(map(counts.get, values, repeat(0))), []).append(domain)
    best = DomainSearch(values, gpus, kinds).run()
    chosen_domains = set(best.domains)
    members = list(compress(free, map(chosen_domains.__contains__, map(topology.get, free))))
    members += [name for name in unlabelled if domain_of(name, topology) in chosen_domains]
    buckets = _names_with(free, [v for v, n in zip(values, best.taken, strict=True) if n], members)
    chosen = _realise(gpus, buckets, values, best.taken)
    spanned = tuple(sorted({domain_of(name, topology) for name, _ in chosen}))
    return _finish(free, gpus, chosen, "optimal", spanned)


POLICIES: dict[str, Policy] = {"optimal": optimal, "largest-first": largest_first}


def plan(free: Mapping[str, int], gpus: int, *, topology: Topology | None = None,
         policy: str = "optimal") -> Plan:
    """Split `gpus` over `free` (eligible node -> free GPUs) by the named policy (see POLICIES)."""
    try:
        chosen = POLICIES[policy]
    except KeyError:
        known = ", ".join(POLICIES)
        raise InvalidInput(f"unknown placement policy {policy!r}; choose one of: {known}") from None
    return chosen(free, gpus, topology)
