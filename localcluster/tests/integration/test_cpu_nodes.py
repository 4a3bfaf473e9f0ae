"""CPU nodes (`--cpu-nodes`, `cpu_nodes=`): where pods that need no GPU go, as on a real cluster."""

from __future__ import annotations

import ipaddress
from typing import Any

from kubernetes import client

from kubeclient import as_body, present
from localcluster import wait_until

CONTAINER = {"name": "main", "image": "busybox:1.36"}


def test_cpu_nodes_are_untainted_gpu_less_and_take_plain_pods(local_cluster_factory: Any) -> None:
    cluster = local_cluster_factory(nodes=[2, 1], cpu_nodes=2)
    v1 = client.CoreV1Api(cluster.api_client())
    nodes = {present(n.metadata.name): n for n in v1.list_node().items}
    assert sorted(nodes) == ["cpu-1", "cpu-2", "node-1", "node-2"]
    gpu_node = present(nodes["node-1"].status.allocatable)
    for name in ("cpu-1", "cpu-2"):
        node = nodes[name]
        allocatable = present(node.status.allocatable)
        assert "nvidia.com/gpu" not in allocatable
        assert "nvidia.com/gpu" not in present(node.status.capacity)
        assert node.spec.taints is None
        assert present(node.metadata.labels)["kubernetes.io/hostname"] == name
        assert {k: allocatable[k] for k in ("cpu", "memory", "pods")} == {
            k: gpu_node[k] for k in ("cpu", "memory", "pods")}
        assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)
    # node numbers continue after the GPU nodes: each node its own /24
    assert [nodes[n].spec.pod_cidr for n in ("node-1", "node-2", "cpu-1", "cpu-2")] == [
        "10.244.1.0/24", "10.244.2.0/24", "10.244.3.0/24", "10.244.4.0/24"]

    # a pod with no GPU and no toleration: the GPU nodes' taint keeps it off them
    v1.create_namespaced_pod("default", as_body({"metadata": {"name": "manager"},
                                         "spec": {"containers": [CONTAINER]}}))
    # a GPU pod (tolerating the taint) never lands on a CPU node
    v1.create_namespaced_pod("default", as_body({"metadata": {"name": "worker"}, "spec": {
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        "containers": [{**CONTAINER, "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}))

    def running(name: str) -> client.V1Pod | None:
        pod = v1.read_namespaced_pod(name, "default")
        return pod if pod.status.phase == "Running" and pod.status.pod_ip else None

    manager = wait_until(lambda: running("manager"), what="manager Running")
    assert manager.spec.node_name == "cpu-1"
    assert ipaddress.ip_address(present(manager.status.pod_ip)) in ipaddress.ip_network("10.244.3.0/24")
    assert wait_until(lambda: running("worker"), what="worker Running").spec.node_name == "node-1"

    # a second GPU pod that fits nowhere: the CPU nodes count as lacking the resource, as on a real cluster
    v1.create_namespaced_pod("default", as_body({"metadata": {"name": "too-big"}, "spec": {
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        "containers": [{**CONTAINER, "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}))

    def message() -> str | None:
        for condition in v1.read_namespaced_pod("too-big", "default").status.conditions or []:
            if condition.reason == "Unschedulable":
                return str(condition.message)
        return None

    assert wait_until(message, what="too-big Unschedulable").startswith(
        "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.")

    # kubectl shows them like any node
    table = cluster.kubectl("get", "nodes")
    assert table.returncode == 0, table.stderr
    assert [line.split()[0] for line in table.stdout.splitlines()[1:]] == ["cpu-1", "cpu-2", "node-1",
                                                                          "node-2"]
