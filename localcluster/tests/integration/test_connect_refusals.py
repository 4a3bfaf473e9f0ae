"""`pods/exec`, `attach`, `portforward` on the simulated runtime and the requests the API server refuses
before any upgrade, each with the real server's status and wording (no root needed; the process runtime's
streaming is tests/e2e/test_debug_verbs.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from localcluster import TestCluster, wait_until

SIM = ("is not available in this local cluster: its simulated runtime (--runtime sim) runs no processes. "
       "Start it with `localcluster up --runtime process` for exec, attach, cp and port-forward")


def pod(name: str, *containers: str, node: str | None = "node-1") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": c, "image": "busybox", "command": ["sleep", "1000"]}
                                           for c in containers]}
    if node is not None:
        spec["nodeName"] = node
    else:
        spec["nodeSelector"] = {"disk": "none"}  # no node has it: never scheduled
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


@pytest.fixture
def cluster(local_cluster_factory: Any) -> TestCluster:
    started: TestCluster = local_cluster_factory(nodes=[1], gpu_taint=False)
    for obj in (pod("one", "main"), pod("two", "app", "sidecar"), pod("nowhere", "main", node=None)):
        done = started.kubectl("apply", "-f", "-", input=json.dumps(obj))
        assert done.returncode == 0, done.stderr
    wait_until(lambda: "Running" in started.kubectl("get", "pod", "one").stdout, what="pod one running")
    return started


@pytest.mark.parametrize(("args", "subresource"), [
    (("exec", "one", "--", "hostname"), "exec"),
    (("attach", "one"), "attach"),
    (("port-forward", "pod/one", ":8080"), "portforward"),
])
def test_the_simulated_runtime_says_it_runs_no_processes(cluster: TestCluster, args: tuple[str, ...],
                                                         subresource: str) -> None:
    done = cluster.kubectl(*args, timeout=30)
    assert done.returncode == 1
    assert f"unable to upgrade connection: pods/{subresource} {SIM}\n" in done.stderr


@pytest.mark.parametrize(("path", "message"), [
    ("/api/v1/namespaces/default/pods/two/exec?command=ls&stdout=true",
     "a container name must be specified for pod two, choose one of: [app sidecar]"),
    ("/api/v1/namespaces/default/pods/one/exec?command=ls&stdout=true&container=nope",
     "container nope is not valid for pod one"),
    ("/api/v1/namespaces/default/pods/one/exec?stdout=true", "you must specify at least one command for the "
     "container"),
    ("/api/v1/namespaces/default/pods/one/exec?command=ls",
     "you must specify at least 1 of stdin, stdout, stderr"),
    ("/api/v1/namespaces/default/pods/nowhere/exec?command=ls&stdout=true",
     "pod nowhere does not have a host assigned"),
    ("/api/v1/namespaces/default/pods/nowhere/portforward", "pod nowhere does not have a host assigned"),
])
def test_requests_the_api_server_refuses_before_upgrading(cluster: TestCluster, path: str,
                                                          message: str) -> None:
    answer = cluster.request("POST", path, headers={"Connection": "Upgrade", "Upgrade": "SPDY/3.1",
                                                    "X-Stream-Protocol-Version": "v4.channel.k8s.io"})
    assert answer.status == 400
    assert answer.json()["message"] == message


def test_discovery_lists_the_connect_subresources(cluster: TestCluster) -> None:
    resources = {r["name"]: r for r in cluster.request("GET", "/api/v1").json()["resources"]}
    assert resources["pods/exec"]["verbs"] == ["create", "get"]
    assert resources["pods/exec"]["kind"] == "PodExecOptions"
    assert resources["pods/portforward"]["kind"] == "PodPortForwardOptions"
    assert resources["pods/attach"]["kind"] == "PodAttachOptions"
    can = cluster.kubectl("auth", "can-i", "create", "pods", "--subresource=exec")
    assert can.stdout.strip() == "yes"
