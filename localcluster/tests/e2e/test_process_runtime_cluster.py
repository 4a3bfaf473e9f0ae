"""The process runtime behind the real local cluster: pods created through the API server with the official
client or kubectl run as real processes, talk to the API server with in-cluster config, and go away
cleanly."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from test_process_runtime import leftovers, ours

from hostimages import HOST_IMAGES_FILE
from kubeclient import as_body, present
from localcluster import TestCluster, kubectl_path

pytestmark = [pytest.mark.e2e, pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="network, mount and PID namespaces need root")]

PY = sys.executable  # the interpreter running the tests: its environment is the pods' "image"
Factory = Callable[..., TestCluster]


def wait_for(what: Callable[[], Any], timeout: float = 60, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)


def pod_manifest(name: str, command: list[str], **spec: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "python:3.11-slim", "command": command,
                 **spec.pop("container", {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "containers": [container], **spec}}


def phase_of(v1: client.CoreV1Api, name: str) -> str:
    return str(v1.read_namespaced_pod(name, "default").status.phase)


def processes_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


@pytest.fixture
def cluster(local_cluster_factory: Factory) -> TestCluster:
    return local_cluster_factory(nodes=[2, 1], runtime="process", gpu_taint=False)


IN_CLUSTER = """
from kubernetes import client, config
config.load_incluster_config()
v1 = client.CoreV1Api()
print("nodes:", ",".join(sorted(n.metadata.name for n in v1.list_node().items)))
try:
    v1.list_namespaced_secret("default")
    print("secrets: allowed")
except client.ApiException as e:
    print("secrets:", e.status, e.reason)
"""


def test_pod_uses_in_cluster_config_under_its_service_account_rbac(cluster: TestCluster) -> None:
    api = cluster.api_client()
    v1, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    v1.create_namespaced_service_account("default", as_body({"metadata": {"name": "node-reader"}}))
    rbac.create_cluster_role(as_body({"metadata": {"name": "node-reader"}, "rules": [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "get"]}]}))
    rbac.create_cluster_role_binding(as_body({
        "metadata": {"name": "node-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "node-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "node-reader", "namespace": "default"}]}))
    v1.create_namespaced_pod("default", as_body(pod_manifest("incluster", [PY, "-c", IN_CLUSTER],
                                                             serviceAccountName="node-reader")))
    wait_for(lambda: phase_of(v1, "incluster") in ("Succeeded", "Failed"))
    out = v1.read_namespaced_pod_log("incluster", "default")
    assert "nodes: node-1,node-2" in out, out
    assert "secrets: 403 Forbidden" in out, out
    assert phase_of(v1, "incluster") == "Succeeded"


def test_kubectl_logs_follows_a_running_pod(cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(cluster.api_client())
    script = "import time\nfor i in range(12):\n print(f'tick {i}', flush=True)\n time.sleep(0.25)\n"
    v1.create_namespaced_pod("default", as_body(pod_manifest("ticker", [PY, "-c", script])))
    wait_for(lambda: v1.read_namespaced_pod("ticker", "default").status.phase == "Running")
    wait_for(lambda: "tick 0" in v1.read_namespaced_pod_log("ticker", "default"))
    follower = subprocess.Popen(
        [kubectl_path(), "--kubeconfig", str(cluster.kubeconfig), "logs", "-f", "ticker"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = follower.communicate(timeout=60)
    finally:
        follower.kill()
    # kubectl started while the pod was still printing and returned only when the container ended
    assert follower.returncode == 0, err
    assert out.splitlines() == [f"tick {i}" for i in range(12)]
    assert phase_of(v1, "ticker") == "Succeeded"


def test_deleted_pod_process_is_gone_within_its_grace_period(cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(cluster.api_client())
    marker = "1234.5678"  # `sleep` ignores SIGTERM as PID 1: only the end of the grace period stops it
    v1.create_namespaced_pod("default", as_body(pod_manifest("sleeper", ["sleep", marker])))
    wait_for(lambda: phase_of(v1, "sleeper") == "Running")
    assert processes_with(marker)
    v1.delete_namespaced_pod("sleeper", "default", grace_period_seconds=2)
    pod = v1.read_namespaced_pod("sleeper", "default")
    assert pod.metadata.deletion_timestamp is not None  # Terminating while the grace period runs

    def gone() -> bool:
        try:
            v1.read_namespaced_pod("sleeper", "default")
        except client.ApiException as e:
            return bool(e.status == 404)
        return False
    wait_for(gone, timeout=30)
    assert processes_with(marker) == []


def test_readiness_probe_gates_ready(cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(cluster.api_client())
    server = ("import socket, time\ntime.sleep(2)\ns = socket.create_server(('0.0.0.0', 8080))\n"
              "print('listening', flush=True)\nwhile True:\n    s.accept()[0].close()\n")
    v1.create_namespaced_pod("default", as_body(pod_manifest(
        "gated", [PY, "-c", server],
        container={"ports": [{"name": "http", "containerPort": 8080}],
                   "readinessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 1}})))

    def ready() -> str | None:
        conditions = v1.read_namespaced_pod("gated", "default").status.conditions or []
        return next((c.status for c in conditions if c.type == "Ready"), None)
    wait_for(lambda: phase_of(v1, "gated") == "Running")
    assert ready() == "False"  # running, but the port is not open yet
    wait_for(lambda: ready() == "True", timeout=30)
    assert "listening" in v1.read_namespaced_pod_log("gated", "default")
    status = v1.read_namespaced_pod("gated", "default").status
    assert present(status.container_statuses)[0].ready is True
    assert status.pod_ip.startswith("10.")


def test_local_down_leaves_nothing_behind(local_cluster_factory: Factory) -> None:
    before = leftovers()
    cluster = local_cluster_factory(nodes=[1, 1], runtime="process", gpu_taint=False)
    v1 = client.CoreV1Api(cluster.api_client())
    for i in range(3):
        v1.create_namespaced_pod("default", as_body(pod_manifest(f"idle-{i}", ["sleep", "1000"])))
    wait_for(lambda: all(phase_of(v1, f"idle-{i}") == "Running" for i in range(3)))
    mine = cluster.runtime.network.cluster_id  # type: ignore[attr-defined]
    assert ours(leftovers(), mine) != ours(before, mine)
    cluster.close()
    assert ours(leftovers(), mine) == ours(before, mine)


def test_up_says_once_what_is_not_enforced(tmp_path: Path) -> None:
    command = str(Path(sys.executable).parent / "localcluster")
    outputs = {}
    for name, flags in (("strict", []), ("lenient", ["--no-network-policy"])):
        state = tmp_path / name
        up = subprocess.run([command, "up", "--runtime", "process", "--nodes", "1", "--dir", str(state),
                             "--images", str(HOST_IMAGES_FILE), *flags], capture_output=True, text=True,
                            timeout=120, check=False)
        down = subprocess.run([command, "down", "--dir", str(state)], capture_output=True, text=True,
                              timeout=120, check=False)
        assert up.returncode == 0 and down.returncode == 0, up.stderr + down.stderr
        outputs[name] = [line for line in up.stdout.splitlines() if line.startswith("note: ")]
    # as root on these machines: NetworkPolicy (nftables) and memory limits (cgroup v1) are both enforced
    assert outputs == {"strict": [],
                       "lenient": ["note: NetworkPolicy is not enforced: switched off (--no-network-policy)"]}
