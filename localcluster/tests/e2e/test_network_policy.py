"""NetworkPolicy enforced by the process runtime, through the real API server: policies applied with kubectl,
pods created with the official client, and what a pod can open is what each pod's own log says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from kubernetes import client
from test_process_runtime import leftovers, ours

from kubeclient import as_body, present
from localcluster import TestCluster

pytestmark = [pytest.mark.e2e, pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces and nftables need root")]

PY = sys.executable
Factory = Callable[..., TestCluster]
JOB = {"app.kubernetes.io/managed-by": "distributetrain", "distributetrain.io/job": "train"}

# What a pod sees of one address: a line each time the answer changes, "open" or "closed".
PROBER = """
import socket, sys, time
last = None
while True:
    try:
        socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1).close()
        now = "open"
    except OSError:
        now = "closed"
    if now != last:
        print(now, flush=True)
        last = now
    time.sleep(0.2)
"""
SERVER = """
import socket
s = socket.create_server(("0.0.0.0", 2222))
while True:
    s.accept()[0].close()
"""

# The job's policy as the product writes it (src/distributetrain/manager/manifests.py network_policy).
JOB_POLICY = json.dumps({
    "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "train-network"},
    "spec": {"podSelector": {"matchLabels": JOB}, "policyTypes": ["Ingress"],
             "ingress": [{"from": [{"podSelector": {"matchLabels": JOB}}]}]}})


def wait_for(what: Callable[[], Any], timeout: float = 30, every: float = 0.2, message: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s: {message or what}")
        time.sleep(every)


def pod(name: str, command: list[str], *, node: str, labels: dict[str, str] | None = None,
        **container: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostname": node},
                     "containers": [{"name": "main", "image": "python:3.11-slim", "command": command,
                                     **container}]}}


def running(v1: client.CoreV1Api, name: str, namespace: str = "default") -> str:
    """The pod's IP once it runs."""
    def ip() -> str | None:
        status = v1.read_namespaced_pod(name, namespace).status
        return status.pod_ip if status.phase == "Running" else None
    return str(wait_for(ip, message=f"pod {namespace}/{name} running"))


def answers(v1: client.CoreV1Api, name: str, namespace: str = "default") -> list[str]:
    try:
        return v1.read_namespaced_pod_log(name, namespace).split()
    except client.ApiException:  # not started yet
        return []


def settles(v1: client.CoreV1Api, name: str, expected: str, namespace: str = "default") -> None:
    """The prober's latest answer becomes `expected` and stays so for a second."""
    wait_for(lambda: answers(v1, name, namespace)[-1:] == [expected], timeout=20,
             message=f"{namespace}/{name} sees {expected}: {answers(v1, name, namespace)}")
    time.sleep(1)
    assert answers(v1, name, namespace)[-1] == expected, answers(v1, name, namespace)


def kubectl(cluster: TestCluster, *args: str, input: str | None = None) -> str:
    done = cluster.kubectl(*args, input=input)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def cluster(local_cluster_factory: Factory) -> TestCluster:
    return local_cluster_factory(nodes=[1, 1, 1], runtime="process", gpu_taint=False)


def test_only_the_jobs_pods_open_a_workers_sshd_port(cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(cluster.api_client())
    v1.create_namespaced_pod("default", as_body(pod(
        "train-worker-0", [PY, "-c", SERVER], node="node-1", labels=JOB,
        readinessProbe={"tcpSocket": {"port": 2222}, "periodSeconds": 1})))
    worker = running(v1, "train-worker-0")
    v1.create_namespaced_pod("default", as_body(pod("train-chief", [PY, "-c", PROBER, worker, "2222"],
                                                    node="node-2", labels=JOB)))
    v1.create_namespaced_pod("default", as_body(pod("outsider", [PY, "-c", PROBER, worker, "2222"],
                                                    node="node-3")))
    settles(v1, "outsider", "open")  # no policy yet: every pod is open to every pod

    kubectl(cluster, "apply", "-f", "-", input=JOB_POLICY)
    settles(v1, "outsider", "closed")
    settles(v1, "train-chief", "open")
    # the kubelet's probe comes from the node, which a policy never shuts out
    statuses = present(v1.read_namespaced_pod("train-worker-0", "default").status.container_statuses)
    assert statuses[0].ready is True

    # a pod's labels decide: given the job's labels the outsider is admitted, without them it is not
    kubectl(cluster, "label", "pod", "outsider", *(f"{k}={v}" for k, v in JOB.items()))
    settles(v1, "outsider", "open")
    kubectl(cluster, "label", "pod", "outsider", *(f"{k}-" for k in JOB))
    settles(v1, "outsider", "closed")

    kubectl(cluster, "delete", "networkpolicy", "train-network")
    settles(v1, "outsider", "open")


IMPOSTOR = """
import socket, subprocess, sys
subprocess.run(["ip", "addr", "add", sys.argv[2] + "/32", "dev", "eth0"], check=True)
s = socket.socket()
s.settimeout(2)
s.bind((sys.argv[2], 0))
try:
    s.connect((sys.argv[1], 2222))
    print("open")
except OSError:
    print("closed")
"""


def test_a_pod_cannot_pass_for_an_admitted_pod_by_taking_its_address(cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(cluster.api_client())
    kubectl(cluster, "apply", "-f", "-", input=JOB_POLICY)
    v1.create_namespaced_pod("default", as_body(pod("train-worker-0", [PY, "-c", SERVER], node="node-1",
                                                    labels=JOB)))
    worker = running(v1, "train-worker-0")
    v1.create_namespaced_pod("default", as_body(pod("train-chief", [PY, "-c", PROBER, worker, "2222"],
                                                    node="node-2", labels=JOB)))
    chief = running(v1, "train-chief")
    settles(v1, "train-chief", "open")
    # root in its network namespace, it may add the chief's address; the bridge drops what it sends from it
    v1.create_namespaced_pod("default", as_body(pod("impostor", [PY, "-c", IMPOSTOR, worker, chief],
                                                    node="node-3")))
    wait_for(lambda: present(v1.read_namespaced_pod("impostor", "default").status).phase
             in ("Succeeded", "Failed"))
    assert answers(v1, "impostor") == ["closed"]


CROSS_NAMESPACE = """
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: from-team-a, namespace: default}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress:
  - from:
    - namespaceSelector: {matchLabels: {team: a}}
      podSelector: {matchLabels: {role: client}}
    ports:
    - {protocol: TCP, port: db}
"""


def test_namespace_and_pod_selectors_together_with_a_named_port(cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(cluster.api_client())
    kubectl(cluster, "create", "namespace", "other")
    v1.create_namespaced_pod("default", as_body(pod("db", [PY, "-c", SERVER], node="node-1",
                                                    labels={"app": "db"},
                                                    ports=[{"name": "db", "containerPort": 2222}])))
    db = running(v1, "db")
    kubectl(cluster, "apply", "-f", "-", input=CROSS_NAMESPACE)
    for name, labels in (("client", {"role": "client"}), ("other-role", {"role": "batch"})):
        v1.create_namespaced_pod("other", as_body(pod(name, [PY, "-c", PROBER, db, "2222"], node="node-2",
                                                      labels=labels)))
    settles(v1, "client", "closed", "other")  # the namespace lacks team=a
    kubectl(cluster, "label", "namespace", "other", "team=a")
    settles(v1, "client", "open", "other")
    settles(v1, "other-role", "closed", "other")  # right namespace, wrong pod


API_CHECK = """
import os, socket, sys
from kubernetes import client, config
host, port = os.environ["KUBERNETES_SERVICE_HOST"], int(os.environ["KUBERNETES_SERVICE_PORT"])
for name, address in (("api", (host, port)), ("worker", (sys.argv[1], 2222))):
    try:
        socket.create_connection(address, timeout=2).close()
        print(name, "open", flush=True)
    except OSError:
        print(name, "closed", flush=True)
config.load_incluster_config()
try:
    print("version", client.VersionApi().get_code(_request_timeout=3).git_version, flush=True)
except Exception as e:
    print("version", type(e).__name__, flush=True)
"""


def test_egress_rules_decide_what_a_pod_reaches_the_api_server_included(cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(cluster.api_client())
    runtime: Any = cluster.runtime
    api = f"{runtime.api_host}/32"
    port = cluster.cluster.api_port
    v1.create_namespaced_pod("default", as_body(pod("train-worker-0", [PY, "-c", SERVER], node="node-1")))
    worker = running(v1, "train-worker-0")
    api_only = {"podSelector": {"matchLabels": {"egress": "api-only"}}, "policyTypes": ["Egress"],
                "egress": [{"to": [{"ipBlock": {"cidr": api}}], "ports": [{"port": port}]},
                           {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]}]}
    deny = {"podSelector": {"matchLabels": {"egress": "none"}}, "policyTypes": ["Egress"]}
    policies = [{"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": name},
                 "spec": spec} for name, spec in (("api-only", api_only), ("deny-egress", deny))]
    kubectl(cluster, "apply", "-f", "-", input="\n---\n".join(json.dumps(p) for p in policies))
    for name in ("api-only", "none", "free"):
        v1.create_namespaced_pod("default", as_body(pod(f"egress-{name}", [PY, "-c", API_CHECK, worker],
                                                        node="node-2", labels={"egress": name})))

    def ended(name: str) -> bool:
        status = present(v1.read_namespaced_pod(f"egress-{name}", "default").status)
        return status.phase in ("Succeeded", "Failed")

    for name in ("api-only", "none", "free"):
        wait_for(partial(ended, name), timeout=60)
    lines = {name: v1.read_namespaced_pod_log(f"egress-{name}", "default").splitlines()
             for name in ("api-only", "none", "free")}
    assert lines["free"][:2] == ["api open", "worker open"], lines
    assert lines["free"][2].startswith("version v1."), lines
    assert lines["api-only"][:2] == ["api open", "worker closed"], lines
    assert lines["api-only"][2].startswith("version v1."), lines
    # a real cluster's default-deny egress shuts out the API server too
    assert lines["none"][:2] == ["api closed", "worker closed"], lines
    assert not lines["none"][2].startswith("version v1."), lines


def test_rules_go_with_the_pods_and_the_cluster(local_cluster_factory: Factory) -> None:
    before = leftovers()
    cluster = local_cluster_factory(nodes=[1, 1], runtime="process", gpu_taint=False)
    mine = cluster.runtime.network.cluster_id  # type: ignore[attr-defined]
    kubectl(cluster, "apply", "-f", "-", input=JOB_POLICY)
    v1 = client.CoreV1Api(cluster.api_client())
    v1.create_namespaced_pod("default", as_body(pod("train-worker-0", ["sleep", "1000"], node="node-1",
                                                    labels=JOB)))
    running(v1, "train-worker-0")
    pause = cluster.runtime.pods[  # type: ignore[attr-defined]
        v1.read_namespaced_pod("train-worker-0", "default").metadata.uid].net.pause.pid
    rules = subprocess.run(["nsenter", f"--net=/proc/{pause}/ns/net", "nft", "list", "ruleset"],
                           capture_output=True, text=True, check=True).stdout
    assert "table inet networkpolicy" in rules and "policy drop" in rules
    assert ours(leftovers(), mine)["nft tables"] == [f"table bridge dtb{mine}"]
    cluster.close()
    assert ours(leftovers(), mine) == ours(before, mine)
