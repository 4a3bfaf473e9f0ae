"""Production faults on pods that are real processes: frozen processes (the whole pod, or only the training
with sshd still answering), a throttled straggler, a node's graceful shutdown with SIGTERM and the grace
period, slow image pulls; all undone when the cluster stops (`localcluster down` too)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from kubeclient import as_body, present
from localcluster import PullTime, TestCluster, kubectl_path, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="namespaces and cgroups need root")]

PY = sys.executable
Factory = Callable[..., TestCluster]
FREEZER = Path("/sys/fs/cgroup/freezer")
CPU = Path("/sys/fs/cgroup/cpu")
COUNTER = ("import itertools, time\n"
           "for i in itertools.count():\n    print(i, flush=True)\n    time.sleep(0.05)\n")
# the training (a counter, `training` in its command line) beside a server standing in for sshd
TRAINER = ["sh", "-c", f'"{PY}" -u -c "$COUNTER" training & exec "{PY}" -m http.server 8080']


def pod(name: str, command: list[str], **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "python:3.11-slim", "command": command,
                                 "env": [{"name": "COUNTER", "value": COUNTER}]}
    container.update(spec.pop("container", {}))
    return {"metadata": {"name": name}, "spec": {"containers": [container], **spec}}


def counted(v1: client.CoreV1Api, name: str) -> int:
    log = v1.read_namespaced_pod_log(name, "default")
    return sum(1 for line in log.splitlines() if line.strip().isdigit())


def ready(v1: client.CoreV1Api, name: str) -> bool:
    conditions = v1.read_namespaced_pod(name, "default").status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def running(v1: client.CoreV1Api, name: str) -> bool:
    return bool(v1.read_namespaced_pod(name, "default").status.phase == "Running")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture
def cluster(local_cluster_factory: Factory) -> TestCluster:
    return local_cluster_factory(nodes=[1], runtime="process", gpu_taint=False)


def test_freezing_the_training_leaves_the_pod_running_ready_and_sshd_answering(cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(cluster.api_client())
    probe = {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1, "timeoutSeconds": 1,
             "failureThreshold": 1}
    v1.create_namespaced_pod("default", as_body(pod("trainer", TRAINER, terminationGracePeriodSeconds=2,
                                                    container={"readinessProbe": probe})))
    wait_until(lambda: ready(v1, "trainer") and counted(v1, "trainer") > 3, timeout=60, what="trainer ready")
    frozen = cluster.freeze("trainer", match="training")
    assert (frozen.action, frozen.method) == ("frozen", "cgroup freezer")
    assert [command.endswith("training") for _, _, command in frozen.processes] == [True]
    pid = frozen.processes[0][1]
    # the kernel's view: in a frozen cgroup of its pod, not running
    line = next(x for x in Path(f"/proc/{pid}/cgroup").read_text().splitlines() if ":freezer:" in x)
    assert (FREEZER / line.split(":", 2)[2].lstrip("/") / "freezer.state").read_text().strip() == "FROZEN"
    stalled = counted(v1, "trainer")
    time.sleep(2.5)   # twenty counts' time, and two readiness probes, answered by the server
    assert counted(v1, "trainer") == stalled
    status = v1.read_namespaced_pod("trainer", "default").status
    assert status.phase == "Running" and ready(v1, "trainer")
    thawed = cluster.thaw("trainer")
    assert thawed.action == "thawed" and pid in [p for _, p, _ in thawed.processes]
    wait_until(lambda: counted(v1, "trainer") > stalled, timeout=10, what="the count going on")
    # the whole pod frozen: the server cannot answer its probe any more
    whole = cluster.freeze("trainer")
    assert len(whole.processes) == 2
    wait_until(lambda: not ready(v1, "trainer"), timeout=15, what="NotReady")
    assert v1.read_namespaced_pod("trainer", "default").status.phase == "Running"
    # a frozen pod is deleted as a stopped one: SIGTERM waits, SIGKILL after its grace period ends it
    v1.delete_namespaced_pod("trainer", "default")

    def gone() -> bool:
        try:
            v1.read_namespaced_pod("trainer", "default")
        except ApiException as error:
            return bool(error.status == 404)
        return False

    wait_until(gone, timeout=30, what="the frozen pod deleted")
    assert not any(alive(p) for _, p, _ in whole.processes)


def test_a_throttled_pod_runs_under_a_cpu_quota_until_unthrottled(cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(cluster.api_client())
    v1.create_namespaced_pod("default", as_body(pod("burner", [PY, "-c", "while True: pass"])))
    wait_until(lambda: v1.read_namespaced_pod("burner", "default").status.phase == "Running", timeout=60,
               what="burner running")
    wait_until(lambda: present(v1.read_namespaced_pod("burner", "default").status.container_statuses)[0].state
               .running, timeout=30, what="its container started")
    fault = cluster.throttle("burner", 0.2)
    assert (fault.action, fault.method) == ("throttled to 0.2 CPU", "cgroup cpu quota")
    pid = fault.processes[0][1]
    uid = v1.read_namespaced_pod("burner", "default").metadata.uid
    path = next(x for x in Path(f"/proc/{pid}/cgroup").read_text().splitlines() if x.split(":")[1] == "cpu")
    directory = CPU / path.split(":", 2)[2].lstrip("/")
    assert directory.name == "throttle-main" and directory.parent.name == uid
    assert (directory / "cpu.cfs_quota_us").read_text().strip() == "20000"   # 0.2 x the 100 ms period

    def throttled_periods() -> int:
        stat = dict(line.split() for line in (directory / "cpu.stat").read_text().splitlines())
        return int(stat["nr_throttled"])

    wait_until(lambda: throttled_periods() > 0, timeout=10, what="the kernel throttling the burner")
    cleared = cluster.unthrottle("burner")
    assert cleared.action == "unthrottled" and [p for _, p, _ in cleared.processes] == [pid]
    assert not directory.exists()
    back = next(x for x in Path(f"/proc/{pid}/cgroup").read_text().splitlines() if x.split(":")[1] == "cpu")
    assert "throttle" not in back


def test_a_graceful_node_shutdown_gives_each_pod_sigterm_and_its_grace(cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(cluster.api_client())
    saver = ["sh", "-c", "trap 'echo checkpoint saved; exit 0' TERM; while true; do sleep 0.1; done"]
    stuck = ["sh", "-c", "trap '' TERM; while true; do sleep 0.1; done"]
    v1.create_namespaced_pod("default", as_body(pod("saver", saver)))
    v1.create_namespaced_pod("default", as_body(pod("stuck", stuck)))
    for name in ("saver", "stuck"):
        wait_until(partial(running, v1, name), timeout=60, what=name)
    done = cluster.shutdown_node("node-1", grace_period=3, critical_grace_period=1)
    assert sorted((p.name, p.grace_seconds) for p in done.pods) == [("saver", 2.0), ("stuck", 2.0)]
    # the group's time is its pods' grace period: the last SIGKILL may land as the shutdown returns
    wait_until(lambda: v1.read_namespaced_pod("stuck", "default").status.phase == "Failed", timeout=15,
               what="stuck killed")
    saved = v1.read_namespaced_pod("saver", "default").status
    killed = v1.read_namespaced_pod("stuck", "default").status
    # a pod whose every container exited 0 is Succeeded, still with the kubelet's reason and condition
    assert (saved.phase, saved.reason) == ("Succeeded", "Terminated")
    assert (killed.phase, killed.reason) == ("Failed", "Terminated")
    assert present(saved.container_statuses)[0].state.terminated.exit_code == 0
    assert present(killed.container_statuses)[0].state.terminated.exit_code == 137   # SIGKILL after 2 s
    for status in (saved, killed):
        target = next(c for c in present(status.conditions) if c.type == "DisruptionTarget")
        assert (target.reason, target.message) == (
            "TerminationByKubelet", "Pod was terminated in response to imminent node shutdown.")
    assert "checkpoint saved" in v1.read_namespaced_pod_log("saver", "default")


def test_a_slow_first_pull_on_process_nodes(local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory(nodes=[1], runtime="process", gpu_taint=False,
                                    pull_times=(PullTime("python", 1.0),))
    v1 = client.CoreV1Api(cluster.api_client())
    v1.create_namespaced_pod("default", as_body(pod("first", ["sleep", "600"])))
    wait_until(lambda: v1.read_namespaced_pod("first", "default").status.phase == "Running", timeout=60,
               what="first running")
    found = [(e.reason, e.message) for e in v1.list_namespaced_event(
        "default", field_selector="involvedObject.name=first").items]
    assert ("Pulling", 'Pulling image "python:3.11-slim"') in found
    pulled = next(m for r, m in found if r == "Pulled")
    assert pulled.startswith('Successfully pulled image "python:3.11-slim" in 1')
    v1.create_namespaced_pod("default", as_body(pod("bad", ["true"], container={"image": "Python:3.11"})))
    wait_until(lambda: (s := v1.read_namespaced_pod("bad", "default").status.container_statuses) and
               s[0].state.waiting.reason == "InvalidImageName", timeout=30, what="InvalidImageName")


def test_down_undoes_the_faults_of_a_cluster_started_by_up(tmp_path: Path) -> None:
    state = tmp_path / "cluster"
    localcluster = str(Path(PY).parent / "localcluster")

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(args), input=stdin, capture_output=True, text=True, timeout=120,
                              check=False, env={**os.environ, "KUBECONFIG": str(state / "kubeconfig")})

    images = tmp_path / "images.yaml"
    images.write_text("images:\n  - pattern: python\n    host: true\n")
    up = run(localcluster, "up", "--nodes", "1", "--cpu-nodes", "0", "--no-gpu-taint", "--runtime", "process",
             "--images", str(images), "--dir", str(state))
    assert up.returncode == 0, up.stderr
    server = int((state / "pid").read_text())
    cache = tempfile.mkdtemp(prefix="kubectl-cache-")
    try:
        manifest = ("apiVersion: v1\nkind: Pod\nmetadata: {name: sleeper}\nspec:\n  containers:\n"
                    "  - name: main\n    image: python:3.11-slim\n    command: [sleep, '600']\n")
        assert run(kubectl_path(), "--cache-dir", cache, "apply", "-f", "-", stdin=manifest).returncode == 0
        wait_until(lambda: run(kubectl_path(), "--cache-dir", cache, "get", "pod", "sleeper", "-o",
                               "jsonpath={.status.containerStatuses[0].state.running.startedAt}").stdout,
                   timeout=60, what="sleeper running")
        frozen = run(localcluster, "fault", "freeze", "sleeper", "--dir", str(state))
        assert frozen.returncode == 0, frozen.stderr
        assert frozen.stdout.startswith("pod default/sleeper: 1 process(es) frozen (cgroup freezer): ")
        throttled = run(localcluster, "fault", "throttle", "sleeper", "--cpu", "0.5", "--dir", str(state))
        assert throttled.returncode == 0, throttled.stderr
        listed = run(localcluster, "fault", "status", "--dir", str(state)).stdout.splitlines()
        assert listed == ["pod default/sleeper: 1 process(es) frozen (cgroup freezer)",
                          "pod default/sleeper: throttled to 0.5 CPU"]
        assert list(FREEZER.glob(f"localcluster-*-{server}-*"))
    finally:
        assert run(localcluster, "down", "--dir", str(state)).returncode == 0
    assert not list(FREEZER.glob(f"localcluster-*-{server}-*"))
    assert not list(CPU.glob(f"localcluster-*-{server}-*"))
