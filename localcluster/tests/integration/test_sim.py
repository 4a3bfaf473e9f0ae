"""The simulated kubelet: phases by restartPolicy, readiness, behaviours, exit codes."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from kubeclient import as_body, present
from localcluster import Behavior, wait_until


def pod(name: str, restart: str, containers: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": restart,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": f"c{i}", "image": "x:1"} for i in range(containers)],
        },
    }


def running(v1: client.CoreV1Api, name: str) -> Any:
    return wait_until(
        lambda: (p := v1.read_namespaced_pod(name, "default")).status.phase == "Running" and p,
        what=f"{name} running",
    )


@pytest.mark.parametrize(
    ("restart", "code", "phase", "restarts"),
    [
        ("Never", 0, "Succeeded", 0),
        ("Never", 3, "Failed", 0),
        ("OnFailure", 0, "Succeeded", 0),
        ("OnFailure", 3, "Running", 1),
        ("Always", 0, "Running", 1),
    ],
)
def test_exit_follows_restart_policy(
    local_cluster: Any, restart: str, code: int, phase: str, restarts: int
) -> None:
    v1 = client.CoreV1Api(local_cluster.api_client())
    v1.create_namespaced_pod("default", as_body(pod("p", restart)))
    running(v1, "p")
    local_cluster.call(local_cluster.runtime.exit_container("default", "p", code))
    after = v1.read_namespaced_pod("p", "default")
    status = present(after.status.container_statuses)[0]
    assert after.status.phase == phase and status.restart_count == restarts
    if phase == "Running":
        assert status.last_state.terminated.exit_code == code and status.state.running is not None
    else:
        assert status.state.terminated.exit_code == code
        assert status.state.terminated.reason == ("Completed" if code == 0 else "Error")


def test_pod_fails_when_one_of_two_containers_fails(local_cluster: Any) -> None:
    v1 = client.CoreV1Api(local_cluster.api_client())
    v1.create_namespaced_pod("default", as_body(pod("two", "Never", containers=2)))
    running(v1, "two")
    local_cluster.call(local_cluster.runtime.exit_container("default", "two", 0, container="c0"))
    assert v1.read_namespaced_pod("two", "default").status.phase == "Running"
    local_cluster.call(local_cluster.runtime.exit_container("default", "two", 1, container="c1"))
    assert v1.read_namespaced_pod("two", "default").status.phase == "Failed"


def test_readiness_hook_and_not_ready_behavior(local_cluster_factory: Any) -> None:
    cluster = local_cluster_factory(
        behaviors=[(lambda p: p["metadata"]["name"].startswith("slow"), Behavior(ready=False))]
    )
    v1 = client.CoreV1Api(cluster.api_client())
    v1.create_namespaced_pod("default", as_body(pod("slow-1", "Always")))

    def ready() -> str:
        conditions = present(v1.read_namespaced_pod("slow-1", "default").status.conditions)
        return str({c.type: c.status for c in conditions}["Ready"])

    running(v1, "slow-1")
    assert ready() == "False"
    cluster.call(cluster.runtime.set_ready("default", "slow-1", True))
    assert ready() == "True"
    assert present(v1.read_namespaced_pod("slow-1", "default").status.container_statuses)[0].ready


def test_pod_ips_are_distinct_per_node_subnet(local_cluster_factory: Any) -> None:
    cluster = local_cluster_factory(nodes=[0, 0], gpu_taint=False)
    v1 = client.CoreV1Api(cluster.api_client())
    for i in range(6):
        v1.create_namespaced_pod("default", as_body(pod(f"p{i}", "Always")))
    pods = [running(v1, f"p{i}") for i in range(6)]
    ips = [p.status.pod_ip for p in pods]
    assert len(set(ips)) == 6
    for p in pods:
        node_index = p.spec.node_name.split("-")[1]
        assert p.status.pod_ip.startswith(f"10.244.{node_index}.")
