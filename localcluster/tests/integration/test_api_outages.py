"""API outages as clients meet them (doubles/apioutage.py): refused connections, hung requests, 429 storms and
503s, through the official client and real kubectl; watches cut and resumed without losing a change; the
cluster's kubelets carrying on meanwhile."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import urllib3
from kubernetes import client
from kubernetes.client import ApiException

from kubeclient import api_status, as_body, present, watch_events
from localcluster import Behavior, TestCluster, wait_until


def pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}],
                                                  "restartPolicy": "Never",
                                                  "tolerations": [{"operator": "Exists"}]}}


def phase(v1: client.CoreV1Api, name: str) -> str:
    return str(v1.read_namespaced_pod(name, "default").status.phase)


@pytest.fixture
def cluster(local_cluster_factory: Any) -> TestCluster:
    # a pod named job-* exits 0 two seconds after it starts: it finishes during an outage
    def job(p: dict[str, Any]) -> bool:
        return bool(p["metadata"]["name"].startswith("job-"))

    cluster: TestCluster = local_cluster_factory(behaviors=[(job, Behavior(exit_code=0, exit_after=2.0))])
    return cluster


def test_refused_connections_then_the_watch_resumes_where_it_was(cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(cluster.api_client())
    listed = v1.list_namespaced_pod("default")
    last = present(listed.metadata.resource_version)
    seen: list[tuple[str, str, str]] = []
    ended = threading.Event()

    def follow(since: str) -> None:
        try:
            for event in watch_events(v1.list_namespaced_pod, "default", resource_version=since,
                                      _request_timeout=60):
                obj = event["raw_object"]
                seen.append((event["type"], obj["metadata"]["name"], obj["metadata"]["resourceVersion"]))
        except (urllib3.exceptions.HTTPError, ApiException):
            pass
        ended.set()

    watcher = threading.Thread(target=follow, args=(last,), daemon=True)
    watcher.start()
    v1.create_namespaced_pod("default", as_body(pod("job-a")))
    wait_until(lambda: phase(v1, "job-a") == "Running", what="job-a running")
    wait_until(lambda: seen, what="the watch saw job-a")
    with cluster.api_outage("refuse") as outage:
        assert outage.active and outage.mode == "refuse"
        assert ended.wait(10), "the watch in flight was not cut"
        resume_from = seen[-1][2]
        with pytest.raises(urllib3.exceptions.MaxRetryError, match="Connection refused"):
            v1.list_namespaced_pod("default", _request_timeout=5)
        refused = cluster.kubectl("get", "pods", "--request-timeout", "5s")
        assert refused.returncode == 1
        assert "was refused - did you specify the right host or port?" in refused.stderr
        # the kubelet carries on: job-a finishes while nobody can ask
        wait_until(lambda: cluster.store.get("pods", "default", "job-a")["status"]["phase"] == "Succeeded",
                   timeout=15, what="job-a succeeded during the outage")
    assert not outage.active
    assert phase(v1, "job-a") == "Succeeded"
    # a watch resumed from the last resourceVersion it saw gets what happened meanwhile, no 410 Gone
    events = []
    for event in watch_events(v1.list_namespaced_pod, "default", resource_version=resume_from,
                              timeout_seconds=1):
        events.append((event["type"], event["raw_object"]["status"]["phase"]))
    assert ("MODIFIED", "Succeeded") in events


def test_a_429_storm_answers_as_priority_and_fairness(cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(cluster.api_client())
    with cluster.api_outage("429", retry_after=2, seconds=120):
        with pytest.raises(ApiException) as caught:
            v1.create_namespaced_pod("default", as_body(pod("p")))
        error = caught.value
        assert (error.status, error.reason) == (429, "Too Many Requests")
        assert error.body == "Too many requests, please try again later.\n"
        headers = present(error.headers)
        assert headers["Retry-After"] == "2"
        assert headers["X-Kubernetes-PF-PriorityLevel-UID"]
        assert cluster.request("GET", "/readyz").status == 200   # the probes' flow schema is exempt
    assert v1.create_namespaced_pod("default", as_body(pod("p"))).metadata.name == "p"


def test_503_answers_a_service_unavailable_status_and_kubectl_says_so(cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(cluster.api_client())
    with cluster.api_outage("503"):
        with pytest.raises(ApiException) as caught:
            v1.list_namespaced_pod("default")
        assert caught.value.status == 503
        assert api_status(caught.value)["reason"] == "ServiceUnavailable"
        assert "Retry-After" not in present(caught.value.headers)   # kubectl would wait and retry with one
        shown = cluster.kubectl("get", "pods", "--request-timeout", "20s")
        assert shown.returncode == 1
        assert "the server is currently unable to handle the request" in shown.stderr
    assert cluster.kubectl("get", "pods").returncode == 0


def test_a_hung_server_answers_nothing_until_the_outage_ends(cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(cluster.api_client())
    outage = cluster.api_outage("hang")
    with pytest.raises(urllib3.exceptions.MaxRetryError, match="Read timed out"):
        client.CoreV1Api(cluster.api_client()).list_namespaced_pod("default", _request_timeout=(5, 1))
    answers: list[int] = []
    waiting = threading.Thread(target=lambda: answers.append(cluster.request(
        "GET", "/api/v1/namespaces/default/pods", timeout=60).status), daemon=True)
    waiting.start()
    waiting.join(1)
    assert waiting.is_alive() and not answers   # accepted, not answered
    outage.clear()
    waiting.join(30)
    assert answers == [200]
    assert v1.list_namespaced_pod("default").items == []


def test_an_outage_for_a_set_time_ends_by_itself(cluster: TestCluster) -> None:
    outage = cluster.api_outage("refuse", seconds=1)
    wait_until(lambda: not outage.active, timeout=10, what="the outage's end")
    assert cluster.request("GET", "/api/v1/namespaces").status == 200
