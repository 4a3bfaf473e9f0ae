"""RBAC end to end: ServiceAccount tokens against Roles and ClusterRoles bound in and across namespaces."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from kubeclient import api_status, as_body

RBAC = "rbac.authorization.k8s.io"
POD: dict[str, Any] = {"metadata": {"name": "p"},
                       "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]}}


def role(kind: str, name: str, rules: list[dict[str, Any]], namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": f"{RBAC}/v1", "kind": kind, "metadata": meta, "rules": rules}


def binding(
    kind: str,
    name: str,
    role_kind: str,
    role_name: str,
    subjects: list[dict[str, Any]],
    namespace: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": kind,
        "metadata": meta,
        "subjects": subjects,
        "roleRef": {"apiGroup": RBAC, "kind": role_kind, "name": role_name},
    }


def sa(name: str, namespace: str = "default") -> dict[str, str]:
    return {"kind": "ServiceAccount", "name": name, "namespace": namespace}


@pytest.fixture
def admin(local_cluster: Any) -> tuple[client.CoreV1Api, client.RbacAuthorizationV1Api]:
    api = local_cluster.api_client()
    core = client.CoreV1Api(api)
    core.create_namespace(as_body({"metadata": {"name": "other"}}))
    for name in ("bot", "idle"):
        core.create_namespaced_service_account("default", as_body({"metadata": {"name": name}}))
    return core, client.RbacAuthorizationV1Api(api)


def as_bot(local_cluster: Any, name: str = "bot") -> client.CoreV1Api:
    return client.CoreV1Api(local_cluster.api_client(token=local_cluster.token_for("default", name)))


def forbidden(call: Any) -> dict[str, Any]:
    with pytest.raises(ApiException) as err:
        call()
    assert err.value.status == 403
    body: dict[str, Any] = api_status(err.value)
    return body


def test_role_grants_only_its_verbs_in_its_namespace(local_cluster: Any, admin: Any) -> None:
    _, rbac = admin
    rbac.create_namespaced_role(
        "default",
        role(
            "Role",
            "pod-maker",
            [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "list"]}],
            "default",
        ),
    )
    rbac.create_namespaced_role_binding(
        "default", binding("RoleBinding", "b", "Role", "pod-maker", [sa("bot")], "default")
    )
    bot = as_bot(local_cluster)
    bot.create_namespaced_pod("default", as_body(POD))
    assert [p.metadata.name for p in bot.list_namespaced_pod("default").items] == ["p"]
    body = forbidden(lambda: bot.delete_namespaced_pod("p", "default"))
    assert body["message"] == (
        'pods "p" is forbidden: User "system:serviceaccount:default:bot" cannot delete '
        'resource "pods" in API group "" in the namespace "default"'
    )
    assert body["reason"] == "Forbidden" and body["details"] == {"name": "p", "kind": "pods"}
    body = forbidden(lambda: bot.create_namespaced_pod("other", as_body(POD)))
    assert body["message"] == (
        'pods is forbidden: User "system:serviceaccount:default:bot" cannot create '
        'resource "pods" in API group "" in the namespace "other"'
    )
    forbidden(lambda: bot.list_pod_for_all_namespaces())
    forbidden(lambda: as_bot(local_cluster, "idle").list_namespaced_pod("default"))


def test_subresources_need_their_own_rules(local_cluster: Any, admin: Any) -> None:
    core, rbac = admin
    core.create_namespaced_pod(
        "default", {**POD, "spec": {**POD["spec"], "tolerations": [{"operator": "Exists"}]}}
    )
    rbac.create_namespaced_role(
        "default",
        role("Role", "pods-only", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}], "default"),
    )
    rbac.create_namespaced_role_binding(
        "default", binding("RoleBinding", "b", "Role", "pods-only", [sa("bot")], "default")
    )
    bot = as_bot(local_cluster)
    assert bot.read_namespaced_pod("p", "default").metadata.name == "p"
    body = forbidden(lambda: bot.read_namespaced_pod_log("p", "default"))
    assert 'cannot get resource "pods/log" in API group ""' in body["message"]


def test_cluster_role_by_role_binding_is_namespaced_and_by_cluster_binding_is_everywhere(
    local_cluster: Any, admin: Any
) -> None:
    _, rbac = admin
    rbac.create_cluster_role(
        role(
            "ClusterRole",
            "node-and-pod-reader",
            [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]},
            ],
        )
    )
    rbac.create_namespaced_role_binding(
        "other", binding("RoleBinding", "local", "ClusterRole", "node-and-pod-reader", [sa("bot")], "other")
    )
    bot = as_bot(local_cluster)
    assert bot.list_namespaced_pod("other").items == []
    forbidden(lambda: bot.list_namespaced_pod("default"))
    body = forbidden(lambda: bot.list_node())
    assert body["message"] == (
        'nodes is forbidden: User "system:serviceaccount:default:bot" cannot list resource '
        '"nodes" in API group "" at the cluster scope'
    )
    rbac.create_cluster_role_binding(
        binding("ClusterRoleBinding", "everywhere", "ClusterRole", "node-and-pod-reader", [sa("bot")])
    )
    assert len(bot.list_node().items) == 3
    assert bot.list_namespaced_pod("default").items == []


def test_wildcards_resource_names_and_groups(local_cluster: Any, admin: Any) -> None:
    core, rbac = admin
    core.create_namespaced_config_map("default", {"metadata": {"name": "mine"}})
    core.create_namespaced_config_map("default", {"metadata": {"name": "theirs"}})
    rbac.create_namespaced_role(
        "default",
        role(
            "Role",
            "r",
            [
                {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["mine"], "verbs": ["*"]},
                {"apiGroups": ["*"], "resources": ["secrets"], "verbs": ["get"]},
            ],
            "default",
        ),
    )
    rbac.create_namespaced_role_binding(
        "default",
        binding(
            "RoleBinding",
            "b",
            "Role",
            "r",
            [{"kind": "Group", "name": "system:serviceaccounts:default"}],
            "default",
        ),
    )
    bot = as_bot(local_cluster)
    assert bot.read_namespaced_config_map("mine", "default").metadata.name == "mine"
    bot.patch_namespaced_config_map("mine", "default", {"data": {"a": "b"}})
    forbidden(lambda: bot.read_namespaced_config_map("theirs", "default"))
    forbidden(lambda: bot.list_namespaced_config_map("default"))  # resourceNames never cover a list
    with pytest.raises(ApiException) as err:
        bot.read_namespaced_secret("absent", "default")
    assert err.value.status == 404  # allowed, and then not found


def test_removing_a_binding_takes_access_away(local_cluster: Any, admin: Any) -> None:
    _, rbac = admin
    rbac.create_cluster_role_binding(
        binding(
            "ClusterRoleBinding",
            "view-all",
            "ClusterRole",
            "view",
            [{"kind": "Group", "name": "system:authenticated"}],
        )
    )
    bot = as_bot(local_cluster)
    assert bot.list_namespaced_pod("other").items == []
    rbac.delete_cluster_role_binding("view-all")
    forbidden(lambda: bot.list_namespaced_pod("other"))


def test_impersonation_needs_the_impersonate_verb(local_cluster: Any, admin: Any) -> None:
    _, rbac = admin
    headers = {"Impersonate-User": "system:serviceaccount:default:idle"}
    token = local_cluster.token_for("default", "bot")
    refused = local_cluster.request("GET", "/api/v1/namespaces/default/pods", token=token, headers=headers)
    assert refused.status == 403
    assert refused.json()["message"].startswith(
        'serviceaccounts "idle" is forbidden: User '
        '"system:serviceaccount:default:bot" cannot impersonate resource'
    )
    rbac.create_cluster_role(
        role(
            "ClusterRole",
            "impersonator",
            [
                {
                    "apiGroups": [""],
                    "resources": ["serviceaccounts", "users", "groups"],
                    "verbs": ["impersonate"],
                }
            ],
        )
    )
    rbac.create_cluster_role_binding(
        binding("ClusterRoleBinding", "imp", "ClusterRole", "impersonator", [sa("bot")])
    )
    as_idle = local_cluster.request("GET", "/api/v1/namespaces/default/pods", token=token, headers=headers)
    assert as_idle.status == 403
    assert (
        'User "system:serviceaccount:default:idle" cannot list resource "pods"' in as_idle.json()["message"]
    )
    as_admin_group = local_cluster.request(
        "GET",
        "/api/v1/namespaces/default/pods",
        token=token,
        headers={"Impersonate-User": "ann", "Impersonate-Group": "system:masters"},
    )
    assert as_admin_group.status == 200
