"""What the process runtime enforces besides NetworkPolicy, through the real API server and kubectl: memory
limits (OOMKilled), /dev/shm and memory-backed emptyDir sizes, PersistentVolumeClaim access modes (422,
Pending without its claim, Multi-Attach for ReadWriteOnce on a second node)."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from kubeclient import as_body, present
from localcluster import TestCluster

pytestmark = [pytest.mark.e2e, pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="cgroups, mounts and namespaces need root")]

PY = sys.executable
Factory = Callable[..., TestCluster]
SLEEP = ["sleep", "1000"]


def wait_for(what: Callable[[], Any], timeout: float = 30, every: float = 0.2, message: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s: {message or what}")
        time.sleep(every)


def pod(name: str, command: list[str], *, node: str | None = None,
        volumes: list[dict[str, Any]] | None = None, **container: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                            "containers": [{"name": "main", "image": "python:3.11-slim", "command": command,
                                            **container}]}
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    if volumes:
        spec["volumes"] = volumes
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def jsonpath(cluster: TestCluster, name: str, path: str) -> str:
    done = cluster.kubectl("get", "pod", name, "-o", f"jsonpath={path}")
    assert done.returncode == 0, done.stderr
    return done.stdout


def finished(v1: client.CoreV1Api, name: str) -> str:
    return str(wait_for(lambda: (phase := present(v1.read_namespaced_pod(name, "default").status).phase) in (
        "Succeeded", "Failed") and phase, timeout=60, message=f"pod {name} to finish"))


@pytest.fixture
def cluster(local_cluster_factory: Factory) -> TestCluster:
    return local_cluster_factory(nodes=[1, 1], runtime="process", gpu_taint=False)


# ---- memory limits ---------------------------------------------------------------------------------------
GREEDY = "b = bytearray({mib} << 20)\nb[::4096] = b'x' * len(b[::4096])\nprint('kept', len(b) >> 20, 'MiB')"


def test_a_container_over_its_memory_limit_ends_oom_killed(cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(cluster.api_client())
    limits: dict[str, Any] = {"resources": {"limits": {"memory": "64Mi"}, "requests": {"memory": "64Mi"}}}
    v1.create_namespaced_pod("default", as_body(pod("greedy", [PY, "-c", GREEDY.format(mib=256)], **limits)))
    v1.create_namespaced_pod("default", as_body(pod("modest", [PY, "-c", GREEDY.format(mib=16)], **limits)))
    assert finished(v1, "greedy") == "Failed"
    terminated = json.loads(jsonpath(cluster, "greedy", "{.status.containerStatuses[0].state.terminated}"))
    assert (terminated["reason"], terminated["exitCode"]) == ("OOMKilled", 137)
    # the limit is the container's own: under it, the same program completes
    assert finished(v1, "modest") == "Succeeded"
    assert v1.read_namespaced_pod_log("modest", "default").strip() == "kept 16 MiB"
    assert "OOMKilled" in cluster.kubectl("describe", "pod", "greedy").stdout


BUSY = ("import time\nstart = time.monotonic()\nwhile time.monotonic() - start < 2:\n    pass\n"
        "print(time.process_time() / (time.monotonic() - start))")


def test_a_cpu_limit_is_a_quota_of_cpu_time(cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(cluster.api_client())
    v1.create_namespaced_pod("default", as_body(pod("throttled", [PY, "-c", BUSY],
                                                    resources={"limits": {"cpu": "100m"}})))
    assert finished(v1, "throttled") == "Succeeded"
    share = float(v1.read_namespaced_pod_log("throttled", "default"))
    assert share < 0.2, share  # a busy loop held to a tenth of a CPU (unthrottled it takes a whole one)


# ---- /dev/shm ------------------------------------------------------------------------------------------
SHM = "import os\ns = os.statvfs('/dev/shm')\nprint(s.f_blocks * s.f_frsize)"


def test_dev_shm_is_64_mib_unless_the_pod_mounts_a_memory_volume_there(cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(cluster.api_client())
    v1.create_namespaced_pod("default", as_body(pod("default-shm", [PY, "-c", SHM])))
    v1.create_namespaced_pod("default", as_body(pod(
        "big-shm", [PY, "-c", SHM], volumeMounts=[{"name": "dshm", "mountPath": "/dev/shm"}],
        volumes=[{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "256Mi"}}])))
    assert finished(v1, "default-shm") == finished(v1, "big-shm") == "Succeeded"
    assert int(v1.read_namespaced_pod_log("default-shm", "default")) == 64 << 20
    assert int(v1.read_namespaced_pod_log("big-shm", "default")) == 256 << 20
    state = str(cluster.cluster.state_dir)
    assert state in Path("/proc/mounts").read_text()  # the volume's tmpfs, while the pod is there
    v1.delete_namespaced_pod("big-shm", "default", grace_period_seconds=0)
    wait_for(lambda: state not in Path("/proc/mounts").read_text(), message="the volume's tmpfs unmounted")


# ---- PersistentVolumeClaims ------------------------------------------------------------------------------
def claim(name: str, *modes: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
                       "spec": {"accessModes": list(modes), "resources": {"requests": {"storage": "1Gi"}}}})


def test_a_claim_needs_access_modes_and_a_storage_request(cluster: TestCluster) -> None:
    bare = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "bare"}, "spec": {}}
    done = cluster.kubectl("apply", "-f", "-", input=json.dumps(bare))
    assert done.returncode == 1
    assert done.stderr == ('The PersistentVolumeClaim "bare" is invalid: \n'
                           "* spec.accessModes: Required value: at least 1 access mode is required\n"
                           "* spec.resources[storage]: Required value\n")
    done = cluster.kubectl("apply", "-f", "-", input=claim("mixed", "ReadWriteOncePod", "ReadWriteMany"))
    assert "spec.accessModes: Forbidden: may not use ReadWriteOncePod with other access modes" in done.stderr
    done = cluster.kubectl("apply", "-f", "-", input=claim("typo", "ReadWriteOnly"))
    assert ('spec.accessModes: Unsupported value: "ReadWriteOnly": supported values: "ReadOnlyMany", '
            '"ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"') in done.stderr
    assert cluster.kubectl("apply", "-f", "-", input=claim("good", "ReadWriteOnce")).returncode == 0
    assert cluster.kubectl("get", "pvc", "good", "-o", "jsonpath={.status.accessModes}").stdout == \
        '["ReadWriteOnce"]'


def test_a_pod_waits_for_its_claim_and_a_read_write_once_claim_for_its_node(cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(cluster.api_client())
    data = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    mount = {"volumeMounts": [{"name": "data", "mountPath": "/data"}]}
    v1.create_namespaced_pod("default", as_body(pod("first", SLEEP, node="node-1", volumes=data, **mount)))
    scheduled = '{.status.conditions[?(@.type=="PodScheduled")].message}'
    message = wait_for(lambda: jsonpath(cluster, "first", scheduled))
    assert message == ('0/2 nodes are available: persistentvolumeclaim "data" not found. '
                       "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.")
    assert cluster.kubectl("apply", "-f", "-", input=claim("data", "ReadWriteOnce")).returncode == 0
    wait_for(lambda: v1.read_namespaced_pod("first", "default").status.phase == "Running")

    # a second node: the volume is attached to node-1 while a pod there uses it
    v1.create_namespaced_pod("default", as_body(pod("second", SLEEP, node="node-2", volumes=data, **mount)))
    uid = v1.read_namespaced_persistent_volume_claim("data", "default").metadata.uid
    expected = f'Multi-Attach error for volume "pvc-{uid}" Volume is already used by pod(s) first'
    waiting = wait_for(lambda: jsonpath(cluster, "second", "{.status.containerStatuses[0].state.waiting}"))
    assert json.loads(waiting) == {"reason": "ContainerCreating", "message": expected}
    events = json.loads(cluster.kubectl("get", "events", "--field-selector", "involvedObject.name=second",
                                        "-o", "json").stdout)["items"]
    attach = [e for e in events if e["reason"] == "FailedAttachVolume"]
    assert [(e["type"], e["message"], e["source"]["component"]) for e in attach] == [
        ("Warning", expected, "attachdetach-controller")]
    # the same node shares it
    v1.create_namespaced_pod("default", as_body(pod("third", SLEEP, node="node-1", volumes=data, **mount)))
    wait_for(lambda: v1.read_namespaced_pod("third", "default").status.phase == "Running")
    v1.delete_namespaced_pod("first", "default", grace_period_seconds=0)
    time.sleep(2)
    assert v1.read_namespaced_pod("second", "default").status.phase == "Pending"  # third still holds it
    v1.delete_namespaced_pod("third", "default", grace_period_seconds=0)
    wait_for(lambda: v1.read_namespaced_pod("second", "default").status.phase == "Running", timeout=30)


def test_a_read_write_many_claim_attaches_to_every_node(cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(cluster.api_client())
    assert cluster.kubectl("apply", "-f", "-", input=claim("shared", "ReadWriteMany")).returncode == 0
    data = [{"name": "data", "persistentVolumeClaim": {"claimName": "shared"}}]
    for node in ("node-1", "node-2"):
        mount = [{"name": "data", "mountPath": "/data"}]
        v1.create_namespaced_pod("default", as_body(pod(f"on-{node}", SLEEP, node=node, volumes=data,
                                                        volumeMounts=mount)))

    def running_on(node: str) -> bool:
        return v1.read_namespaced_pod(f"on-{node}", "default").status.phase == "Running"

    for node in ("node-1", "node-2"):
        wait_for(partial(running_on, node))
