"""Debugging a pod the way Kubernetes users do, through the real kubectl 1.37 and the process runtime:
`kubectl exec` (with and without a terminal, exit codes, stdin), `kubectl cp` both ways, `kubectl attach`,
`kubectl port-forward` (HTTP, several connections at once, a closed port, the pod ending), and RBAC.

Each exec and port-forward test runs over both protocols kubectl speaks: WebSocket (what it tries first)
and SPDY/3.1 (its fallback, forced with KUBECTL_REMOTE_COMMAND_WEBSOCKETS and
KUBECTL_PORT_FORWARD_WEBSOCKETS=false).
One cluster serves the whole module; each test makes its own pods.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import pty
import select
import socket
import struct
import subprocess
import sys
import termios
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hostimages import HOST_IMAGES
from kubeclient import make_api_client
from localcluster import TestCluster, kubectl_path, start_cluster, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="network, mount and PID namespaces need root")]

PY = sys.executable
PROTOCOLS = ["websocket", "spdy"]


def protocol_env(protocol: str) -> dict[str, str]:
    if protocol == "websocket":
        return {}
    return {"KUBECTL_REMOTE_COMMAND_WEBSOCKETS": "false", "KUBECTL_PORT_FORWARD_WEBSOCKETS": "false"}


def apply(cluster: TestCluster, *objects: dict[str, Any]) -> None:
    for obj in objects:
        done = cluster.kubectl("apply", "-f", "-", input=json.dumps(obj))
        assert done.returncode == 0, done.stderr


def running_pod(cluster: TestCluster, name: str, containers: list[dict[str, Any]], **spec: Any) -> None:
    apply(cluster, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                    "spec": {"containers": containers, **spec}})
    ready, every = "jsonpath={.status.containerStatuses[*].ready}", ["true"] * len(containers)
    wait_until(lambda: cluster.kubectl("get", "pod", name, "-o", ready).stdout.split() == every,
               timeout=60, interval=0.2, what=f"pod {name} to be ready")


@pytest.fixture(scope="module")
def cluster() -> Iterator[TestCluster]:
    started = start_cluster(nodes=[2, 1], runtime="process", gpu_taint=False, client_factory=make_api_client,
                            images=HOST_IMAGES)
    try:
        apply(started, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "site"},
                        "data": {"greeting": "hello from the pod\n"}})
        running_pod(started, "shell", [{
            "name": "main", "image": "busybox", "command": ["sleep", "3600"],
            "env": [{"name": "FOO", "value": "bar"}],
            "volumeMounts": [{"name": "site", "mountPath": "/etc/demo"}]}],
            volumes=[{"name": "site", "configMap": {"name": "site"}}],
            securityContext={"runAsUser": 1000, "runAsGroup": 1000})
        yield started
    finally:
        started.close()


def exec_in(cluster: TestCluster, protocol: str, *args: str, input: str | None = None,
            token: str | None = None) -> subprocess.CompletedProcess[str]:
    return cluster.kubectl("exec", *args, input=input, token=token, extra_env=protocol_env(protocol))


# ---- exec --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_exec_runs_in_the_pods_namespaces_as_its_user(cluster: TestCluster, protocol: str) -> None:
    pod_ip = cluster.kubectl("get", "pod", "shell", "-o", "jsonpath={.status.podIP}").stdout
    done = exec_in(cluster, protocol, "shell", "--", "sh", "-c",
                   "hostname; echo $FOO; cat /etc/demo/greeting; id -u; "
                   "tr '\\0' ' ' < /proc/1/cmdline; echo; "
                   "ip -4 -o addr show eth0 | awk '{print $4}'; echo to-stderr >&2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["shell", "bar", "hello from the pod", "1000", "sleep 3600 ",
                                        f"{pod_ip}/16"]
    assert done.stderr == "to-stderr\n"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_failing_command_carries_its_exit_code_back(cluster: TestCluster, protocol: str) -> None:
    done = exec_in(cluster, protocol, "shell", "--", "sh", "-c", "echo partial; exit 3")
    assert (done.returncode, done.stdout) == (3, "partial\n")
    assert done.stderr == "command terminated with exit code 3\n"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_stdin_piped_in_reaches_the_command_and_its_end_too(cluster: TestCluster, protocol: str) -> None:
    text = "".join(f"line {i} of the checkpoint manifest\n" for i in range(8000))  # ~270 KB
    done = exec_in(cluster, protocol, "-i", "shell", "--", "sha256sum", input=text)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == hashlib.sha256(text.encode()).hexdigest()


def test_a_command_that_does_not_exist_is_the_kubelets_internal_error(cluster: TestCluster) -> None:
    done = exec_in(cluster, "websocket", "shell", "--", "no-such-command")
    assert done.returncode == 1
    assert done.stderr == ('error: Internal error occurred: error executing command in container: exec: '
                           '"no-such-command": executable file not found in $PATH\n')


def test_a_request_without_an_upgrade_is_refused(cluster: TestCluster) -> None:
    answer = cluster.request("POST", "/api/v1/namespaces/default/pods/shell/exec?command=ls&stdout=true")
    assert (answer.status, answer.json()["message"]) == (400, "Upgrade request required")


class Terminal:
    """kubectl run on a pseudo-terminal, as a person at a shell runs `kubectl exec -it`."""

    def __init__(self, argv: list[str], env: dict[str, str], *, rows: int, columns: int) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: kubectl, on the terminal
            os.execve(argv[0], argv, env)
        self.resize(rows, columns)
        self.output = b""

    def resize(self, rows: int, columns: int) -> None:
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))

    def type(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def read_until(self, marker: bytes, timeout: float = 20) -> bytes:
        deadline = time.monotonic() + timeout
        while marker not in self.output and time.monotonic() < deadline:
            if select.select([self.fd], [], [], 0.1)[0]:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:  # EIO: kubectl has exited
                    break
                self.output += chunk
        return self.output

    def wait(self, timeout: float = 20) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.read_until(b"\0never\0", timeout=0.2)
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
        os.kill(self.pid, 9)
        raise AssertionError(f"kubectl did not exit; it printed {self.output!r}")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_interactive_terminal_follows_resizes_and_returns_the_exit_code(cluster: TestCluster,
                                                                           protocol: str) -> None:
    argv = [kubectl_path(), "--kubeconfig", str(cluster.kubeconfig), "exec", "-it", "shell", "--", "sh"]
    term = Terminal(argv, {**os.environ, **protocol_env(protocol)}, rows=33, columns=111)
    term.type("stty size; tty; echo TERM=$TERM; echo done-$((40 + 2))\n")
    first = term.read_until(b"done-42\r\n")  # the shell's output, not the echo of what was typed
    term.resize(40, 132)  # kubectl sees SIGWINCH and sends the new size on the resize channel
    time.sleep(0.5)
    term.type("stty size; exit 7\n")
    code = term.wait()
    text = term.output.decode(errors="replace").replace("\r\n", "\n")
    assert b"33 111\r\n" in first, text
    assert "\n/dev/pts/" in text and "TERM=xterm\n" in text
    assert "\n40 132\n" in text
    assert "command terminated with exit code 7" in text
    assert code == 7


def test_exec_ended_by_the_client_leaves_no_process(cluster: TestCluster) -> None:
    marker = "271.828"
    command = [kubectl_path(), "--kubeconfig", str(cluster.kubeconfig), "exec", "shell", "--",
               "sleep", marker]
    client = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: processes_with(marker), timeout=20, what="the exec'd sleep to start")
    client.kill()
    client.wait()
    wait_until(lambda: not processes_with(marker), timeout=20, what="the exec'd sleep to be stopped")


def processes_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if f.read().split(b"\0")[:2] == [b"sleep", marker.encode()]:
                        found.append(int(entry))
            except OSError:
                continue
    return found


# ---- cp ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_cp_both_ways_with_a_non_root_container(cluster: TestCluster, protocol: str, tmp_path: Path) -> None:
    name = f"trainer-{protocol}"
    running_pod(cluster, name, [{
        "name": "main", "image": "busybox", "workingDir": "/ckpt",
        "command": ["sh", "-c", "echo epoch-3-weights > /ckpt/model.h5; sleep 3600"],
        "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}]}],
        volumes=[{"name": "ckpt", "emptyDir": {}}], securityContext={"runAsUser": 1000, "runAsGroup": 1000})
    env = protocol_env(protocol)
    down = cluster.kubectl("cp", f"{name}:/ckpt/model.h5", str(tmp_path / "model.h5"), extra_env=env)
    assert down.returncode == 0, down.stderr
    assert (tmp_path / "model.h5").read_text() == "epoch-3-weights\n"

    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "lr.txt").write_text("0.001\n")
    up = cluster.kubectl("cp", str(tmp_path / "config"), f"{name}:/ckpt/config", extra_env=env)
    assert up.returncode == 0, up.stderr
    seen = exec_in(cluster, protocol, name, "--", "sh", "-c",
                   "cat /ckpt/config/lr.txt; stat -c %u /ckpt/config")
    assert seen.stdout.splitlines() == ["0.001", "1000"], seen.stderr


# ---- attach ------------------------------------------------------------------------------------------------
def test_attach_streams_what_the_container_prints_until_it_ends(cluster: TestCluster) -> None:
    script = "import time\nfor i in range(30):\n print(f'tick {i}', flush=True)\n time.sleep(0.2)\n"
    apply(cluster, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ticker"},
                    "spec": {"restartPolicy": "Never",
                             "containers": [{"name": "main", "image": "busybox",
                                             "command": [PY, "-c", script]}]}})
    wait_until(lambda: "tick 1" in cluster.kubectl("logs", "ticker").stdout, timeout=60, what="ticks")
    done = cluster.kubectl("attach", "ticker")
    assert done.returncode == 0, done.stderr
    ticks = done.stdout.splitlines()
    assert ticks and ticks[-1] == "tick 29"  # output from the moment it attached, to the container's end
    assert ticks == [f"tick {i}" for i in range(int(ticks[0].split()[1]), 30)]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_run_interactive_attaches_stdin_and_removes_the_pod(cluster: TestCluster, protocol: str) -> None:
    name = f"catter-{protocol}"  # kubectl run -i: a pod with stdin and stdinOnce, attached to, then deleted
    done = cluster.kubectl("run", "-i", "--rm", "--restart=Never", name, "--image=busybox", "--", "sh", "-c",
                           "cat; echo stdin-ended", input="line one\nline two\n",
                           extra_env=protocol_env(protocol))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["line one", "line two", "stdin-ended",
                                        f'pod "{name}" deleted from default namespace']


# ---- port-forward ------------------------------------------------------------------------------------------
class PortForward:
    def __init__(self, cluster: TestCluster, target: str, remote: int, protocol: str,
                 token: str | None = None) -> None:
        command = [kubectl_path(), "--kubeconfig", str(cluster.kubeconfig), "port-forward", target,
                   f":{remote}"] + (["--token", token] if token else [])
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                        env={**os.environ, **protocol_env(protocol)})
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # Forwarding from 127.0.0.1:PORT -> REMOTE
        assert line.startswith("Forwarding from 127.0.0.1:"), line + self.stop()
        self.port = int(line.split(":")[1].split()[0])

    def stop(self) -> str:
        if self.process.poll() is None:
            self.process.terminate()
        _, err = self.process.communicate(timeout=20)
        return err


@pytest.fixture(scope="module")
def web(cluster: TestCluster) -> str:
    running_pod(cluster, "web", [{
        "name": "main", "image": "busybox",
        "command": [PY, "-m", "http.server", "8000", "--directory", "/site"],
        "volumeMounts": [{"name": "site", "mountPath": "/site"}],
        "readinessProbe": {"tcpSocket": {"port": 8000}, "periodSeconds": 1}}],
        volumes=[{"name": "site", "configMap": {"name": "site"}}])
    return "pod/web"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_port_forward_carries_http_several_connections_at_once(cluster: TestCluster, web: str,
                                                               protocol: str) -> None:
    forward = PortForward(cluster, web, 8000, protocol)
    try:
        # two raw connections open together, their requests interleaved, then eight more in parallel
        first, second = (socket.create_connection(("127.0.0.1", forward.port), timeout=10) for _ in range(2))
        first.sendall(b"GET /greeting HTTP/1.0\r\n")
        second.sendall(b"GET /nothing HTTP/1.0\r\n\r\n")
        first.sendall(b"\r\n")
        replies = [read_all(first), read_all(second)]
        assert replies[0].startswith(b"HTTP/1.0 200") and replies[0].endswith(b"\r\n\r\nhello from the pod\n")
        assert replies[1].startswith(b"HTTP/1.0 404")

        bodies: list[bytes] = []
        threads = [threading.Thread(target=lambda: bodies.append(urllib.request.urlopen(
            f"http://127.0.0.1:{forward.port}/greeting", timeout=20).read())) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert bodies == [b"hello from the pod\n"] * 8
    finally:
        forward.stop()


def read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    sock.close()
    return data


def test_port_forward_to_a_closed_port_says_why(cluster: TestCluster, web: str) -> None:
    forward = PortForward(cluster, web, 8999, "websocket")
    try:
        with socket.create_connection(("127.0.0.1", forward.port), timeout=10) as sock:
            assert sock.recv(100) == b""  # the connection closes
    finally:
        err = forward.stop()
    assert '"An error occurred forwarding"' in err, err  # kubectl's words, then the kubelet's
    assert "error forwarding port 8999 to pod web, uid " in err, err
    assert ("failed to connect to localhost:8999 "
            'inside the network namespace of pod \\"default/web\\": dial tcp4 127.0.0.1:8999: connect: '
            "connection refused") in err, err


def test_port_forward_ends_when_the_pod_ends(cluster: TestCluster) -> None:
    running_pod(cluster, "short", [{"name": "main", "image": "busybox",
                                    "command": [PY, "-m", "http.server", "8000"],
                                    "readinessProbe": {"tcpSocket": {"port": 8000}, "periodSeconds": 1}}])
    forward = PortForward(cluster, "pod/short", 8000, "spdy")
    deleted = cluster.kubectl("delete", "pod", "short", "--grace-period=1")
    assert deleted.returncode == 0, deleted.stderr
    started = time.monotonic()
    _, err = forward.process.communicate(timeout=30)
    assert forward.process.returncode == 1
    assert err.strip() == "error: lost connection to pod"
    assert time.monotonic() - started < 10


# ---- RBAC --------------------------------------------------------------------------------------------------
def test_exec_needs_create_on_pods_exec(cluster: TestCluster) -> None:
    apply(cluster, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader"}},
          {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "reader"},
           "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]},
          {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
           "metadata": {"name": "reader"},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
           "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": "default"}]})
    token = cluster.token_for("default", "reader")
    forbidden = ('pods "shell" is forbidden: User "system:serviceaccount:default:reader" cannot create '
                 'resource "pods/{}" in API group "" in the namespace "default"')
    refused = exec_in(cluster, "websocket", "shell", "--", "true", token=token)
    assert refused.returncode == 1
    assert refused.stderr == f"error: unable to upgrade connection: {forbidden.format('exec')}\n"
    refused = cluster.kubectl("port-forward", "shell", ":8080", token=token, timeout=20)
    assert forbidden.format("portforward") in refused.stderr

    apply(cluster, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                    "metadata": {"name": "reader"},
                    "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
                              {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]}]})
    allowed = wait_until(
        lambda: (done := exec_in(cluster, "websocket", "shell", "--", "hostname", token=token))
        .returncode == 0 and done, timeout=10, what="exec allowed once granted")
    assert allowed.stdout == "shell\n"
