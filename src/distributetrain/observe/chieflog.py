"""Lines the chief's launcher writes for the manager to read: each one's format and its parser, side by side,
so the writer (chief/launcher.py) and the reader (manager/posttraining.py) cannot drift apart.

The chief runs in the base image and the manager in its own; they share no process, only the chief's log,
which the manager follows. The training's own lines (dt-progress, Train.py's recovery lines) are
observe/progress.py's and manager/recovery.py's. NCCL's own lines naming the network it chose are read here
too: the manager reports them and the chief's pre-flight checks them against the fabric.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from distributetrain.hostfile import HostSlots
from distributetrain.placement import fabric

_RANK_FAILED = re.compile(rb"rank (\d+) on (\S+) exited with (-?\d+)")
# the launcher's `hostfile: 10.0.0.5 slots=1, 10.0.0.6 slots=2` as each horovodrun starts, chief first
_HOSTFILE = re.compile(rb"^launcher \S+ \S+ INFO hostfile: (.*)$")
_HOST = re.compile(r"^(\S+) slots=(\d{1,6})$")


@dataclass(frozen=True)
class RankFailed:
    """The first rank horovodrun reported ending non-zero, on which host (a pod IP, or a pod's name under
    elastic Horovod's host discovery), with which exit code."""

    rank: int
    host: str
    exit_code: int


def rank_failed(failed: RankFailed, *, result: int) -> str:
    """The launcher's line for a failed rank; `result` is the exit code the training ends with."""
    return (f"rank {failed.rank} on {failed.host} exited with {failed.exit_code}; the training failed with "
            f"exit code {result}")


def parse_rank_failed(line: bytes) -> RankFailed | None:
    """The failed rank a line of the chief's log reports, if it is that line."""
    match = _RANK_FAILED.search(line)
    if match is None:
        return None
    return RankFailed(int(match[1]), match[2].decode("utf-8", "replace"), int(match[3]))


# the launcher's line once its pre-flight passed: the manager, which waits for the verdict before it calls
# the gang started, reads it (pretraining.py)
PREFLIGHT_PASSED = "pre-flight passed; starting the training"
_PREFLIGHT_BLAMED = re.compile(rb"pre-flight blames node\(s\) (\S*) \(pods (\S*)\)")


@dataclass(frozen=True)
class PreflightBlame:
    """The nodes (and pod addresses) the chief's pre-flight check failed on: where a re-plan must not go."""

    nodes: tuple[str, ...]
    pods: tuple[str, ...]


def preflight_blamed(blame: PreflightBlame) -> str:
    """The launcher's line naming what its pre-flight blames, before its error and exit 76."""
    return f"pre-flight blames node(s) {','.join(blame.nodes) or '-'} (pods {','.join(blame.pods) or '-'})"


def parse_preflight_blamed(line: bytes) -> PreflightBlame | None:
    """The nodes and pods a line of the chief's log says its pre-flight blamed, if it is that line."""
    match = _PREFLIGHT_BLAMED.search(line)
    if match is None:
        return None
    nodes, pods = (tuple(p for p in match[i].decode("utf-8", "replace").split(",") if p and p != "-")
                   for i in (1, 2))
    return PreflightBlame(nodes, pods)


# the launcher's last line when its pre-flight failed (PreflightFailed's message, logged at ERROR)
_PREFLIGHT_FAILED = re.compile(rb" ERROR (.*); the training was not started\s*$")


@dataclass(frozen=True)
class PreflightVerdict:
    """What the chief's pre-flight decided: passed, or failed `why`, blaming `blame`'s nodes and pods."""

    passed: bool
    why: str = ""
    blame: PreflightBlame = PreflightBlame((), ())


def read_preflight(lines: Iterable[bytes]) -> PreflightVerdict | None:
    """The pre-flight's verdict in the chief's log so far; None while it has not said one."""
    blame = PreflightBlame((), ())
    for line in lines:
        if PREFLIGHT_PASSED.encode() in line:
            return PreflightVerdict(passed=True)
        found = parse_preflight_blamed(line)
        if found is not None:
            blame = found
        failed = _PREFLIGHT_FAILED.search(line)
        if failed is not None:
            return PreflightVerdict(False, failed[1].decode("utf-8", "replace"), blame)
    return None


# ---- NCCL's network lines ---------------------------------------------------------------------------------
# Every rank's NCCL writes them (NCCL_DEBUG=INFO, which job pods get by default; NCCL_DEBUG_SUBSYS=INIT,NET
# keeps them short) and horovodrun copies them into the chief's log behind its `[RANK]<stdout>:` prefix.
# NCCL's own prefix is `HOST:PID:TID [CUDA DEVICE] NCCL INFO `, HOST the pod's hostname (its name) cut at the
# first dot (NVIDIA/nccl src/debug.cc). The lines read, each as NCCL and aws-ofi-nccl write them:
#   Using network <name>             - the network NCCL chose, per communicator: IB, Socket, or a plugin's
#                                      name: Libfabric (aws-ofi-nccl; "AWS Libfabric" before 1.7), IBext (the
#                                      SHARP plugin) (NVIDIA/nccl src/init.cc, `INFO(NCCL_INIT, "Using network
#                                      %s", ...)`)
#   Channel ... via NET/<name>/<dev> - a connection over that network
#   NET/OFI Selected Provider is <p> - aws-ofi-nccl's libfabric provider: efa, or tcp/sockets without EFA
#   NET/IB : Using [0]mlx5_0:1/IB ...; OOB eth0:...  - the HCAs NCCL's IB transport opened (IB or RoCE)
#   NET/Socket : Using [0]eth0:10.0.0.1<0>           - the interfaces of the socket transport; NCCL 2.4
#                                      printed it for every run (its bootstrap), so alone it proves nothing
NET_OFI, NET_IB, NET_SOCKET = "NET/OFI", "NET/IB", "NET/Socket"
_NCCL_INFO = re.compile(r"(?:^|[\s:>])(?P<host>[A-Za-z0-9][A-Za-z0-9_.\-]*):\d+:\d+ \[\d+\] NCCL INFO "
                        r"(?P<text>.*)$")
_USING_NETWORK = re.compile(r"^Using network (?P<name>.+?)\s*$")
_CHANNEL = re.compile(r"\bvia NET/(?P<name>[^/]+)/")
_PROVIDER = re.compile(r"^NET/OFI Selected Provider is (?P<provider>[\w.\-]+)")
_DEVICES = re.compile(r"^(?P<net>NET/IB|NET/Socket) : Using (?P<devices>.+?)\s*$")


def transport_of(network: str) -> str:
    """NCCL's network name as the transport it is: NET/OFI, NET/IB or NET/Socket (else NET/<name>)."""
    if network in ("Libfabric", "AWS Libfabric") or network.startswith("OFI"):
        return NET_OFI
    if network.startswith("IB"):  # IB, and the SHARP plugin's IBext
        return NET_IB
    return NET_SOCKET if network == "Socket" else f"NET/{network}"


@dataclass(frozen=True)
class NcclNet:
    """What one of NCCL's network lines says about the pod `host`: the `transport` it uses (a `Using
    network` or `via NET/...` line), or a detail: libfabric's `provider`, or the `devices` of a transport."""

    host: str
    transport: str | None = None
    provider: str | None = None
    devices: str | None = None
    devices_of: str | None = None  # the transport whose devices they are


def parse_nccl_net(line: bytes | str) -> NcclNet | None:
    """What a line of the chief's log says of NCCL's network, if it is one of NCCL's network lines."""
    if isinstance(line, bytes):
        if b"NCCL INFO" not in line:  # most lines: no decoding, no regular expression
            return None
        line = line.decode("utf-8", "replace")
    text = line
    if "NCCL INFO" not in text:
        return None
    match = _NCCL_INFO.search(text.rstrip("\r\n"))
    if match is None:
        return None
    host, message = match["host"].split(".")[0], match["text"]
    if (m := _USING_NETWORK.match(message)) is not None:
        return NcclNet(host, transport=transport_of(m["name"]))
    if (m := _CHANNEL.search(message)) is not None:
        return NcclNet(host, transport=transport_of(m["name"]))
    if (m := _PROVIDER.match(message)) is not None:
        return NcclNet(host, provider=m["provider"].rstrip(","))
    if (m := _DEVICES.match(message)) is not None:
        return NcclNet(host, devices=m["devices"], devices_of=m["net"])
    return None


@dataclass(frozen=True)
class HostNet:
    """What NCCL said of one pod's network, all its lines together."""

    host: str
    transport: str | None = None
    provider: str | None = None
    devices: tuple[tuple[str, str], ...] = ()  # (transport, devices)

    def text(self) -> str:
        """`NET/OFI (provider efa)`, `NET/IB ([0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>)`."""
        detail = f"provider {self.provider}" if self.transport == NET_OFI and self.provider else \
            next((d for t, d in self.devices if t == self.transport), "")
        return f"{self.transport or 'no network named'}" + (f" ({detail})" if detail else "")


class NetworksSeen:
    """NCCL's network lines gathered per pod, in the order they came."""

    def __init__(self) -> None:
        self.hosts: dict[str, HostNet] = {}

    def add(self, net: NcclNet) -> HostNet:
        """Take in one line's news; the pod's view after it."""
        seen = self.hosts.get(net.host, HostNet(net.host))
        if net.transport is not None and seen.transport is None:
            seen = HostNet(seen.host, net.transport, seen.provider, seen.devices)
        if net.provider is not None:
            seen = HostNet(seen.host, seen.transport, net.provider, seen.devices)
        if net.devices is not None and net.devices_of is not None and \
                all(t != net.devices_of for t, _ in seen.devices):
            seen = HostNet(seen.host, seen.transport, seen.provider,
                           (*seen.devices, (net.devices_of, net.devices)))
        self.hosts[net.host] = seen
        return seen


def read_networks(lines: Iterable[bytes | str]) -> dict[str, HostNet]:
    """Every pod's network, from NCCL's lines among `lines`."""
    seen = NetworksSeen()
    for line in lines:
        net = parse_nccl_net(line)
        if net is not None:
            seen.add(net)
    return seen.hosts


# what NCCL's log must show for each fabric kind (placement/fabric.py)
FABRIC_TRANSPORT = {fabric.EFA: NET_OFI, fabric.IB: NET_IB}
FABRIC_HINT = {
    fabric.EFA: "is the image built with --build-arg FABRIC=efa (libfabric and aws-ofi-nccl), and does the "
                "pod hold vpc.amazonaws.com/efa devices?",
    fabric.IB: "is the image built with --build-arg FABRIC=ib (rdma-core), does the pod hold the RDMA "
               "devices, and may it lock memory (docs/real-cluster.md, InfiniBand and RoCE)?",
}


def fabric_mismatch(net: HostNet, kind: str) -> str | None:
    """Why a pod's NCCL is not on the fabric of `kind` (None: it is, or it has not said yet)."""
    want = FABRIC_TRANSPORT[kind]
    if net.transport is None:
        return None
    if net.transport != want:
        return (f"NCCL uses {net.text()} where the fabric {kind} was asked ({want}); {FABRIC_HINT[kind]}")
    if kind == fabric.EFA and net.provider is not None and net.provider != "efa":
        return (f"NCCL uses {net.text()}, libfabric's {net.provider} provider over TCP rather than EFA; "
                f"{FABRIC_HINT[kind]}")
    return None


def hostfile(hosts: Sequence[HostSlots]) -> str:
    """The launcher's line for the hostfile a horovodrun starts with, in rank order (the chief first)."""
    return "hostfile: " + ", ".join(f"{h.host} slots={h.slots}" for h in hosts)


def parse_hostfile(line: bytes) -> tuple[HostSlots, ...] | None:
    """The hosts a launcher's hostfile line names, in rank order; None when it is not that line."""
    match = _HOSTFILE.match(line.rstrip(b"\r\n"))
    if match is None:
        return None
    hosts = []
    for part in match[1].decode("utf-8", "replace").split(", "):
        found = _HOST.match(part.strip())
        if found is None:
            return None
        hosts.append(HostSlots(found[1], int(found[2])))
    return tuple(hosts)


def rank_host(hosts: Sequence[HostSlots], rank: int) -> str | None:
    """The host of a rank: Horovod fills hosts in hostfile order, every slot of one host before the next
    (horovod/runner/common/util/hosts.py, get_host_assignments)."""
    for h in hosts:
        if rank < h.slots:
            return h.host
        rank -= h.slots
    return None
