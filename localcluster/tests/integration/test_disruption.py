"""PodDisruptionBudgets, the eviction subresource, `kubectl drain`/`cordon`/`uncordon`, PriorityClasses
and the Priority admission plugin, through real kubectl (its typed, protobuf-speaking commands included)
and the official client, against kubernetes v1.37's behaviour and words. Simulated pods."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from kubeclient import api_status, as_body, present
from localcluster import TestCluster, wait_until

Obj = dict[str, Any]
MANAGER_POLICY = {"rules": [
    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
    {"action": "Count", "onExitCodes": {"operator": "In", "values": [77, 137, 143]}},
    {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}}]}


@pytest.fixture
def cluster(local_cluster_factory: Any) -> TestCluster:
    built: TestCluster = local_cluster_factory(nodes=[2, 2], gpu_taint=False, job_backoff=0.2)
    return built


@pytest.fixture
def v1(cluster: TestCluster) -> client.CoreV1Api:
    return client.CoreV1Api(cluster.api_client())


@pytest.fixture
def policy(cluster: TestCluster) -> client.PolicyV1Api:
    return client.PolicyV1Api(cluster.api_client())


def pod(name: str, node: str = "node-1", **labels: str) -> Obj:
    return {"metadata": {"name": name, "labels": {"app": "train", **labels}},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]}}


def budget(**spec: Any) -> Obj:
    return {"metadata": {"name": "train"}, "spec": {"selector": {"matchLabels": {"app": "train"}}, **spec}}


def eviction(name: str) -> Obj:
    return {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": "default"}}


def phase(v1: client.CoreV1Api, name: str) -> str:
    return str(present(v1.read_namespaced_pod(name, "default").status).phase)


def running(v1: client.CoreV1Api, *names: str) -> None:
    wait_until(lambda: all(phase(v1, name) == "Running" for name in names), what=f"{names} running")


def pdb_status(policy: client.PolicyV1Api) -> Any:
    return present(policy.read_namespaced_pod_disruption_budget_status("train", "default").status)


def test_the_budgets_status_counts_healthy_pods_and_says_whether_a_disruption_is_allowed(
        cluster: TestCluster, v1: client.CoreV1Api, policy: client.PolicyV1Api) -> None:
    for name in ("a", "b"):
        v1.create_namespaced_pod("default", as_body(pod(name)))
    running(v1, "a", "b")
    policy.create_namespaced_pod_disruption_budget("default", as_body(budget(minAvailable=1)))
    wait_until(lambda: pdb_status(policy).current_healthy == 2, what="budget synced")
    status = pdb_status(policy)
    assert (status.disruptions_allowed, status.desired_healthy, status.expected_pods,
            status.observed_generation) == (1, 1, 2, 1)
    condition = present(status.conditions)[0]
    assert (condition.type, condition.status, condition.reason) == (
        "DisruptionAllowed", "True", "SufficientPods")
    table = cluster.kubectl("get", "pdb").stdout.splitlines()
    assert table[0].split() == ["NAME", "MIN", "AVAILABLE", "MAX", "UNAVAILABLE", "ALLOWED", "DISRUPTIONS",
                                "AGE"]
    assert table[1].split()[:4] == ["train", "1", "N/A", "1"]


def test_an_eviction_the_budget_forbids_is_429_with_the_real_status(
        cluster: TestCluster, v1: client.CoreV1Api, policy: client.PolicyV1Api) -> None:
    v1.create_namespaced_pod("default", as_body(pod("a")))
    running(v1, "a")
    policy.create_namespaced_pod_disruption_budget("default", as_body(budget(minAvailable=1)))
    wait_until(lambda: pdb_status(policy).current_healthy == 1, what="budget synced")
    with pytest.raises(ApiException) as refused:
        v1.create_namespaced_pod_eviction("a", "default", as_body(eviction("a")))
    assert refused.value.status == 429
    assert api_status(refused.value) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Cannot evict pod as it would violate the pod's disruption budget.",
        "reason": "TooManyRequests",
        "details": {"causes": [{
            "reason": "DisruptionBudget",
            "message": "The disruption budget train needs 1 healthy pods and has 1 currently"}]},
        "code": 429}
    assert v1.read_namespaced_pod("a", "default").metadata.deletion_timestamp is None


def test_an_allowed_eviction_marks_the_pod_a_disruption_target_then_deletes_it(
        cluster: TestCluster, v1: client.CoreV1Api, policy: client.PolicyV1Api) -> None:
    for name in ("a", "b"):
        v1.create_namespaced_pod("default", as_body(pod(name)))
    running(v1, "a", "b")
    policy.create_namespaced_pod_disruption_budget("default", as_body(budget(maxUnavailable=1)))
    # pods without a controller: maxUnavailable has no scale to work from, as upstream (UnmanagedPods)
    wait_until(lambda: pdb_status(policy).observed_generation == 1, what="budget synced")
    assert pdb_status(policy).disruptions_allowed == 0
    cluster.kubectl("delete", "pdb", "train")
    watcher = v1.read_namespaced_pod("a", "default").metadata.resource_version
    v1.create_namespaced_pod_eviction("a", "default", as_body(eviction("a")))
    seen = []
    for line in cluster.request("GET", f"/api/v1/namespaces/default/pods?watch=1&fieldSelector="
                                f"metadata.name=a&resourceVersion={watcher}&timeoutSeconds=3").body.splitlines():
        seen.append(json.loads(line))
    targeted = next(e["object"] for e in seen if any(
        c["type"] == "DisruptionTarget" for c in e["object"]["status"].get("conditions", [])))
    condition = next(c for c in targeted["status"]["conditions"] if c["type"] == "DisruptionTarget")
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "True", "EvictionByEvictionAPI", "Eviction API: evicting")
    assert "deletionTimestamp" not in targeted["metadata"]
    assert seen[-1]["type"] == "DELETED"


def test_kubectl_drain_retries_on_429_until_its_timeout_then_drains_once_the_budget_allows(
        cluster: TestCluster, v1: client.CoreV1Api) -> None:
    manager = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "manager"},
               "spec": {"backoffLimit": 2, "podFailurePolicy": MANAGER_POLICY,
                        "template": {"metadata": {"labels": {"app": "train"}},
                                     "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                                              "nodeSelector": {"kubernetes.io/hostname": "node-1"},
                                              "containers": [{"name": "main", "image": "busybox"}]}}}}
    pdb = budget(minAvailable=1)
    both = [manager, {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", **pdb}]
    applied = cluster.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(m) for m in both))
    assert applied.returncode == 0, applied.stderr
    first = str(wait_until(lambda: v1.list_namespaced_pod("default", label_selector="app=train").items,
                           what="the manager's pod")[0].metadata.name)
    running(v1, first)
    wait_until(lambda: "1" in cluster.kubectl("get", "pdb", "train", "-o", "jsonpath={.status.currentHealthy}"
                                              ).stdout, what="budget synced")
    drain = ("drain", "node-1", "--ignore-daemonsets", "--delete-emptydir-data")
    blocked = cluster.kubectl(*drain, "--timeout=7s")
    assert blocked.returncode == 1
    assert "node/node-1 cordoned" in blocked.stdout
    assert (f'error when evicting pods/"{first}" -n "default" (will retry after 5s): Cannot evict pod as it '
            "would violate the pod's disruption budget.") in blocked.stderr
    assert "global timeout reached: 7s" in blocked.stderr
    assert "SchedulingDisabled" in cluster.kubectl("get", "node", "node-1").stdout
    cluster.kubectl("patch", "pdb", "train", "--type=merge", "-p", '{"spec":{"minAvailable":0}}')
    drained = cluster.kubectl(*drain, "--timeout=60s")
    assert drained.returncode == 0, drained.stderr
    assert f"pod/{first} evicted" in drained.stdout and "node/node-1 drained" in drained.stdout
    # the Job replaces its evicted pod without counting a failure (DisruptionTarget -> Ignore); the new
    # pod cannot land on the cordoned node it is pinned to
    batch = client.BatchV1Api(cluster.api_client())
    replacement = wait_until(lambda: [p for p in v1.list_namespaced_pod("default", label_selector="app=train")
                                      .items if p.metadata.name != first], timeout=20,
                             what="a replacement pod")[0]
    assert replacement.spec.node_name is None
    assert present(batch.read_namespaced_job_status("manager", "default").status).failed is None
    assert cluster.kubectl("uncordon", "node-1").stdout == "node/node-1 uncordoned\n"
    running(v1, str(replacement.metadata.name))


def test_typed_kubectl_creates_of_budgets_classes_and_quotas_are_read_from_protobuf(
        cluster: TestCluster, policy: client.PolicyV1Api) -> None:
    made = [cluster.kubectl("create", "poddisruptionbudget", "web", "--selector=app=web",
                            "--min-available=50%"),
            cluster.kubectl("create", "priorityclass", "batch", "--value=1000", "--description=batch jobs",
                            "--preemption-policy=Never"),
            cluster.kubectl("create", "quota", "team", "--hard=pods=2,requests.nvidia.com/gpu=4"),
            cluster.kubectl("create", "service", "clusterip", "web", "--tcp=80:8080")]
    assert [m.stdout for m in made] == ["poddisruptionbudget.policy/web created\n",
                                        "priorityclass.scheduling.k8s.io/batch created\n",
                                        "resourcequota/team created\n", "service/web created\n"], \
        [m.stderr for m in made]
    spec = present(policy.read_namespaced_pod_disruption_budget("web", "default").spec)
    assert (spec.min_available, present(spec.selector).match_labels) == ("50%", {"app": "web"})
    pc = client.SchedulingV1Api(cluster.api_client()).read_priority_class("batch")
    assert (pc.value, pc.description, pc.preemption_policy, pc.global_default) == (
        1000, "batch jobs", "Never", None)
    quota = client.CoreV1Api(cluster.api_client()).read_namespaced_resource_quota("team", "default")
    assert present(quota.spec).hard == {"pods": "2", "requests.nvidia.com/gpu": "4"}


def test_a_pod_gets_its_priority_from_its_class_or_is_refused_for_an_unknown_one(
        cluster: TestCluster, v1: client.CoreV1Api) -> None:
    classes = cluster.kubectl("get", "priorityclasses").stdout.splitlines()
    assert [line.split()[:3] for line in classes] == [
        ["NAME", "VALUE", "GLOBAL-DEFAULT"], ["system-cluster-critical", "2000000000", "false"],
        ["system-node-critical", "2000001000", "false"]]
    with pytest.raises(ApiException) as refused:
        v1.create_namespaced_pod("default", as_body({**pod("x"), "spec": {
            **pod("x")["spec"], "priorityClassName": "foo"}}))
    assert refused.value.status == 403
    assert api_status(refused.value)["message"] == (
        'pods "x" is forbidden: no PriorityClass with name foo was found')
    cluster.kubectl("create", "priorityclass", "low", "--value=10", "--global-default")
    made = v1.create_namespaced_pod("default", as_body(pod("y")))
    assert (made.spec.priority_class_name, made.spec.priority, made.spec.preemption_policy) == (
        "low", 10, "PreemptLowerPriority")
    second = cluster.kubectl("create", "priorityclass", "lower", "--value=1", "--global-default")
    assert second.returncode == 1
    assert ('priorityclasses.scheduling.k8s.io "lower" is forbidden: PriorityClass low is already marked as '
            "default. Only one default can exist") in second.stderr
