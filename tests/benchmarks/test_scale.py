"""bench/measure/scale.py's realistic pods: shaped like a real cluster's, holding what the minimal ones
hold; where the manager's steps are cut (scale_path.py); and how the section reads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from bench.measure import scale_path
from bench.measure.manager_overhead import background_pod
from bench.measure.scale import _fields_v1, realistic_pod
from bench.measure.scale_path import Stamp
from bench.report import speed_section

from distributetrain.kube import slimpods
from distributetrain.placement import inventory


def _free(shape: Callable[[int, int], dict[str, Any]]) -> dict[str, int]:
    """Free GPUs on 10 nodes of 8 under 60 pods of this shape, read through the manager's slim decoder."""
    nodes = [{"metadata": {"name": f"node-{n}"},
              "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
              "status": {"allocatable": {"nvidia.com/gpu": "8"},
                         "conditions": [{"type": "Ready", "status": "True"}]}} for n in range(1, 11)]
    pods = [{**shape(i, 10), "status": {"phase": "Running"}} for i in range(60)]
    decoded = slimpods.decode_pod_list(orjson.dumps({"items": pods}))["items"]
    return inventory.free_gpus(inventory.inventory(nodes, decoded))


def test_realistic_pods_hold_the_same_gpus_as_minimal_ones() -> None:
    free = _free(realistic_pod)
    assert free == _free(background_pod)
    assert set(free.values()) != {8}  # some nodes hold GPUs


def test_realistic_pods_carry_what_a_real_server_returns() -> None:
    pod = realistic_pod(3, 10)
    assert [c["name"] for c in pod["spec"]["containers"]] == ["main", "log-shipper", "metrics-exporter"]
    managers = [(m["manager"], m.get("subresource")) for m in pod["metadata"]["managedFields"]]
    assert managers == [("kube-controller-manager", None), ("kubelet", "status")]
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
    assert len(orjson.dumps(pod)) > 8000


def test_fields_v1_keys_named_list_items() -> None:
    tree = _fields_v1({"spec": {"containers": [{"name": "main", "image": "x"}], "dnsPolicy": "ClusterFirst"}})
    assert tree == {".": {}, "f:spec": {".": {}, "f:containers": {'k:{"name":"main"}': {
        ".": {}, "f:name": {}, "f:image": {}}}, "f:dnsPolicy": {}}}


def _at(wall: float) -> Stamp:
    """A moment on the three clocks: the manager's CPU at half the wall time, the server's at a quarter."""
    return Stamp(wall, wall / 2, wall / 4)


def test_plan_steps_are_cut_where_the_manager_ends_each() -> None:
    marks = [("list limitranges", _at(1.0)), ("list resourcequotas", _at(1.5)), ("get namespaces", _at(2.0)),
             ("say", _at(2.5)), ("list nodes", _at(3.0)), ("list pods", _at(5.0)), ("say", _at(7.0)),
             ("say", _at(7.1)), ("say", _at(8.0)), ("planned", _at(8.5))]
    steps = scale_path.plan_steps(_at(0.5), marks)
    assert {step: stamp.wall for step, stamp in steps.items()} == {
        "namespace": 2.0, "nodes": 0.5, "pods": 2.0, "accounting": 2.0, "plan": 1.5}
    assert steps["pods"] == Stamp(2.0, 1.0, 0.5)


def _clocks(wall: float, cpu: float, server: float) -> dict[str, float]:
    return {"wall": wall, "cpu": cpu, "server_cpu": server}


def _row(shape: str, cold: float) -> dict[str, Any]:
    steps = {step: _clocks(cold / 7, cold / 14, cold / 28) for step in speed_section.STEPS}
    return {"shape": shape, "nodes": 7500, "pods": 150_000, "gpus_per_node": 8, "job_gpus": 64,
            "pods_listed": 150_000, "load_average_1m": 1.0, "pod_json_bytes_mean": 1940, "seed_seconds": 170,
            "inventory_plus_plan_s": {"cold": cold, "warm_p50": 3.0, "max": cold, "warm": [3.0, 3.1, 2.9]},
            "cold": {"total": _clocks(cold, 2.1, 4.0), **steps},
            "warm_median": {"total": _clocks(3.0, 1.5, 1.2), **steps},
            "peak_rss_mib": 400.0, "transfer": _clocks(1.5, 0.3, 1.1), "bytes": 300 * 2**20,
            "orjson_decode_s": 3.1, "client_models_s_estimated": 56.3, "server_rss_mib": 2700.0}


def test_the_scale_section_shows_the_managers_cpu_apart_and_says_whether_the_goal_is_met() -> None:
    text = speed_section.scale({"rows": [_row("minimal", 6.3), _row("realistic", 4.2)]})
    assert "| the same: the manager's own CPU; the API server's CPU meanwhile | 2.10 s; 4.00 s |" in text
    assert "| cold, the manager's imports (wall; manager CPU; server CPU) | 0.90 s; 0.45 s; 0.23 s |" in text
    assert "Goal, the first plan under 5 s cold: not met (minimal 6.30 s, realistic 4.20 s)" in text
    met = speed_section.scale({"rows": [_row("minimal", 4.9)]})
    assert "Goal, the first plan under 5 s cold: met (minimal 4.90 s)" in met
