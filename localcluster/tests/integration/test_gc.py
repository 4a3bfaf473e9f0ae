"""Garbage collection by ownerReferences through the API: background, foreground and orphan deletion."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from kubeclient import as_body, present
from localcluster import wait_until


@pytest.fixture
def v1(local_cluster: Any) -> client.CoreV1Api:
    return client.CoreV1Api(local_cluster.api_client())


def owned_by(owner: Any, name: str) -> dict[str, Any]:
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": owner.metadata.name,
        "uid": owner.metadata.uid,
        "blockOwnerDeletion": True,
    }
    return {"metadata": {"name": name, "ownerReferences": [ref]}, "data": {}}


def names(v1: client.CoreV1Api) -> list[str]:
    return sorted(present(c.metadata.name) for c in v1.list_namespaced_config_map("default").items)


@pytest.fixture
def family(v1: client.CoreV1Api) -> Any:
    owner = v1.create_namespaced_config_map("default", as_body({"metadata": {"name": "owner"}}))
    for child in ("child-1", "child-2"):
        v1.create_namespaced_config_map("default", as_body(owned_by(owner, child)))
    return owner


def test_background_deletes_dependents_after_the_owner(v1: client.CoreV1Api, family: Any) -> None:
    v1.delete_namespaced_config_map("owner", "default")
    wait_until(lambda: names(v1) == ["kube-root-ca.crt"] or names(v1) == [], what="dependents collected")


def test_foreground_keeps_the_owner_until_dependents_are_gone(v1: client.CoreV1Api, family: Any) -> None:
    v1.delete_namespaced_config_map("owner", "default", propagation_policy="Foreground")
    wait_until(lambda: "owner" not in names(v1), what="owner gone")
    assert not {"child-1", "child-2"} & set(names(v1))


def test_orphan_keeps_dependents_without_the_reference(v1: client.CoreV1Api, family: Any) -> None:
    v1.delete_namespaced_config_map("owner", "default", propagation_policy="Orphan")
    wait_until(lambda: "owner" not in names(v1), what="owner gone")
    for child in ("child-1", "child-2"):
        assert not v1.read_namespaced_config_map(child, "default").metadata.owner_references


def test_dependent_with_another_live_owner_survives(v1: client.CoreV1Api, family: Any) -> None:
    second = v1.create_namespaced_config_map("default", as_body({"metadata": {"name": "second"}}))
    shared = owned_by(family, "shared")
    shared["metadata"]["ownerReferences"].append(owned_by(second, "x")["metadata"]["ownerReferences"][0])
    v1.create_namespaced_config_map("default", as_body(shared))
    v1.delete_namespaced_config_map("owner", "default")
    wait_until(lambda: "child-1" not in names(v1), what="sole dependents collected")
    refs = v1.read_namespaced_config_map("shared", "default").metadata.owner_references
    assert [r.name for r in refs] == ["second"]


def test_pods_owned_by_a_deleted_configmap_go_too(v1: client.CoreV1Api) -> None:
    owner = v1.create_namespaced_config_map("default", as_body({"metadata": {"name": "job"}}))
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "job", "uid": owner.metadata.uid}
    v1.create_namespaced_pod(
        "default",
        as_body({
            "metadata": {"name": "worker", "ownerReferences": [ref]},
            "spec": {"containers": [{"name": "c", "image": "x:1"}], "tolerations": [{"operator": "Exists"}]},
        }),
    )
    v1.delete_namespaced_config_map("job", "default")

    def gone() -> bool:
        try:
            v1.read_namespaced_pod("worker", "default")
        except ApiException as err:
            return bool(err.status == 404)
        return False

    wait_until(gone, what="owned pod deleted")
