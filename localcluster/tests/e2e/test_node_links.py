"""Node links (`localcluster up --node-link RATE`): pods of one node talk at memory speed, pods of different
nodes through their nodes' links, each node's link shared by all its pods, as a NIC is. Measured as a user
would: a TCP transfer (Python sockets, iperf-like) started with the real kubectl's exec in pods created with
the official client, timed from the first byte sent until the receiver has read the last one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from kubernetes import client
from test_network_policy import kubectl, pod, running
from test_process_runtime import leftovers, ours

from hostimages import HOST_IMAGES, HOST_IMAGES_FILE
from kubeclient import as_body
from localcluster import InvalidInput, TestCluster, kubectl_path, parse_node_link, start_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces and tc need root")]

PY = sys.executable
Factory = Callable[..., TestCluster]
LINK = "200mbit"
MIB = 1 << 20
TOLERANCE = 0.10

SINK = """
import socket, threading
def drain(conn):
    buf = bytearray(1 << 20)
    with conn:
        while conn.recv_into(buf):
            pass
server = socket.create_server(("0.0.0.0", 5001), backlog=16)
while True:
    threading.Thread(target=drain, args=(server.accept()[0],), daemon=True).start()
"""
# Sends MiB mebibytes from START_AT (a Unix time: pods share the machine's clock), then waits until the sink
# closes (it has read everything): prints the bytes and the seconds they took.
SEND = """
import socket, sys, time
host, mebibytes, start_at = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
chunk = b"x" * (1 << 20)
conn = socket.create_connection((host, 5001), timeout=60)
time.sleep(max(0.0, start_at - time.time()))
began = time.monotonic()
for _ in range(mebibytes):
    conn.sendall(chunk)
conn.shutdown(socket.SHUT_WR)
conn.recv(1)
print(mebibytes * (1 << 20), time.monotonic() - began, flush=True)
"""


def transfers(cluster: TestCluster, sink_ip: str, senders: dict[str, int]) -> dict[str, tuple[int, float]]:
    """Each sender sends its MiB to the sink, all at once (through `kubectl exec`); bytes, seconds by pod."""
    start_at = time.time() + 4  # every exec has started by then, even on a loaded machine
    procs = {name: subprocess.Popen(
        [kubectl_path(), "--kubeconfig", str(cluster.kubeconfig), "exec", name, "--",
         PY, "-c", SEND, sink_ip, str(mebibytes), str(start_at)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name, mebibytes in senders.items()}
    out = {}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
        sent, seconds = stdout.split()
        out[name] = (int(sent), float(seconds))
    return out


def rate(results: dict[str, tuple[int, float]]) -> float:
    """Bytes per second over the whole exchange: every byte, over the time until the last one arrived."""
    return sum(sent for sent, _ in results.values()) / max(seconds for _, seconds in results.values())


def test_pods_on_one_node_are_not_shaped_and_each_nodes_link_is_shared_by_its_pods(
        local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory(nodes=[1, 1, 1], runtime="process", gpu_taint=False, node_link=LINK)
    v1 = client.CoreV1Api(cluster.api_client())
    v1.create_namespaced_pod("default", as_body(pod("sink", [PY, "-c", SINK], node="node-1", readinessProbe={
        "tcpSocket": {"port": 5001}, "periodSeconds": 1})))
    for name, node in (("near", "node-1"), ("far-1", "node-2"), ("far-2", "node-2"), ("other", "node-3")):
        v1.create_namespaced_pod("default", as_body(pod(name, ["sleep", "infinity"], node=node)))
    sink = running(v1, "sink")
    for name in ("near", "far-1", "far-2", "other"):
        running(v1, name)
    link = parse_node_link(LINK).payload_bytes_per_s  # what TCP can carry over 200 Mbit/s of frames

    across = rate(transfers(cluster, sink, {"far-1": 60}))
    within = rate(transfers(cluster, sink, {"near": 600}))
    # two pods of node-2 send at once: they share node-2's link; node-2 and node-3 send at once to node-1:
    # they share node-1's link (its way in)
    one_node_out = rate(transfers(cluster, sink, {"far-1": 40, "far-2": 40}))
    one_node_in = rate(transfers(cluster, sink, {"far-1": 40, "other": 40}))
    measured = {"across": across / 1e6, "within": within / 1e6, "link payload": link / 1e6,
                "one node's way out, 2 pods": one_node_out / 1e6,
                "one node's way in, 2 nodes": one_node_in / 1e6}
    print(f"MB/s: {json.dumps(measured)}")

    assert abs(across / link - 1) <= TOLERANCE, measured
    assert within >= 5 * link, measured  # the node's own bridge: no link in the way
    assert abs(one_node_out / link - 1) <= TOLERANCE, measured
    assert abs(one_node_in / link - 1) <= TOLERANCE, measured


def test_localcluster_up_shapes_each_nodes_uplink_and_down_removes_them(tmp_path: Path) -> None:
    state = tmp_path / "cluster"
    before = leftovers()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(Path(PY).parent / "localcluster"), *args, "--dir", str(state)],
                              capture_output=True, text=True, timeout=120, cwd=tmp_path)

    up = cli("up", "--nodes", "1,1", "--cpu-nodes", "0", "--runtime", "process", "--node-link", "1gbit",
             "--images", str(HOST_IMAGES_FILE))
    assert up.returncode == 0, up.stderr
    try:
        assert "node links 1gbit each way" in up.stdout
        env = {**os.environ, "KUBECONFIG": str(state / "kubeconfig"), "HOME": str(tmp_path)}
        for node in ("node-1", "node-2"):
            created = subprocess.run(
                [kubectl_path(), "run", f"on-{node}", "--image", "busybox:1.36", "--restart", "Never",
                 "--overrides", json.dumps({"spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                                                     "tolerations": [{"operator": "Exists"}]}}),
                 "--command", "--", "sleep", "infinity"], env=env, capture_output=True, text=True, timeout=60)
            assert created.returncode == 0, created.stderr
        waited = subprocess.run([kubectl_path(), "wait", "--for=condition=Ready", "pod", "--all",
                                 "--timeout=60s"], env=env, capture_output=True, text=True, timeout=90)
        assert waited.returncode == 0, waited.stderr
        server = int((state / "pid").read_text())
        links = json.loads(subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True,
                                          check=True).stdout)
        bridge = next(link["ifname"] for link in links if f"pid={server} " in link.get("ifalias", ""))
        cluster_id = bridge.removeprefix("dtb")
        uplinks = sorted(link["ifname"] for link in links if link["ifname"].startswith(f"dtv{cluster_id}")
                         and link["ifname"][len(f"dtv{cluster_id}")] in "us")
        assert uplinks == [f"dtv{cluster_id}{end}{index:02x}" for end in "su" for index in (1, 2)]
        for uplink in uplinks:
            shown = subprocess.run(["tc", "qdisc", "show", "dev", uplink], capture_output=True, text=True,
                                   check=True).stdout
            classes = subprocess.run(["tc", "class", "show", "dev", uplink], capture_output=True, text=True,
                                     check=True).stdout
            assert "qdisc htb 1: root" in shown and "rate 1Gbit ceil 1Gbit" in classes, (shown, classes)
    finally:
        down = cli("down")
    assert down.returncode == 0, down.stderr
    assert ours(leftovers(), cluster_id) == ours(before, cluster_id)
    assert not [line for line in subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True,
                                                check=True).stdout.splitlines() if cluster_id in line]


def test_a_delay_is_emulated_only_where_the_kernel_has_netem(tmp_path: Path) -> None:
    probe = subprocess.run(["ip", "link", "add", "dtnetemprobe", "type", "dummy"], capture_output=True)
    has_netem = probe.returncode == 0 and subprocess.run(
        ["tc", "qdisc", "add", "dev", "dtnetemprobe", "root", "netem", "delay", "1ms"],
        capture_output=True).returncode == 0
    subprocess.run(["ip", "link", "del", "dtnetemprobe"], capture_output=True)
    if has_netem:
        cluster = start_cluster(nodes=[1], runtime="process", gpu_taint=False, node_link="200mbit,1ms",
                                images=HOST_IMAGES)
        cluster.close()
        return
    before = leftovers()
    with pytest.raises(InvalidInput, match=r"--node-link 200mbit,1ms: a delay needs the netem qdisc, which "
                                           r"this kernel does not have .*--node-link 200mbit"):
        start_cluster(nodes=[1], runtime="process", gpu_taint=False, node_link="200mbit,1ms",
                      state_dir=tmp_path / "refused")
    after = leftovers()
    assert [link for link in after["links"] if link not in before["links"]] == []  # its bridge went too


def test_kubectl_sees_nothing_different_without_a_node_link(local_cluster_factory: Factory) -> None:
    """No node link: each node still has its bridge, and pods of different nodes talk unshaped."""
    cluster = local_cluster_factory(nodes=[1, 1], runtime="process", gpu_taint=False)
    v1 = client.CoreV1Api(cluster.api_client())
    v1.create_namespaced_pod("default", as_body(pod("sink", [PY, "-c", SINK], node="node-1", readinessProbe={
        "tcpSocket": {"port": 5001}, "periodSeconds": 1})))
    v1.create_namespaced_pod("default", as_body(pod("far", ["sleep", "infinity"], node="node-2")))
    sink = running(v1, "sink")
    running(v1, "far")
    assert rate(transfers(cluster, sink, {"far": 300})) >= 5 * parse_node_link(LINK).payload_bytes_per_s
    assert "sink" in kubectl(cluster, "get", "pods", "-o", "name")
