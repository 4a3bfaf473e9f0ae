"""Fidelity of the local API server with the official client: metadata, selectors, paging, concurrency,
watches from a resourceVersion (410 included), the three patch kinds, deletion and Status errors."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from kubeclient import api_status, as_body, present, raw, watch_events
from localcluster import wait_until

TOLERATE_ALL = [{"operator": "Exists"}]


def pod(
    name: str = "", *, labels: dict[str, str] | None = None, gpus: int = 0, **spec: Any
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "busybox:1.36"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    meta: dict[str, Any] = {"name": name} if name else {"generateName": "gen-"}
    if labels:
        meta["labels"] = labels
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [container], "tolerations": TOLERATE_ALL, **spec},
    }


def status_of(error: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = api_status(error)
    return body


@pytest.fixture
def v1(local_cluster: Any) -> client.CoreV1Api:
    return client.CoreV1Api(local_cluster.api_client())


def test_create_fills_server_fields_and_generate_name(v1: client.CoreV1Api) -> None:
    first = v1.create_namespaced_pod("default", as_body(pod()))
    second = v1.create_namespaced_pod("default", as_body(pod()))
    for created in (first, second):
        name = present(created.metadata.name)
        assert name.startswith("gen-") and len(name) == len("gen-") + 5
        assert created.metadata.uid and created.metadata.creation_timestamp
        assert created.spec.restart_policy == "Always" and created.spec.service_account_name == "default"
        assert created.status.phase == "Pending"
    assert first.metadata.name != second.metadata.name
    assert int(present(second.metadata.resource_version)) > int(present(first.metadata.resource_version))


def test_label_and_field_selectors(v1: client.CoreV1Api, local_cluster: Any) -> None:
    v1.create_namespaced_pod("default", as_body(pod("a", labels={"app": "x", "tier": "1"})))
    v1.create_namespaced_pod("default", as_body(pod("b", labels={"app": "x", "tier": "2"})))
    v1.create_namespaced_pod("default", as_body(pod("c", labels={"app": "y"}, nodeSelector={"none": "such"})))

    def names(**kw: Any) -> list[str]:
        return sorted(present(p.metadata.name) for p in v1.list_namespaced_pod("default", **kw).items)

    assert names(label_selector="app=x") == ["a", "b"]
    assert names(label_selector="app in (x,y),tier!=2") == ["a", "c"]
    assert names(label_selector="!tier") == ["c"]
    assert names(field_selector="metadata.name=b") == ["b"]
    wait_until(lambda: v1.read_namespaced_pod("a", "default").spec.node_name, what="pod a bound")
    wait_until(lambda: v1.read_namespaced_pod("b", "default").spec.node_name, what="pod b bound")
    assert names(field_selector="spec.nodeName=") == ["c"]
    assert names(field_selector="status.phase=Pending") == ["c"]
    with pytest.raises(ApiException) as err:
        v1.list_namespaced_pod("default", field_selector="spec.bogus=1")
    assert err.value.status == 400
    assert "field label not supported: spec.bogus" in status_of(err.value)["message"]


def test_limit_and_continue_page_through_everything(v1: client.CoreV1Api) -> None:
    for i in range(7):
        v1.create_namespaced_pod("default", as_body(pod(f"p{i}")))
    seen, token, pages = [], None, 0
    while True:
        page = v1.list_namespaced_pod("default", limit=3, _continue=token)
        pages += 1
        seen += [p.metadata.name for p in page.items]
        token = page.metadata._continue
        if not token:
            break
        assert page.metadata.remaining_item_count == 7 - len(seen)
    assert pages == 3 and seen == [f"p{i}" for i in range(7)]


def test_limit_with_a_selector_pages_through_matches_without_a_remaining_count(v1: client.CoreV1Api) -> None:
    for i in range(7):
        parity = "odd" if i % 2 else "even"
        v1.create_namespaced_pod("default", as_body(pod(f"p{i}", labels={"parity": parity})))
    seen, token = [], None
    while True:
        page = v1.list_namespaced_pod("default", label_selector="parity=even", limit=2, _continue=token)
        seen += [p.metadata.name for p in page.items]
        # the real server cannot count what a selector leaves, so it never says
        assert page.metadata.remaining_item_count is None
        token = page.metadata._continue
        if not token:
            break
    assert seen == ["p0", "p2", "p4", "p6"]


def test_stale_update_conflicts_and_duplicate_create_already_exists(v1: client.CoreV1Api) -> None:
    v1.create_namespaced_config_map("default", as_body({"metadata": {"name": "cfg"}, "data": {"k": "1"}}))
    fresh = v1.read_namespaced_config_map("cfg", "default")
    stale = v1.read_namespaced_config_map("cfg", "default")
    present(fresh.data)["k"] = "2"
    v1.replace_namespaced_config_map("cfg", "default", fresh)
    present(stale.data)["k"] = "3"
    with pytest.raises(ApiException) as err:
        v1.replace_namespaced_config_map("cfg", "default", stale)
    body = status_of(err.value)
    assert err.value.status == 409 and body["reason"] == "Conflict"
    assert body["message"] == (
        'Operation cannot be fulfilled on configmaps "cfg": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_config_map("default", as_body({"metadata": {"name": "cfg"}}))
    body = status_of(err.value)
    assert err.value.status == 409 and body["reason"] == "AlreadyExists"
    assert body["message"] == 'configmaps "cfg" already exists'
    assert body["details"] == {"name": "cfg", "kind": "configmaps"}
    assert v1.read_namespaced_config_map("cfg", "default").data == {"k": "2"}


def test_watch_resumes_from_a_resource_version(v1: client.CoreV1Api) -> None:
    v1.create_namespaced_config_map("default", as_body({"metadata": {"name": "w"}, "data": {"n": "0"}}))
    rv = v1.list_namespaced_config_map("default").metadata.resource_version
    v1.patch_namespaced_config_map("w", "default", {"data": {"n": "1"}})
    v1.delete_namespaced_config_map("w", "default")
    events = [
        (e["type"], e["object"].metadata.name, (e["object"].data or {}).get("n"))
        for e in watch_events(
            v1.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=1
        )
    ]
    assert events == [("MODIFIED", "w", "1"), ("DELETED", "w", "1")]


def test_watch_from_a_compacted_version_is_gone(v1: client.CoreV1Api, local_cluster: Any) -> None:
    old = v1.list_namespaced_config_map("default").metadata.resource_version
    v1.create_namespaced_config_map("default", as_body({"metadata": {"name": "x"}}))
    local_cluster.compact()
    response = local_cluster.request(
        "GET", f"/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={old}&timeoutSeconds=2"
    )
    assert response.status == 200
    lines = [json.loads(line) for line in response.body.splitlines()]
    assert len(lines) == 1 and lines[0]["type"] == "ERROR"
    assert lines[0]["object"]["code"] == 410 and lines[0]["object"]["reason"] == "Expired"
    with pytest.raises(ApiException) as err:
        list(
            watch_events(
                v1.list_namespaced_config_map, "default", resource_version=old, timeout_seconds=2
            )
        )
    assert err.value.status == 410


def test_bookmarks_and_selector_watch_sees_objects_leave(local_cluster_factory: Any) -> None:
    cluster = local_cluster_factory(bookmark_interval=0.2)
    v1 = client.CoreV1Api(cluster.api_client())
    v1.create_namespaced_config_map("default", as_body({"metadata": {"name": "m", "labels": {"team": "a"}}}))
    rv = v1.list_namespaced_config_map("default").metadata.resource_version
    v1.patch_namespaced_config_map("m", "default", {"metadata": {"labels": {"team": "b"}}})
    seen = []
    for event in watch_events(
        v1.list_namespaced_config_map,
        "default",
        label_selector="team=a",
        resource_version=rv,
        allow_watch_bookmarks=True,
        timeout_seconds=1,
    ):
        seen.append(event["type"])
    assert seen[0] == "DELETED"  # the object no longer matches the selector
    assert "BOOKMARK" in seen[1:]


def test_patch_kinds(v1: client.CoreV1Api) -> None:
    v1.create_namespaced_pod("default", as_body(pod("pt", labels={"a": "1"})))
    v1.patch_namespaced_pod(
        "pt",
        "default",
        {"metadata": {"labels": {"b": "2", "a": None}}},
        _content_type="application/merge-patch+json",
    )
    assert v1.read_namespaced_pod("pt", "default").metadata.labels == {"b": "2"}
    v1.patch_namespaced_pod(
        "pt",
        "default",
        {"spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]}},
        _content_type="application/strategic-merge-patch+json",
    )
    patched = v1.read_namespaced_pod("pt", "default")
    assert [c.image for c in patched.spec.containers] == ["busybox:1.37"]
    assert (
        patched.spec.containers[0].termination_message_path == "/dev/termination-log"
    )  # merged, not replaced
    v1.patch_namespaced_pod(
        "pt",
        "default",
        [{"op": "add", "path": "/metadata/annotations", "value": {"note": "hi"}}],
        _content_type="application/json-patch+json",
    )
    assert v1.read_namespaced_pod("pt", "default").metadata.annotations == {"note": "hi"}
    with pytest.raises(ApiException) as err:
        v1.patch_namespaced_pod(
            "pt",
            "default",
            [{"op": "test", "path": "/metadata/name", "value": "other"}],
            _content_type="application/json-patch+json",
        )
    assert err.value.status == 422
    with pytest.raises(ApiException) as err:
        v1.patch_namespaced_pod(
            "pt",
            "default",
            {"spec": {"restartPolicy": "Never"}},
            _content_type="application/merge-patch+json",
        )
    assert err.value.status == 422 and "pod updates may not change fields" in status_of(err.value)["message"]


def test_dry_run_create_stores_nothing(v1: client.CoreV1Api) -> None:
    answer = v1.create_namespaced_config_map(
        "default", as_body({"metadata": {"name": "dry"}, "data": {"a": "b"}}), dry_run="All"
    )
    assert answer.data == {"a": "b"}
    with pytest.raises(ApiException) as err:
        v1.read_namespaced_config_map("dry", "default")
    assert err.value.status == 404


def test_delete_graceful_pod_then_gone_and_collection(v1: client.CoreV1Api) -> None:
    v1.create_namespaced_pod("default", as_body(pod("g1", labels={"set": "x"})))
    v1.create_namespaced_pod("default", as_body(pod("g2", labels={"set": "x"})))
    v1.create_namespaced_pod("default", as_body(pod("keep")))
    wait_until(
        lambda: all(p.status.phase == "Running" for p in v1.list_namespaced_pod("default").items),
        what="pods running",
    )
    answer = v1.delete_namespaced_pod("g1", "default")
    assert answer.metadata.name == "g1" and answer.metadata.deletion_timestamp is not None
    v1.delete_collection_namespaced_pod("default", label_selector="set=x", grace_period_seconds=0)
    wait_until(
        lambda: [p.metadata.name for p in v1.list_namespaced_pod("default").items] == ["keep"],
        what="only 'keep' left",
    )


def test_logs_tail_and_follow(v1: client.CoreV1Api, local_cluster: Any) -> None:
    v1.create_namespaced_pod("default", as_body(pod("talker")))
    wait_until(lambda: v1.read_namespaced_pod("talker", "default").status.phase == "Running", what="running")
    rt = local_cluster.runtime
    local_cluster.call(rt.append_log("default", "talker", "one\ntwo\nthree\n"))
    assert v1.read_namespaced_pod_log("talker", "default") == "one\ntwo\nthree\n"
    assert v1.read_namespaced_pod_log("talker", "default", tail_lines=1) == "three\n"
    chunks: list[bytes] = []

    def follow() -> None:
        stream = raw(v1.read_namespaced_pod_log("talker", "default", follow=True, _preload_content=False))
        for chunk in stream.stream(64):
            chunks.append(chunk)
        stream.release_conn()

    reader = threading.Thread(target=follow)
    reader.start()
    wait_until(lambda: chunks, what="first log chunk")
    local_cluster.call(rt.append_log("default", "talker", "four\n"))
    local_cluster.call(rt.exit_container("default", "talker", 0))  # restartPolicy Always: restarts
    local_cluster.call(rt.append_log("default", "talker", "five\n"))
    v1.delete_namespaced_pod("talker", "default", grace_period_seconds=0)
    reader.join(10)
    assert not reader.is_alive()
    assert b"".join(chunks) == b"one\ntwo\nthree\nfour\nfive\n"


def test_status_errors_have_real_shapes(v1: client.CoreV1Api, local_cluster: Any) -> None:
    with pytest.raises(ApiException) as err:
        v1.read_namespaced_pod("nope", "default")
    assert status_of(err.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "nope" not found',
        "reason": "NotFound",
        "details": {"name": "nope", "kind": "pods"},
        "code": 404,
    }
    with pytest.raises(ApiException) as err:
        bad = {"metadata": {"name": "Bad_Name"}, "spec": {"containers": []}}
        v1.create_namespaced_pod("default", as_body(bad))
    body = status_of(err.value)
    assert err.value.status == 422 and body["reason"] == "Invalid"
    assert body["message"].startswith('Pod "Bad_Name" is invalid: [metadata.name: Invalid value: "Bad_Name"')
    fields = {c["field"] for c in body["details"]["causes"]}
    assert {"metadata.name", "spec.containers"} <= fields
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod("missing-ns", as_body(pod("x")))
    assert err.value.status == 404 and status_of(err.value)["message"] == 'namespaces "missing-ns" not found'
    unauthenticated = local_cluster.request("GET", "/api/v1/pods", token="wrong")
    assert unauthenticated.status == 401
    assert unauthenticated.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Unauthorized",
        "reason": "Unauthorized",
        "code": 401,
    }
    not_allowed = local_cluster.request("PUT", "/api/v1/namespaces/default/pods", body="{}")
    assert not_allowed.status == 405 and not_allowed.json()["reason"] == "MethodNotAllowed"


def test_namespace_deletion_removes_its_contents(v1: client.CoreV1Api) -> None:
    v1.create_namespace(as_body({"metadata": {"name": "team"}}))
    wait_until(lambda: v1.list_namespaced_service_account("team").items, what="default service account")
    v1.create_namespaced_pod("team", as_body(pod("p")))
    v1.create_namespaced_secret("team", as_body({"metadata": {"name": "s"}, "stringData": {"k": "v"}}))
    assert v1.read_namespaced_secret("s", "team").data == {"k": "dg=="}
    answer = raw(v1.delete_namespace("team", _preload_content=False))
    body = json.loads(answer.data)
    answer.release_conn()
    assert body["status"]["phase"] == "Terminating"
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_config_map("team", as_body({"metadata": {"name": "late"}}))
    assert err.value.status in (403, 404)
    wait_until(
        lambda: "team" not in [n.metadata.name for n in v1.list_namespace().items], what="namespace gone"
    )
    assert v1.list_namespaced_pod("team").items == []


def test_service_account_token_request(v1: client.CoreV1Api, local_cluster: Any) -> None:
    v1.create_namespaced_service_account("default", as_body({"metadata": {"name": "robot"}}))
    answer = v1.create_namespaced_service_account_token(
        "robot",
        "default",
        as_body({"spec": {"audiences": ["https://kubernetes.default.svc"], "expirationSeconds": 3600}}),
    )
    token = answer.status.token
    assert token and answer.status.expiration_timestamp
    who = local_cluster.request(
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        token=token,
        body=json.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
    )
    assert who.status == 201
    assert who.json()["status"]["userInfo"]["username"] == "system:serviceaccount:default:robot"
    v1.delete_namespaced_service_account("robot", "default")
    assert local_cluster.request("GET", "/api/v1/namespaces/default/pods", token=token).status == 401


def test_binding_status_and_eviction_subresources(v1: client.CoreV1Api) -> None:
    v1.create_namespaced_pod("default", as_body(pod("manual", schedulerName="my-scheduler")))
    assert v1.read_namespaced_pod("manual", "default").spec.node_name is None  # not ours to schedule
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "manual"},
               "target": {"apiVersion": "v1", "kind": "Node", "name": "node-2"}}
    # the client cannot model the Status a binding answers with: read it raw (and give the connection back)
    response = raw(v1.create_namespaced_pod_binding("manual", "default", as_body(binding),
                                                    _preload_content=False))
    response.release_conn()
    assert response.status == 201
    wait_until(lambda: v1.read_namespaced_pod("manual", "default").status.phase == "Running",
               what="bound pod runs")
    assert v1.read_namespaced_pod("manual", "default").spec.node_name == "node-2"
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod_binding("manual", "default", as_body(binding), _preload_content=False)
    assert err.value.status == 409
    v1.patch_namespaced_pod_status("manual", "default", {"status": {"message": "patched through status"},
                                                         "metadata": {"labels": {"ignored": "yes"}}})
    after = v1.read_namespaced_pod("manual", "default")
    assert after.status.message == "patched through status" and not after.metadata.labels
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "manual"}}
    response = raw(v1.create_namespaced_pod_eviction("manual", "default", as_body(eviction),
                                                     _preload_content=False))
    response.release_conn()
    assert response.status == 201
    wait_until(lambda: not v1.list_namespaced_pod("default").items, what="evicted pod gone")
