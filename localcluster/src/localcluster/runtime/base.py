"""The small interface between the local cluster's control plane and a pod runtime (its kubelets).

The control plane owns every object; a runtime never writes the store directly, only through RuntimeHost.
All methods run on the cluster's single asyncio event loop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol


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

    async def shutdown(self) -> None:
        """Stop every pod; remove all the runtime made (processes, namespaces, veths, mounts, files)."""
        ...
