"""The local cluster through the official client: create, list, get, watch, logs, delete."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal, TypeVar

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from kubeclient import as_body, present, watch_events
from localcluster import Behavior, TestCluster

T = TypeVar("T")

TOLERATE_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def pod(name: str, *, gpus: int = 0, **spec: object) -> dict[str, object]:
    container: dict[str, object] = {"name": "main", "image": "busybox:1.36"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [container], "tolerations": TOLERATE_GPU, **spec},
    }


def wait_for(check: Callable[[], T | Literal[False] | None], timeout: float = 10.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


def test_nodes_as_the_briefing_describes(local_cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(local_cluster.api_client())
    nodes = {present(n.metadata.name): n for n in v1.list_node().items}
    assert sorted(nodes) == ["node-1", "node-2", "node-3"]
    assert [present(nodes[f"node-{i}"].status.allocatable)["nvidia.com/gpu"] for i in (1, 2, 3)] == [
        "5", "3", "2"]
    node = nodes["node-1"]
    allocatable = present(node.status.allocatable)
    assert present(node.metadata.labels)["kubernetes.io/hostname"] == "node-1"
    assert allocatable["cpu"] == "64" and allocatable["memory"] == "512Gi"
    assert [(t.key, t.value, t.effect) for t in node.spec.taints] == [
        ("nvidia.com/gpu", "present", "NoSchedule")
    ]
    ready = next(c for c in node.status.conditions if c.type == "Ready")
    assert ready.status == "True"


def test_pod_runs_gets_ip_and_is_deleted(local_cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(local_cluster.api_client())
    created = v1.create_namespaced_pod("default", as_body(pod("p1", gpus=2)))
    assert created.metadata.uid and created.metadata.creation_timestamp
    running = wait_for(lambda: (p := v1.read_namespaced_pod("p1", "default")).status.phase == "Running" and p)
    assert running.spec.node_name == "node-1"
    assert running.status.pod_ip.startswith("10.244.1.")
    assert {c.type: c.status for c in running.status.conditions}["Ready"] == "True"
    v1.delete_namespaced_pod("p1", "default")
    wait_for(lambda: not v1.list_namespaced_pod("default").items)
    with pytest.raises(ApiException) as err:
        v1.read_namespaced_pod("p1", "default")
    assert err.value.status == 404


def test_watch_sees_changes_after_a_list(local_cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(local_cluster.api_client())
    rv = v1.list_namespaced_pod("default").metadata.resource_version
    v1.create_namespaced_pod("default", as_body(pod("w1")))
    seen: list[tuple[str, str, str]] = []
    for event in watch_events(
        v1.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=5
    ):
        seen.append((event["type"], event["object"].metadata.name, event["object"].status.phase))
        if event["object"].status.phase == "Running":
            break
    assert seen[0] == ("ADDED", "w1", "Pending")
    assert seen[-1] == ("MODIFIED", "w1", "Running")


def test_logs_from_a_behavior(local_cluster_factory: Callable[..., TestCluster]) -> None:
    cluster = local_cluster_factory(
        behaviors=[
            (
                lambda p: p["metadata"]["name"].endswith("-chief"),
                Behavior(log="training done\n", exit_code=0, exit_after=0.2),
            )
        ]
    )
    v1 = client.CoreV1Api(cluster.api_client())
    v1.create_namespaced_pod("default", as_body(pod("job-chief", restartPolicy="Never")))
    done = wait_for(
        lambda: (p := v1.read_namespaced_pod("job-chief", "default")).status.phase == "Succeeded" and p
    )
    assert done.status.container_statuses[0].state.terminated.reason == "Completed"
    assert v1.read_namespaced_pod_log("job-chief", "default") == "training done\n"
