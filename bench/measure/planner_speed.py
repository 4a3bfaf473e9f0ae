"""How long one placement decision takes: `planner.plan` at 100, 1,000 and 10,000 nodes.

Clusters are drawn from published GPU fleets (the traces docs/benchmarks.md cites): all 8-GPU nodes (SenseTime
Helios), or the Alibaba 2023 mix (617 x 8, 518 x 2, 54 x 4, 24 x 1 per 1,213 nodes), each node partly busy.
Request sizes follow the Helios job mix, plus large jobs (64-512 GPUs) that span many nodes and, with racks,
several racks. Each decision is timed alone (wall clock and this thread's CPU time around one plan() call,
the input dict built beforehand).

Run: .venv/bin/python -m bench.measure.planner_speed [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from distributetrain.errors import CannotPlace
from distributetrain.placement.inventory import inventory
from distributetrain.placement.planner import POLICIES, plan

SIZES = (100, 1_000, 10_000)
RACK_NODES = 32
# Helios job sizes (GPUs: weight), with the big jobs that dominate GPU time kept in
REQUESTS = {1: 67, 2: 3, 4: 7, 8: 16, 16: 4, 32: 2, 64: 1, 128: 1, 256: 1, 512: 1}
ALIBABA_MIX = {8: 617, 2: 518, 4: 54, 1: 24}


def _busy(rng: random.Random, capacity: int) -> int:
    """Free GPUs on a node of `capacity`: a third idle, a third full, the rest partly used."""
    roll = rng.random()
    if roll < 1 / 3:
        return capacity
    if roll < 2 / 3:
        return 0
    return rng.randint(0, capacity)


def cluster(nodes: int, mix: str, seed: int) -> tuple[dict[str, int], dict[str, str]]:
    """Free GPUs per node and a rack per node (RACK_NODES nodes per rack)."""
    rng = random.Random(seed)
    if mix == "8gpu":
        capacities = [8] * nodes
    else:
        kinds, weights = zip(*ALIBABA_MIX.items(), strict=True)
        capacities = rng.choices(kinds, weights=weights, k=nodes)
    free = {f"node-{i}": _busy(rng, capacity) for i, capacity in enumerate(capacities)}
    racks = {f"node-{i}": f"rack-{i // RACK_NODES}" for i in range(nodes)}
    return free, racks


def _percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def time_decisions(free: dict[str, int], topology: dict[str, str] | None, policy: str,
                   requests: list[int]) -> dict[str, Any]:
    """Wall-clock and CPU (this thread) milliseconds per decision; CPU time is what a loaded machine
    distorts least."""
    wall_ms: list[float] = []
    cpu_ms: list[float] = []
    placed = 0
    for gpus in requests:
        wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
        try:
            plan(free, gpus, topology=topology, policy=policy)
            placed += 1
        except CannotPlace:
            pass
        cpu_ms.append((time.thread_time_ns() - cpu) / 1e6)
        wall_ms.append((time.perf_counter_ns() - wall) / 1e6)
    return {"decisions": len(wall_ms), "placed": placed,
            "p50_ms": round(statistics.median(wall_ms), 3), "p99_ms": round(_percentile(wall_ms, 0.99), 3),
            "max_ms": round(max(wall_ms), 3),
            "cpu_p50_ms": round(statistics.median(cpu_ms), 3),
            "cpu_p99_ms": round(_percentile(cpu_ms, 0.99), 3)}


def time_inventory(nodes: int, pods: int, seed: int = 1) -> dict[str, Any]:
    """CPU seconds of `inventory()` over raw Node/Pod dicts, a fifth of the pods asking for one GPU."""
    rng = random.Random(seed)
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    node_objects = [{"metadata": {"name": f"node-{i}", "labels": {"rack": f"rack-{i // RACK_NODES}"}},
                     "spec": {"taints": [taint]},
                     "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi"},
                                "conditions": [{"type": "Ready", "status": "True"}]}} for i in range(nodes)]
    pod_objects = []
    for index in range(pods):
        if rng.random() < 0.2:
            resources = {"limits": {"nvidia.com/gpu": "1", "memory": "8Gi"}, "requests": {"cpu": "2"}}
        else:
            resources = {"requests": {"cpu": "500m", "memory": "1Gi"}}
        pod_objects.append({"metadata": {"name": f"pod-{index}", "namespace": "ml"},
                            "spec": {"nodeName": f"node-{rng.randrange(nodes)}",
                                     "containers": [{"name": "main", "resources": resources}]},
                            "status": {"phase": "Running"}})
    start = time.thread_time()
    inventory(node_objects, pod_objects)
    return {"nodes": nodes, "pods": pods, "cpu_s": round(time.thread_time() - start, 3)}


def main(quick: bool = False) -> dict[str, Any]:
    """Time every policy, with and without racks, at each size; returns one row per combination."""
    rng = random.Random(2)
    decisions = 40 if quick else 300
    sizes, weights = zip(*REQUESTS.items(), strict=True)
    rows: list[dict[str, Any]] = []
    for nodes in SIZES:
        for mix in ("8gpu", "alibaba"):
            free, racks = cluster(nodes, mix, seed=nodes)
            total = sum(free.values())
            requests = [min(size, total) for size in rng.choices(sizes, weights=weights, k=decisions)]
            runs: list[tuple[str, str, dict[str, str] | None]] = [
                (policy, "none", None) for policy in POLICIES]
            runs.append(("optimal", f"racks of {RACK_NODES}", racks))
            for policy, topology_name, topology in runs:
                result = time_decisions(free, topology, policy, requests)
                rows.append({"nodes": nodes, "mix": mix, "free_gpus": total, "policy": policy,
                             "topology": topology_name, **result})
    scale = [(1_000, 10_000)] if quick else [(1_000, 10_000), (10_000, 100_000)]
    inventories = [time_inventory(nodes, pods) for nodes, pods in scale]
    return {"benchmark": "planner_speed", "quick": quick, "requests": REQUESTS, "rows": rows,
            "inventory": inventories,
            "load_average_1m": round(os.getloadavg()[0], 2), "cpus": os.cpu_count()}


def _print(results: dict[str, Any], out: Callable[[str], None] = print) -> None:
    out(f"{'nodes':>6} {'mix':8} {'free':>6} {'policy':14} {'topology':12} {'n':>4} {'p50 ms':>8} "
        f"{'p99 ms':>8} {'max ms':>8} {'cpu p50':>8} {'cpu p99':>8}")
    for row in results["rows"]:
        out(f"{row['nodes']:>6} {row['mix']:8} {row['free_gpus']:>6} {row['policy']:14} {row['topology']:12} "
            f"{row['decisions']:>4} {row['p50_ms']:>8.3f} {row['p99_ms']:>8.3f} {row['max_ms']:>8.3f} "
            f"{row['cpu_p50_ms']:>8.3f} {row['cpu_p99_ms']:>8.3f}")
    for row in results["inventory"]:
        out(f"inventory() of {row['nodes']} nodes and {row['pods']} pods: {row['cpu_s']} s CPU")
    out(f"load average (1 min) at the end: {results['load_average_1m']} on {results['cpus']} CPUs")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer decisions per configuration")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    arguments = parser.parse_args()
    measured = main(quick=arguments.quick)
    if arguments.json:
        print(json.dumps(measured, indent=2))
    else:
        _print(measured)
