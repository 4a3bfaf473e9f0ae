"""The scheduler fits cpu, memory and extended resources together, in the real FailedScheduling words; and a
cluster whose nodes' kubernetes.io/hostname label differs from their name (as on EKS) refuses a pin by that
label to a node name, while a pin by matchFields metadata.name schedules."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from kubeclient import as_body, present
from localcluster import TestCluster, wait_until

GPU_TOLERATION = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
PREEMPT = "preemption: 0/4 nodes are available: "


def pod(name: str, *, limits: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            **spec,
            "containers": [{"name": "main", "image": "busybox:1.36", "resources": {"limits": limits}}],
        },
    }


def unschedulable(v1: client.CoreV1Api, name: str) -> str:
    def message() -> str:
        p = v1.read_namespaced_pod(name, "default")
        cond = next((c for c in p.status.conditions or [] if c.type == "PodScheduled"), None)
        return str(cond.message) if cond is not None and cond.status == "False" else ""

    return wait_until(message, what=f"{name} unschedulable")


def bound(v1: client.CoreV1Api, name: str) -> str:
    node = wait_until(lambda: v1.read_namespaced_pod(name, "default").spec.node_name, what=f"{name} bound")
    return str(node)


def test_cpu_and_memory_are_fitted_with_the_real_messages(local_cluster_factory: Any) -> None:
    cluster: TestCluster = local_cluster_factory(cpu_nodes=1)
    v1 = client.CoreV1Api(cluster.api_client())
    v1.create_namespaced_pod("default", as_body(pod("cpu-hog", limits={"cpu": "65"})))
    assert unschedulable(v1, "cpu-hog") == (
        "0/4 nodes are available: 1 Insufficient cpu, 3 node(s) had untolerated taint "
        "{nvidia.com/gpu: present}. "
        + PREEMPT
        + "1 No preemption victims found for incoming pod, 3 Preemption is not helpful for scheduling."
    )
    v1.create_namespaced_pod(
        "default", as_body(pod("mem-hog", limits={"cpu": "1", "memory": "600Gi"}, tolerations=GPU_TOLERATION))
    )
    assert unschedulable(v1, "mem-hog") == (
        "0/4 nodes are available: 4 Insufficient memory. " + PREEMPT + "4 No preemption victims found for "
        "incoming pod."
    )
    events = v1.list_namespaced_event("default", field_selector="involvedObject.name=mem-hog").items
    assert [(e.reason, e.source.component) for e in events] == [("FailedScheduling", "default-scheduler")]


def test_cpu_memory_and_gpus_are_held_together_and_freed_together(local_cluster_factory: Any) -> None:
    cluster: TestCluster = local_cluster_factory(nodes=[4], cpu_nodes=0)
    v1 = client.CoreV1Api(cluster.api_client())
    v1.create_namespaced_pod(
        "default",
        as_body(pod(
            "first",
            limits={"cpu": "60", "memory": "500Gi", "nvidia.com/gpu": "1"},
            tolerations=GPU_TOLERATION,
        )),
    )
    assert bound(v1, "first") == "node-1"
    # GPUs are left (3 of 4); cpu and memory are not
    v1.create_namespaced_pod(
        "default",
        as_body(pod(
            "second", limits={"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": "1"}, tolerations=GPU_TOLERATION
        )),
    )
    assert unschedulable(v1, "second") == (
        "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory. preemption: 0/1 nodes are "
        "available: 1 No preemption victims found for incoming pod."
    )
    v1.delete_namespaced_pod("first", "default", grace_period_seconds=0)
    assert bound(v1, "second") == "node-1"


def test_a_pin_by_hostname_label_fails_where_the_label_is_not_the_node_name(
    local_cluster_factory: Any,
) -> None:
    cluster: TestCluster = local_cluster_factory(cpu_nodes=1, hostname_label_suffix=".ec2.internal")
    v1 = client.CoreV1Api(cluster.api_client())
    node = v1.read_node("node-1")
    assert present(node.metadata.labels)["kubernetes.io/hostname"] == "node-1.ec2.internal"

    def pinned(name: str, term: dict[str, Any]) -> dict[str, Any]:
        affinity = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
        }
        return pod(name, limits={"nvidia.com/gpu": "1"}, tolerations=GPU_TOLERATION, affinity=affinity)

    by_label = {
        "matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-1"]}]
    }
    by_name = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}
    v1.create_namespaced_pod("default", as_body(pinned("by-label", by_label)))
    v1.create_namespaced_pod("default", as_body(pinned("by-name", by_name)))
    assert bound(v1, "by-name") == "node-1"
    assert unschedulable(v1, "by-label") == (
        "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector. "
        + PREEMPT
        + "4 Preemption is not helpful for scheduling."
    )
    assert v1.read_namespaced_pod("by-label", "default").status.phase == "Pending"
    # the label's own value pins as it does on EKS
    by_real_label = {
        "matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-1.ec2.internal"]}
        ]
    }
    v1.create_namespaced_pod("default", as_body(pinned("by-real-label", by_real_label)))
    assert bound(v1, "by-real-label") == "node-1"
