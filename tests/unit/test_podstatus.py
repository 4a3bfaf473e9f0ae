"""Reading pod status as a person would: ready or not, and why, in the scheduler's or kubelet's words."""

from __future__ import annotations

from typing import Any

import pytest

from distributetrain import podstatus

TERM = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-1"]}]}
PINNED = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [TERM]}}}}
UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/3 nodes are available: 1 Insufficient nvidia.com/gpu."}


def pod(status: dict[str, Any], *, bound: bool = True) -> dict[str, Any]:
    spec = {**PINNED, **({"nodeName": "node-1"} if bound else {})}
    return {"metadata": {"name": "train-worker-0", "annotations": {"distributetrain.io/gpus": "5"}},
            "spec": spec, "status": status}


@pytest.mark.parametrize(("status", "bound", "expected"), [
    ({"phase": "Pending", "conditions": [UNSCHEDULABLE]},
     False, "pod train-worker-0 planned for node node-1: not scheduled: Unschedulable: 0/3 nodes are "
            "available: 1 Insufficient nvidia.com/gpu."),
    ({"phase": "Pending", "containerStatuses": [{"name": "worker", "state": {"waiting": {
        "reason": "ImagePullBackOff", "message": "Back-off pulling image \"x:1\""}}}]},
     True, "pod train-worker-0 on node node-1: container worker waiting: ImagePullBackOff: Back-off pulling "
           "image \"x:1\""),
    ({"phase": "Failed", "reason": "NodeLost", "message": "Node node-1 is unresponsive"},
     True, "pod train-worker-0 on node node-1: NodeLost: Node node-1 is unresponsive"),
    ({"phase": "Failed", "containerStatuses": [{"name": "worker", "state": {"terminated": {
        "exitCode": 137, "reason": "OOMKilled"}}}]},
     True, "pod train-worker-0 on node node-1: container worker exited with code 137: OOMKilled"),
    ({"phase": "Running",
      "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}]},
     True, "pod train-worker-0 on node node-1: running but not Ready (its readiness probe has not passed: "
           "ContainersNotReady)"),
])
def test_describe_says_which_pod_where_and_why(status: dict[str, Any], bound: bool, expected: str) -> None:
    assert podstatus.describe(pod(status, bound=bound)) == expected


def test_ready_and_terminated() -> None:
    ready = pod({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]})
    assert podstatus.is_ready(ready) and not podstatus.is_terminated(ready)
    done = pod({"phase": "Succeeded", "containerStatuses": [{"name": "launcher", "state": {"terminated": {
        "exitCode": 0}}}]})
    assert podstatus.is_terminated(done) and not podstatus.is_ready(done)
    assert podstatus.exit_code(done, "launcher") == 0 and podstatus.exit_code(ready) is None
    assert podstatus.gpus(ready) == 5 and podstatus.planned_node(ready) == "node-1"


def test_what_a_chief_pod_says_about_its_job() -> None:
    chief = {"spec": {"activeDeadlineSeconds": 90, "containers": [
        {"name": "launcher", "env": [{"name": "DT_NUM_PROCESSES", "value": "6"}]}]}}
    assert podstatus.expected_processes(chief) == 6
    assert podstatus.active_deadline(chief) == 90.0
    assert podstatus.expected_processes({"spec": {"containers": [{"name": "launcher"}]}}) is None
    assert podstatus.active_deadline({"spec": {}}) is None


def test_the_ipv4_address_of_a_dual_stack_pod() -> None:
    dual = {"status": {"podIP": "fd00::7", "podIPs": [{"ip": "fd00::7"}, {"ip": "10.244.1.7"}]}}
    assert podstatus.pod_ipv4(dual) == "10.244.1.7"
    assert podstatus.pod_ipv4({"status": {"podIP": "10.0.0.1"}}) == "10.0.0.1"
    assert podstatus.pod_ipv4({"status": {"podIP": "fd00::7"}}) is None


def test_planned_node_by_name_field() -> None:
    pod = {"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                "values": ["node-7"]}]}]}}}}}
    assert podstatus.planned_node(pod) == "node-7"


def test_a_disrupted_pod_says_who_disrupted_it() -> None:
    pod = {"metadata": {"name": "w1", "deletionTimestamp": "2026-11-26T08:00:00Z"},
           "spec": {"nodeName": "node-2"},
           "status": {"phase": "Running", "conditions": [
               {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                "message": "Eviction API: evicting"}]}}
    assert podstatus.describe(pod) == ("pod w1 on node node-2: evicted (a drain, or the eviction API): "
                                       "EvictionByEvictionAPI: Eviction API: evicting")
    shutdown = {**pod, "status": {"phase": "Failed", "reason": "Terminated",
                                  "message": "Pod was terminated in response to imminent node shutdown.",
                                  "conditions": [{"type": "DisruptionTarget", "status": "True",
                                                  "reason": "TerminationByKubelet"}]}}
    assert podstatus.why(shutdown).startswith("terminated by its node (node shutdown")
