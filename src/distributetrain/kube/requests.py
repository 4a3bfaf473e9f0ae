"""The Kubernetes API as plain values: every request the manager sends (HTTP method, path, query, body),
built here apart from sending it (gateway.py sends), and the error a refusal means, read from the server's
Status object by its code, reason and details. Pure, so both are unit-tested without a server.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import orjson

from distributetrain.errors import AlreadyExists, ApiError, Conflict, Forbidden, Gone, NotFound
from distributetrain.podstatus import TERMINAL_PHASES

# pods that may hold resources: the server filters out the finished ones
NOT_TERMINATED = ",".join(f"status.phase!={phase}" for phase in TERMINAL_PHASES)


@dataclass(frozen=True)
class Resource:
    """Where a kind of object lives in the API."""

    api: str          # "/api/v1", "/apis/networking.k8s.io/v1"
    plural: str
    namespaced: bool = True


RESOURCES: dict[str, Resource] = {
    "pods": Resource("/api/v1", "pods"),
    "secrets": Resource("/api/v1", "secrets"),
    "configmaps": Resource("/api/v1", "configmaps"),
    "networkpolicies": Resource("/apis/networking.k8s.io/v1", "networkpolicies"),
    "poddisruptionbudgets": Resource("/apis/policy/v1", "poddisruptionbudgets"),
    "jobs": Resource("/apis/batch/v1", "jobs"),
    "persistentvolumeclaims": Resource("/api/v1", "persistentvolumeclaims"),
    "events": Resource("/api/v1", "events"),
    "limitranges": Resource("/api/v1", "limitranges"),
    "resourcequotas": Resource("/api/v1", "resourcequotas"),
    "namespaces": Resource("/api/v1", "namespaces", namespaced=False),
    "nodes": Resource("/api/v1", "nodes", namespaced=False),
    # capacity the manager does not place itself (manager/capacity.py): served where those systems run
    "podtemplates": Resource("/api/v1", "podtemplates"),
    "provisioningrequests": Resource("/apis/autoscaling.x-k8s.io/v1", "provisioningrequests"),
    "localqueues": Resource("/apis/kueue.x-k8s.io/v1beta1", "localqueues"),
    "workloads": Resource("/apis/kueue.x-k8s.io/v1beta1", "workloads"),
    "karpenter-nodepools": Resource("/apis/karpenter.sh/v1", "nodepools", namespaced=False),
}
# an object's `kind` -> its resource, for what the manager creates
RESOURCE_OF_KIND = {"Pod": "pods", "Secret": "secrets", "ConfigMap": "configmaps",
                    "NetworkPolicy": "networkpolicies", "PodDisruptionBudget": "poddisruptionbudgets",
                    "Event": "events", "PodTemplate": "podtemplates",
                    "ProvisioningRequest": "provisioningrequests"}
MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True)
class Request:
    """One API request. `verb` is what Kube.requests counts it as (list, watch, get, create, delete, log);
    `what` names it in errors and log lines ("create pods default/job-worker-0")."""

    verb: str
    method: str
    path: str
    what: str
    query: tuple[tuple[str, str], ...] = ()
    body: Mapping[str, Any] | None = None
    content_type: str = "application/json"


def path(resource: str, namespace: str | None = None, name: str | None = None,
         subresource: str | None = None) -> str:
    """`/api/v1/namespaces/NS/pods/NAME/log`; a namespaced resource without a namespace: all namespaces."""
    where = RESOURCES[resource]
    parts = [where.api]
    if where.namespaced and namespace is not None:
        parts += ["namespaces", quote(namespace, safe="")]
    parts.append(where.plural)
    if name is not None:
        parts.append(quote(name, safe=""))
    if subresource is not None:
        parts.append(subresource)
    return "/".join(parts)


def _query(**params: str | int | bool | None) -> tuple[tuple[str, str], ...]:
    """The parameters that are set, as the API spells them (`str(True)` is "True": booleans as "true")."""
    out = []
    for key, value in params.items():
        if value is None:
            continue
        text = str(value).lower() if isinstance(value, bool) else str(value)
        out.append((key, text))
    return tuple(out)


def list_request(resource: str, namespace: str | None = None, *, limit: int,
                 continue_token: str | None = None, label_selector: str | None = None,
                 field_selector: str | None = None, resource_version: str | None = None) -> Request:
    """One page of a list (limit/continue); without a namespace, across all of them. `resource_version`
    "0": served from the API server's watch cache, not a quorum read of etcd (it then may ignore `limit`
    and answer in one page); the server refuses it together with a continue token, so it goes on the
    first page only."""
    where = f"{resource} in {namespace}" if namespace else resource
    return Request("list", "GET", path(resource, namespace), f"list {where}", _query(
        labelSelector=label_selector or None, fieldSelector=field_selector or None, limit=limit,
        resourceVersion=None if continue_token else resource_version,
        **{"continue": continue_token or None}))


def discovery_request(resource: str) -> Request:
    """The discovery document of the group-version `resource` lives in (`/apis/GROUP/VERSION`): answered to
    every authenticated user (system:discovery), 404 when the cluster does not serve that API."""
    api = RESOURCES[resource].api
    return Request("get", "GET", api, f"discover {api}")


def get_request(resource: str, namespace: str | None, name: str) -> Request:
    return Request("get", "GET", path(resource, namespace, name), f"get {resource} {namespace}/{name}")


def create_request(body: Mapping[str, Any]) -> Request:
    """Create `body` (its kind and namespace say where)."""
    resource = RESOURCE_OF_KIND[body["kind"]]
    meta = body["metadata"]
    return Request("create", "POST", path(resource, meta["namespace"]),
                   f"create {resource} {meta['namespace']}/{meta['name']}", body=body)


def delete_request(resource: str, namespace: str, name: str, *, grace_seconds: int | None = None,
                   uid: str | None = None) -> Request:
    """Delete in the background (dependents by the garbage collector); with `uid`, only that incarnation of
    the object (a precondition: a namesake created since answers 409 Conflict)."""
    options: dict[str, Any] = {"propagationPolicy": "Background"}
    if grace_seconds is not None:
        options["gracePeriodSeconds"] = grace_seconds
    if uid:
        options["preconditions"] = {"uid": uid}
    return Request("delete", "DELETE", path(resource, namespace, name),
                   f"delete {resource} {namespace}/{name}", body=options)


def merge_patch_request(resource: str, namespace: str, name: str, patch: Mapping[str, Any]) -> Request:
    """A JSON merge patch (RFC 7386) of one object: e.g. labels and annotations, leaving the rest alone."""
    return Request("patch", "PATCH", path(resource, namespace, name), f"patch {resource} {namespace}/{name}",
                   body=patch, content_type=MERGE_PATCH)


def watch_request(resource: str, namespace: str | None, *, resource_version: str, label_selector: str | None,
                  timeout_seconds: int) -> Request:
    """A watch from `resource_version` with bookmarks, which the server ends after `timeout_seconds`."""
    return Request("watch", "GET", path(resource, namespace),
                   f"watch {resource} {label_selector or ''} from {resource_version}", _query(
                       labelSelector=label_selector or None, resourceVersion=resource_version,
                       timeoutSeconds=timeout_seconds, allowWatchBookmarks=True, watch=True))


def log_request(namespace: str, name: str, container: str, *, follow: bool = False,
                tail_lines: int | None = None, timestamps: bool = False,
                since_time: str | None = None) -> Request:
    """A container's log; `timestamps` prefixes each line with its RFC3339Nano time, `since_time`
    (RFC3339, whole seconds: what the API server passes on) starts at the first line at or after it."""
    return Request("log", "GET", path("pods", namespace, name, "log"), f"logs {namespace}/{name}", _query(
        container=container, follow=follow or None, tailLines=tail_lines, timestamps=timestamps or None,
        sinceTime=since_time))


# ---- answers -------------------------------------------------------------------------------------------

def status_object(body: bytes | str | None) -> dict[str, Any]:
    """The Status object an error answer carries; {} when the body is something else."""
    try:
        parsed = orjson.loads(body or b"{}")
    except orjson.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def status_message(code: int, body: bytes | str | None, http_reason: str = "") -> str:
    """The server's own words: the Status's message, else the HTTP status line."""
    return str(status_object(body).get("message") or f"{code} {http_reason}")


def api_error(code: int, body: bytes | str | None, *, what: str, http_reason: str = "") -> ApiError:
    """The error an answer with HTTP status `code` means, decided by the code and the Status's reason, and
    carrying them; the message is the server's own words, after `what` was asked."""
    status = status_object(body)
    message = status_message(code, body, http_reason)
    fields: dict[str, Any] = {"status": code, "reason": status.get("reason") or None,
                              "details": status.get("details") or {}}
    if code == 403:
        return Forbidden(f"{what}: Forbidden: {message}. {forbidden_advice(message)}", **fields)
    if code == 401:
        return ApiError(f"{what}: Unauthorized: {message}. Check the kubeconfig or the ServiceAccount token",
                        **fields)
    if code == 404:
        return NotFound(f"{what}: not found: {message}", **fields)
    if code == 409:
        conflict = AlreadyExists if fields["reason"] == "AlreadyExists" else Conflict
        return conflict(f"{what}: {message}", **fields)
    if code == 410:
        return Gone(f"{what}: {message}", **fields)
    return ApiError(f"{what}: the API server answered {code}: {message}", **fields)


def forbidden_advice(message: str) -> str:
    """What to do about a 403. Its Status says only Forbidden, whoever refused (RBAC, Pod Security admission,
    a ResourceQuota); their messages, fixed by the API server, are the one way to tell them apart."""
    if "violates PodSecurity" in message:
        return ("The namespace's Pod Security admission refused the pod: give it the securityContext named "
                "above through the pod template (--pod-template), or use a namespace whose "
                "pod-security.kubernetes.io/enforce level allows it (docs/real-cluster.md)")
    if "exceeded quota" in message or "failed quota" in message:
        return ("A ResourceQuota of the namespace refused it: ask for fewer GPUs or less per GPU "
                "(--cpu-per-gpu, --memory-per-gpu), set what the quota requires, or have the quota raised "
                "(kubectl describe resourcequota)")
    return ("The ServiceAccount running the manager needs this permission: apply rbac/ (see docs/manager.md) "
            "in the job's namespace")


def watch_error(status: Mapping[str, Any], *, what: str) -> ApiError:
    """The error a watch's ERROR event carries (a Status): 410 is Gone (list again), anything else ends it."""
    code = status.get("code")
    fields: dict[str, Any] = {"status": code if isinstance(code, int) else None,
                              "reason": status.get("reason") or None, "details": status.get("details") or {}}
    if code == 410:
        return Gone(f"{what}: {status.get('message', 'too old resource version')}", **fields)
    return ApiError(f"{what}: the server ended the watch: {status.get('message', status)}", **fields)


def retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds the server asks us to wait (Retry-After), None when it does not say."""
    value = (headers or {}).get("Retry-After")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def is_missing_namespace(err: NotFound, namespace: str) -> bool:
    """Whether a 404 on a create means the namespace itself does not exist (its Status details name it)."""
    return err.details.get("kind") == "namespaces" and err.details.get("name") in (None, namespace)
