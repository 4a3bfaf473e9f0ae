"""The scheduler and the kubelet's admission, seen through the API like a user sees them."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from kubeclient import as_body
from localcluster import wait_until

GPU_TOLERATION = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def gpu_pod(name: str, gpus: int, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "tolerations": GPU_TOLERATION,
            **spec,
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1.36",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
        },
    }


def condition(v1: client.CoreV1Api, name: str) -> Any:
    pod = v1.read_namespaced_pod(name, "default")
    return next((c for c in pod.status.conditions or [] if c.type == "PodScheduled"), None)


@pytest.fixture
def v1(local_cluster: Any) -> client.CoreV1Api:
    return client.CoreV1Api(local_cluster.api_client())


def test_binds_on_requests_and_reports_unschedulable_then_binds_when_room_frees(v1: client.CoreV1Api) -> None:
    v1.create_namespaced_pod("default", as_body(gpu_pod("big", 5)))
    v1.create_namespaced_pod("default", as_body(gpu_pod("mid", 3)))
    wait_until(lambda: v1.read_namespaced_pod("mid", "default").status.phase == "Running", what="mid running")
    assert v1.read_namespaced_pod("big", "default").spec.node_name == "node-1"
    assert v1.read_namespaced_pod("mid", "default").spec.node_name == "node-2"
    v1.create_namespaced_pod("default", as_body(gpu_pod("waiting", 4)))
    cond = wait_until(lambda: condition(v1, "waiting"), what="PodScheduled condition")
    assert (cond.status, cond.reason) == ("False", "Unschedulable")
    assert cond.message.startswith("0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    events = v1.list_namespaced_event("default", field_selector="involvedObject.name=waiting").items
    assert [(e.type, e.reason) for e in events] == [("Warning", "FailedScheduling")]
    v1.delete_namespaced_pod("big", "default")
    wait_until(
        lambda: v1.read_namespaced_pod("waiting", "default").spec.node_name == "node-1",
        what="waiting bound once big is gone",
    )
    assert condition(v1, "waiting").status == "True"


def test_taints_selectors_and_hostname_affinity(local_cluster_factory: Any) -> None:
    cluster = local_cluster_factory(nodes=[2, 0])
    v1 = client.CoreV1Api(cluster.api_client())
    v1.create_namespaced_pod(
        "default",
        as_body({"metadata": {"name": "plain"}, "spec": {"containers": [{"name": "c", "image": "x:1"}]}}),
    )
    wait_until(
        lambda: v1.read_namespaced_pod("plain", "default").spec.node_name == "node-2",
        what="untolerating pod on the untainted node",
    )
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-1"]}
                        ]
                    }
                ]
            }
        }
    }
    v1.create_namespaced_pod(
        "default",
        as_body({
            "metadata": {"name": "pinned"},
            "spec": {"affinity": affinity, "containers": [{"name": "c", "image": "x:1"}]},
        }),
    )
    cond = wait_until(lambda: condition(v1, "pinned"), what="pinned unschedulable")
    assert cond.message.startswith(
        "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) had untolerated taint {nvidia.com/gpu: present}."
    )


def test_pod_created_on_a_full_node_fails_admission(v1: client.CoreV1Api) -> None:
    v1.create_namespaced_pod("default", as_body(gpu_pod("first", 2, nodeName="node-3")))
    v1.create_namespaced_pod("default", as_body(gpu_pod("second", 1, nodeName="node-3")))
    failed = wait_until(
        lambda: (p := v1.read_namespaced_pod("second", "default")).status.phase == "Failed" and p,
        what="second rejected",
    )
    assert failed.status.reason == "OutOfnvidia.com/gpu"
    assert failed.status.message == (
        "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, "
        "requested: 1, used: 2, capacity: 2"
    )
    assert v1.read_namespaced_pod("first", "default").status.phase == "Running"


def test_failed_node_fails_its_pods_and_is_not_ready(v1: client.CoreV1Api, local_cluster: Any) -> None:
    v1.create_namespaced_pod("default", as_body(gpu_pod("victim", 1, nodeName="node-2")))
    wait_until(lambda: v1.read_namespaced_pod("victim", "default").status.phase == "Running", what="running")
    local_cluster.call(local_cluster.runtime.fail_node("node-2"))
    pod = v1.read_namespaced_pod("victim", "default")
    assert (pod.status.phase, pod.status.reason) == ("Failed", "NodeLost")
    ready = next(c for c in v1.read_node("node-2").status.conditions if c.type == "Ready")
    assert ready.status != "True"
    v1.create_namespaced_pod(
        "default", as_body(gpu_pod("after", 1, nodeSelector={"kubernetes.io/hostname": "node-2"}))
    )
    cond = wait_until(lambda: condition(v1, "after"), what="after unschedulable")
    assert cond.status == "False"
    assert "1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }" in cond.message
