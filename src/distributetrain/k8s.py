"""The Kubernetes gateway: the only module that imports the `kubernetes` client.

Everything crosses it as plain JSON dicts (camelCase, as the API sends them): lists and watches ask for raw
JSON (`_preload_content=False`) and decode it with orjson, which is ~9x cheaper than the client's model
deserialisation on big lists. Errors are mapped once, here: 403 -> ApiError with the server's own Forbidden
message; 404/409/410 -> NotFound/AlreadyExists/Gone; 429 and 5xx are retried a bounded number of times with
exponential backoff, honouring Retry-After. Every request is counted by verb (`Kube.requests`).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import urllib3
from kubernetes import client, config

from distributetrain import slimpods
from distributetrain.errors import ApiError
from distributetrain.podstatus import TERMINAL_PHASES

log = logging.getLogger(__name__)

RETRYABLE = frozenset({429, 500, 502, 503, 504})
# pods that may hold resources: the server filters out the finished ones
NOT_TERMINATED = ",".join(f"status.phase!={phase}" for phase in TERMINAL_PHASES)
# large pages: 10,000 pods in 2 requests; each page is bounded (~12 MB of JSON) unlike an unpaginated list
DEFAULT_PAGE_SIZE = 5000
# a silent training log is normal; after this long without a byte the follower reconnects, which is harmless
LOG_READ_TIMEOUT = 600.0


class Forbidden(ApiError):
    """403: RBAC denies the request; the message carries the server's own words."""


class NotFound(ApiError):
    """404: the object (or its namespace) does not exist."""


class AlreadyExists(ApiError):
    """409 on create: an object of that name exists (ours from an earlier attempt, or someone else's)."""


class Gone(ApiError):
    """410: a watch's resourceVersion or a list's continue token is too old; list again."""


class StreamBroken(ApiError):
    """A watch or log stream was cut mid-way (API server restarted, connection reset); resume it."""


@dataclass(frozen=True)
class Kind:
    """How to reach one resource through the generated client: the API class and the method suffix."""

    api: str          # "CoreV1Api" or "NetworkingV1Api"
    suffix: str       # as in list_namespaced_<suffix>
    namespaced: bool = True


KINDS: dict[str, Kind] = {
    "pods": Kind("CoreV1Api", "pod"),
    "secrets": Kind("CoreV1Api", "secret"),
    "configmaps": Kind("CoreV1Api", "config_map"),
    "networkpolicies": Kind("NetworkingV1Api", "network_policy"),
    "nodes": Kind("CoreV1Api", "node", namespaced=False),
}
KIND_OF = {"Pod": "pods", "Secret": "secrets", "ConfigMap": "configmaps", "NetworkPolicy": "networkpolicies"}


def _status_message(err: client.ApiException) -> str:
    """The server's own words: Status.message when the body is a Status, else the HTTP reason."""
    try:
        body = orjson.loads(err.body or b"{}")
        if isinstance(body, dict) and body.get("message"):
            return str(body["message"])
    except orjson.JSONDecodeError:
        pass
    return f"{err.status} {err.reason}"


def _retry_after(err: client.ApiException) -> float | None:
    headers = err.headers or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def map_error(err: client.ApiException, what: str) -> ApiError:
    """One ApiError for a failed request; `what` names it, e.g. "create pods default/job-worker-0"."""
    message = _status_message(err)
    if err.status == 403:
        return Forbidden(f"{what}: Forbidden: {message}. The ServiceAccount running the manager needs this "
                        "permission: apply rbac/ (see docs/manager.md) in the job's namespace")
    if err.status == 401:
        return ApiError(f"{what}: Unauthorized: {message}. Check the kubeconfig or the ServiceAccount token")
    if err.status == 404:
        return NotFound(f"{what}: not found: {message}")
    if err.status == 409:
        return AlreadyExists(f"{what}: {message}")
    if err.status == 410:
        return Gone(f"{what}: {message}")
    return ApiError(f"{what}: the API server answered {err.status}: {message}")


class Kube:
    """A connection to one API server. Thread-safe for the two threads the manager uses (watch and log)."""

    def __init__(self, api_client: client.ApiClient, *, attempts: int = 6, backoff: float = 0.25,
                 max_backoff: float = 8.0, request_timeout: float = 30.0, page_size: int = DEFAULT_PAGE_SIZE,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.networking = client.NetworkingV1Api(api_client)
        self.attempts = attempts
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.request_timeout = request_timeout
        self.page_size = page_size
        self.requests: Counter[str] = Counter()
        self._sleep = sleep
        self._lock = threading.Lock()

    # ---- construction -------------------------------------------------------------------------------
    @staticmethod
    def connect(*, kubeconfig: str | None = None, context: str | None = None, **options: Any) -> Kube:
        """In-cluster config when running in a pod and no kubeconfig is named; else the kubeconfig
        (--kubeconfig, $KUBECONFIG, ~/.kube/config) and its current or named context."""
        configuration = client.Configuration()
        try:
            if kubeconfig is None and context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
                config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            else:
                config.load_kube_config(  # type: ignore[no-untyped-call]
                    config_file=kubeconfig, context=context, client_configuration=configuration)
        except (config.ConfigException, OSError) as err:
            why = str(err).rstrip(".")
            raise ApiError(f"cannot load the Kubernetes configuration ({kubeconfig or 'default'}): {why}. "
                           "Pass --kubeconfig FILE, or run inside the cluster") from err
        return Kube(_api_client(configuration), **options)

    @staticmethod
    def from_token(*, url: str, token: str, ca_path: str, **options: Any) -> Kube:
        """A connection as a ServiceAccount (or any bearer token), e.g. to test RBAC rules."""
        configuration = client.Configuration()
        configuration.host = url
        configuration.ssl_ca_cert = ca_path
        configuration.api_key = {"authorization": f"Bearer {token}"}
        return Kube(_api_client(configuration), **options)

    # ---- the one place requests are sent -----------------------------------------------------------
    def call(self, verb: str, what: str, send: Callable[[], Any]) -> Any:
        """Send one request with bounded retries on 429/5xx and connection errors; map errors once."""
        delay = self.backoff
        for attempt in range(1, self.attempts + 1):
            with self._lock:
                self.requests[verb] += 1
            try:
                return send()
            except client.ApiException as err:
                if err.status not in RETRYABLE or attempt == self.attempts:
                    mapped = map_error(err, what)
                    if err.status in RETRYABLE:
                        mapped = ApiError(f"{mapped} (gave up after {attempt} attempts)")
                    raise mapped from err
                wait = _retry_after(err)
                reason = f"{err.status} {_status_message(err)}"
            except (urllib3.exceptions.HTTPError, OSError) as err:
                if attempt == self.attempts:
                    raise ApiError(f"{what}: cannot reach the API server after {attempt} attempts: {err}. "
                                   "Check that the cluster is up and the kubeconfig points at it") from err
                wait, reason = None, f"{type(err).__name__}: {err}"
            pause = min(self.max_backoff * 4, wait) if wait is not None else delay * (0.5 + random.random())
            log.warning("%s: %s; retrying in %.2fs (attempt %d of %d)", what, reason, pause, attempt,
                        self.attempts)
            self._sleep(pause)
            delay = min(self.max_backoff, delay * 2)
        raise AssertionError("unreachable")

    def _method(self, kind: str, action: str, namespace: str | None) -> Callable[..., Any]:
        spec = KINDS[kind]
        api = self.core if spec.api == "CoreV1Api" else self.networking
        if action == "list" and spec.namespaced and namespace is None:
            return getattr(api, f"list_{spec.suffix}_for_all_namespaces")  # type: ignore[no-any-return]
        infix = "namespaced_" if spec.namespaced else ""
        return getattr(api, f"{action}_{infix}{spec.suffix}")  # type: ignore[no-any-return]

    def _timeout(self) -> tuple[float, float]:
        return (min(10.0, self.request_timeout), self.request_timeout)

    # ---- reads ------------------------------------------------------------------------------------------
    def list(self, kind: str, namespace: str | None = None, *, label_selector: str | None = None,
             field_selector: str | None = None, page_size: int | None = None,
             decode: Callable[[bytes], dict[str, Any]] = orjson.loads,
             ) -> tuple[list[dict[str, Any]], str]:
        """Every object, page by page (limit/continue); returns the items and the list's resourceVersion.
        A continue token that expires mid-way (410) restarts the list once from the beginning. `decode`
        turns a page's bytes into the list (e.g. slimpods.decode_pod_list, keeping only some fields)."""
        method = self._method(kind, "list", namespace)
        for restart in range(2):
            items: list[dict[str, Any]] = []
            token: str | None = None
            try:
                while True:
                    kwargs: dict[str, Any] = {"limit": page_size or self.page_size, "_preload_content": False,
                                              "_request_timeout": self._timeout()}
                    if token:
                        kwargs["_continue"] = token
                    if label_selector:
                        kwargs["label_selector"] = label_selector
                    if field_selector:
                        kwargs["field_selector"] = field_selector
                    args = (namespace,) if namespace is not None and KINDS[kind].namespaced else ()
                    where = f"{kind} in {namespace}" if namespace else kind
                    response = self.call("list", f"list {where}", functools.partial(method, *args, **kwargs))
                    with gc_paused():
                        page = decode(response.data)
                    items.extend(page.get("items") or [])
                    meta = page.get("metadata") or {}
                    token = meta.get("continue") or None
                    if not token:
                        return items, str(meta.get("resourceVersion") or "")
            except Gone:
                if restart:
                    raise
                log.info("list %s: continue token expired; listing again", kind)
        raise AssertionError("unreachable")

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""
        method = self._method(kind, "read", namespace)
        args = (name, namespace) if KINDS[kind].namespaced else (name,)
        try:
            response = self.call("get", f"get {kind} {namespace}/{name}",
                                 lambda: method(*args, _preload_content=False,
                                                _request_timeout=self._timeout()))
        except NotFound:
            return None
        return orjson.loads(response.data)  # type: ignore[no-any-return]

    # ---- writes -----------------------------------------------------------------------------------------
    def create(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create an object (its kind and namespace from the body); AlreadyExists when the name is taken."""
        kind = KIND_OF[body["kind"]]
        namespace = body["metadata"]["namespace"]
        method = self._method(kind, "create", namespace)
        response = self.call("create", f"create {kind} {namespace}/{body['metadata']['name']}",
                             lambda: method(namespace, body, _preload_content=False,
                                            _request_timeout=self._timeout()))
        return orjson.loads(response.data)  # type: ignore[no-any-return]

    def delete(self, kind: str, namespace: str, name: str, *, grace_seconds: int | None = None,
               uid: str | None = None) -> bool:
        """Delete in the background (dependents by the garbage collector); False when already gone. With
        `uid`, only that incarnation of the object is deleted (a precondition), never a namesake."""
        method = self._method(kind, "delete", namespace)
        options: dict[str, Any] = {"propagationPolicy": "Background"}
        if grace_seconds is not None:
            options["gracePeriodSeconds"] = grace_seconds
        if uid:
            options["preconditions"] = {"uid": uid}
        try:
            self.call("delete", f"delete {kind} {namespace}/{name}",
                      lambda: method(name, namespace, body=options, _preload_content=False,
                                     _request_timeout=self._timeout()))
        except NotFound:
            return False
        except AlreadyExists:
            return False  # 409 on delete: the uid precondition failed, the object is a newer namesake
        return True

    # ---- streams ----------------------------------------------------------------------------------------
    def watch(self, kind: str, namespace: str | None, *, resource_version: str, label_selector: str | None,
              timeout_seconds: int) -> Iterator[dict[str, Any]]:
        """One watch stream from `resource_version`: yields events {"type", "object"} until the server ends
        it (after `timeout_seconds`). Raises Gone when the version is too old; the caller re-lists."""
        method = self._method(kind, "list", namespace)
        kwargs: dict[str, Any] = {"watch": True, "resource_version": resource_version,
                                  "timeout_seconds": timeout_seconds, "allow_watch_bookmarks": True,
                                  "_preload_content": False,
                                  "_request_timeout": (self._timeout()[0], timeout_seconds + 15.0)}
        if label_selector:
            kwargs["label_selector"] = label_selector
        args = (namespace,) if namespace is not None and KINDS[kind].namespaced else ()
        what = f"watch {kind} {label_selector or ''} from {resource_version}"
        response = self.call("watch", what, lambda: method(*args, **kwargs))
        try:
            for line in _lines(response):
                event = orjson.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    if status.get("code") == 410:
                        raise Gone(f"{what}: {status.get('message', 'too old resource version')}")
                    raise ApiError(f"{what}: the server ended the watch: {status.get('message', status)}")
                yield event
        finally:
            _close(response)

    def follow_log(self, namespace: str, name: str, container: str) -> Iterator[bytes]:
        """The container's log lines (without newline) as they are written, until the container ends."""
        what = f"logs {namespace}/{name}"
        response = self.call("log", what, lambda: self.core.read_namespaced_pod_log(
            name, namespace, container=container, follow=True, _preload_content=False,
            _request_timeout=(self._timeout()[0], LOG_READ_TIMEOUT)))
        try:
            yield from _lines(response)
        finally:
            _close(response)

    def read_log(self, namespace: str, name: str, container: str, *, tail_lines: int | None = None) -> bytes:
        response = self.call("log", f"logs {namespace}/{name}", lambda: self.core.read_namespaced_pod_log(
            name, namespace, container=container, tail_lines=tail_lines, _preload_content=False,
            _request_timeout=self._timeout()))
        return response.data  # type: ignore[no-any-return]


def _lines(response: Any) -> Iterator[bytes]:
    """Split a streamed body into lines, whatever the chunking; a cut stream raises StreamBroken."""
    pending = b""
    try:
        for chunk in response.stream(amt=None, decode_content=False):
            pending += chunk
            *complete, pending = pending.split(b"\n")
            for line in complete:
                if line.strip():
                    yield line
    except (urllib3.exceptions.HTTPError, OSError) as err:
        raise StreamBroken(f"the stream was cut: {type(err).__name__}: {err}") from err
    if pending.strip():
        yield pending


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic collector paused: decoding a 20 MB list makes a million long-lived objects, and the
    full collections they trigger cost 2-3x the decode itself (docs/local-cluster.md, "Numbers")."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _close(response: Any) -> None:
    # a stream abandoned mid-way must not go back to the pool with unread bytes: close its socket first
    response.close()
    response.release_conn()


def _api_client(configuration: client.Configuration) -> client.ApiClient:
    # our own bounded retries count and log every attempt; urllib3's silent ones would hide them
    configuration.retries = False
    return client.ApiClient(configuration)


def list_nodes_and_pods(*, kubeconfig: str | None = None, context: str | None = None,
                        kube: Kube | None = None, page_size: int | None = None
                        ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every node, and every pod that may hold resources (not Succeeded or Failed), in all namespaces:
    what inventory.inventory() takes. Two paginated lists, never a query per node."""
    kube = kube or Kube.connect(kubeconfig=kubeconfig, context=context)
    nodes, _ = kube.list("nodes", page_size=page_size)
    # only the fields GPU accounting reads: at 150,000 pods a full decode costs seconds and a GiB
    pods, _ = kube.list("pods", None, field_selector=NOT_TERMINATED, page_size=page_size,
                        decode=slimpods.decode_pod_list)
    return nodes, pods
