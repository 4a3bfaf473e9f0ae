"""bench/measure/scale.py's realistic pods: shaped like a real cluster's, holding what the minimal ones
hold."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from bench.measure.manager_overhead import background_pod
from bench.measure.scale import _fields_v1, realistic_pod

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
