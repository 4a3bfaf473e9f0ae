"""The planner: the issue's examples, each rule, errors, determinism, and a brute-force optimum check."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distributetrain.errors import CannotPlace, InvalidInput
from distributetrain.placement.planner import POLICIES, Entry, InsufficientGpus, Plan, domain_of, plan


def split(result: Plan) -> dict[str, int]:
    return {entry.node: entry.gpus for entry in result.allocation}


@pytest.mark.parametrize(("free", "gpus", "expected"), [
    # the examples: keep the 3-GPU block whole; take 4+4 and leave 7 and 4
    ({"a": 5, "b": 3, "c": 2}, 6, {"a": 5, "c": 1}),
    ({"a": 7, "b": 4, "c": 4, "d": 4}, 8, {"b": 4, "c": 4}),
    # one node suffices: the smallest node that fits, keeping the big one whole
    ({"a": 8, "b": 4, "c": 2}, 3, {"b": 3}),
    ({"a": 8, "b": 4, "c": 2}, 8, {"a": 8}),
    # fewest nodes beats bigger leftovers: 8 on one node rather than 4+4
    ({"a": 8, "b": 4, "c": 4}, 8, {"a": 8}),
    # Kueue's BestFit example [3,3,2,1], 7 -> three nodes; we keep the 3 whole: 3 + 2 + ... is 6 < 7, so 3+3+1
    ({"a": 3, "b": 3, "c": 2, "d": 1}, 7, {"a": 3, "b": 3, "d": 1}),
    # nodes with nothing free are never used
    ({"a": 0, "b": 2}, 2, {"b": 2}),
    # the whole cluster
    ({"a": 2, "b": 2}, 4, {"a": 2, "b": 2}),
])
def test_optimal_examples(free: dict[str, int], gpus: int, expected: dict[str, int]) -> None:
    result = plan(free, gpus)
    assert split(result) == expected
    assert result.requested == gpus
    assert result.policy == "optimal"
    assert result.nodes_spanned == len(expected)
    assert dict(result.free_after) == {name: count - expected.get(name, 0) for name, count in free.items()}


def test_largest_first_is_the_design_rule() -> None:
    result = plan({"a": 7, "b": 4, "c": 4, "d": 4}, 8, policy="largest-first")
    assert result.allocation == (Entry("a", 7), Entry("b", 1))
    assert sorted(result.free_after.values(), reverse=True) == [4, 4, 3, 0]
    result = plan({"a": 5, "b": 3, "c": 2}, 6, policy="largest-first")
    assert result.allocation == (Entry("a", 5), Entry("b", 1))


def test_chief_is_the_smallest_entry_and_workers_the_rest() -> None:
    result = plan({"a": 5, "b": 3, "c": 2}, 6)
    assert result.chief == Entry("c", 1)
    assert result.workers == (Entry("a", 5),)
    single = plan({"a": 5}, 5)
    assert single.chief == Entry("a", 5)
    assert single.workers == ()


def test_allocation_is_largest_first_with_names_breaking_ties() -> None:
    result = plan({"n3": 4, "n1": 4, "n2": 4, "n0": 1}, 12)
    assert [e.node for e in result.allocation] == ["n1", "n2", "n3"]
    result = plan({"z": 2, "y": 2, "x": 2, "w": 2}, 3)
    assert result.allocation == (Entry("w", 2), Entry("x", 1))


def test_too_few_gpus_names_requested_total_and_largest_node() -> None:
    with pytest.raises(InsufficientGpus) as caught:
        plan({"node-1": 5, "node-2": 3, "node-3": 2}, 11)
    assert isinstance(caught.value, CannotPlace)
    message = str(caught.value)
    assert "11 GPU" in message
    assert "only 10 out of 11" in message
    assert "node-1 with 5 free" in message
    assert (caught.value.requested, caught.value.free_total, caught.value.largest) == (11, 10, ("node-1", 5))


def test_no_eligible_node_at_all() -> None:
    with pytest.raises(InsufficientGpus, match="no eligible node"):
        plan({}, 1)


@pytest.mark.parametrize("gpus", [0, -1, True, 1.5, "2"])
def test_gpus_must_be_a_positive_whole_number(gpus: object) -> None:
    with pytest.raises(InvalidInput, match="positive whole number"):
        plan({"a": 4}, gpus)  # type: ignore[arg-type]


def test_free_counts_are_validated() -> None:
    with pytest.raises(InvalidInput, match="node 'b'"):
        plan({"a": 4, "b": -1}, 1)


def test_unknown_policy_lists_the_known_ones() -> None:
    with pytest.raises(InvalidInput, match="optimal, largest-first"):
        plan({"a": 4}, 1, policy="best")
    assert set(POLICIES) >= {"optimal", "largest-first"}


# ---- topology ------------------------------------------------------------------------------------

def test_topology_prefers_one_domain_over_fewer_nodes() -> None:
    free = {"a": 8, "b": 4, "c": 4}
    topology = {"a": "rack-1", "b": "rack-2", "c": "rack-2"}
    # 8 on node a spans one node in one rack; any rack choice spanning one domain wins, then fewest nodes
    assert split(plan(free, 8, topology=topology)) == {"a": 8}
    # 10 cannot fit one rack: two racks, then two nodes (a:8 + 2 from a 4-node), then the leftover block of 2
    result = plan(free, 10, topology=topology)
    assert result.nodes_spanned == 2
    assert result.domains == ("rack-1", "rack-2")


def test_topology_keeps_the_job_in_one_rack_even_with_more_nodes() -> None:
    free = {"a": 4, "b": 4, "c": 3, "d": 3, "e": 3}
    topology = {"a": "r1", "b": "r2", "c": "r3", "d": "r3", "e": "r3"}
    result = plan(free, 8, topology=topology)
    assert result.domains == ("r3",)
    assert result.nodes_spanned == 3
    # without a topology two nodes suffice
    assert plan(free, 8).nodes_spanned == 2


def test_nodes_without_a_domain_label_are_their_own_domain() -> None:
    free = {"a": 2, "b": 2, "c": 3}
    result = plan(free, 4, topology={"a": "r1", "b": "r1"})
    assert result.domains == ("r1",)
    assert domain_of("c", {"a": "r1"}) == "(no label: c)"


# ---- determinism and optimality ------------------------------------------------------------------

def test_same_cluster_in_any_order_gives_the_same_plan() -> None:
    rng = random.Random(7)
    free = {f"node-{i}": rng.choice([0, 1, 2, 4, 8, 8, 8]) for i in range(200)}
    topology = {name: f"rack-{i % 9}" for i, name in enumerate(free)}
    for gpus in (1, 3, 8, 13, 40, 100):
        for policy in POLICIES:
            expected = plan(free, gpus, topology=topology, policy=policy)
            for _ in range(5):
                items = list(free.items())
                rng.shuffle(items)
                shuffled_topology = dict(sorted(topology.items(), key=lambda _: rng.random()))
                assert plan(dict(items), gpus, topology=shuffled_topology, policy=policy) == expected


def rank(free: dict[str, int], take: dict[str, int], topology: dict[str, str] | None) -> tuple[object, ...]:
    """Smaller is better: (domains spanned, nodes spanned, negated free-after vector sorted descending)."""
    used = [name for name, count in take.items() if count]
    domains = len({domain_of(name, topology) for name in used}) if topology is not None else 0
    after = sorted((free[name] - take.get(name, 0) for name in free), reverse=True)
    return (domains, len(used), tuple(-count for count in after))


def brute_force_best(free: dict[str, int], gpus: int, topology: dict[str, str] | None) -> tuple[object, ...]:
    names = list(free)
    best: tuple[object, ...] | None = None
    for counts in itertools.product(*(range(free[name] + 1) for name in names)):
        if sum(counts) == gpus:
            key = rank(free, dict(zip(names, counts, strict=True)), topology)
            best = key if best is None or key < best else best
    assert best is not None
    return best


clusters = st.dictionaries(st.sampled_from("abcdef"), st.integers(min_value=0, max_value=5),
                           min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(free=clusters, data=st.data(), with_topology=st.booleans())
def test_optimal_matches_brute_force(free: dict[str, int], data: st.DataObject, with_topology: bool) -> None:
    total = sum(free.values())
    gpus = data.draw(st.integers(min_value=1, max_value=max(total, 1)))
    topology = None
    if with_topology:
        # some nodes may lack the label: they count as their own domain
        racks = st.sampled_from(["r1", "r2", "r3"])
        topology = data.draw(st.dictionaries(st.sampled_from(sorted(free)), racks))
    if gpus > total:
        with pytest.raises(InsufficientGpus):
            plan(free, gpus, topology=topology)
        return
    result = plan(free, gpus, topology=topology)
    take = split(result)
    assert sum(take.values()) == gpus
    assert all(0 < count <= free[name] for name, count in take.items())
    assert rank(free, take, topology) == brute_force_best(free, gpus, topology)
    assert dict(result.free_after) == {name: free[name] - take.get(name, 0) for name in free}


@settings(max_examples=150, deadline=None)
@given(free=clusters, data=st.data())
def test_largest_first_spans_the_fewest_nodes_too(free: dict[str, int], data: st.DataObject) -> None:
    total = sum(free.values())
    if total == 0:
        return
    gpus = data.draw(st.integers(min_value=1, max_value=total))
    assert plan(free, gpus, policy="largest-first").nodes_spanned == plan(free, gpus).nodes_spanned


def exhaustive_over_domain_sets(free: dict[str, int], gpus: int,
                                topology: dict[str, str]) -> tuple[object, ...]:
    """Every set of the fewest domains, each with its fewest nodes and its best leftover (one block, as the
    brute force above confirms on small clusters): the best (domains, nodes, negated free-after) overall."""
    domains = sorted(set(topology.values()))
    held = {d: sum(free[n] for n in free if topology[n] == d) for d in domains}
    fewest = next(size for size in range(1, len(domains) + 1)
                  if sum(sorted(held.values(), reverse=True)[:size]) >= gpus)
    best: tuple[object, ...] | None = None
    for chosen in itertools.combinations(domains, fewest):
        inside = sorted((free[n] for n in free if topology[n] in chosen and free[n] > 0), reverse=True)
        if sum(inside) < gpus:
            continue
        nodes = next(k for k in range(1, len(inside) + 1) if sum(inside[:k]) >= gpus)
        for picked in set(itertools.combinations(inside, nodes)):
            if sum(picked) < gpus:
                continue
            after = sorted(free.values(), reverse=True)
            for value in picked:
                after.remove(value)
            after += [sum(picked) - gpus] + [0] * (nodes - 1)
            key = (fewest, nodes, tuple(-c for c in sorted(after, reverse=True)))
            best = key if best is None or key < best else best
    assert best is not None
    return best


@settings(max_examples=120, deadline=None)
@given(data=st.data())
def test_domain_search_matches_every_set_of_domains(data: st.DataObject) -> None:
    """Bigger clusters than the brute force reaches, to exercise the branch and bound over several racks."""
    free: dict[str, int] = {}
    topology: dict[str, str] = {}
    for rack in range(data.draw(st.integers(min_value=2, max_value=8))):
        for node in range(data.draw(st.integers(min_value=1, max_value=4))):
            free[f"r{rack}n{node}"] = data.draw(st.sampled_from([0, 1, 2, 4, 7, 8, 8, 8]))
            topology[f"r{rack}n{node}"] = f"rack-{rack}"
    total = sum(free.values())
    if total == 0:
        return
    gpus = data.draw(st.integers(min_value=1, max_value=total))
    result = plan(free, gpus, topology=topology)
    assert rank(free, split(result), topology) == exhaustive_over_domain_sets(free, gpus, topology)
