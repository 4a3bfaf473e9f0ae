"""The pure rules of scheduling gates, the node-pool autoscaler's scale-up decision and ProvisioningRequest
verdicts, and Kueue's webhook, workloads and quota: each with the real component's words."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from localcluster import InvalidInput, NodePool, parse_node_pool
from localcluster._internal.admission import schedulinggates
from localcluster._internal.apimachinery.status import ApiStatus
from localcluster._internal.auth.identity import UserInfo
from localcluster._internal.cluster.spec import ClusterSpec, node_object
from localcluster._internal.controllers import scheduler
from localcluster._internal.doubles.autoscaler import planning, provisioning
from localcluster._internal.doubles.autoscaler.pools import POOL_LABEL, dressed
from localcluster._internal.doubles.kueue import quota, webhook, workloads

Obj = dict[str, Any]
USER = UserInfo(name="admin", groups=("system:masters",))


def gpu_pod(name: str, gpus: int, **spec: Any) -> Obj:
    return {"metadata": {"name": name, "namespace": "default", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}], **spec,
                     "containers": [{"name": "c", "image": "busybox", "resources": {
                         "limits": {"nvidia.com/gpu": str(gpus), "cpu": "1", "memory": "1Gi"}}}]}}


# ---- scheduling gates ------------------------------------------------------------------------------------
def test_a_gated_pod_is_created_with_the_schedulinggated_condition() -> None:
    pod = gpu_pod("p", 1, schedulingGates=[{"name": "example.com/wait"}])
    schedulinggates.apply_on_create(pod, now="2026-01-01T00:00:00Z")
    (cond,) = pod["status"]["conditions"]
    assert (cond["type"], cond["status"], cond["reason"], cond["message"]) == (
        "PodScheduled", "False", "SchedulingGated", "Scheduling is blocked due to non-empty scheduling gates")
    plain = gpu_pod("q", 1)
    schedulinggates.apply_on_create(plain, now="x")
    assert "status" not in plain


def test_gates_on_create_must_be_qualified_names_listed_once_and_not_beside_a_node_name() -> None:
    spec = {"schedulingGates": [{"name": "ok.io/a"}, {"name": "ok.io/a"}, {"name": "bad name"}],
            "nodeName": "node-1"}
    texts = [str(c) for c in schedulinggates.create_causes(spec)]
    assert 'spec.schedulingGates[1]: Duplicate value: "ok.io/a"' in texts
    assert any(t.startswith('spec.schedulingGates[2].name: Invalid value: "bad name"') for t in texts)
    assert "spec.nodeName: Forbidden: cannot be set until all schedulingGates have been cleared" in texts


def test_gates_can_only_be_removed_and_a_gated_pods_selector_only_grow() -> None:
    old = {"schedulingGates": [{"name": "g1"}], "nodeSelector": {"a": "b"}}
    added = dict(old, schedulingGates=[{"name": "g1"}, {"name": "g2"}])
    assert [str(c) for c in schedulinggates.update_causes(old, added)] == [
        "spec.schedulingGates[1].name: Forbidden: only deletion is allowed, but found new scheduling gate "
        "'g2'"]
    assert schedulinggates.update_causes(old, {"nodeSelector": {"a": "b", "c": "d"}}) == []
    changed = [str(c) for c in schedulinggates.update_causes(old, {**old, "nodeSelector": {"a": "z"}})]
    assert changed == ['spec.nodeSelector: Invalid value: {"a":"z"}: only additions to spec.nodeSelector '
                       "are allowed (no mutations or deletions)"]
    # once ungated, the selector is part of the spec no update may change (the caller's rule)
    view = schedulinggates.without_scheduling_directives({"nodeSelector": {"a": "b"}}, {"nodeSelector": {}})
    assert view == {"nodeSelector": {}}


# ---- node pools and scale-up -----------------------------------------------------------------------------
def test_a_node_pool_reads_from_text_and_refuses_nonsense() -> None:
    assert parse_node_pool("gpu-pool:2:3") == NodePool("gpu-pool", 2, 3)
    assert parse_node_pool("gpu:8:4:1").min_size == 1
    with pytest.raises(InvalidInput, match="expected NAME:GPUS:MAX"):
        parse_node_pool("gpu:2")
    with pytest.raises(InvalidInput, match=r"sizes 2\.\.1"):
        NodePool("gpu", 2, 1, min_size=2)
    with pytest.raises(InvalidInput, match="expected KEY"):
        NodePool("gpu", 2, 1, taints=("nope",))


def group(pool: NodePool, size: int = 0) -> planning.Group:
    base = node_object(99, pool.gpus, ClusterSpec(), name=f"template-{pool.name}")
    return planning.Group(pool, size, dressed(base, pool, gpu_taint=True, ready=True))


def test_scale_up_packs_pending_pods_onto_new_nodes_of_the_first_pool_that_fits() -> None:
    small, big = NodePool("small", 1, 5), NodePool("big", 4, 2)
    pending = [gpu_pod("w0", 4), gpu_pod("w1", 2), gpu_pod("w2", 2)]
    plan = planning.plan_scale_up(pending, [group(small), group(big)], [], scheduler.schedule)
    # the 4-GPU pod fits only the big pool; the 2-GPU pods share a second big node
    assert dict(plan.increases) == {"big": 2}
    assert plan.triggered[("default", "w0")] == "pod triggered scale-up: [{big 0->2 (max: 2)}]"
    assert plan.not_triggered == {}


def test_a_pod_no_pool_can_take_hears_every_pools_reason() -> None:
    pools = [group(NodePool("small", 2, 3)), group(NodePool("full", 8, 1), size=1)]
    plan = planning.plan_scale_up([gpu_pod("huge", 4)], pools, [], scheduler.schedule)
    assert plan.increases == {}
    assert plan.not_triggered[("default", "huge")] == (
        "pod didn't trigger scale-up: 1 Insufficient nvidia.com/gpu, 1 max node group size reached")


def test_a_pod_pinned_to_a_node_by_name_never_triggers_a_scale_up() -> None:
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-9"]}]}
    pinned = gpu_pod("pinned", 1, affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}})
    plan = planning.plan_scale_up([pinned], [group(NodePool("gpu", 2, 3))], [], scheduler.schedule)
    assert plan.not_triggered[("default", "pinned")] == (
        "pod didn't trigger scale-up: 1 node(s) didn't match Pod's node affinity/selector")


def test_pods_that_fit_nodes_already_coming_add_none() -> None:
    pool = NodePool("gpu", 2, 3)
    coming = copy.deepcopy(group(pool).template)
    coming["metadata"]["name"] = "gpu-1"
    plan = planning.plan_scale_up([gpu_pod("a", 2)], [group(pool, size=1)], [coming], scheduler.schedule)
    assert plan.increases == {} and plan.triggered == {} and plan.not_triggered == {}


def test_a_pool_node_carries_its_label_taints_and_registers_not_ready() -> None:
    pool = NodePool("gpu", 2, 3, labels=(("accelerator", "a100"),), taints=("dedicated=ml:NoSchedule",))
    node = dressed(node_object(7, 2, ClusterSpec(), name="gpu-1"), pool, gpu_taint=True, ready=False)
    labels = node["metadata"]["labels"]
    assert labels[POOL_LABEL] == "gpu" and labels["accelerator"] == "a100"
    assert node["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                                      {"key": "dedicated", "effect": "NoSchedule", "value": "ml"}]
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "KubeletNotReady")


def test_a_provisioning_request_is_all_or_nothing() -> None:
    template = {"metadata": {"name": "worker", "namespace": "default"},
                "template": {"spec": gpu_pod("x", 2)["spec"]}}
    request = {"metadata": {"name": "job", "namespace": "default"},
               "spec": {"provisioningClassName": provisioning.BEST_EFFORT_ATOMIC,
                        "podSets": [{"podTemplateRef": {"name": "worker"}, "count": 3}]}}
    pods = provisioning.requested_pods(request, {"worker": template})
    assert isinstance(pods, list) and len(pods) == 3
    fits = planning.place_all(pods, [group(NodePool("gpu", 2, 3))], nodes=[], bound=[],
                              schedule=scheduler.schedule, grow=True)
    assert fits == {"gpu": 3}
    assert provisioning.verdict(provisioning.BEST_EFFORT_ATOMIC, fits) == provisioning.Verdict(
        True, "CapacityIsProvisioned", "Capacity is found in the cluster")
    short = planning.place_all(pods, [group(NodePool("gpu", 2, 2))], nodes=[], bound=[],
                               schedule=scheduler.schedule, grow=True)
    assert short is None
    assert provisioning.verdict(provisioning.BEST_EFFORT_ATOMIC, short) == provisioning.Verdict(
        False, "CapacityIsNotFound", "Capacity is not found, CA will try to find it later.")
    assert provisioning.requested_pods(request, {}) == "podSets[0]: PodTemplate default/worker not found"


# ---- Kueue ----------------------------------------------------------------------------------------------
def hook(*queues: str, manage_all: bool = False) -> webhook.PodWebhook:
    return webhook.PodWebhook(local_queue=lambda ns, name: name in queues,
                              manage_without_queue_name=manage_all)


NAMESPACE = {"metadata": {"name": "default"}}


def test_the_webhook_gates_queued_pods_and_leaves_others_alone() -> None:
    queued = gpu_pod("a", 1)
    queued["metadata"]["labels"] = {webhook.QUEUE_LABEL: "team", webhook.GROUP_LABEL: "job"}
    hook().mutate_pod(queued, NAMESPACE, USER)
    assert queued["metadata"]["labels"][webhook.MANAGED_LABEL] == "true"
    assert queued["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/admission"}]
    assert len(queued["metadata"]["annotations"][webhook.ROLE_HASH]) == 8
    plain = gpu_pod("b", 1)
    hook().mutate_pod(plain, NAMESPACE, USER)
    assert "schedulingGates" not in plain["spec"]
    # the namespace's LocalQueue named default takes pods without a queue name
    hook("default").mutate_pod(plain, NAMESPACE, USER)
    assert plain["metadata"]["labels"][webhook.QUEUE_LABEL] == "default"
    # a pod whose controller is a pod or a Job is its owner's to queue; kube-system is never managed
    owned = gpu_pod("c", 1)
    owned["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "m", "uid": "u",
                                             "controller": True}]
    hook(manage_all=True).mutate_pod(owned, NAMESPACE, USER)
    assert "schedulingGates" not in owned["spec"]
    system = gpu_pod("d", 1)
    hook(manage_all=True).mutate_pod(system, {"metadata": {"name": "kube-system"}}, USER)
    assert "schedulingGates" not in system["spec"]


def test_the_webhook_refuses_a_group_without_its_total_count() -> None:
    pod = gpu_pod("a", 1)
    pod["metadata"]["labels"] = {webhook.GROUP_LABEL: "job"}
    with pytest.raises(ApiStatus) as refused:
        hook().validate_pod(pod, NAMESPACE, USER)
    assert refused.value.code == 403
    assert str(refused.value.message) == (
        'admission webhook "vpod.kb.io" denied the request: metadata.annotations[kueue.x-k8s.io/pod-group-'
        "total-count]: Required value: both the 'kueue.x-k8s.io/pod-group-total-count' annotation and the "
        "'kueue.x-k8s.io/pod-group-name' label should be set")


def member(name: str, gpus: int, *, uid: str, phase: str = "Pending") -> Obj:
    pod = gpu_pod(name, gpus)
    pod["metadata"].update(uid=uid, labels={webhook.QUEUE_LABEL: "team", webhook.GROUP_LABEL: "job",
                                            webhook.MANAGED_LABEL: "true"},
                           annotations={webhook.TOTAL_COUNT: "3", webhook.RETRIABLE_IN_GROUP: "false"})
    pod["metadata"]["annotations"][webhook.ROLE_HASH] = webhook.role_hash(pod)
    pod["status"] = {"phase": phase}
    return pod


def test_a_group_is_one_workload_of_its_roles_owned_by_every_member() -> None:
    pods = [member("chief", 1, uid="u0"), member("w0", 2, uid="u1"), member("w1", 2, uid="u2")]
    workload = workloads.build("job", "default", pods, group=True)
    assert workload["spec"]["queueName"] == "team"
    assert sorted(p["count"] for p in workload["spec"]["podSets"]) == [1, 2]
    assert [ref["uid"] for ref in workload["metadata"]["ownerReferences"]] == ["u0", "u1", "u2"]
    assert workload["metadata"]["annotations"] == {"kueue.x-k8s.io/is-group-workload": "true"}
    # the chief succeeded, the workers were deleted: an unretriable group with nobody active is finished
    assert workloads.finished([member("chief", 1, uid="u0", phase="Succeeded")], total=3, group=True) == (
        True, "Pods succeeded: 1/3.")
    assert workloads.finished(pods, total=3, group=True) is None


QUOTAS = [{"name": "cpu", "nominalQuota": 64}, {"name": "memory", "nominalQuota": "512Gi"},
          {"name": "nvidia.com/gpu", "nominalQuota": 6}]
QUEUE = {"spec": {"resourceGroups": [{"coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                                      "flavors": [{"name": "a100", "resources": QUOTAS}]}]}}
FLAVORS = {"a100": {"metadata": {"name": "a100"}, "spec": {"nodeLabels": {"gpu": "a100"}}}}


def test_quota_admits_within_nominal_and_says_how_much_more_is_needed() -> None:
    workload = workloads.build("job", "default", [member("w0", 4, uid="a"), member("w1", 4, uid="b")],
                               group=True)
    assert quota.assign(workload, QUEUE, FLAVORS, {}) == (
        "couldn't assign flavors to pod set " + workload["spec"]["podSets"][0]["name"]
        + ": insufficient quota for nvidia.com/gpu in flavor a100, request > maximum capacity (8 > 6)")
    half = workloads.build("job", "default", [member("w0", 2, uid="a"), member("w1", 2, uid="b")], group=True)
    assigned = quota.assign(half, QUEUE, FLAVORS, {})
    assert not isinstance(assigned, str)
    (assignment,) = assigned
    assert assignment.flavors == {"cpu": "a100", "memory": "a100", "nvidia.com/gpu": "a100"}
    used = {("a100", "nvidia.com/gpu"): assignment.usage["nvidia.com/gpu"]}
    assert quota.assign(half, QUEUE, FLAVORS, used) == (
        "couldn't assign flavors to pod set " + half["spec"]["podSets"][0]["name"]
        + ": insufficient unused quota for nvidia.com/gpu in flavor a100, 2 more needed")
    gpu_only = {"spec": {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"],
                                             "flavors": QUEUE["spec"]["resourceGroups"][0]["flavors"]}]}}
    assert quota.assign(half, gpu_only, FLAVORS, {}) == (
        "couldn't assign flavors to pod set " + half["spec"]["podSets"][0]["name"]
        + ": resource cpu unavailable in ClusterQueue")


def test_an_admitted_pod_set_gets_its_flavors_node_labels() -> None:
    workload = {"status": {"admission": {"podSetAssignments": [
        {"name": "main", "flavors": {"nvidia.com/gpu": "a100"}, "resourceUsage": {"nvidia.com/gpu": "2"}}]}}}
    assert quota.admitted_node_labels(workload, FLAVORS, "main") == {"gpu": "a100"}
    assert quota.reserved(workload) == {("a100", "nvidia.com/gpu"): 2}
