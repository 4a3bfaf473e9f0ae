"""The slim PodList decoder the manager lists pods with keeps exactly what GPU accounting reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson

from distributetrain.kube.slimpods import decode_pod_list
from distributetrain.placement import inventory
from distributetrain.placement.podrequests import pod_requests

CLUSTER = Path(__file__).resolve().parents[1] / "data" / "cluster.json"

SIDECAR_POD = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "p", "namespace": "ml", "uid": "u1", "labels": {"a": "b"},
                 "annotations": {"big": "x" * 1000}},
    "spec": {"nodeName": "node-1", "overhead": {"nvidia.com/gpu": "1"},
             "initContainers": [
                 {"name": "setup", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "4"}}},
                 {"name": "proxy", "image": "i", "restartPolicy": "Always",
                  "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}],
             "containers": [{"name": "main", "image": "i", "env": [{"name": "A", "value": "1"}],
                             "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "500m"}}}]},
    "status": {"phase": "Running", "podIP": "10.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]},
}


def page(pods: list[dict[str, Any]], **meta: str) -> bytes:
    return orjson.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": pods})


def test_accounting_reads_the_same_from_slim_and_full_pods() -> None:
    items = json.loads(CLUSTER.read_text())["items"]
    nodes = [i for i in items if i["kind"] == "Node"]
    pods = [i for i in items if i["kind"] == "Pod"] + [SIDECAR_POD]
    slim = decode_pod_list(page(pods))["items"]
    assert inventory.inventory(nodes, slim) == inventory.inventory(nodes, pods)
    assert [pod_requests(p) for p in slim] == [pod_requests(p) for p in pods]


def test_what_accounting_does_not_read_is_dropped() -> None:
    decoded = decode_pod_list(page([SIDECAR_POD], resourceVersion="42", **{"continue": "tok"}))
    assert decoded["metadata"] == {"resourceVersion": "42", "continue": "tok"}
    (pod,) = decoded["items"]
    assert pod["metadata"] == {"name": "p", "namespace": "ml", "uid": "u1"}
    assert pod["status"] == {"phase": "Running"}
    assert pod["spec"]["containers"] == [{"name": "main",
                                          "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "500m"}}}]
    assert pod["spec"]["initContainers"][1]["restartPolicy"] == "Always"
