"""The simulator: strict FCFS, conservation of GPUs, the ideal bound, and the speed trick's exactness."""

from __future__ import annotations

import random
from itertools import pairwise

import numpy as np
import pytest
from bench.sim import model
from bench.sim.model import SpanCost
from bench.sim.policies import POLICIES, SPANS_MORE_THAN_FEWEST, Context
from bench.sim.simulator import Nodes, RunResult, fill_until_full, frag_table_for, simulate
from bench.sim.workload import Cluster, Trace, make_cluster, make_trace

Small = tuple[Cluster, Trace]


@pytest.fixture(scope="module")
def small() -> Small:
    cluster = make_cluster("C3", "small")
    trace = make_trace(cluster, model.MIXES["stress"], 1.1, seed=11, days=1.5, warmup_days=0.25)
    return cluster, trace


def runs(cluster: Cluster, trace: Trace) -> dict[str, RunResult]:
    mix = model.MIXES["stress"]
    ctx = Context(cluster.capacity_map(), mix)
    table = frag_table_for(mix, cluster)
    out = {key: simulate(cluster, trace, key, factory(ctx), frag_table=table,
                         fewest_only=key not in SPANS_MORE_THAN_FEWEST)
           for key, (_, factory) in POLICIES.items()}
    out["ideal"] = simulate(cluster, trace, "ideal", None, frag_table=table)
    return out


def test_the_ideal_bound_starts_and_ends_every_job_no_later_than_any_policy(small: Small) -> None:
    cluster, trace = small
    results = runs(cluster, trace)
    ideal = results.pop("ideal")
    for key, run in results.items():
        assert np.all(ideal.start <= run.start + 1e-6), key
        assert np.all(ideal.end <= run.end + 1e-6), key
    # and the comparison is not vacuous: under spreading many jobs finish later than the bound
    assert np.mean(results["original"].end > ideal.end + 1) > 0.2


def test_strict_fcfs_starts_jobs_in_arrival_order_and_never_before_they_arrive(small: Small) -> None:
    cluster, trace = small
    for key, run in runs(cluster, trace).items():
        assert np.all(np.diff(run.start) >= 0), key
        assert np.all(run.start >= trace.arrival), key
        assert not np.isnan(run.end).any(), key


def test_ours_never_spans_more_nodes_than_the_fewest_possible(small: Small) -> None:
    cluster, trace = small
    run = runs(cluster, trace)["ours"]
    assert np.array_equal(run.nodes, run.fewest_then)
    assert np.all(run.nodes >= run.fewest_empty)


def test_run_time_grows_by_the_span_cost_per_extra_node(small: Small) -> None:
    cluster, trace = small
    run = runs(cluster, trace)["leastfree"]
    extra = run.nodes - run.fewest_empty
    assert extra.max() > 0
    expected = trace.duration * np.array([model.SPAN_COST.slowdown(int(k), int(k0))
                                          for k, k0 in zip(run.nodes, run.fewest_empty, strict=True)])
    assert np.allclose(run.end - run.start, expected)


def test_the_2017_span_cost_follows_from_the_bandwidth_figures() -> None:
    """The model before the throughput bench calibrated it (tests/benchmarks/test_throughput.py: now)."""
    cost = model.DERIVED_2017_SPAN_COST
    assert cost.comm_cross == pytest.approx(((1 / 0.9 - 1) + (1 / 0.68 - 1)) / 2)
    assert cost.comm_cross / cost.comm_in == pytest.approx(230 / 74)
    # a one-node job split in two moves its all-reduce from in-node to cross-node bandwidth
    assert cost.first_extra_node == pytest.approx((1 + cost.comm_cross) / (1 + cost.comm_in) - 1)
    assert 0.15 < cost.first_extra_node < 0.22
    # every extra node costs something, each less than the one before; none when on the fewest nodes
    steps = [cost.slowdown(k, 1) for k in range(1, 10)]
    assert steps[0] == 1.0 and all(b > a for a, b in pairwise(steps))
    gains = [b - a for a, b in pairwise(steps)]
    assert all(later < earlier for earlier, later in pairwise(gains))
    assert cost.slowdown(16, 8) < 1.05
    assert SpanCost(comm_cross=0, comm_in=0, linear_per_node=0.3).slowdown(4, 2) == pytest.approx(1.6)


def test_the_view_a_policy_sees_gives_the_same_choice_as_the_whole_cluster() -> None:
    rng = random.Random(5)
    cluster = make_cluster("C2", "small")
    caps = cluster.capacity_map()
    ctx = Context(caps, model.MIXES["stress"])
    policies = {key: factory(ctx) for key, (_, factory) in POLICIES.items()}
    for _ in range(40):
        nodes = Nodes(cluster)
        for name, cap in caps.items():  # a random state
            used = rng.randint(0, cap)
            if used:
                nodes.take(((name, used),), used)
        full = {name: nodes.free[nodes.index[name]] for name in cluster.names}
        for gpus in (1, 2, 3, 8, 12, 16, 64):
            if gpus > nodes.total_free:
                continue
            fewest = nodes.fewest_nodes(gpus)
            for key, place in policies.items():
                view = nodes.view(gpus if key in SPANS_MORE_THAN_FEWEST else fewest)
                assert len(view) < len(full)
                assert place(view, gpus) == place(full, gpus), (key, gpus)


def test_nodes_give_back_what_they_took() -> None:
    cluster = make_cluster("C3", "small")
    nodes = Nodes(cluster)
    held = nodes.take((("node-00", nodes.free[0]),), nodes.free[0])
    assert nodes.total_free == cluster.total_gpus - cluster.capacity[0]
    nodes.give_back(held)
    assert nodes.total_free == cluster.total_gpus and nodes.free == list(cluster.capacity)
    with pytest.raises(AssertionError):
        nodes.take((("node-00", 99),), 99)


def test_allocation_at_saturation_is_bounded_by_the_ideal_and_hurt_by_spreading() -> None:
    cluster = make_cluster("C1", "small")
    mix = model.HELIOS_MIX
    ctx = Context(cluster.capacity_map(), mix)
    sizes = np.random.default_rng(3).choice(list(mix), size=2000, p=list(mix.values()))
    ideal = fill_until_full(cluster, sizes, None)
    rates = {key: fill_until_full(cluster, sizes, factory(ctx)) for key, (_, factory) in POLICIES.items()}
    assert ideal >= 0.98
    assert all(rate <= ideal for rate in rates.values())
    assert rates["original"] < rates["bestfit"]
