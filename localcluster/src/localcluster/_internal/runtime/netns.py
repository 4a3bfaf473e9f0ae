"""Pod networking for the process runtime: a bridge with a host-side address, one network namespace per pod.

Two address modes (docs/local-cluster-processes.md):
- `netns` (root): a bridge `dtb<cluster id>` in the root namespace carrying 10.<b>.0.1/16 (the address pods
  reach the API server on) and 10.<b>.<node>.1 (each node's hostIP); a node with pods has a bridge of its
  own, `dtb<id>n<node>`, joined to the cluster's by a veth pair, its uplink (`dtv<id>u<node>` on the node's
  side, `dtv<id>s<node>` on the cluster's): traffic between pods of one node stays on the node's bridge, all
  other traffic of the node crosses its uplink, which a node link shapes (runtime/nodelink.py). Every pod
  gets a network namespace held by its pause process, a veth on its node's bridge whose pod end is renamed
  `eth0` with 10.<b>.<node index>.<x>/16, and `lo` up. One L2 segment: there is no default route in pods,
  no NAT and no forwarding: pods reach each other, the API server and the node addresses, nothing else.
  <b> is the first of 244..254 no interface or route of the machine overlaps.
- `loopback` (no root, or asked for): pods share the host's network; each gets a distinct 127.<c>.<node>.<x>.

The pause process (`unshare ... sleep infinity`, like the kubelet's pause container) holds the pod's network,
UTS and IPC namespaces; containers join them. It dies with the runtime (PR_SET_PDEATHSIG), and a network
namespace dies with its last process, so a crash leaves at most a bridge, removed by the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import ipaddress
import json
import os
import random
import secrets
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from localcluster._internal.errors import InvalidInput
from localcluster._internal.runtime.nodelink import NodeLink, probe_delay_batch, shaping_batch

BRIDGE_PREFIX = "dtb"
VETH_PREFIX = "dtv"
ALIAS_PREFIX = "distributetrain-localcluster"
SECOND_OCTETS = range(244, 255)
# every address a cluster's API server may be reached on from pods: for the serving certificate's SANs
POSSIBLE_API_HOSTS = tuple(f"10.{b}.0.1" for b in SECOND_OCTETS)
POD_HOSTS = range(2, 255)  # .1 is the node's own address


class NetworkError(RuntimeError):
    pass


def node_bridge_name(cluster_id: str, index: int) -> str:
    """The bridge of node `index` (1..254): `dtb<cluster id>n<index in hex>`, 14 characters at most."""
    return f"{BRIDGE_PREFIX}{cluster_id}n{index:02x}"


def uplink_names(cluster_id: str, index: int) -> tuple[str, str]:
    """The two ends of node `index`'s uplink: on the node's bridge, and on the cluster's (pods' veths end in
    four hex digits, so these never collide with them)."""
    return f"{VETH_PREFIX}{cluster_id}u{index:02x}", f"{VETH_PREFIX}{cluster_id}s{index:02x}"


def random_mac() -> str:
    """A fixed, locally administered MAC: a bridge without one takes the lowest MAC of its ports, so deleting
    a pod's veth could change it under the other pods' ARP caches and stall their traffic for a minute."""
    return "02:" + ":".join(f"{byte:02x}" for byte in secrets.token_bytes(5))


async def run(*argv: str, stdin: bytes | None = None, check: bool = True) -> str:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate(stdin)
    if check and proc.returncode != 0:
        message = err.decode(errors="replace").strip()
        raise NetworkError(f"{' '.join(argv)} failed ({proc.returncode}): {message}")
    return out.decode()


async def spawn(*argv: str, **options: Any) -> asyncio.subprocess.Process:
    """create_subprocess_exec that never loses a process to a cancellation arriving while it starts (a pod
    deleted right after it was bound): the process is killed instead of left running unseen."""
    task = asyncio.ensure_future(asyncio.create_subprocess_exec(*argv, **options))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            proc = await task
            proc.kill()
            await proc.wait()
        raise


def can_use_netns() -> bool:
    return os.geteuid() == 0 and all(os.path.exists(p) for p in ("/proc/self/ns/net", "/usr/bin/unshare"))


def can_use_userns() -> bool:
    """Whether this (non-root) user may make user namespaces, in which it may then mount."""
    try:
        return subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"],
                              capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def process_start_time(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat: tells a live owner from a reused PID."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def cidr_index(pod_cidr: str) -> int:
    """The node number a podCIDR 10.X.N.0/24 encodes (X >= 244): (X - 244) * 256 + N; 0 when it is none."""
    octets = pod_cidr.removesuffix(".0/24").split(".")
    if len(octets) != 3 or octets[0] != "10" or not all(o.isdigit() for o in octets[1:]):
        return 0
    index = (int(octets[1]) - 244) * 256 + int(octets[2])
    return index if 0 < index < 255 else 0


def node_index(node: str, known: dict[str, int], *, pod_cidr: str = "") -> int:
    """The node's number after its podCIDR (so pod IPs fall in the node's range), else node-3 -> 3; other
    names get the next free index, stable for the runtime's life."""
    if node not in known:
        _, _, suffix = node.rpartition("-")
        wanted = cidr_index(pod_cidr) or (
            int(suffix) if node.startswith("node-") and suffix.isdigit() and 0 < int(suffix) < 255 else 0)
        used = set(known.values())
        known[node] = wanted if wanted and wanted not in used else next(
            i for i in range(1, 255) if i not in used)
    return known[node]


@dataclass
class AddressPool:
    """Pod addresses `<first>.<second>.<node index>.<host>`; pure bookkeeping.

    Round-robin per node, as the CNI host-local IPAM hands them out (containernetworking/plugins
    plugins/ipam/host-local/backend/allocator/allocator.go, GetIter: from the last reserved address + 1, "a
    crash-looping container will not see the same IP until the entire range has been run through"). Handing
    a freed address straight to the next pod would let the node and the other pods keep sending to the old
    pod's MAC address until their neighbour entry for it fails (5 s and more): a replacement for a deleted
    pod would answer its readiness probe and its peers seconds late."""

    first: int
    second: int
    used: set[str] = field(default_factory=set)
    last: dict[int, int] = field(default_factory=dict)  # node index -> the host part allocated last

    def node_ip(self, index: int) -> str:
        return f"{self.first}.{self.second}.{index}.1"

    def allocate(self, index: int) -> str:
        hosts = list(POD_HOSTS)
        start = hosts.index(self.last[index]) + 1 if self.last.get(index) in hosts else 0
        for host in hosts[start:] + hosts[:start]:
            ip = f"{self.first}.{self.second}.{index}.{host}"
            if ip not in self.used:
                self.used.add(ip)
                self.last[index] = host
                return ip
        raise InvalidInput(f"node index {index} has no free pod address: {len(POD_HOSTS)} pods are the most "
                           "a node holds in the local cluster; delete some pods")

    def release(self, ip: str) -> None:
        self.used.discard(ip)


class _RunLock:
    """Serialises subnet choice and bridge creation between local clusters on one machine. flock on /run
    itself: nothing to create or leave behind, and the kernel drops the lock when its holder dies."""

    def __init__(self) -> None:
        self.fd = -1

    async def __aenter__(self) -> None:
        self.fd = os.open("/run", os.O_RDONLY | os.O_DIRECTORY)
        for _ in range(600):
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                await asyncio.sleep(0.05)
        os.close(self.fd)
        raise NetworkError("another local cluster held the network lock on /run for 30 s; is one stuck?")

    async def __aexit__(self, *exc: object) -> None:
        os.close(self.fd)


@dataclass
class PodNetwork:
    ip: str
    pause: asyncio.subprocess.Process
    veth: str | None = None
    node: int = 0  # the index of the node whose bridge the pod's veth is on (0: none yet)


class ClusterNetwork:
    def __init__(self, *, mode: str, user_namespace: bool = False, node_link: NodeLink | None = None,
                 node_links: Mapping[str, NodeLink] | None = None) -> None:
        """`node_link`: every node's link; `node_links`: the link of the nodes named, instead (one slow
        NIC)."""
        if mode not in ("netns", "loopback"):
            raise InvalidInput(f"network mode {mode!r}: use netns (root) or loopback")
        shaped = node_link or next(iter((node_links or {}).values()), None)
        if shaped is not None and mode != "netns":
            raise InvalidInput(f"--node-link {shaped}: node links need the netns network mode (root): in "
                               "loopback mode every pod shares the host's network and there is no link to "
                               "shape; run as root, or leave --node-link out")
        self.mode = mode
        self.node_link = node_link
        self.node_links = dict(node_links or {})
        # without root, the pod's namespaces belong to a user namespace of its own, where we are "root"
        self.user_namespace = user_namespace
        self.cluster_id = secrets.token_hex(4)
        self.bridge = f"{BRIDGE_PREFIX}{self.cluster_id}"
        self.pool = AddressPool(127, random.randrange(100, 250))
        self.api_host = "127.0.0.1"
        self.nodes: dict[str, int] = {}
        self._node_ips: set[str] = set()
        self._veths = 0
        self._bridge_up = False
        # node index -> its bridge and how many pods are on it: made with the node's first pod, removed (with
        # its uplink) with its last, so a node without pods leaves nothing on the host
        self._node_bridges: dict[int, str] = {}
        self._node_pods: dict[int, int] = {}
        self._node_lock = asyncio.Lock()

    # ---- the cluster's bridge -----------------------------------------------------------------------------
    async def setup(self) -> None:
        if self.mode != "netns" or self._bridge_up:
            return
        async with _RunLock():
            await remove_stale_bridges()
            addresses = json.loads(await run("ip", "-j", "-4", "addr", "show"))
            routes = json.loads(await run("ip", "-j", "-4", "route", "show", "table", "all"))
            second = choose_second_octet(addresses, routes)
            self.pool = AddressPool(10, second)
            self.api_host = f"10.{second}.0.1"
            await run("ip", "link", "add", self.bridge, "address", random_mac(), "type", "bridge")
            self._bridge_up = True
            alias = f"{ALIAS_PREFIX} pid={os.getpid()} start={process_start_time(os.getpid())}"
            # the host-side address goes on before any pod exists, so 10.x never routes to the default gateway
            await run("ip", "-batch", "-", stdin=(
                f"link set dev {self.bridge} alias \"{alias}\"\n"
                f"addr add {self.api_host}/16 dev {self.bridge}\n"
                f"link set dev {self.bridge} up\n").encode())
        delayed = next((link for link in [self.node_link, *self.node_links.values()]
                        if link is not None and link.delay_s), None)
        if delayed is not None:
            await self._check_delay(delayed)

    def _link_of(self, index: int) -> NodeLink | None:
        """Node `index`'s link: its own (node_links), else every node's."""
        name = next((node for node, at in self.nodes.items() if at == index), "")
        return self.node_links.get(name, self.node_link)

    async def _check_delay(self, link: NodeLink) -> None:
        try:
            await run("tc", "-batch", "-", stdin=probe_delay_batch(self.bridge).encode())
        except NetworkError as error:
            await self.teardown()
            said = next((line.partition("Error:")[2].strip() for line in str(error).splitlines()
                         if "Error:" in line), "it could not add one")
            raise InvalidInput(
                f"--node-link {link}: a delay needs the netem qdisc, which this kernel does not "
                f"have (tc: {said}); give the rate alone, e.g. --node-link "
                f"{str(link).partition(',')[0]}") from None

    def host_ip(self, node: str, *, pod_cidr: str = "") -> str:
        """The node's address; the first call for a node numbers it (after its podCIDR when given)."""
        index = node_index(node, self.nodes, pod_cidr=pod_cidr)
        return self.pool.node_ip(index) if self.mode == "netns" else "127.0.0.1"

    async def teardown(self) -> None:
        """The cluster's bridge, the nodes' bridges and their uplinks (and with them any shaping)."""
        if self._bridge_up:
            lines = [f"link del {uplink_names(self.cluster_id, index)[0]}\nlink del {bridge}\n"
                     for index, bridge in sorted(self._node_bridges.items())]
            await run("ip", "-force", "-batch", "-", stdin=("".join(lines) + f"link del {self.bridge}\n")
                      .encode(), check=False)
            self._node_bridges.clear()
            self._node_pods.clear()
            self._bridge_up = False

    async def _join_node(self, pod: PodNetwork, index: int) -> str:
        """Node `index`'s bridge for the pod, made with its uplink (shaped when there is a node link) for the
        node's first pod."""
        async with self._node_lock:
            if index not in self._node_bridges:
                bridge = node_bridge_name(self.cluster_id, index)
                near, far = uplink_names(self.cluster_id, index)
                self._node_bridges[index] = bridge  # before it exists: teardown removes a half-made node too
                self._node_pods[index] = 0
                await run("ip", "-batch", "-", stdin=(
                    f"link add {bridge} address {random_mac()} type bridge\n"
                    f"link add {near} type veth peer name {far}\n"
                    f"link set dev {near} master {bridge}\nlink set dev {far} master {self.bridge}\n"
                    f"link set dev {near} up\nlink set dev {far} up\nlink set dev {bridge} up\n").encode())
                link = self._link_of(index)
                if link is not None:
                    await run("tc", "-batch", "-", stdin=(shaping_batch(near, link)
                                                         + shaping_batch(far, link)).encode())
            self._node_pods[index] += 1
            pod.node = index
            return self._node_bridges[index]

    async def _leave_node(self, pod: PodNetwork) -> None:
        async with self._node_lock:
            index, pod.node = pod.node, 0
            self._node_pods[index] -= 1
            if self._node_pods[index] > 0:
                return
            del self._node_pods[index]
            bridge = self._node_bridges.pop(index)
            await run("ip", "-force", "-batch", "-", stdin=(
                f"link del {uplink_names(self.cluster_id, index)[0]}\nlink del {bridge}\n").encode(),
                check=False)

    # ---- one pod ------------------------------------------------------------------------------------------
    async def create_pod(self, *, node: str, hostname: str) -> PodNetwork:
        """Start the pod's pause process in fresh UTS/IPC (and network) namespaces and give it an address."""
        index = node_index(node, self.nodes)
        namespaces = ["--user", "--map-root-user"] if self.user_namespace else []
        namespaces += ["--uts", "--ipc"] + (["--net"] if self.mode == "netns" else [])
        pause = await spawn(
            "setpriv", "--pdeathsig", "KILL", "--", "unshare", *namespaces, "--",
            "/bin/sh", "-c", 'hostname "$1" && echo ready && exec sleep infinity', "pause", hostname[:63],
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True)
        assert pause.stdout is not None and pause.stderr is not None
        pod = PodNetwork(ip="", pause=pause)
        try:
            line = await asyncio.wait_for(pause.stdout.readline(), 30)
            if line.strip() != b"ready":
                err = await pause.stderr.read()
                raise NetworkError(f"the pause process of {hostname} did not start: "
                                   f"{err.decode(errors='replace')}")
            pod.ip = self.pool.allocate(index)
            if self.mode == "netns":
                await self._wire(pod, index)
        except BaseException:
            await asyncio.shield(self.delete_pod(pod))
            raise
        return pod

    async def _wire(self, pod: PodNetwork, index: int) -> None:
        node_ip = self.pool.node_ip(index)
        if node_ip not in self._node_ips:
            self._node_ips.add(node_ip)
            await run("ip", "addr", "add", f"{node_ip}/16", "dev", self.bridge)
        self._veths += 1
        pod.veth = f"{VETH_PREFIX}{self.cluster_id}{self._veths % 0x10000:04x}"
        bridge = await self._join_node(pod, index)
        await run("ip", "link", "add", pod.veth, "type", "veth", "peer", "name", "eth0",
                  "netns", str(pod.pause.pid))
        await run("ip", "-batch", "-", stdin=(
            f"link set dev {pod.veth} master {bridge}\nlink set dev {pod.veth} up\n").encode())
        await run("nsenter", f"--net=/proc/{pod.pause.pid}/ns/net", "ip", "-batch", "-", stdin=(
            f"addr add {pod.ip}/16 dev eth0\nlink set dev eth0 up\nlink set dev lo up\n").encode())

    async def delete_pod(self, pod: PodNetwork) -> None:
        if pod.veth:
            # deleting our end removes both at once; left to the namespace's death it lingers a second or two
            await run("ip", "link", "del", pod.veth, check=False)
            pod.veth = None
        if pod.node:
            await self._leave_node(pod)
        if pod.pause.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                pod.pause.send_signal(signal.SIGKILL)
        await pod.pause.wait()
        if pod.ip:
            self.pool.release(pod.ip)


def choose_second_octet(addresses: list[dict[str, Any]], routes: list[dict[str, Any]]) -> int:
    """The first 10.<b>.0.0/16 that no address or route of the machine overlaps."""
    taken: list[ipaddress.IPv4Network] = []
    for link in addresses:
        for a in link.get("addr_info", []):
            taken.append(ipaddress.IPv4Network(f"{a['local']}/{a['prefixlen']}", strict=False))
    for r in routes:
        dst = r.get("dst", "")
        if dst and dst != "default" and ":" not in dst:
            with contextlib.suppress(ValueError):
                taken.append(ipaddress.IPv4Network(dst if "/" in dst else f"{dst}/32", strict=False))
    for second in SECOND_OCTETS:
        net = ipaddress.IPv4Network(f"10.{second}.0.0/16")
        if not any(net.overlaps(t) for t in taken if t.prefixlen > 0):
            return second
    raise NetworkError("every subnet 10.244.0.0/16 .. 10.254.0.0/16 is already used on this machine; stop "
                       "another local cluster or use the loopback network mode")


async def remove_stale_bridges() -> list[str]:
    """Bridges (with their veths, nodes' bridges and uplinks) of local clusters whose process is gone."""
    removed: list[str] = []
    links = json.loads(await run("ip", "-j", "link", "show"))
    for link in links:
        name, alias = link.get("ifname", ""), link.get("ifalias", "")
        if not name.startswith(BRIDGE_PREFIX) or not alias.startswith(ALIAS_PREFIX):
            continue
        fields = dict(w.split("=", 1) for w in alias.split()[1:] if "=" in w)
        pid = int(fields.get("pid", "0") or 0)
        if pid and process_start_time(pid) == fields.get("start"):
            continue
        cluster = name[len(BRIDGE_PREFIX):]
        for other in links:
            other_name = other.get("ifname", "")
            if other_name.startswith(VETH_PREFIX + cluster) or (
                    other_name.startswith(BRIDGE_PREFIX + cluster) and other_name != name):
                await run("ip", "link", "del", other_name, check=False)
        await run("ip", "link", "del", name, check=False)
        removed.append(name)
    return removed
