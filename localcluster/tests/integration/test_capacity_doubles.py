"""Capacity machinery seen through kubectl, as a user sees it: scheduling gates, the node-pool autoscaler
(nodes that come for pending pods and go when empty, ProvisioningRequests) and Kueue's plain-pod queueing."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from localcluster import NodePool, TestCluster, kueue_queue_manifests, wait_until

Factory = Callable[..., TestCluster]
FAST_POOLS = {"autoscaler_scan_interval": 0.2, "autoscaler_provision_delay": 0.5,
              "autoscaler_ready_delay": 0.5, "autoscaler_unneeded_time": 1.0}


def gpu_pod(name: str, gpus: int, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **meta},
            "spec": {"restartPolicy": "Never",
                     "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                     "containers": [{"name": "c", "image": "busybox", "resources": {
                         "limits": {"nvidia.com/gpu": str(gpus), "cpu": "1", "memory": "1Gi"}}}]}}


def create(cluster: TestCluster, *objects: dict[str, Any]) -> str:
    done = cluster.kubectl("create", "-f", "-", input=yaml.safe_dump_all(objects))
    assert done.returncode == 0, done.stderr
    return done.stdout


def get(cluster: TestCluster, *args: str) -> Any:
    done = cluster.kubectl("get", *args, "-o", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def events(cluster: TestCluster, name: str, namespace: str = "default") -> list[tuple[str, str]]:
    found = get(cluster, "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}")
    return [(e["reason"], e["message"]) for e in found["items"]]


def node_of(cluster: TestCluster, pod: str) -> str | None:
    return str(get(cluster, "pod", pod)["spec"].get("nodeName") or "") or None


# ---- scheduling gates --------------------------------------------------------------------------------
def test_a_gated_pod_waits_unscheduled_until_its_last_gate_is_removed(local_cluster: TestCluster) -> None:
    pod = gpu_pod("gated", 1)
    pod["spec"]["schedulingGates"] = [{"name": "example.com/a"}, {"name": "example.com/b"}]
    create(local_cluster, pod)
    listed = local_cluster.kubectl("get", "pod", "gated").stdout
    assert "SchedulingGated" in listed, listed
    cond = get(local_cluster, "pod", "gated")["status"]["conditions"][0]
    assert (cond["reason"], cond["message"]) == ("SchedulingGated",
                                                 "Scheduling is blocked due to non-empty scheduling gates")
    gates = [{"name": "example.com/a"}, {"name": "example.com/b"}, {"name": "x.io/c"}]
    added = local_cluster.kubectl("patch", "pod", "gated", "--type", "merge", "-p",
                                  json.dumps({"spec": {"schedulingGates": gates}}))
    assert added.returncode == 1
    assert ("spec.schedulingGates[2].name: Forbidden: only deletion is allowed, but found new scheduling "
            "gate 'x.io/c'") in added.stderr
    # while gated its placement may narrow: an added node selector entry
    narrowed = local_cluster.kubectl("patch", "pod", "gated", "--type", "merge", "-p",
                                     json.dumps({"spec": {"nodeSelector": {"kubernetes.io/os": "linux"}}}))
    assert narrowed.returncode == 0, narrowed.stderr
    local_cluster.kubectl("patch", "pod", "gated", "--type", "merge", "-p",
                          json.dumps({"spec": {"schedulingGates": [{"name": "example.com/b"}]}}))
    assert node_of(local_cluster, "gated") is None
    local_cluster.kubectl("patch", "pod", "gated", "--type", "json", "-p",
                          '[{"op": "remove", "path": "/spec/schedulingGates"}]')
    assert wait_until(lambda: node_of(local_cluster, "gated"), timeout=10, what="the ungated pod bound")
    # no FailedScheduling while it was gated
    assert next(r for r, _ in events(local_cluster, "gated")) == "Scheduled"


# ---- the node-pool autoscaler ------------------------------------------------------------------------
def test_a_pool_grows_for_pending_pods_and_shrinks_when_they_are_gone(local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory(nodes=[], cpu_nodes=1, node_pools=[NodePool("gpu", 2, 3)], **FAST_POOLS)
    create(cluster, gpu_pod("a", 2), gpu_pod("b", 2), gpu_pod("toobig", 4))
    assert wait_until(lambda: node_of(cluster, "a") and node_of(cluster, "b"), timeout=20,
                      what="both pods bound to new nodes")
    nodes = {n["metadata"]["name"]: n for n in get(cluster, "nodes")["items"]}
    assert sorted(nodes) == ["cpu-1", "gpu-1", "gpu-2"]
    assert nodes["gpu-1"]["status"]["allocatable"]["nvidia.com/gpu"] == "2"
    assert nodes["gpu-1"]["metadata"]["labels"]["localcluster.io/node-pool"] == "gpu"
    assert ("TriggeredScaleUp", "pod triggered scale-up: [{gpu 0->2 (max: 3)}]") in events(cluster, "a")
    assert ("NotTriggerScaleUp", "pod didn't trigger scale-up: 1 Insufficient nvidia.com/gpu") in events(
        cluster, "toobig")  # no node of the pool could ever hold it
    status = get(cluster, "configmap", "-n", "kube-system", "cluster-autoscaler-status")["data"]["status"]
    group = yaml.safe_load(status)["nodeGroups"][0]
    assert (group["name"], group["health"]["minSize"], group["health"]["maxSize"]) == ("gpu", 0, 3)
    scaled = events(cluster, "cluster-autoscaler-status", "kube-system")
    assert ("ScaledUpGroup", "Scale-up: setting group gpu size to 2 instead of 0 (max: 3)") in scaled

    cluster.kubectl("delete", "pod", "a", "b", "toobig", "--grace-period=0", "--force")
    wait_until(lambda: [n["metadata"]["name"] for n in get(cluster, "nodes")["items"]] == ["cpu-1"],
               timeout=20, what="the empty pool nodes removed")
    said = events(cluster, "cluster-autoscaler-status", "kube-system")
    assert sorted(m for r, m in said if r == "ScaleDownEmpty") == [
        'Scale-down: removing empty node "gpu-1"', 'Scale-down: removing empty node "gpu-2"']


def provisioning_request(name: str, count: int) -> list[dict[str, Any]]:
    template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": f"{name}-shape"},
                "template": {"spec": gpu_pod("x", 2)["spec"]}}
    request = {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
               "metadata": {"name": name},
               "spec": {"provisioningClassName": "best-effort-atomic-scale-up.autoscaling.x-k8s.io",
                        "podSets": [{"podTemplateRef": {"name": f"{name}-shape"}, "count": count}]}}
    return [template, request]


def test_a_provisioning_request_is_provisioned_whole_or_not_at_all(local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory(nodes=[], cpu_nodes=1, node_pools=[NodePool("gpu", 2, 3)],
                                    provisioning_requests=True, **FAST_POOLS)
    create(cluster, *provisioning_request("fits", 3), *provisioning_request("toomany", 4))

    def conditions(name: str) -> dict[str, tuple[str, str]]:
        found = get(cluster, "provreq", name).get("status", {}).get("conditions") or []
        return {c["type"]: (c["status"], c["reason"]) for c in found}

    wait_until(lambda: conditions("fits").get("Provisioned") == ("True", "CapacityIsProvisioned"), timeout=20,
               what="the request that fits provisioned")
    assert conditions("fits")["Accepted"] == ("True", "Accepted")
    wait_until(lambda: len(get(cluster, "nodes")["items"]) == 4, timeout=20, what="three pool nodes")
    assert conditions("toomany")["Provisioned"] == ("False", "CapacityIsNotFound")


def test_the_doubles_kinds_are_served_only_by_a_cluster_that_runs_them(local_cluster: TestCluster) -> None:
    for kind in ("provisioningrequests", "workloads", "clusterqueues"):
        missing = local_cluster.kubectl("get", kind)
        assert missing.returncode == 1
        assert f'the server doesn\'t have a resource type "{kind}"' in missing.stderr
    assert local_cluster.kubectl("get", "podtemplates").returncode == 0


# ---- Kueue ------------------------------------------------------------------------------------------
QUEUES = kueue_queue_manifests(gpus=6, node_labels={"kubernetes.io/os": "linux"})


def member(name: str, group: str, gpus: int, total: int) -> dict[str, Any]:
    return gpu_pod(name, gpus, labels={"kueue.x-k8s.io/queue-name": "team-queue",
                                       "kueue.x-k8s.io/pod-group-name": group},
                   annotations={"kueue.x-k8s.io/pod-group-total-count": str(total),
                                "kueue.x-k8s.io/retriable-in-group": "false"})


@pytest.fixture
def kueue_cluster(local_cluster_factory: Factory) -> TestCluster:
    cluster = local_cluster_factory(nodes=[4, 4], kueue=True)
    applied = cluster.kubectl("apply", "-f", "-", input=QUEUES)
    assert applied.returncode == 0, applied.stderr
    return cluster


def test_a_pod_group_is_admitted_whole_once_complete_and_a_second_waits_for_quota(
        kueue_cluster: TestCluster) -> None:
    cluster = kueue_cluster
    create(cluster, member("a-0", "a", 4, 2))
    assert "SchedulingGated" in cluster.kubectl("get", "pod", "a-0").stdout
    assert get(cluster, "workloads")["items"] == []  # the group is not complete: nothing is queued
    create(cluster, member("a-1", "a", 1, 2), member("b-0", "b", 2, 1))
    wait_until(lambda: node_of(cluster, "a-0") and node_of(cluster, "a-1"), timeout=10, what="group a bound")
    table = cluster.kubectl("get", "workloads").stdout
    assert table.split("\n")[0].split() == ["NAME", "QUEUE", "RESERVED", "IN", "ADMITTED", "FINISHED", "AGE"]
    workload_b = wait_until(lambda: get(cluster, "workload", "b").get("status"), timeout=10, what="b pending")
    (reserved,) = workload_b["conditions"]
    assert (reserved["type"], reserved["status"], reserved["reason"]) == ("QuotaReserved", "False", "Pending")
    assert reserved["message"].endswith("insufficient unused quota for nvidia.com/gpu in flavor gpus, 1 more "
                                        "needed")
    assert node_of(cluster, "b-0") is None
    assert get(cluster, "pod", "a-0")["spec"]["nodeSelector"] == {"kubernetes.io/os": "linux"}
    queue = get(cluster, "localqueue", "team-queue")["status"]
    assert (queue["pendingWorkloads"], queue["admittedWorkloads"]) == (1, 1)

    cluster.kubectl("delete", "pod", "a-0", "a-1", "--grace-period=0", "--force")
    assert wait_until(lambda: node_of(cluster, "b-0"), timeout=10, what="b admitted once a's quota is free")


def test_a_group_without_its_total_count_is_refused_by_the_webhook(kueue_cluster: TestCluster) -> None:
    pod = member("x", "x", 1, 1)
    del pod["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"]
    refused = kueue_cluster.kubectl("create", "-f", "-", input=json.dumps(pod))
    assert refused.returncode == 1
    assert 'admission webhook "vpod.kb.io" denied the request' in refused.stderr


def test_a_pod_without_a_queue_name_takes_the_namespace_default_queue(kueue_cluster: TestCluster) -> None:
    create(kueue_cluster, {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                           "metadata": {"name": "default"}, "spec": {"clusterQueue": "team"}})
    create(kueue_cluster, gpu_pod("lone", 1))
    pod = get(kueue_cluster, "pod", "lone")
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"
    assert wait_until(lambda: node_of(kueue_cluster, "lone"), timeout=10, what="the single pod admitted")
    (workload,) = get(kueue_cluster, "workloads")["items"]
    assert workload["metadata"]["name"].startswith("pod-lone-")
