"""The small interface between the local cluster's control plane and a pod runtime (its kubelets).

The control plane owns every object; a runtime never writes the store directly, only through RuntimeHost.
All methods run on the cluster's single asyncio event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Collection
from pathlib import Path
from typing import Any, Protocol

ObjectChange = Callable[[str, dict[str, Any] | None, dict[str, Any] | None], None]


class RuntimeHost(Protocol):
    """What the control plane offers a runtime."""

    state_dir: Path        # the runtime's directory (per-pod dirs, logs); removed by `localcluster down`
    api_host: str          # the address pods reach the API server on (e.g. 10.244.0.1 or 127.0.0.1)
    api_port: int
    ca_cert_pem: bytes     # the cluster CA, for pods' /var/run/secrets/kubernetes.io/serviceaccount/ca.crt

    def get(self, resource: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The current object (a deep copy), e.g. get("secrets", "default", "job-ssh"); None when absent."""
        ...

    async def update_pod_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Merge these top-level keys into the pod's .status, bump resourceVersion, notify watchers.
        A pod that no longer exists is ignored."""
        ...

    async def set_node_ready(self, node: str, ready: bool, *, reason: str, message: str) -> None:
        """Set the node's Ready condition (a failed node is NotReady)."""
        ...

    def service_account_token(self, namespace: str, service_account: str) -> str:
        """A bearer token the API server accepts as system:serviceaccount:NAMESPACE:NAME."""
        ...

    def list_objects(self, resource: str) -> list[dict[str, Any]]:
        """Every object of a resource in every namespace, by its store key ("pods",
        "networkpolicies.networking.k8s.io"). Read-only: the caller must not change them."""
        ...

    def on_change(self, resources: Collection[str], callback: ObjectChange) -> None:
        """After every write to one of `resources`, call callback(resource, old, new): old is None for a
        creation, new None for a deletion. It runs inside the write, so it may only queue work."""
        ...

    async def record_event(self, obj: dict[str, Any], *, reason: str, message: str, type: str = "Normal",
                           component: str = "kubelet", field_path: str = "") -> None:
        """Record an Event about `obj` (a pod, as the runtime was given it), as `kubectl describe` shows it:
        reason (Pulled, Created, Started, Killing, BackOff, Unhealthy, Failed...), message, type Normal or
        Warning, the reporting component (the kubelet's events name the pod's node as their host);
        `field_path` names a container (`spec.containers{NAME}`). Repeats within 10 minutes aggregate into
        one event's count. Never raises: an event never fails the pod operation behind it."""
        ...


class PodRuntime(Protocol):
    """A kubelet for every node of the local cluster."""

    async def start(self, host: RuntimeHost) -> None:
        """Called once before any pod is given."""
        ...

    async def run_pod(self, pod: dict[str, Any]) -> None:
        """A pod was bound to a node (spec.nodeName set). Start it and report its status through the host
        (phase, podIP, hostIP, startTime, conditions, containerStatuses); return without waiting for it
        to end."""
        ...

    async def stop_pod(self, pod: dict[str, Any], grace_seconds: float) -> None:
        """The pod is being deleted: SIGTERM its containers, SIGKILL after the grace period, release what it
        held (IP, mounts, directories). Return once nothing of it runs; the control plane then removes it."""
        ...

    def logs(self, namespace: str, name: str, container: str, *, follow: bool,
             tail_lines: int | None, timestamps: bool = False,
             since: int | None = None) -> AsyncIterator[bytes]:
        """The container's log; with `follow`, keep yielding until the container ends. `timestamps`: each line
        prefixed with its time (RFC3339, 9 fraction digits) and a space; `since` (ns since the epoch): only
        lines from then on."""
        ...

    async def fail_node(self, node: str) -> None:
        """Test hook: the node dies. Its pods' containers end (phase Failed, reason NodeLost)."""
        ...

    async def kill_pod(self, pod: dict[str, Any], grace_seconds: float, *, reason: str, message: str,
                       conditions: list[dict[str, Any]]) -> None:
        """The kubelet ends a pod that is not being deleted (graceful node shutdown, doubles/nodeshutdown.py):
        SIGTERM to its containers, SIGKILL after `grace_seconds`, no restart; then its final status, as
        the kubelet reports a pod it terminated: phase Succeeded if every container exited 0, else Failed,
        `reason` and `message`, `conditions` added (lastTransitionTime: now), containers that never ran
        terminated as ContainerStatusUnknown. Returns once nothing of it runs; the pod stays until deleted."""
        ...

    async def shutdown(self) -> None:
        """Stop every pod; remove all the runtime made (processes, namespaces, veths, mounts, files)."""
        ...


class StreamingError(Exception):
    """An exec, attach or port-forward the runtime cannot serve; the message says why, for the user."""


class ExecSession(Protocol):
    """A command running in a container for `exec` (or a container `attach`ed to), as the API server streams
    it. Readers return b"" once their stream has ended."""

    async def write_stdin(self, data: bytes) -> None: ...

    async def close_stdin(self) -> None: ...

    async def read_stdout(self) -> bytes: ...

    async def read_stderr(self) -> bytes:
        """Always b"" with a terminal (its output is all on stdout)."""
        ...

    def resize(self, width: int, height: int) -> None:
        """The terminal's new size (ignored without one)."""
        ...

    async def wait(self) -> int:
        """The exit code (128+N for signal N)."""
        ...

    async def kill(self) -> None:
        """The client went away: end what still runs."""
        ...


class StreamingRuntime(Protocol):
    """What a runtime offers for `kubectl exec`, `attach`, `cp` and `port-forward` (the process runtime does;
    the simulated one runs no processes and has none of it). Each raises StreamingError when it cannot."""

    async def exec_in_container(self, namespace: str, name: str, container: str, command: list[str], *,
                                tty: bool, stdin: bool) -> ExecSession: ...

    async def attach_container(self, namespace: str, name: str, container: str, *,
                               tty: bool) -> ExecSession: ...

    async def open_pod_port(self, namespace: str, name: str,
                            port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A TCP connection to localhost:PORT as the pod sees it (inside its network namespace)."""
        ...
