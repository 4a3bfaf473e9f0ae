"""The Kubernetes gateway: the only module that imports the `kubernetes` client, and the one that sends.

Requests are built as plain values in requests.py (method, path, query, body) and sent here through the
client's ApiClient, which brings its configuration, authentication and TLS. Everything crosses as plain
JSON dicts (camelCase, as the API sends them), decoded with orjson from the raw body: ~9x cheaper than the
client's model deserialisation on big lists. Errors are read once (requests.api_error) into errors.py's
ApiError family, which carries the status code, reason and details callers match on. Every request is
counted by verb (`Kube.requests`).

Retries. A refused or cut connection, a timeout, 429 and 5xx are retried with exponential backoff, honouring
Retry-After: a bounded number of times while a job is being created (a first error should surface fast,
before anything runs), and for as long as `patient(seconds)` allows once it runs - an API server upgrade or a
zonal control-plane outage takes minutes, and a three-day training must not be lost to it. Past that
tolerance the error is ApiUnreachable (exit 77).
"""

from __future__ import annotations

import contextlib
import copy
import gc
import logging
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import orjson
import urllib3
from kubernetes import client, config

from distributetrain.errors import ApiError, ApiUnreachable, Conflict, Gone, NotFound, StreamBroken
from distributetrain.kube import requests, slimpods
from distributetrain.kube.requests import Request

log = logging.getLogger(__name__)

RETRYABLE = frozenset({429, 500, 502, 503, 504})
# large pages: 10,000 pods in 2 requests; each page is bounded (~12 MB of JSON) unlike an unpaginated list
DEFAULT_PAGE_SIZE = 5000
# a silent training log is normal; after this long without a byte the follower reconnects, which is harmless
LOG_READ_TIMEOUT = 600.0
# while patient: the longest pause between two tries (so the job is back soon after the server), the longest
# Retry-After honoured, and how often a continuing outage is logged again
PATIENT_MAX_BACKOFF = 10.0
PATIENT_MAX_RETRY_AFTER = 60.0
OUTAGE_LOG_EVERY = 30.0


class Kube:
    """A connection to one API server. Thread-safe for the two threads the manager uses (watch and log)."""

    def __init__(self, api_client: client.ApiClient, *, attempts: int = 6, backoff: float = 0.25,
                 max_backoff: float = 8.0, request_timeout: float = 30.0, page_size: int = DEFAULT_PAGE_SIZE,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.api_client = api_client
        self.attempts = attempts
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.request_timeout = request_timeout
        self.page_size = page_size
        self.requests: Counter[str] = Counter()
        # None: `attempts` tries at most; else retry a retryable failure for this many seconds
        self.patience: float | None = None
        self._sleep = sleep
        self._clock = clock
        self._lock = threading.Lock()

    def patient(self, seconds: float) -> Kube:
        """The same connection (its client, counters and lock), retrying a retryable failure for up to
        `seconds` from its first try instead of a bounded number of times: for a job that runs."""
        other = copy.copy(self)
        other.patience = seconds
        return other

    @property
    def core(self) -> client.CoreV1Api:
        """The generated client, for callers that want its typed models (bench/measure/scale.py compares
        them); made on demand: its construction costs a third of a second the manager does not need."""
        return client.CoreV1Api(self.api_client)

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
    def send(self, request: Request, *, timeout: tuple[float, float] | None = None) -> Any:
        """Send one request, retrying a refused or cut connection, a timeout, 429 and 5xx (see the module's
        docstring); an error answer becomes its ApiError (requests.api_error). Returns the raw response:
        `.data`, or `.stream()` it."""
        delay = self.backoff
        first_failure: float | None = None
        logged_at: float | None = None
        attempt = 0
        while True:
            attempt += 1
            with self._lock:
                self.requests[request.verb] += 1
            try:
                answer = self._send_once(request, timeout or self._timeout())
            except client.ApiException as err:  # the client's own refusal to send (e.g. a TLS error)
                raise requests.api_error(err.status, err.body, what=request.what,
                                         http_reason=str(err.reason)) from err
            except (urllib3.exceptions.HTTPError, OSError) as err:
                wait, reason, error = None, f"{type(err).__name__}: {err}", None
            else:
                if 200 <= answer.status <= 299:
                    if logged_at is not None:
                        log.warning("%s: the API server answers again after %.0fs", request.what,
                                    self._clock() - (first_failure or 0.0))
                    return answer.response
                error = requests.api_error(answer.status, answer.read(), what=request.what,
                                           http_reason=str(answer.reason))
                if answer.status not in RETRYABLE:
                    raise error
                wait = requests.retry_after(answer.headers)
                message = requests.status_message(answer.status, answer.data, answer.reason)
                reason = f"{answer.status} {message}"
            now = self._clock()
            first_failure = now if first_failure is None else first_failure
            if self._exhausted(attempt, now - first_failure):
                raise self._gave_up(request, attempt, now - first_failure, reason, error)
            cap = PATIENT_MAX_BACKOFF if self.patience is not None else self.max_backoff * 4
            pause = min(cap, delay * (0.5 + random.random())) if wait is None else \
                min(wait, PATIENT_MAX_RETRY_AFTER if self.patience is not None else cap)
            if self.patience is None:
                log.warning("%s: %s; retrying in %.2fs (attempt %d of %d)", request.what, reason, pause,
                            attempt, self.attempts)
            elif logged_at is None or now - logged_at >= OUTAGE_LOG_EVERY:
                logged_at = now
                log.warning("%s: %s; the API server has not answered for %.0fs, retrying (tolerating %.0fs "
                            "of outage, --api-outage-tolerance)", request.what, reason, now - first_failure,
                            self.patience)
            self._sleep(pause)
            delay = min(PATIENT_MAX_BACKOFF if self.patience is not None else self.max_backoff, delay * 2)

    def _exhausted(self, attempt: int, failing_for: float) -> bool:
        if self.patience is None:
            return attempt >= self.attempts
        return failing_for >= self.patience

    def _gave_up(self, request: Request, attempt: int, failing_for: float, reason: str,
                 error: ApiError | None) -> ApiError:
        if self.patience is not None:
            return ApiUnreachable(f"{request.what}: the API server did not answer for {failing_for:.0f}s "
                                  f"({attempt} attempts; last: {reason}), longer than --api-outage-tolerance "
                                  f"({self.patience:g}s)")
        if error is not None:
            return ApiError(f"{error} (gave up after {attempt} attempts)", status=error.status,
                            reason=error.reason, details=error.details)
        return ApiError(f"{request.what}: cannot reach the API server after {attempt} attempts: {reason}. "
                        "Check that the cluster is up and the kubeconfig points at it")

    def _send_once(self, request: Request, timeout: tuple[float, float]) -> Any:
        """One HTTP exchange through the client's ApiClient (its host, credentials and TLS)."""
        headers = {"Accept": "application/json"}
        if request.body is not None:
            headers["Content-Type"] = request.content_type
        method, url, headers, body, post = self.api_client.param_serialize(
            request.method, request.path, query_params=list(request.query), header_params=headers,
            body=request.body, auth_settings=["BearerToken"])
        return self.api_client.call_api(method, url, headers, body, post, _request_timeout=timeout)

    def _timeout(self) -> tuple[float, float]:
        return (min(10.0, self.request_timeout), self.request_timeout)

    def _json(self, request: Request) -> dict[str, Any]:
        return orjson.loads(self.send(request).data)  # type: ignore[no-any-return]

    # ---- reads ------------------------------------------------------------------------------------------
    def list(self, kind: str, namespace: str | None = None, *, label_selector: str | None = None,
             field_selector: str | None = None, page_size: int | None = None,
             decode: Callable[[bytes], dict[str, Any]] = orjson.loads, from_cache: bool = False,
             ) -> tuple[list[dict[str, Any]], str]:
        """Every object, page by page (limit/continue); returns the items and the list's resourceVersion.
        A continue token that expires mid-way (410) restarts the list once from the beginning. `decode`
        turns a page's bytes into the list (e.g. slimpods.decode_pod_list, keeping only some fields).
        `from_cache`: resourceVersion=0, the watch cache's view (what planning reads, often, on big clusters:
        no quorum read of etcd each time; it may be a moment old, which the plan tolerates: a pod it missed
        is caught by the scheduler, and the gang re-planned)."""
        for restart in range(2):
            items: list[dict[str, Any]] = []
            token: str | None = None
            try:
                while True:
                    response = self.send(requests.list_request(
                        kind, namespace, limit=page_size or self.page_size, continue_token=token,
                        label_selector=label_selector, field_selector=field_selector,
                        resource_version="0" if from_cache else None))
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

    def serves(self, kind: str) -> bool:
        """Whether the cluster serves the API of `kind` (its group-version's discovery document): for the
        APIs of other systems (Kueue, ProvisioningRequests, Karpenter), which a cluster may not have."""
        try:
            self.send(requests.discovery_request(kind)).drain_conn()
        except NotFound:
            return False
        return True

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""
        try:
            return self._json(requests.get_request(kind, namespace, name))
        except NotFound:
            return None

    # ---- writes -----------------------------------------------------------------------------------------
    def create(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create an object (its kind and namespace from the body); Conflict (AlreadyExists) when the name is
        taken, NotFound when the namespace is missing."""
        return self._json(requests.create_request(body))

    def patch(self, kind: str, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """A JSON merge patch of the object (e.g. its labels and annotations); NotFound when it is gone."""
        return self._json(requests.merge_patch_request(kind, namespace, name, patch))

    def delete(self, kind: str, namespace: str, name: str, *, grace_seconds: int | None = None,
               uid: str | None = None) -> bool:
        """Delete in the background (dependents by the garbage collector); False when already gone. With
        `uid`, only that incarnation of the object is deleted (a precondition), never a namesake."""
        try:
            self.send(requests.delete_request(kind, namespace, name, grace_seconds=grace_seconds,
                                                 uid=uid)).drain_conn()
        except NotFound:
            return False
        except Conflict:
            return False  # the only 409 a delete gets: the uid precondition failed, the object is a namesake
        return True

    # ---- streams ----------------------------------------------------------------------------------------
    def watch(self, kind: str, namespace: str | None, *, resource_version: str, label_selector: str | None,
              timeout_seconds: int) -> Iterator[dict[str, Any]]:
        """One watch stream from `resource_version`: yields events {"type", "object"} until the server ends
        it (after `timeout_seconds`). Raises Gone when the version is too old; the caller re-lists."""
        request = requests.watch_request(kind, namespace, resource_version=resource_version,
                                         label_selector=label_selector, timeout_seconds=timeout_seconds)
        response = self.send(request, timeout=(self._timeout()[0], timeout_seconds + 15.0))
        try:
            for line in _lines(response):
                event = orjson.loads(line)
                if event.get("type") == "ERROR":
                    raise requests.watch_error(event.get("object") or {}, what=request.what)
                yield event
        finally:
            _close(response)

    def follow_log(self, namespace: str, name: str, container: str, *, timestamps: bool = False,
                   since_time: str | None = None) -> Iterator[bytes]:
        """The container's log lines (without newline) as they are written, until the container ends; with
        `timestamps`, each starts with its time and a space; `since_time`: from that second on."""
        request = requests.log_request(namespace, name, container, follow=True, timestamps=timestamps,
                                          since_time=since_time)
        response = self.send(request, timeout=(self._timeout()[0], LOG_READ_TIMEOUT))
        try:
            yield from _lines(response)
        finally:
            _close(response)

    def read_log(self, namespace: str, name: str, container: str, *, tail_lines: int | None = None) -> bytes:
        request = requests.log_request(namespace, name, container, tail_lines=tail_lines)
        return self.send(request).data  # type: ignore[no-any-return]


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
    what inventory.inventory() takes. Two paginated lists from the watch cache (resourceVersion=0), never a
    query per node."""
    kube = kube or Kube.connect(kubeconfig=kubeconfig, context=context)
    nodes, _ = kube.list("nodes", page_size=page_size, from_cache=True)
    # only the fields GPU accounting reads: at 150,000 pods a full decode costs seconds and a GiB
    pods, _ = kube.list("pods", None, field_selector=requests.NOT_TERMINATED, page_size=page_size,
                        decode=slimpods.decode_pod_list, from_cache=True)
    return nodes, pods
