"""The pure AUTHZ modules as the server wires them: scheduling passes, gc neighbourhoods, RBAC escalation
prevention, rules reviews (`kubectl auth can-i --list`) and JSON-patch failure causes."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence
from functools import partial
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from kubeclient import api_status, as_body, present
from localcluster import wait_until
from localcluster._internal.controllers import scheduler

RBAC = "rbac.authorization.k8s.io"
BOT = "system:serviceaccount:default:bot"
BOT_GROUPS = '["system:serviceaccounts" "system:serviceaccounts:default" "system:authenticated"]'
TOLERATE_ALL = [{"operator": "Exists"}]


def gpu_pod(name: str, *, node: str | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"tolerations": TOLERATE_ALL, "containers": [
        {"name": "main", "image": "busybox:1.36", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def error_body(call: Any, code: int) -> dict[str, Any]:
    with pytest.raises(ApiException) as err:
        call()
    assert err.value.status == code, err.value.body
    body: dict[str, Any] = api_status(err.value)
    return body


# ---- scheduling: one pass places many pods against usage that follows each bind ----
def test_one_pass_binds_many_waiting_pods_without_overcommitting(local_cluster: Any) -> None:
    v1 = client.CoreV1Api(local_cluster.api_client())
    for node, gpus in (("node-1", 5), ("node-2", 3), ("node-3", 2)):
        for i in range(gpus):
            held = gpu_pod(f"hold-{node}-{i}", node=node, labels={"hold": "yes"})
            v1.create_namespaced_pod("default", as_body(held))
    for i in range(12):
        v1.create_namespaced_pod("default", as_body(gpu_pod(f"wait-{i:02d}")))
    waiting = [f"wait-{i:02d}" for i in range(12)]

    def all_unschedulable() -> bool:
        pods = {p.metadata.name: p for p in v1.list_namespaced_pod("default").items}
        return all(any(c.type == "PodScheduled" and c.reason == "Unschedulable"
                       for c in pods[name].status.conditions or []) for name in waiting)

    wait_until(all_unschedulable, what="every waiting pod Unschedulable")
    # free all ten GPUs in one request: the next pass has twelve candidates for ten places
    v1.delete_collection_namespaced_pod("default", label_selector="hold=yes", grace_period_seconds=0)

    def settled() -> list[client.V1Pod] | None:
        pods = [p for p in v1.list_namespaced_pod("default").items if present(p.metadata.name) in waiting]
        return pods if len([p for p in pods if p.spec.node_name]) == 10 else None

    pods = wait_until(settled, what="ten pods bound")
    assert Counter(p.spec.node_name for p in pods if p.spec.node_name) == {"node-1": 5, "node-2": 3,
                                                                         "node-3": 2}
    # oldest first: the two created last are the ones still waiting, with the real message
    pending = sorted(present(p.metadata.name) for p in pods if not p.spec.node_name)
    assert pending == ["wait-10", "wait-11"]
    for name in pending:
        pod = wait_until(partial(_unschedulable_message, v1, name), what=f"{name} message")
        assert pod.startswith("0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")

    # the per-node usage the scheduler keeps equals a fresh sum over every pod
    async def compare() -> tuple[dict[str, Any], dict[str, Any]]:
        controllers = local_cluster.cluster.controllers
        fresh = scheduler.usage_by_node(local_cluster.store.objects("pods"))
        kept = {node: use for node, use in controllers._usage.items() if use.pods}
        return ({n: (dict(u.requested), u.pods) for n, u in kept.items()},
                {n: (dict(u.requested), u.pods) for n, u in fresh.items()})

    kept, fresh = local_cluster.call(compare())
    assert kept == fresh


def _unowned(v1: client.CoreV1Api, name: str) -> bool:
    return not v1.read_namespaced_config_map(name, "default").metadata.owner_references


def _unschedulable_message(v1: client.CoreV1Api, name: str) -> str | None:
    pod = v1.read_namespaced_pod(name, "default")
    for condition in pod.status.conditions or []:
        if condition.type == "PodScheduled" and condition.reason == "Unschedulable" and condition.message:
            return str(condition.message)
    return None


# ---- garbage collection ----
def _cm(name: str, owners: Sequence[dict[str, Any]] = (), finalizers: Sequence[str] = ()) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if owners:
        meta["ownerReferences"] = list(owners)
    if finalizers:
        meta["finalizers"] = list(finalizers)
    return {"metadata": meta, "data": {"k": "v"}}


def _ref(obj: client.V1ConfigMap, *, block: bool = False) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": obj.metadata.name, "uid": obj.metadata.uid,
            "blockOwnerDeletion": block}


def _gone(v1: client.CoreV1Api, name: str) -> bool:
    try:
        v1.read_namespaced_config_map(name, "default")
    except ApiException as error:
        return bool(error.status == 404)
    return False


def test_foreground_owner_waits_for_its_blocking_dependent_whatever_triggers_the_gc(
        local_cluster: Any) -> None:
    v1 = client.CoreV1Api(local_cluster.api_client())
    owner = v1.create_namespaced_config_map("default", as_body(_cm("owner")))
    other = v1.create_namespaced_config_map("default", as_body(_cm("other")))
    held = _cm("held", [_ref(owner, block=True)], ["example.com/hold"])
    v1.create_namespaced_config_map("default", as_body(held))
    v1.delete_namespaced_config_map("owner", "default", propagation_policy="Foreground")
    wait_until(lambda: v1.read_namespaced_config_map("held", "default").metadata.deletion_timestamp,
               what="the blocking dependent being deleted")
    # a second dependent of the deleting owner, also owned by `other`; deleting `other` makes the collector
    # look at this dependent's neighbourhood, which holds the owner but not (by ownership) `held`
    v1.create_namespaced_config_map("default", as_body(_cm("shared", [_ref(owner), _ref(other)])))
    v1.delete_namespaced_config_map("other", "default")
    wait_until(lambda: _gone(v1, "shared"), what="the shared dependent collected")
    still = v1.read_namespaced_config_map("owner", "default")
    assert still.metadata.deletion_timestamp and still.metadata.finalizers == ["foregroundDeletion"]
    v1.patch_namespaced_config_map("held", "default", {"metadata": {"finalizers": None}})
    wait_until(lambda: _gone(v1, "held") and _gone(v1, "owner"), what="owner gone after its dependent")


def test_orphaning_owner_orphans_every_dependent(local_cluster: Any) -> None:
    v1 = client.CoreV1Api(local_cluster.api_client())
    owner = v1.create_namespaced_config_map("default", as_body(_cm("owner")))
    other = v1.create_namespaced_config_map("default", as_body(_cm("other")))
    for name in ("a", "b", "c"):
        v1.create_namespaced_config_map("default", as_body(_cm(name, [_ref(owner)])))
    v1.create_namespaced_config_map("default", as_body(_cm("shared", [_ref(owner), _ref(other)])))
    # the collector may first look at `other`'s neighbourhood, where the orphaning owner has one dependent
    v1.delete_namespaced_config_map("other", "default")
    v1.delete_namespaced_config_map("owner", "default", propagation_policy="Orphan")
    wait_until(lambda: _gone(v1, "owner"), what="orphaning owner removed")
    # `shared` lost its dangling owner and was orphaned by the other: every dependent survives, unowned
    for name in ("a", "b", "c", "shared"):
        wait_until(partial(_unowned, v1, name), what=f"{name} orphaned")


def test_owner_of_a_kind_the_server_does_not_serve_is_left_alone(local_cluster: Any) -> None:
    v1 = client.CoreV1Api(local_cluster.api_client())
    foreign = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": str(uuid.uuid4())}
    missing = {"apiVersion": "v1", "kind": "ConfigMap", "name": "gone", "uid": str(uuid.uuid4())}
    v1.create_namespaced_config_map("default", as_body(_cm("of-replicaset", [foreign])))
    v1.create_namespaced_config_map("default", as_body(_cm("of-missing-configmap", [missing])))
    # the collector deletes a dependent whose owner of a served kind does not exist...
    wait_until(lambda: _gone(v1, "of-missing-configmap"), what="dangling dependent collected")
    # ...but cannot look up a ReplicaSet here, so, like the real one, leaves that dependent alone
    owners = present(v1.read_namespaced_config_map("of-replicaset", "default").metadata.owner_references)
    assert owners[0].kind == "ReplicaSet"


# ---- RBAC escalation prevention ----
@pytest.fixture
def bot(local_cluster: Any) -> tuple[client.RbacAuthorizationV1Api, client.RbacAuthorizationV1Api]:
    api = local_cluster.api_client()
    client.CoreV1Api(api).create_namespaced_service_account("default", as_body({"metadata": {"name": "bot"}}))
    admin = client.RbacAuthorizationV1Api(api)
    admin.create_namespaced_role("default", as_body({"metadata": {"name": "rbac-writer"}, "rules": [
        {"apiGroups": [RBAC], "resources": ["roles", "rolebindings"],
         "verbs": ["create", "get", "update", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]}))
    admin.create_namespaced_role_binding("default", as_body({
        "metadata": {"name": "bot-writes-rbac"},
        "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "default"}],
        "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "rbac-writer"}}))
    token = local_cluster.token_for("default", "bot")
    return admin, client.RbacAuthorizationV1Api(local_cluster.api_client(token=token))


def _binding(name: str, kind: str, role: str) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "default"}],
            "roleRef": {"apiGroup": RBAC, "kind": kind, "name": role}}


def test_nobody_grants_what_they_do_not_hold(bot: Any) -> None:
    admin, as_bot = bot
    pod_reader = {"metadata": {"name": "reader"},
                  "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]}
    as_bot.create_namespaced_role("default", pod_reader)
    body = error_body(lambda: as_bot.create_namespaced_role("default", {
        "metadata": {"name": "deleter"},
        "rules": [{"apiGroups": [""], "resources": ["pods", "secrets"], "verbs": ["delete", "get"]}]}), 403)
    assert body["message"] == (
        f'roles.{RBAC} "deleter" is forbidden: user "{BOT}" (groups={BOT_GROUPS}) is attempting to grant '
        "RBAC permissions not currently held:\n"
        '{APIGroups:[""], Resources:["pods"], Verbs:["delete"]}\n'
        '{APIGroups:[""], Resources:["secrets"], Verbs:["delete" "get"]}')
    assert body["reason"] == "Forbidden" and body["details"] == {"name": "deleter", "group": RBAC,
                                                                 "kind": "roles"}
    # an update is checked too
    error_body(lambda: as_bot.patch_namespaced_role("reader", "default", {"rules": [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "delete"]}]}), 403)
    # ...except one that only touches what the garbage collector touches
    as_bot.patch_namespaced_role("reader", "default", {"metadata": {"finalizers": ["example.com/x"]}})
    assert as_bot.read_namespaced_role("reader", "default").rules[0].verbs == ["get", "list"]

    as_bot.create_namespaced_role_binding("default", _binding("to-reader", "Role", "reader"))
    body = error_body(lambda: as_bot.create_namespaced_role_binding(
        "default", _binding("to-admin", "ClusterRole", "admin")), 403)
    assert body["message"].startswith(
        f'rolebindings.{RBAC} "to-admin" is forbidden: user "{BOT}" (groups={BOT_GROUPS}) is attempting to '
        "grant RBAC permissions not currently held:\n")
    # `bind` on that ClusterRole lets the bot bind it without holding it
    admin.create_namespaced_role("default", {"metadata": {"name": "may-bind-admin"}, "rules": [
        {"apiGroups": [RBAC], "resources": ["clusterroles"], "verbs": ["bind"], "resourceNames": ["admin"]}]})
    admin.create_namespaced_role_binding("default", {
        "metadata": {"name": "bot-binds"},
        "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "default"}],
        "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "may-bind-admin"}})
    assert as_bot.create_namespaced_role_binding(
        "default", _binding("to-admin", "ClusterRole", "admin")).metadata.name == "to-admin"


def test_kubectl_create_role_beyond_held_rights_is_refused(local_cluster: Any, bot: Any) -> None:
    token = local_cluster.token_for("default", "bot")
    done = local_cluster.kubectl("create", "role", "killer", "--verb=delete", "--resource=pods", token=token)
    assert done.returncode == 1
    assert (f'roles.{RBAC} "killer" is forbidden: user "{BOT}" (groups={BOT_GROUPS}) is attempting to grant '
            "RBAC permissions not currently held:") in done.stderr
    assert '{APIGroups:[""], Resources:["pods"], Verbs:["delete"]}' in done.stderr
    fine = local_cluster.kubectl("create", "role", "looker", "--verb=get", "--resource=pods", token=token)
    assert fine.returncode == 0, fine.stderr


# ---- SelfSubjectRulesReview: kubectl auth can-i --list ----
def test_kubectl_auth_can_i_list_shows_the_rules_held(local_cluster: Any, bot: Any) -> None:
    token = local_cluster.token_for("default", "bot")
    done = local_cluster.kubectl("auth", "can-i", "--list", "-n", "default", token=token)
    assert done.returncode == 0, done.stderr
    # columns: Resources, Non-Resource URLs, Resource Names, Verbs (verbs are "[a b c]", spaces inside)
    rows = {line.split()[0]: "[" + line.split("[")[-1] for line in done.stdout.splitlines()[1:]
            if line.strip() and not line.startswith(" ")}
    assert rows[f"roles.{RBAC}"] == "[create get update patch]"
    assert rows["pods"] == "[get list]"
    # what system:basic-user and system:discovery give every authenticated user
    assert rows["selfsubjectaccessreviews.authorization.k8s.io"] == "[create]"
    assert "/version" in done.stdout
    elsewhere = local_cluster.kubectl("auth", "can-i", "--list", "-n", "kube-system", token=token)
    assert "pods" not in [line.split()[0] for line in elsewhere.stdout.splitlines() if line.strip()]
    admin = local_cluster.kubectl("auth", "can-i", "--list")
    assert admin.stdout.splitlines()[1].split() == ["*.*", "[]", "[]", "[*]"]


# ---- JSON patch failures carry their cause ----
def test_json_patch_failure_is_422_with_its_cause(local_cluster: Any) -> None:
    v1 = client.CoreV1Api(local_cluster.api_client())
    v1.create_namespaced_config_map("default", as_body(_cm("cfg")))
    body = error_body(lambda: v1.patch_namespaced_config_map(
        "cfg", "default", [{"op": "remove", "path": "/data/missing"}]), 422)
    assert body["reason"] == "Invalid"
    assert body["message"] == "the server rejected our request due to an error in our request"
    assert body["details"]["causes"] == [{
        "reason": "UnexpectedServerResponse",
        "message": "Unable to remove nonexistent key: missing: missing value"}]
    done = local_cluster.kubectl("patch", "configmap", "cfg", "--type=json",
                                 "-p", '[{"op": "test", "path": "/data/k", "value": "other"}]')
    assert done.returncode == 1
    assert "testing value /data/k failed: test failed" in done.stderr
