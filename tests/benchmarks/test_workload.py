"""The simulator's inputs match the numbers they claim: size mixes, durations, arrivals, clusters."""

from __future__ import annotations

import math

import numpy as np
import pytest
from bench.sim import model
from bench.sim.workload import (
    arrival_rate,
    make_cluster,
    make_trace,
    mean_gpus,
    sample_arrivals,
    sample_durations,
    sample_sizes,
)

DRAWS = 200_000


@pytest.mark.parametrize("mix_name", ["helios", "stress"])
def test_sampled_sizes_follow_the_mix(mix_name: str) -> None:
    mix = model.MIXES[mix_name]
    sizes = sample_sizes(np.random.default_rng(1), mix, DRAWS)
    assert set(np.unique(sizes).tolist()) == set(mix)
    for size, share in mix.items():
        assert abs((sizes == size).mean() - share) < 0.005, size


def test_stress_mix_moves_ten_percent_to_odd_sizes() -> None:
    stress = model.MIXES["stress"]
    assert math.isclose(sum(stress.values()), 1.0)
    assert math.isclose(sum(stress[s] for s in (3, 5, 6, 12)), 0.10)
    assert math.isclose(stress[1], 0.67 * 0.9)
    assert math.isclose(stress[64], 0.01 * 0.9)


def test_durations_have_the_published_median_and_p90_and_are_clipped_to_a_day() -> None:
    durations = sample_durations(np.random.default_rng(2), DRAWS)
    assert np.median(durations) == pytest.approx(300, rel=0.03)
    assert np.percentile(durations, 90) == pytest.approx(15_000, rel=0.05)
    assert durations.max() <= 86_400 and durations.min() >= 1
    assert durations.mean() == pytest.approx(model.mean_duration_s(), rel=0.03)
    # clipping at a day brings the mean near Helios' published 6,652 s
    assert 5_500 < model.mean_duration_s() < 7_500


def test_arrivals_have_the_mean_rate_and_a_two_to_one_day_night_swing() -> None:
    rate, days = 0.5, 40
    times = sample_arrivals(np.random.default_rng(3), rate, days * model.DAY_S)
    assert np.all(np.diff(times) >= 0)
    assert len(times) / (days * model.DAY_S) == pytest.approx(rate, rel=0.02)
    phase = times % model.DAY_S
    hour = 3600
    peak = np.sum(np.abs(phase - model.DAY_S / 4) < hour)
    trough = np.sum(np.abs(phase - 3 * model.DAY_S / 4) < hour)
    assert peak / trough == pytest.approx(2.0, rel=0.08)


def test_a_trace_offers_the_load_asked_for() -> None:
    cluster = make_cluster("C1", "large")
    trace = make_trace(cluster, model.HELIOS_MIX, 0.9, seed=4, days=6, warmup_days=1)
    offered = float((trace.gpus * trace.duration).sum()) / (cluster.total_gpus * trace.horizon)
    assert offered == pytest.approx(0.9, rel=0.08)
    assert arrival_rate(cluster.total_gpus, model.HELIOS_MIX, 0.9) * mean_gpus(model.HELIOS_MIX) \
        * model.mean_duration_s() == pytest.approx(0.9 * cluster.total_gpus)


def test_same_arguments_same_trace() -> None:
    cluster = make_cluster("C3", "small")
    a = make_trace(cluster, model.HELIOS_MIX, 0.7, seed=5, days=1, warmup_days=0)
    b = make_trace(cluster, model.HELIOS_MIX, 0.7, seed=5, days=1, warmup_days=0)
    assert np.array_equal(a.arrival, b.arrival) and np.array_equal(a.gpus, b.gpus)


@pytest.mark.parametrize(("name", "scale", "nodes", "gpus"), [
    ("C1", "small", 64, 512), ("C1", "large", 750, 6000),
    ("C2", "small", 100, 512), ("C2", "large", 1213, 6212),  # the Alibaba 2023 trace's own node list
    ("C3", "small", 85, 512), ("C3", "large", 1000, 6000),
])
def test_clusters_have_the_stated_shape(name: str, scale: str, nodes: int, gpus: int) -> None:
    cluster = make_cluster(name, scale)
    assert len(cluster.names) == nodes and cluster.total_gpus == gpus
    assert len(set(cluster.names)) == nodes and list(cluster.names) == sorted(cluster.names)


def test_alibaba_shares_and_fewest_nodes_on_an_empty_cluster() -> None:
    c2 = make_cluster("C2", "small")
    shares = {cap: cluster_share for cap, cluster_share in
              ((cap, c2.capacity.count(cap) / len(c2.capacity)) for cap in (8, 2, 4, 1))}
    assert shares == {8: 0.51, 2: 0.43, 4: 0.04, 1: 0.02}
    assert [c2.min_nodes(g) for g in (1, 8, 9, 16, 64)] == [1, 1, 2, 2, 8]
    c3 = make_cluster("C3", "small")
    assert c3.min_nodes(12) == 2 and c3.min_nodes(5) == 1
