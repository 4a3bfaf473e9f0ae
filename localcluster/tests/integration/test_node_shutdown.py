"""A node's graceful shutdown on simulated nodes as a user reads it (doubles/nodeshutdown.py): the node
NotReady with the kubelet's message and events, its pods Failed with reason Terminated and the
DisruptionTarget condition, new pods refused there."""

from __future__ import annotations

from functools import partial
from typing import Any

from kubernetes import client

from kubeclient import as_body, present
from localcluster import PodKill, TestCluster, wait_until

MESSAGE = "Pod was terminated in response to imminent node shutdown."


def phase_is(v1: client.CoreV1Api, name: str, phase: str) -> bool:
    return bool(v1.read_namespaced_pod(name, "default").status.phase == phase)


def pod(name: str, node: str, *, priority_class: str | None = None, grace: int | None = None
        ) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeName": node, "tolerations": [{"operator": "Exists"}],
                            "containers": [{"name": "main", "image": "busybox:1.36"}]}
    if priority_class is not None:  # the Priority admission plugin resolves it (a bare priority is refused)
        spec["priorityClassName"] = priority_class
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"metadata": {"name": name}, "spec": spec}


def test_a_graceful_node_shutdown_ends_every_pod_as_the_kubelet_reports_it(
        local_cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(local_cluster.api_client())
    v1.create_namespaced_pod("default", as_body(pod("worker", "node-2", grace=600)))
    v1.create_namespaced_pod("default", as_body(pod("quick", "node-2", grace=3)))
    critical = pod("agent", "node-2", priority_class="system-node-critical")
    v1.create_namespaced_pod("default", as_body(critical))
    v1.create_namespaced_pod("default", as_body(pod("other", "node-1")))
    for name in ("worker", "quick", "agent", "other"):
        wait_until(partial(phase_is, v1, name, "Running"), what=name)
    done = local_cluster.shutdown_node("node-2", grace_period=6, critical_grace_period=2)
    assert done.node == "node-2"
    assert sorted(done.pods, key=lambda p: p.name) == [PodKill("default", "agent", 2.0),
                                                        PodKill("default", "quick", 3.0),
                                                        PodKill("default", "worker", 4.0)]
    for name in ("worker", "quick", "agent"):
        status = v1.read_namespaced_pod(name, "default").status
        assert (status.phase, status.reason, status.message) == ("Failed", "Terminated", MESSAGE)
        target = next(c for c in present(status.conditions) if c.type == "DisruptionTarget")
        assert (target.status, target.reason, target.message) == ("True", "TerminationByKubelet", MESSAGE)
        ready = next(c for c in present(status.conditions) if c.type == "Ready")
        assert ready.status == "False"
        terminated = present(status.container_statuses)[0].state.terminated
        assert (terminated.exit_code, terminated.reason) == (143, "Error")   # SIGTERM
    assert v1.read_namespaced_pod("other", "default").status.phase == "Running"
    described = local_cluster.kubectl("describe", "pod", "worker").stdout
    assert "Status:           Failed" in described and "Reason:           Terminated" in described
    assert f"Message:          {MESSAGE}" in described
    assert "Killing" in described and "Stopping container main" in described
    ready = next(c for c in present(v1.read_node("node-2").status.conditions) if c.type == "Ready")
    assert (ready.status, ready.reason, ready.message) == (
        "False", "KubeletNotReady", "node is shutting down")
    assert local_cluster.kubectl("get", "node", "node-2", "--no-headers").stdout.split()[1] == "NotReady"
    rows = "jsonpath={range .items[*]}{.reason}|{.message}|{.source.host}{'\\n'}{end}"
    node_events = local_cluster.kubectl("get", "events", "--field-selector", "involvedObject.kind=Node", "-o",
                                        rows)
    assert node_events.stdout.splitlines() == [
        "NodeShutdown|Shutdown manager detected shutdown event|node-2",
        "NodeNotReady|Node node-2 status is now: NodeNotReady|node-2"]


def test_a_node_shutting_down_refuses_new_pods_and_is_not_scheduled_to(local_cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(local_cluster.api_client())
    local_cluster.shutdown_node("node-3", grace_period=1, critical_grace_period=0)
    v1.create_namespaced_pod("default", as_body(pod("late", "node-3")))
    wait_until(partial(phase_is, v1, "late", "Failed"), what="late refused")
    status = v1.read_namespaced_pod("late", "default").status
    assert (status.reason, status.message) == (
        "NodeShutdown", "Pod was rejected as the node is shutting down.")
    taints = {(t.key, t.effect) for t in present(v1.read_node("node-3").spec.taints)}
    not_ready = "node.kubernetes.io/not-ready"
    assert {(not_ready, "NoSchedule"), (not_ready, "NoExecute")} <= taints
    pinned = {"metadata": {"name": "pinned"}, "spec": {
        "nodeSelector": {"kubernetes.io/hostname": "node-3"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        "containers": [{"name": "main", "image": "busybox:1.36"}]}}
    v1.create_namespaced_pod("default", as_body(pinned))

    def unschedulable() -> Any:
        conditions = v1.read_namespaced_pod("pinned", "default").status.conditions or []
        return next((c for c in conditions if c.type == "PodScheduled" and c.status == "False"), None)

    condition = wait_until(unschedulable, what="pinned unschedulable")
    assert "node(s) had untolerated taint {node.kubernetes.io/not-ready: }" in condition.message
