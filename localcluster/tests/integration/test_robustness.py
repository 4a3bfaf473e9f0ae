"""Bad input never crashes the server, each answering its Status; many clients and watches at once are safe;
failure-injection hooks behave as documented."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from kubeclient import api_status, as_body, present, watch_events
from localcluster import wait_until

PODS = "/api/v1/namespaces/default/pods"


def still_serving(cluster: Any) -> None:
    assert cluster.request("GET", "/api/v1/namespaces/default/pods").status == 200


@pytest.mark.parametrize(
    ("method", "path", "body", "content_type", "code", "reason"),
    [
        ("POST", PODS, "{not json", "application/json", 400, "BadRequest"),
        ("POST", PODS, "[1, 2]", "application/json", 400, "BadRequest"),
        (
            "POST",
            PODS,
            '{"kind": "Service", "apiVersion": "v1", "metadata": {"name": "x"}}',
            "application/json",
            400,
            "BadRequest",
        ),
        ("POST", PODS, "{}", "text/plain", 415, "UnsupportedMediaType"),
        ("PATCH", PODS + "/nope", "{}", "application/merge-patch+json", 404, "NotFound"),
        ("GET", "/api/v1/namespaces/default/widgets", None, "", 404, "NotFound"),
        ("GET", "/apis/example.com/v1/things", None, "", 404, "NotFound"),
        ("GET", "/api/v2/pods", None, "", 404, "NotFound"),
        ("POST", PODS, '{"metadata": {"name": "p"}, "spec": {}}', "application/json", 422, "Invalid"),
        (
            "POST",
            PODS,
            '{"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i",'
            ' "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}}}]}}',
            "application/json",
            422,
            "Invalid",
        ),
        ("GET", PODS + "?labelSelector=a%20in%20(", None, "", 400, "BadRequest"),
        ("GET", PODS + "?watch=true&resourceVersion=abc", None, "", 400, "BadRequest"),
    ],
)
def test_bad_requests_answer_a_status(
    local_cluster: Any, method: str, path: str, body: str | None, content_type: str, code: int, reason: str
) -> None:
    response = local_cluster.request(method, path, body=body, content_type=content_type)
    assert response.status == code
    status = response.json()
    assert (status["kind"], status["status"], status["reason"], status["code"]) == (
        "Status",
        "Failure",
        reason,
        code,
    )
    still_serving(local_cluster)


def test_oversized_body_is_refused_with_413(local_cluster: Any) -> None:
    huge = json.dumps({"metadata": {"name": "big"}, "data": {"blob": "x" * (3 * 1024 * 1024 + 10)}})
    response = local_cluster.request("POST", "/api/v1/namespaces/default/configmaps", body=huge)
    assert response.status == 413 and response.json()["reason"] == "RequestEntityTooLarge"
    still_serving(local_cluster)


def test_invalid_gpu_request_names_the_rule(local_cluster: Any) -> None:
    v1 = client.CoreV1Api(local_cluster.api_client())
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod(
            "default",
            as_body({
                "metadata": {"name": "frac"},
                "spec": {
                    "containers": [
                        {"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "500m"}}}
                    ]
                },
            }),
        )
    body = api_status(err.value)
    assert err.value.status == 422
    assert any(c["field"].startswith("spec.containers[0].resources") for c in body["details"]["causes"])


def test_many_clients_and_watches_at_once(local_cluster: Any) -> None:
    api = local_cluster.api_client()
    v1 = client.CoreV1Api(api)
    rv = v1.list_namespaced_config_map("default").metadata.resource_version
    watchers = 4
    seen: list[set[str]] = [set() for _ in range(4)]
    started = threading.Barrier(watchers + 1)

    def watch_all(index: int) -> None:
        own = client.CoreV1Api(local_cluster.api_client())
        started.wait()
        for event in watch_events(
            own.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=8
        ):
            seen[index].add(event["object"].metadata.name)
            if len(seen[index]) == 80:
                break

    threads = [threading.Thread(target=watch_all, args=(i,)) for i in range(watchers)]
    for thread in threads:
        thread.start()
    started.wait()

    def create(i: int) -> str:
        own = client.CoreV1Api(local_cluster.api_client())
        name = str(present(own.create_namespaced_config_map(
            "default", as_body({"metadata": {"name": f"cm-{i}"}})
        ).metadata.name))
        own.read_namespaced_config_map(name, "default")
        return name

    with ThreadPoolExecutor(8) as pool:
        created = set(pool.map(create, range(80)))
    for thread in threads:
        thread.join(15)
    expected = {f"cm-{i}" for i in range(80)}
    assert created == expected
    assert all(s == expected for s in seen)
    assert len(v1.list_namespaced_config_map("default").items) == 80


def test_injected_faults_answer_then_clear(local_cluster: Any) -> None:
    v1 = client.CoreV1Api(local_cluster.api_client())
    local_cluster.inject_fault(500, verb="list", resource="pods", count=2)
    for _ in range(2):
        with pytest.raises(ApiException) as err:
            v1.list_namespaced_pod("default")
        assert err.value.status == 500 and api_status(err.value)["reason"] == "InternalError"
    assert v1.list_namespaced_pod("default").items == []
    # with Retry-After, urllib3 under the official client waits and retries by itself, as with a real server
    fault = local_cluster.inject_fault(429, verb="list", resource="configmaps", count=1, retry_after=1)
    v1.create_namespaced_config_map("default", as_body({"metadata": {"name": "after-429"}}))
    assert [c.metadata.name for c in v1.list_namespaced_config_map("default").items] == ["after-429"]
    assert fault.hits == 1
    # a POST is not retried by the client: the caller sees the 429 and its Retry-After
    local_cluster.inject_fault(429, verb="create", resource="configmaps", count=1, retry_after=2)
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_config_map("default", as_body({"metadata": {"name": "refused"}}))
    assert err.value.status == 429 and present(err.value.headers)["Retry-After"] == "2"


def test_cut_watches_and_restart_keep_the_store(local_cluster: Any) -> None:
    v1 = client.CoreV1Api(local_cluster.api_client())
    v1.create_namespaced_config_map("default", as_body({"metadata": {"name": "kept"}}))
    ended = threading.Event()

    def watch_until_cut() -> None:
        own = client.CoreV1Api(local_cluster.api_client())
        for _ in watch_events(own.list_namespaced_config_map, "default", timeout_seconds=30):
            pass
        ended.set()

    threading.Thread(target=watch_until_cut, daemon=True).start()
    wait_until(lambda: local_cluster.cut_watches() > 0, what="a watch to cut")
    assert ended.wait(10)
    local_cluster.restart()
    fresh = client.CoreV1Api(local_cluster.api_client())
    assert [c.metadata.name for c in fresh.list_namespaced_config_map("default").items] == ["kept"]
