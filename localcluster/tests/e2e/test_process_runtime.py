"""The process runtime's sandbox mechanics, driven through a small in-memory RuntimeHost (no API server):
real processes, real network namespaces, real mounts. Each test checks what a user of the pod would see."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from hostimages import HOST_IMAGES
from localcluster._internal.runtime.process import SANDBOX, ProcessRuntime
from localcluster._internal.runtime.runas import image_directories

pytestmark = [pytest.mark.e2e, pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="network, mount and PID namespaces need root")]

PY = sys.executable  # the interpreter running the tests: its environment is the pods' "image"


class StandInHost:
    """Just enough of the control plane for a runtime: objects by key, pod status merges, node readiness,
    change listeners, events."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.api_host = "127.0.0.1"
        self.api_port = 6443
        self.ca_cert_pem = b"-----BEGIN CERTIFICATE-----\nstand-in\n-----END CERTIFICATE-----\n"
        self.objects: dict[tuple[str, str | None, str], dict[str, Any]] = {}
        self.node_ready: dict[str, tuple[bool, str]] = {}
        self.events: list[tuple[str, str, str, str, str]] = []  # (pod, type, reason, message, fieldPath)
        self.changed = asyncio.Event()
        self.listeners: list[tuple[frozenset[str], Any]] = []
        for i, gpus in enumerate((4, 2), start=1):
            self.add({"kind": "Node", "metadata": {"name": f"node-{i}"},
                      "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "64",
                                                 "memory": "512Gi"}}},
                     "nodes")

    def add(self, obj: dict[str, Any], resource: str) -> dict[str, Any]:
        meta = obj["metadata"]
        meta.setdefault("uid", str(uuid.uuid4()))
        namespace = None if resource in ("nodes", "namespaces") else meta.setdefault("namespace", "default")
        old = self.objects.get((resource, namespace, meta["name"]))
        self.objects[(resource, namespace, meta["name"])] = obj
        self._notify(resource, copy.deepcopy(old), copy.deepcopy(obj))
        return obj

    def remove(self, resource: str, namespace: str | None, name: str) -> None:
        old = self.objects.pop((resource, namespace, name))
        self._notify(resource, old, None)

    def _notify(self, resource: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        for resources, callback in self.listeners:
            if resource in resources:
                callback(resource, old, new)

    def list_objects(self, resource: str) -> list[dict[str, Any]]:
        return [obj for (kind, _, _), obj in self.objects.items() if kind == resource]

    def on_change(self, resources: Any, callback: Any) -> None:
        self.listeners.append((frozenset(resources), callback))

    def get(self, resource: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        obj = self.objects.get((resource, namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    async def update_pod_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        pod = self.objects.get(("pods", namespace, name))
        if pod is not None:
            pod.setdefault("status", {}).update(copy.deepcopy(status))
            self.changed.set()

    async def set_node_ready(self, node: str, ready: bool, *, reason: str, message: str) -> None:
        self.node_ready[node] = (ready, reason)

    def service_account_token(self, namespace: str, service_account: str) -> str:
        return f"token-of-{namespace}-{service_account}"

    async def record_event(self, obj: dict[str, Any], *, reason: str, message: str, type: str = "Normal",
                           component: str = "kubelet", field_path: str = "") -> None:
        self.events.append((obj["metadata"]["name"], type, reason, message, field_path))

    def status(self, name: str, namespace: str = "default") -> dict[str, Any]:
        status: dict[str, Any] = self.objects[("pods", namespace, name)].get("status", {})
        return status

    async def wait(self, what: Callable[[], bool], timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not what():
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out; pods: {json.dumps(self._pods(), indent=1)[:4000]}")
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), min(left, 0.5))

    def _pods(self) -> dict[str, Any]:
        return {k[2]: v.get("status") for k, v in self.objects.items() if k[0] == "pods"}


def pod(name: str, node: str, containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "default", "uid": str(uuid.uuid4())},
            "spec": {"nodeName": node, "containers": containers, "restartPolicy": "Never", **spec},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}}


def container(name: str, script: str, **more: Any) -> dict[str, Any]:
    return {"name": name, "image": "busybox:1.36", "command": ["/bin/sh", "-c", script], **more}


def phase(host: StandInHost, name: str) -> str:
    return str(host.status(name).get("phase", ""))


def state(host: StandInHost, name: str, index: int = 0) -> dict[str, Any]:
    statuses = host.status(name).get("containerStatuses") or [{}]
    return dict(statuses[index].get("state") or {})


async def read_logs(runtime: ProcessRuntime, name: str, container_name: str, **kw: Any) -> str:
    chunks = [c async for c in runtime.logs("default", name, container_name, follow=kw.get("follow", False),
                                            tail_lines=kw.get("tail_lines"))]
    return b"".join(chunks).decode()


def ours(snapshot: dict[str, Any], cluster_id: str) -> dict[str, Any]:
    """A leftovers() snapshot without the bridges, veths, tables and cgroups of other local clusters (other
    engineers' tests start and stop theirs on this machine meanwhile)."""
    def keep(name: str) -> bool:
        return cluster_id in name or not any(mark in name for mark in ("dtb", "dtv", "localcluster-"))
    return {key: [v for v in value if keep(v)] if key in ("links", "nft tables", "cgroups") else value
            for key, value in snapshot.items()}


def leftovers() -> dict[str, Any]:
    """What a runtime could leave behind on the host."""
    links = json.loads(subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True,
                                      check=True).stdout)
    with open("/proc/mounts") as f:
        mounts = sorted(line.split()[1] for line in f)
    tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    return {
        "nft tables": sorted(line for line in tables.splitlines() if " dtb" in line),
        "cgroups": sorted(str(p) for p in Path("/sys/fs/cgroup").glob("*/localcluster-*")),
        "links": sorted(link["ifname"] for link in links),
        "netns": subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout,
        "mounts": mounts,
        "children": sorted(int(p) for p in Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children")
                           .read_text().split()),
        "paths": sorted(p for p in ("/etc/job", "/workspace", "/var/run/secrets", "/data")
                        if os.path.lexists(p)),
    }


@pytest_asyncio.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[ProcessRuntime, StandInHost]]:
    host = StandInHost(tmp_path / "state")
    host.state_dir.mkdir()
    runtime = ProcessRuntime(network="netns", images=HOST_IMAGES)
    await runtime.start(host)
    try:
        yield runtime, host
    finally:
        await runtime.shutdown()


@pytest.mark.asyncio
async def test_pod_sees_its_env_hostname_ip_and_volumes(cluster: tuple[ProcessRuntime, StandInHost]) -> None:
    runtime, host = cluster
    host.add({"metadata": {"name": "job-ssh"}, "type": "Opaque",
              "data": {"id_ed25519": base64.b64encode(b"PRIVATE").decode(),
                       "authorized_keys": base64.b64encode(b"ssh-ed25519 AAAA").decode()}}, "secrets")
    host.add({"metadata": {"name": "job-hostfile"}, "data": {"hostfile": "10.0.0.1 slots=2\n", "other": "x"}},
             "configmaps")
    script = ("echo HOST=$(hostname); echo IP=$(ip -4 -o addr show eth0 | awk '{print $4}'); "
              "echo RESOLVED=$(getent hosts $(hostname) | awk '{print $1}'); "
              "echo ENV=$POD_NAME,$POD_NS,$POD_IP,$NODE,$GREETING,$FROM_CM,$NVIDIA_VISIBLE_DEVICES,"
              "$CFG_other; "
              "echo KEY=$(cat /etc/job/ssh/id_ed25519); "
              "echo MODE=$(stat -L -c %a /etc/job/ssh/id_ed25519); "
              "echo HOSTFILE=$(cat /etc/job/hostfile/hostfile); "
              "ls /etc/job/hostfile; "
              "echo LABELS=$(cat /etc/podinfo/labels); echo SA=$(cat /var/run/secrets/kubernetes.io/"
              "serviceaccount/token),$(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace); "
              "echo PWD=$(pwd); echo scratch > /data/out; echo K8S=$KUBERNETES_SERVICE_HOST; "
              "echo ARGS=\"$0 $1\"")
    spec = pod("reporter", "node-1", [container(
        "main", script, args=["first-arg", "$(GREETING)-expanded"], workingDir="/workspace/run",
        env=[{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
             {"name": "POD_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
             {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
             {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
             {"name": "GREETING", "value": "hello"},
             {"name": "FROM_CM", "valueFrom": {"configMapKeyRef": {"name": "job-hostfile", "key": "other"}}}],
        envFrom=[{"configMapRef": {"name": "job-hostfile"}, "prefix": "CFG_"}],
        resources={"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "2"}},
        volumeMounts=[{"name": "ssh", "mountPath": "/etc/job/ssh", "readOnly": True},
                      {"name": "hostfile", "mountPath": "/etc/job/hostfile"},
                      {"name": "info", "mountPath": "/etc/podinfo"},
                      {"name": "data", "mountPath": "/data"}])],
        volumes=[{"name": "ssh", "secret": {"secretName": "job-ssh", "defaultMode": 0o600}},
                 {"name": "hostfile", "configMap": {"name": "job-hostfile",
                                                     "items": [{"key": "hostfile", "path": "hostfile"}]}},
                 {"name": "info", "downwardAPI": {"items": [{"path": "labels",
                                                             "fieldRef": {"fieldPath": "metadata.labels"}}]}},
                 {"name": "data", "persistentVolumeClaim": {"claimName": "results"}}])
    spec["metadata"]["labels"] = {"app": "reporter"}
    host.add({"metadata": {"name": "results"}, "spec": {"accessModes": ["ReadWriteOnce"]}},
             "persistentvolumeclaims")
    host.add(spec, "pods")
    before = leftovers()
    await runtime.run_pod(copy.deepcopy(spec))
    await host.wait(lambda: phase(host, "reporter") == "Succeeded")
    out = await read_logs(runtime, "reporter", "main")
    status = host.status("reporter")
    ip = status["podIP"]
    assert ip.startswith("10.") and ip.split(".")[2] == "1", ip  # node-1's /24
    assert "HOST=reporter" in out
    assert f"IP={ip}/16" in out
    assert f"RESOLVED={ip}" in out  # the hostname resolves to the pod IP, not 127.0.0.1 (Gloo)
    assert f"ENV=reporter,default,{ip},node-1,hello,x,0,1,x" in out
    assert "KEY=PRIVATE" in out and "MODE=600" in out
    assert "HOSTFILE=10.0.0.1 slots=2" in out and "\nhostfile\n" in out
    assert "other" not in out.split("HOSTFILE")[1]  # items: only the listed key
    assert 'LABELS=app="reporter"' in out
    assert "SA=token-of-default-default,default" in out
    assert "PWD=/workspace/run" in out
    assert f"K8S={runtime.api_host}" in out
    assert "ARGS=first-arg hello-expanded" in out
    term = state(host, "reporter")["terminated"]
    assert term["exitCode"] == 0 and term["reason"] == "Completed"
    claim = host.state_dir / "process" / "claims" / "default" / "results" / "out"
    assert claim.read_text() == "scratch\n"
    after = leftovers()
    assert after["paths"] == before["paths"] == []  # mount points were made inside the pod only


@pytest.mark.asyncio
async def test_pods_on_different_nodes_talk_by_pod_ip(cluster: tuple[ProcessRuntime, StandInHost]) -> None:
    runtime, host = cluster
    server = pod("server", "node-1", [container("srv", "")], restartPolicy="Always")
    server["spec"]["containers"][0]["command"] = [
        PY, "-c", "import socket\ns=socket.create_server(('0.0.0.0', 7000))\nwhile True:\n c,a=s.accept()\n"
                  " c.sendall(b'pong from ' + socket.gethostname().encode() + b' to ' + a[0].encode())\n"
                  " c.close()"]
    server["spec"]["containers"][0]["readinessProbe"] = {"tcpSocket": {"port": 7000}, "periodSeconds": 1}
    host.add(server, "pods")
    await runtime.run_pod(copy.deepcopy(server))
    await host.wait(lambda: host.status("server").get("containerStatuses", [{}])[0].get("ready") is True)
    server_ip = host.status("server")["podIP"]
    client = pod("client", "node-2", [container("cli", "")])
    client["spec"]["containers"][0]["command"] = [
        PY, "-c", f"import socket\nc=socket.create_connection(('{server_ip}', 7000), timeout=10)\n"
                  "print(c.recv(100).decode())"]
    host.add(client, "pods")
    await runtime.run_pod(copy.deepcopy(client))
    await host.wait(lambda: phase(host, "client") in ("Succeeded", "Failed"))
    client_ip = host.status("client")["podIP"]
    assert client_ip.split(".")[2] == "2" and server_ip.split(".")[2] == "1"
    assert (await read_logs(runtime, "client", "cli")).strip() == f"pong from server to {client_ip}"
    assert phase(host, "client") == "Succeeded"


@pytest.mark.asyncio
async def test_readiness_gates_ready_and_logs_follow(cluster: tuple[ProcessRuntime, StandInHost]) -> None:
    runtime, host = cluster
    spec = pod("gated", "node-1", [container(
        "main", "for i in 1 2 3 4 5 6; do echo line-$i; sleep 0.3; done; touch /tmp/ready; "
                "echo ready-now; sleep 1000",
        readinessProbe={"exec": {"command": ["cat", "/tmp/ready"]}, "periodSeconds": 1})])
    host.add(spec, "pods")
    await runtime.run_pod(copy.deepcopy(spec))
    await host.wait(lambda: "running" in state(host, "gated"))
    conditions = {c["type"]: c["status"] for c in host.status("gated")["conditions"]}
    assert conditions["Ready"] == "False" and conditions["ContainersReady"] == "False"
    assert phase(host, "gated") == "Running"
    follower = asyncio.ensure_future(read_logs(runtime, "gated", "main", follow=True))
    await host.wait(lambda: {c["type"]: c["status"] for c in host.status("gated")["conditions"]}["Ready"]
                    == "True")
    assert host.status("gated")["containerStatuses"][0]["ready"] is True
    assert not os.path.exists("/tmp/ready")  # the pod wrote into its own root, not the host's
    assert not follower.done()  # following a running container does not end
    await runtime.stop_pod(host.get("pods", "default", "gated") or {}, 1)
    followed = await asyncio.wait_for(follower, 10)
    assert followed.splitlines()[:7] == [f"line-{i}" for i in range(1, 7)] + ["ready-now"]


@pytest.mark.asyncio
async def test_deleted_pod_is_gone_within_its_grace_period(
        cluster: tuple[ProcessRuntime, StandInHost]) -> None:
    runtime, host = cluster
    # sleep as PID 1 ignores SIGTERM (as in a real container): the grace period ends it with SIGKILL
    stubborn = pod("stubborn", "node-1", [container("main", "exec sleep 1000")])
    polite = pod("polite", "node-2", [container("main", "trap 'echo got TERM; exit 0' TERM; echo armed; "
                                                        "while true; do sleep 0.1; done")])
    for p in (stubborn, polite):
        host.add(p, "pods")
        await runtime.run_pod(copy.deepcopy(p))
    await host.wait(lambda: "running" in state(host, "stubborn") and "running" in state(host, "polite"))
    for _ in range(100):  # a SIGTERM before the trap is set would be ignored by PID 1, as in a container
        if "armed" in await read_logs(runtime, "polite", "main"):
            break
        await asyncio.sleep(0.1)
    pids = [runtime.pods[p["metadata"]["uid"]].app[0].pid for p in (stubborn, polite)]
    assert all(pid and os.path.exists(f"/proc/{pid}") for pid in pids)
    polite_log = runtime.pods[polite["metadata"]["uid"]].app[0].log_path
    stopped: list[str] = []

    async def stop(p: dict[str, Any], grace: float) -> None:
        await runtime.stop_pod(p, grace)
        stopped.append(p["metadata"]["name"])
        assert not os.path.exists(f"/proc/{runtime_pid[p['metadata']['name']]}")

    runtime_pid = {"stubborn": pids[0], "polite": pids[1]}
    await asyncio.gather(stop(stubborn, 2), stop(polite, 30))
    # the polite one ended on SIGTERM, long before the stubborn one's 2 s grace period was over
    assert stopped == ["polite", "stubborn"]
    assert not polite_log.exists()  # the pod's directory went with it
    assert runtime.pods == {}


@pytest.mark.asyncio
async def test_restart_policy_and_exit_codes(cluster: tuple[ProcessRuntime, StandInHost]) -> None:
    runtime, host = cluster
    never = pod("never", "node-1", [container("main", "echo bye; exit 3")])
    onfailure = pod("onfailure", "node-1", [container(
        "main", "n=$(cat /data/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /data/n; [ $n -ge 3 ]",
        volumeMounts=[{"name": "data", "mountPath": "/data"}])],
        restartPolicy="OnFailure", volumes=[{"name": "data", "emptyDir": {}}])
    missing = pod("missing", "node-2", [{"name": "main", "image": "busybox", "command": ["no-such-binary"]}])
    for p in (never, onfailure, missing):
        host.add(p, "pods")
        await runtime.run_pod(copy.deepcopy(p))
    await host.wait(lambda: all(phase(host, n) in ("Succeeded", "Failed")
                                for n in ("never", "onfailure", "missing")), timeout=60)
    assert phase(host, "never") == "Failed"
    assert state(host, "never")["terminated"]["exitCode"] == 3
    assert state(host, "never")["terminated"]["reason"] == "Error"
    assert phase(host, "onfailure") == "Succeeded"
    assert host.status("onfailure")["containerStatuses"][0]["restartCount"] == 2
    assert host.status("onfailure")["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] == 1
    assert state(host, "missing")["terminated"]["reason"] == "StartError"
    assert "no-such-binary" in state(host, "missing")["terminated"]["message"]


@pytest.mark.asyncio
async def test_failed_node_fails_its_pods(cluster: tuple[ProcessRuntime, StandInHost]) -> None:
    runtime, host = cluster
    doomed = pod("doomed", "node-2", [container("main", "exec sleep 1000")], restartPolicy="Always")
    host.add(doomed, "pods")
    await runtime.run_pod(copy.deepcopy(doomed))
    await host.wait(lambda: "running" in state(host, "doomed"))
    pid = runtime.pods[doomed["metadata"]["uid"]].app[0].pid
    await runtime.fail_node("node-2")
    await host.wait(lambda: phase(host, "doomed") == "Failed")
    assert host.status("doomed")["reason"] == "NodeLost"
    assert host.node_ready["node-2"] == (False, "NodeStatusUnknown")
    assert not os.path.exists(f"/proc/{pid}")
    assert state(host, "doomed")["terminated"]["exitCode"] == 137


@pytest.mark.asyncio
async def test_shutdown_leaves_nothing_behind(tmp_path: Path) -> None:
    before = leftovers()
    host = StandInHost(tmp_path / "state")
    host.state_dir.mkdir()
    runtime = ProcessRuntime(network="netns", images=HOST_IMAGES)
    await runtime.start(host)
    for i, node in enumerate(("node-1", "node-2", "node-1")):
        spec = pod(f"p{i}", node, [container("a", "exec sleep 1000"),
                                   container("b", "trap 'exit 0' TERM; while true; do sleep 0.2; done",
                                             volumeMounts=[{"name": "e", "mountPath": "/workspace/e"}])],
                   volumes=[{"name": "e", "emptyDir": {}}])
        host.add(spec, "pods")
        await runtime.run_pod(copy.deepcopy(spec))
    await host.wait(lambda: all(len(host.status(f"p{i}").get("containerStatuses") or []) == 2 and all(
        "running" in c["state"] for c in host.status(f"p{i}")["containerStatuses"]) for i in range(3)))
    mine = runtime.network.cluster_id
    during = ours(leftovers(), mine)
    assert len(during["links"]) > len(ours(before, mine)["links"])  # the bridge and the veths were there
    assert during["nft tables"] == [f"table bridge {runtime.network.bridge}"]
    await runtime.shutdown()
    assert ours(leftovers(), mine) == ours(before, mine)
    assert list((tmp_path / "state").iterdir()) == []


DOCKERFILE = """\
FROM python:3.11-slim
ARG APP=/srv/app
ENV GREETING="hi there" APP_HOME=${APP}
COPY app/ ${APP}/
COPY --chmod=0700 run.sh /usr/local/bin/run-app
COPY build-only.txt /tmp/build/
RUN pip install -r /tmp/build/build-only.txt && rm -rf /tmp/build
WORKDIR ${APP}
ENTRYPOINT ["/usr/local/bin/run-app"]
CMD ["default-arg"]
"""


@pytest.mark.asyncio
async def test_image_maps_to_dockerfile_files_and_defaults(tmp_path: Path) -> None:
    from localcluster import ImageMap, ImageMapping

    context = tmp_path / "context"
    (context / "app" / "conf").mkdir(parents=True)
    (context / "app" / "conf" / "settings.ini").write_text("answer=42\n")
    (context / "run.sh").write_text('#!/bin/sh\necho "ENTRY $* in $(pwd) greeting=$GREETING '
                                    'settings=$(cat conf/settings.ini) mode=$(stat -c %a $0)"\n')
    (context / "build-only.txt").write_text("nothing\n")
    (context / "Dockerfile").write_text(DOCKERFILE)
    registry = ImageMap((ImageMapping("team/app", context / "Dockerfile"),))
    host = StandInHost(tmp_path / "state")
    host.state_dir.mkdir()
    runtime = ProcessRuntime(network="netns", images=registry)
    await runtime.start(host)
    image = "registry.example.com:5000/team/app:1.0"
    cases = {  # Kubernetes: command replaces ENTRYPOINT (and CMD); args replace CMD only
        "defaults": {},
        "args": {"args": ["from-args", "$(GREETING)"]},
        "command": {"command": ["/bin/sh", "-c", "echo COMMAND in $(pwd); ls /tmp/build 2>&1 | head -1"]},
    }
    try:
        for name, override in cases.items():
            spec = pod(name, "node-1", [{"name": "main", "image": image, **override}])
            host.add(spec, "pods")
            await runtime.run_pod(copy.deepcopy(spec))
        await host.wait(lambda: all(phase(host, n) == "Succeeded" for n in cases))
        logs = {n: (await read_logs(runtime, n, "main")).strip() for n in cases}
    finally:
        await runtime.shutdown()
    assert logs["defaults"] == "ENTRY default-arg in /srv/app greeting=hi there settings=answer=42 mode=700"
    assert logs["args"] == ("ENTRY from-args hi there in /srv/app greeting=hi there settings=answer=42 "
                            "mode=700")
    assert logs["command"].splitlines()[0] == "COMMAND in /srv/app"
    assert "No such file" in logs["command"]  # what a RUN removed is not in the image
    assert not os.path.exists("/srv/app")
    assert host.status("defaults")["containerStatuses"][0]["imageID"] == f"local://{context / 'Dockerfile'}"


@pytest.mark.asyncio
async def test_loopback_mode_gives_each_pod_its_own_loopback_address(tmp_path: Path) -> None:
    host = StandInHost(tmp_path / "state")
    host.state_dir.mkdir()
    runtime = ProcessRuntime(network="loopback", images=HOST_IMAGES)
    await runtime.start(host)
    try:
        for name, node in (("lo-a", "node-1"), ("lo-b", "node-2")):
            script = "hostname; getent hosts $(hostname) | awk '{print $1}'"
            spec = pod(name, node, [container("main", script)])
            host.add(spec, "pods")
            await runtime.run_pod(copy.deepcopy(spec))
        await host.wait(lambda: all(phase(host, n) == "Succeeded" for n in ("lo-a", "lo-b")))
        outs = {n: (await read_logs(runtime, n, "main")).split() for n in ("lo-a", "lo-b")}
    finally:
        await runtime.shutdown()
    ips = {n: host.status(n)["podIP"] for n in outs}
    assert runtime.api_host == "127.0.0.1"
    assert len(set(ips.values())) == 2
    assert all(ip.startswith("127.") and ip != "127.0.0.1" for ip in ips.values())
    assert outs == {n: [n, ips[n]] for n in outs}


@pytest.mark.asyncio
async def test_stale_bridge_of_a_dead_cluster_is_removed(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()  # a PID that no longer runs: the owner of a cluster that crashed
    subprocess.run(["ip", "link", "add", "dtbdeadbeef", "type", "bridge"], check=True)
    subprocess.run(["ip", "link", "set", "dtbdeadbeef", "alias",
                    f"distributetrain-localcluster pid={dead.pid} start=1"], check=True)
    host = StandInHost(tmp_path / "state")
    host.state_dir.mkdir()
    runtime = ProcessRuntime(network="netns", images=HOST_IMAGES)
    try:
        await runtime.start(host)
        assert "dtbdeadbeef" not in leftovers()["links"]
        assert runtime.network.bridge in leftovers()["links"]
    finally:
        await runtime.shutdown()
        subprocess.run(["ip", "link", "del", "dtbdeadbeef"], capture_output=True)


NON_ROOT_SCRIPT = """
import asyncio, copy, json, sys
from pathlib import Path
sys.path[:0] = sys.argv[2:4]
from test_process_runtime import StandInHost, container, phase, pod, read_logs
from hostimages import HOST_IMAGES
from localcluster import ProcessRuntime

async def main():
    host = StandInHost(Path(sys.argv[1]))
    host.add({"metadata": {"name": "cfg"}, "data": {"greeting": "hello\\n"}}, "configmaps")
    runtime = ProcessRuntime(images=HOST_IMAGES)
    await runtime.start(host)
    try:
        spec = pod("plain", "node-1", [container(
            "main", "hostname; cat /etc/demo/greeting; getent hosts $(hostname) | cut -d' ' -f1; id -u",
            volumeMounts=[{"name": "cfg", "mountPath": "/etc/demo"}])], volumes=[
            {"name": "cfg", "configMap": {"name": "cfg"}}])
        host.add(spec, "pods")
        await runtime.run_pod(copy.deepcopy(spec))
        await host.wait(lambda: phase(host, "plain") in ("Succeeded", "Failed"))
        print(json.dumps({"mode": runtime.network.mode, "userns": runtime.user_namespace,
                          "phase": phase(host, "plain"), "ip": host.status("plain")["podIP"],
                          "log": await read_logs(runtime, "plain", "main"),
                          "state": host.status("plain")["containerStatuses"][0]["state"]}))
    finally:
        await runtime.shutdown()

asyncio.run(main())
"""


# A user who runs the local cluster owns their checkout. Played here by `nobody`, which may not enter a
# checkout under a 0700 directory (or an interpreter under /root): the command runs in a private mount
# namespace where the shim's `reveal` shows it the interpreter, the environment and the project, as for a pod.
REVEALED = """
import os, sys
sys.path.insert(0, sys.argv[1])
import sandbox
sandbox._check(sandbox._libc.unshare(sandbox.CLONE_NEWNS), "unshare the mount namespace")
sandbox.mount(None, "/", None, sandbox.MS_REC | sandbox.MS_PRIVATE)
sandbox.reveal("", sys.argv[2].split(":"), set())
os.execvp(sys.argv[3], sys.argv[3:])
"""


def as_nobody(*command: str, reveal: tuple[Path, ...] = ()) -> list[str]:
    """`command` as `nobody`, shown the interpreter and its environment and, besides, `reveal` (e.g. these
    tests, which a checkout under a 0700 directory would hide from it)."""
    shown = [*image_directories(), *map(str, reveal)]
    return [PY, "-I", "-S", "-c", REVEALED, str(SANDBOX.parent), ":".join(shown),
            "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", *command]


def test_without_root_pods_get_loopback_addresses_and_user_namespaces(tmp_path: Path) -> None:
    state = Path(tempfile.mkdtemp(prefix="dt-nonroot-"))
    try:
        os.chown(state, 65534, 65534)
        here = Path(__file__).parent
        run = subprocess.run(as_nobody(PY, "-c", NON_ROOT_SCRIPT, str(state), str(here), str(here.parent),
                                       reveal=(here.parent,)),
                             capture_output=True, text=True, timeout=120,
                             env={**os.environ, "HOME": str(state)})
        assert run.returncode == 0, run.stderr
        result = json.loads(run.stdout.strip().splitlines()[-1])
        assert result["mode"] == "loopback" and result["userns"] is True
        assert result["phase"] == "Succeeded", (result["log"], str(result["state"]))
        # uid 0: root inside its own user namespace, nobody outside
        assert result["log"].split() == ["plain", "hello", result["ip"], "0"]
        assert result["ip"].startswith("127.") and result["ip"] != "127.0.0.1"
        assert not os.path.exists("/etc/demo")
        assert list(state.iterdir()) == [state / "process"] or list(state.iterdir()) == []
    finally:
        shutil.rmtree(state, ignore_errors=True)


@pytest.mark.asyncio
async def test_init_containers_run_first_and_a_failing_one_fails_the_pod(
        cluster: tuple[ProcessRuntime, StandInHost]) -> None:
    runtime, host = cluster
    shared = {"volumeMounts": [{"name": "work", "mountPath": "/work-dir"}]}
    good = pod("init-ok", "node-1", [container("main", "cat /work-dir/prepared", **shared)],
               initContainers=[container("prepare", "echo prepared-by-init > /work-dir/prepared", **shared)],
               volumes=[{"name": "work", "emptyDir": {}}])
    bad = pod("init-bad", "node-2", [container("main", "echo never")],
              initContainers=[container("check", "exit 4")])
    for p in (good, bad):
        host.add(p, "pods")
        await runtime.run_pod(copy.deepcopy(p))
    await host.wait(lambda: phase(host, "init-ok") == "Succeeded" and phase(host, "init-bad") == "Failed")
    assert (await read_logs(runtime, "init-ok", "main")).strip() == "prepared-by-init"
    assert host.status("init-ok")["initContainerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    bad_status = host.status("init-bad")
    assert bad_status["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 4
    assert bad_status["containerStatuses"][0]["state"] == {"waiting": {"reason": "PodInitializing"}}
    assert {c["type"]: c["status"] for c in bad_status["conditions"]}["Initialized"] == "False"


@pytest.mark.asyncio
async def test_failing_liveness_probe_restarts_the_container(
        cluster: tuple[ProcessRuntime, StandInHost]) -> None:
    runtime, host = cluster
    spec = pod("unhealthy", "node-1", [container(
        "main", "trap 'exit 0' TERM; echo started; while true; do sleep 0.1; done",
        livenessProbe={"exec": {"command": ["test", "-e", "/nonexistent-health-file"]},
                       "periodSeconds": 1, "failureThreshold": 2})], restartPolicy="Always",
        terminationGracePeriodSeconds=2)
    host.add(spec, "pods")
    await runtime.run_pod(copy.deepcopy(spec))
    await host.wait(lambda: (host.status("unhealthy").get("containerStatuses") or [{}])[0]
                    .get("restartCount", 0) >= 1, timeout=60)
    status = host.status("unhealthy")["containerStatuses"][0]
    assert "terminated" in status["lastState"]
    assert phase(host, "unhealthy") == "Running"


@pytest.mark.asyncio
async def test_pod_deleted_while_starting_leaves_nothing(cluster: tuple[ProcessRuntime, StandInHost]) -> None:
    runtime, host = cluster
    before = leftovers()
    for delay in (0, 0.01, 0.05, 0.2):
        spec = pod(f"brief-{int(delay * 1000)}", "node-1", [container("main", "exec sleep 1000")])
        host.add(spec, "pods")
        await runtime.run_pod(copy.deepcopy(spec))
        await asyncio.sleep(delay)
        await runtime.stop_pod(spec, 1)
    assert runtime.pods == {}
    assert ours(leftovers(), runtime.network.cluster_id) == ours(before, runtime.network.cluster_id)
