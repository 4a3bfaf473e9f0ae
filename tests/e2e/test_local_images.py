"""Our images on the local cluster, as scripts/local-cluster-images.yaml maps them (the map every cluster of
these tests gets, tests/conftest.py): the base image is base-image/Dockerfile's files and defaults, its
sshd worker is reached from another pod and through `kubectl port-forward` as a user debugging a job does,
Horovod over Gloo runs across two of its pods, and the manager image runs as its non-root USER."""

from __future__ import annotations

import base64
import io
import os
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import paramiko
import pytest
from kubernetes import client
from localcluster import TestCluster, kubectl_path, wait_until

from apiclient import as_body, present
from distributetrain import naming
from distributetrain.manager import sshkeys

pytestmark = [pytest.mark.e2e, pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="network, mount and PID namespaces need root")]

REPO = Path(__file__).resolve().parents[2]
BASE = "registry.example.com/distributetrain/base:0.1.0"
MANAGER_IMAGE = "distributetrain/manager:0.1.0"
SSH_MOUNT = {"name": "ssh", "mountPath": "/etc/distributetrain/ssh", "readOnly": True}


@pytest.fixture
def pod_security_labels() -> dict[str, str]:
    return {}  # what these pods are checked for is the images, not the demo namespace's Pod Security


@pytest.fixture
def cluster(local_cluster_factory: Callable[..., TestCluster]) -> TestCluster:
    return local_cluster_factory(nodes=[2, 1], runtime="process", gpu_taint=False)


def pod(name: str, containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"restartPolicy": "Never", "containers": containers, **spec}}


def finished(v1: client.CoreV1Api, name: str, timeout: float = 60) -> tuple[str, str]:
    """The pod's phase once it ended, and its log."""
    def ended() -> str | None:
        phase = v1.read_namespaced_pod(name, "default").status.phase
        return phase if phase in ("Succeeded", "Failed") else None
    phase = wait_until(ended, timeout=timeout, interval=0.2, what=f"pod {name} to end")
    return phase, v1.read_namespaced_pod_log(name, "default")


def ready(v1: client.CoreV1Api, name: str) -> str:
    """The pod's IP once its containers are ready."""
    def check() -> str | None:
        status = v1.read_namespaced_pod(name, "default").status
        containers = status.container_statuses or []
        return status.pod_ip if containers and all(c.ready for c in containers) else None
    return wait_until(check, timeout=60, interval=0.2, what=f"pod {name} to be ready")


def ssh_secret(v1: client.CoreV1Api, name: str) -> sshkeys.KeyPair:
    """A job's key pair as the manager stores it: a Secret the workers' sshd and the chief mount."""
    keys = sshkeys.generate(name)
    data = {"ssh-privatekey": keys.private_openssh(), "id_ed25519": keys.private_openssh(),
            "authorized_keys": keys.authorized_keys().encode()}
    v1.create_namespaced_secret("default", as_body({
        "metadata": {"name": name}, "type": "kubernetes.io/ssh-auth",
        "data": {key: base64.b64encode(value).decode() for key, value in data.items()}}))
    return keys


def worker(v1: client.CoreV1Api, name: str, secret: str, *, node: str,
           mounts: list[dict[str, Any]] | None = None, volumes: list[dict[str, Any]] | None = None) -> str:
    """A base-image worker (no command: the image's ENTRYPOINT and CMD ["worker"], sshd on 2222), ready; its
    IP. The image runs sshd as its non-root account, which reads the key through the pod's fsGroup."""
    v1.create_namespaced_pod("default", as_body(pod(name, [{
        "name": "worker", "image": BASE, "volumeMounts": [SSH_MOUNT, *(mounts or [])],
        "readinessProbe": {"tcpSocket": {"port": 2222}, "periodSeconds": 1}}],
        volumes=[{"name": "ssh", "secret": {"secretName": secret, "defaultMode": 0o400}}, *(volumes or [])],
        nodeName=node, restartPolicy="Always", securityContext={"fsGroup": naming.IMAGE_GID})))
    return ready(v1, name)


def test_the_base_image_is_its_dockerfile(cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(cluster.api_client())
    v1.create_namespaced_pod("default", as_body(pod("base", [{
        "name": "main", "image": BASE,
        "command": ["/bin/sh", "-c", "pwd; echo $DT_SSH_PORT; cat /opt/distributetrain/sshd_config; "
                    "test -x /usr/local/bin/distributetrain-entrypoint && echo entrypoint-ok; "
                    "python -c 'import distributetrain.chief.launcher, horovod; print(\"imports-ok\")'"]}])))
    phase, out = finished(v1, "base")
    assert phase == "Succeeded", out
    lines = out.splitlines()
    assert lines[:2] == ["/opt/distributetrain", "2222"]  # its WORKDIR and ENV
    assert (REPO / "base-image" / "sshd_config").read_text() in out  # a file it COPYs
    assert "entrypoint-ok" in lines and "imports-ok" in lines


def test_a_base_image_worker_runs_sshd_reachable_from_another_pod(cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(cluster.api_client())
    ssh_secret(v1, "job-ssh")
    worker_ip = worker(v1, "job-worker-0", "job-ssh", node="node-1")
    v1.create_namespaced_pod("default", as_body(pod("job-chief", [{
        "name": "chief", "image": BASE, "volumeMounts": [SSH_MOUNT],
        "command": ["/bin/sh", "-c", "cp /etc/distributetrain/ssh/id_ed25519 /tmp/k && chmod 600 /tmp/k && "
                    f"ssh -i /tmp/k -p 2222 -o StrictHostKeyChecking=no -o BatchMode=yes "
                    f"{naming.IMAGE_USER}@{worker_ip} 'hostname; id -un; ip -4 -o addr show eth0'"]}],
        volumes=[{"name": "ssh", "secret": {"secretName": "job-ssh", "defaultMode": 0o400}}],
        nodeName="node-2", securityContext={"fsGroup": naming.IMAGE_GID})))
    phase, out = finished(v1, "job-chief")
    assert phase == "Succeeded", out + v1.read_namespaced_pod_log("job-worker-0", "default")
    assert "job-worker-0" in out.splitlines() and f"inet {worker_ip}/16" in out
    assert naming.IMAGE_USER in out.splitlines()  # the account the image's RUN created, in the container only


HOROVOD_ALLREDUCE = """\
import socket
import horovod.tensorflow as hvd
import tensorflow as tf
hvd.init()
total = hvd.allreduce(tf.constant([float(hvd.rank() + 1)]), op=hvd.Sum)
print("rank", hvd.rank(), "of", hvd.size(), "on", socket.gethostname(), "sum", float(total.numpy()[0]))
"""


@pytest.mark.timeout(600)
def test_horovod_over_gloo_across_two_base_image_pods(cluster: TestCluster) -> None:
    """The pitfall a kubelet's hostname and /etc/hosts avoid: Gloo advertises the address its hostname
    resolves to; with 127.0.0.1 the ranks on the other pod could not connect."""
    v1 = client.CoreV1Api(cluster.api_client())
    ssh_secret(v1, "hvd-ssh")
    v1.create_namespaced_config_map("default", as_body({"metadata": {"name": "hvd-code"},
                                                        "data": {"allreduce.py": HOROVOD_ALLREDUCE}}))
    code = {"name": "code", "configMap": {"name": "hvd-code"}}
    code_mount = {"name": "code", "mountPath": "/code"}
    worker_ip = worker(v1, "hvd-worker-0", "hvd-ssh", node="node-1", mounts=[code_mount], volumes=[code])
    launch = ("cp /etc/distributetrain/ssh/id_ed25519 /tmp/key && chmod 600 /tmp/key && "
              f"horovodrun -np 3 -H {worker_ip}:2,hvd-chief:1 -p 2222 --ssh-identity-file /tmp/key --gloo "
              "--network-interface eth0 python /code/allreduce.py")
    v1.create_namespaced_pod("default", as_body(pod("hvd-chief", [{
        "name": "chief", "image": BASE, "volumeMounts": [SSH_MOUNT, code_mount],
        "command": ["/bin/sh", "-c", launch]}],
        volumes=[{"name": "ssh", "secret": {"secretName": "hvd-ssh", "defaultMode": 0o400}}, code],
        nodeName="node-2", securityContext={"fsGroup": naming.IMAGE_GID})))
    phase, out = finished(v1, "hvd-chief", timeout=300)
    assert phase == "Succeeded", out
    ranks = sorted(line.split(">:", 1)[1] for line in out.splitlines() if "<stdout>:rank" in line)
    assert ranks == ["rank 0 of 3 on hvd-worker-0 sum 6.0", "rank 1 of 3 on hvd-worker-0 sum 6.0",
                     "rank 2 of 3 on hvd-chief sum 6.0"]


@pytest.mark.parametrize("protocol", ["websocket", "spdy"])
def test_port_forward_carries_an_ssh_session_to_a_worker(cluster: TestCluster, protocol: str) -> None:
    """`kubectl port-forward pod/WORKER 12222:2222`, as docs/local-cluster.md's "Debugging a job" does, over
    both protocols kubectl speaks (SPDY is its fallback, forced by KUBECTL_PORT_FORWARD_WEBSOCKETS)."""
    v1 = client.CoreV1Api(cluster.api_client())
    keys = ssh_secret(v1, "fwd-ssh")
    worker(v1, "fwd-worker", "fwd-ssh", node="node-1")
    env = {**os.environ, **({"KUBECTL_PORT_FORWARD_WEBSOCKETS": "false"} if protocol == "spdy" else {})}
    forward = subprocess.Popen([kubectl_path(), "--kubeconfig", str(cluster.kubeconfig), "port-forward",
                                "pod/fwd-worker", ":2222"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env)
    try:
        line = present(forward.stdout).readline()  # Forwarding from 127.0.0.1:PORT -> 2222
        assert line.startswith("Forwarding from 127.0.0.1:"), line
        port = int(line.split(":")[1].split()[0])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            transport = paramiko.Transport(sock)
            transport.start_client(timeout=20)
            assert transport.remote_version.startswith("SSH-2.0-OpenSSH")
            key = paramiko.Ed25519Key.from_private_key(io.StringIO(keys.private_openssh().decode()))
            transport.auth_publickey(naming.IMAGE_USER, key)
            channel = transport.open_session()
            channel.exec_command("hostname")
            assert channel.makefile().read().decode().strip() == "fwd-worker"
            transport.close()
    finally:
        forward.terminate()
        forward.communicate(timeout=20)


def test_the_manager_image_runs_as_its_non_root_user(cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(cluster.api_client())
    who = "import os; print(os.getuid(), os.getgid())"
    v1.create_namespaced_pod("default", as_body(pod("manager-image", [{
        "name": "main", "image": MANAGER_IMAGE, "command": ["python3", "-c", who]}],
        securityContext={"runAsNonRoot": True})))  # the kubelet checks its numeric USER, 65532:65532
    phase, out = finished(v1, "manager-image")
    assert (phase, out) == ("Succeeded", "65532 65532\n")
