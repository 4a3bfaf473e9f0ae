"""Every request the manager sends, built without a server, and the error each refusal means."""

from __future__ import annotations

import json

import pytest

from distributetrain.errors import (
    AlreadyExists,
    ApiError,
    Conflict,
    Forbidden,
    Gone,
    NotFound,
)
from distributetrain.kube.requests import (
    NOT_TERMINATED,
    Request,
    api_error,
    create_request,
    delete_request,
    get_request,
    is_missing_namespace,
    list_request,
    log_request,
    retry_after,
    watch_error,
    watch_request,
)


def status(code: int, reason: str, message: str, **details: str) -> bytes:
    return json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                       "reason": reason, "details": details, "code": code}).encode()


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (list_request("nodes", limit=5000),
         Request("list", "GET", "/api/v1/nodes", "list nodes", (("limit", "5000"),))),
        (list_request("pods", None, limit=500, continue_token="c1", field_selector=NOT_TERMINATED),
         Request("list", "GET", "/api/v1/pods", "list pods",
                 (("fieldSelector", "status.phase!=Succeeded,status.phase!=Failed"), ("limit", "500"),
                  ("continue", "c1")))),
        (list_request("networkpolicies", "ml", limit=5000, label_selector="a=b"),
         Request("list", "GET", "/apis/networking.k8s.io/v1/namespaces/ml/networkpolicies",
                 "list networkpolicies in ml", (("labelSelector", "a=b"), ("limit", "5000")))),
        (get_request("pods", "default", "job-chief"),
         Request("get", "GET", "/api/v1/namespaces/default/pods/job-chief", "get pods default/job-chief")),
        (watch_request("pods", "default", resource_version="42", label_selector="a=b", timeout_seconds=60),
         Request("watch", "GET", "/api/v1/namespaces/default/pods", "watch pods a=b from 42",
                 (("labelSelector", "a=b"), ("resourceVersion", "42"), ("timeoutSeconds", "60"),
                  ("allowWatchBookmarks", "true"), ("watch", "true")))),
        (log_request("default", "job-chief", "launcher", follow=True),
         Request("log", "GET", "/api/v1/namespaces/default/pods/job-chief/log", "logs default/job-chief",
                 (("container", "launcher"), ("follow", "true")))),
        (log_request("default", "job-chief", "launcher", tail_lines=10),
         Request("log", "GET", "/api/v1/namespaces/default/pods/job-chief/log", "logs default/job-chief",
                 (("container", "launcher"), ("tailLines", "10")))),
    ],
)
def test_reads_are_built_as_the_api_spells_them(request_: Request, expected: Request) -> None:
    assert request_ == expected


def test_create_and_delete_carry_their_bodies() -> None:
    policy = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
              "metadata": {"name": "job-network", "namespace": "ml"}}
    assert create_request(policy) == Request(
        "create", "POST", "/apis/networking.k8s.io/v1/namespaces/ml/networkpolicies",
        "create networkpolicies ml/job-network", body=policy)
    assert delete_request("pods", "ml", "job-worker-0", uid="u-1", grace_seconds=0) == Request(
        "delete", "DELETE", "/api/v1/namespaces/ml/pods/job-worker-0", "delete pods ml/job-worker-0",
        body={"propagationPolicy": "Background", "gracePeriodSeconds": 0, "preconditions": {"uid": "u-1"}})
    assert delete_request("secrets", "ml", "job-ssh").body == {"propagationPolicy": "Background"}


@pytest.mark.parametrize(
    ("code", "body", "kind", "reason", "words"),
    [
        (403, status(403, "Forbidden", 'pods is forbidden: User "x" cannot create resource "pods"'),
         Forbidden, "Forbidden", "Forbidden: pods is forbidden: User \"x\" cannot create resource \"pods\". "
                                 "The ServiceAccount running the manager needs this permission"),
        (403, status(403, "Forbidden", 'pods "p" is forbidden: violates PodSecurity "restricted:latest": '
                                       "runAsNonRoot != true (pod must set runAsNonRoot=true)"),
         Forbidden, "Forbidden", "Pod Security admission refused the pod: give it the securityContext"),
        (403, status(403, "Forbidden", 'pods "p" is forbidden: exceeded quota: gpus, requested: '
                                       "requests.nvidia.com/gpu=5, used: requests.nvidia.com/gpu=4, limited: "
                                       "requests.nvidia.com/gpu=8"),
         Forbidden, "Forbidden", "A ResourceQuota of the namespace refused it"),
        (404, status(404, "NotFound", 'pods "p" not found', name="p", kind="pods"),
         NotFound, "NotFound", 'not found: pods "p" not found'),
        (409, status(409, "AlreadyExists", 'secrets "s" already exists', name="s", kind="secrets"),
         AlreadyExists, "AlreadyExists", 'secrets "s" already exists'),
        (409, status(409, "Conflict", 'Operation cannot be fulfilled on pods "p": Precondition failed'),
         Conflict, "Conflict", "Precondition failed"),
        (410, status(410, "Expired", "too old resource version: 1 (42)"), Gone, "Expired", "too old"),
        (401, status(401, "Unauthorized", "Unauthorized"), ApiError, "Unauthorized",
         "Unauthorized: Unauthorized. Check the kubeconfig"),
        (503, b"<html>busy</html>", ApiError, None, "the API server answered 503: 503 Service Unavailable"),
    ],
)
def test_errors_are_decided_by_status_and_reason_and_carry_them(
        code: int, body: bytes, kind: type[ApiError], reason: str | None, words: str) -> None:
    error = api_error(code, body, what="create pods default/p", http_reason="Service Unavailable")
    assert type(error) is kind
    assert (error.status, error.reason, error.exit_code) == (code, reason, 72)
    assert str(error).startswith("create pods default/p: ") and words in str(error)


def test_a_conflict_that_is_not_already_exists_is_not_taken_for_it() -> None:
    precondition = api_error(409, status(409, "Conflict", "Precondition failed: UID in precondition: a"),
                             what="delete pods default/p")
    assert isinstance(precondition, Conflict) and not isinstance(precondition, AlreadyExists)


def test_a_missing_namespace_is_read_from_the_status_details_not_its_words() -> None:
    body = status(404, "NotFound", 'namespaces "ml" not found', name="ml", kind="namespaces")
    missing = api_error(404, body, what="create pods ml/p")
    assert isinstance(missing, NotFound) and missing.details == {"name": "ml", "kind": "namespaces"}
    assert is_missing_namespace(missing, "ml")
    # a pod named "namespace-x" that is not found says "namespace" in its message, and is not a namespace
    body = status(404, "NotFound", 'pods "namespace-x" not found', name="namespace-x", kind="pods")
    pod = api_error(404, body, what="get pods ml/namespace-x")
    assert isinstance(pod, NotFound) and not is_missing_namespace(pod, "ml")


def test_watch_errors_and_retry_after() -> None:
    expired = {"code": 410, "reason": "Expired", "message": "too old resource version"}
    gone = watch_error(expired, what="watch")
    assert isinstance(gone, Gone) and gone.status == 410 and str(gone) == "watch: too old resource version"
    other = watch_error({"code": 500, "message": "etcd"}, what="watch")
    assert type(other) is ApiError and str(other) == "watch: the server ended the watch: etcd"
    assert retry_after({"Retry-After": "3"}) == 3.0
    assert retry_after({"Retry-After": "soon"}) is None and retry_after(None) is None


def test_the_error_type_fields() -> None:
    plain = ApiError("cannot load the Kubernetes configuration")
    assert (plain.status, plain.reason, dict(plain.details)) == (None, None, {})
    error = Conflict("x", status=409, reason="Conflict", details={"name": "p"})
    assert isinstance(error, ApiError) and error.details["name"] == "p"
    with pytest.raises(TypeError):
        error.details["name"] = "q"  # type: ignore[index]
