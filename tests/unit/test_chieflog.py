"""NCCL's network lines as the chief's log carries them (observe/chieflog.py): which transport NCCL chose on
each pod, read from real NCCL and aws-ofi-nccl output recorded in their projects' issues - there is no fabric
on the machines the tests run on - and whether it is the fabric the job asked for."""

from __future__ import annotations

import pytest

from distributetrain.observe import chieflog
from distributetrain.observe.chieflog import NET_IB, NET_OFI, NET_SOCKET

# Recorded lines, verbatim from the threads named (hosts, pids and addresses as their authors posted them).
# EFA through aws-ofi-nccl on p5en, NCCL 2.2x (NVIDIA/nccl#1597): the provider, then the network's name.
EFA_P5EN = [
    "8h200-2:6831:6840 [0] NCCL INFO NET/OFI Selected Provider is efa (found 16 nics)",
    "8h200-2:6831:6840 [0] NCCL INFO NET/OFI Creating one domain per process",
    "8h200-2:6831:6840 [0] NCCL INFO Using network Libfabric",
]
# Horovod over EFA, aws-ofi-nccl of 2019, whose network was still "AWS Libfabric", behind mpirun's rank
# prefix (aws/aws-ofi-nccl#24)
EFA_HOROVOD_2019 = [
    "[1,7]<stdout>:ip-172-32-38-1:21471:22316 [7] NCCL INFO Ring 00 : 7 -> 8 [send] via NET/AWS "
    "Libfabric/0",
    "[1,26]<stdout>:ip-172-32-36-209:8716:9558 [2] NCCL INFO Ring 00 : 26[2] -> 30[6] via P2P/IPC",
]
# RoCE on DGX H100, NCCL 2.19.3 - the NCCL of the base image - with no net plugin (NVIDIA/nccl-tests#185)
ROCE_NCCL_2_19 = [
    "dgxh100-3:2152176:2152176 [0] NCCL INFO NET/Plugin : Plugin load (libnccl-net.so) returned 2 : "
    "libnccl-net.so: cannot open shared object file: No such file or directory",
    "dgxh100-3:2152176:2152299 [0] NCCL INFO NET/IB : Using [0]mlx5_10:1/RoCE [1]mlx5_11:1/RoCE [RO]; OOB "
    "enp220s0np0:11.1.128.128<0>",
    "dgxh100-3:2152176:2152299 [0] NCCL INFO Using network IB",
]
# InfiniBand, four HCAs (ROCm/rccl#419, RCCL writes NCCL's lines)
IB_FOUR_HCAS = [
    "e05r3n09:929:929 [2] NCCL INFO NET/IB : Using [0]mlx5_3:1/IB [1]mlx5_2:1/IB [2]mlx5_1:1/IB "
    "[3]mlx5_0:1/IB ; OOB ib0:11.5.5.50<0>",
    "e05r3n09:929:929 [2] NCCL INFO Using network IB",
]
# The fallback the issue is about: no IB device, NCCL on TCP sockets (Oneflow-Inc/oneflow#3586)
SOCKET_FALLBACK = [
    "worker:101542:101542 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal "
    "implementation",
    "worker:101542:101542 [0] NCCL INFO NET/IB : No device found.",
    "worker:101542:101542 [0] NCCL INFO NET/Socket : Using [0]eno1:172.18.40.41<0> "
    "[1]veth25f2e72:fe80::380d:bfff:fe5b:54d2%veth25f2e72<0>",
    "worker:101542:101542 [0] NCCL INFO Using network Socket",
    "worker:101542:101934 [0] NCCL INFO Channel 00 : 0[18000] -> 1[18000] [receive] via NET/Socket/1",
]
# NCCL 2.4 printed its socket bootstrap's interfaces on every run, IB or not (Mellanox/nv_peer_memory#56)
IB_NCCL_2_4 = [
    "master_node:20:289 [0] NCCL INFO NET/Socket : Using [0]ib0:192.168.11.1<0>",
    "master_node:20:289 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so).",
    "master_node:20:289 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:192.168.11.1<0>",
]


def one(lines: list[str], host: str) -> chieflog.HostNet:
    return chieflog.read_networks(lines)[host]


@pytest.mark.parametrize(("lines", "host", "transport", "text"), [
    (EFA_P5EN, "8h200-2", NET_OFI, "NET/OFI (provider efa)"),
    (EFA_HOROVOD_2019, "ip-172-32-38-1", NET_OFI, "NET/OFI"),
    (ROCE_NCCL_2_19, "dgxh100-3", NET_IB, "NET/IB ([0]mlx5_10:1/RoCE [1]mlx5_11:1/RoCE [RO]; OOB "
                                         "enp220s0np0:11.1.128.128<0>)"),
    (IB_FOUR_HCAS, "e05r3n09", NET_IB, "NET/IB ([0]mlx5_3:1/IB [1]mlx5_2:1/IB [2]mlx5_1:1/IB "
                                       "[3]mlx5_0:1/IB ; OOB ib0:11.5.5.50<0>)"),
    (SOCKET_FALLBACK, "worker", NET_SOCKET, "NET/Socket ([0]eno1:172.18.40.41<0> "
                                           "[1]veth25f2e72:fe80::380d:bfff:fe5b:54d2%veth25f2e72<0>)"),
])
def test_the_transport_nccl_chose(lines: list[str], host: str, transport: str, text: str) -> None:
    net = one(lines, host)
    assert (net.transport, net.text()) == (transport, text)


def test_lines_behind_horovodruns_gloo_prefix_are_read_too() -> None:
    nets = chieflog.read_networks([f"[3]<stdout>:{line}" for line in ROCE_NCCL_2_19])
    assert nets["dgxh100-3"].transport == NET_IB


def test_a_socket_bootstrap_line_alone_is_not_the_transport() -> None:
    net = one(IB_NCCL_2_4, "master_node")
    assert net.transport is None  # not yet said: a channel line `via NET/IB/0` will say it
    assert dict(net.devices) == {NET_SOCKET: "[0]ib0:192.168.11.1<0>",
                                 NET_IB: "[0]mlx5_0:1/IB ; OOB ib0:192.168.11.1<0>"}
    later = [*IB_NCCL_2_4, "master_node:20:289 [0] NCCL INFO Ring 00 : 0 -> 1 [send] via NET/IB/0"]
    assert one(later, "master_node").transport == NET_IB


def test_the_first_network_named_is_kept() -> None:
    net = one([*SOCKET_FALLBACK, "worker:1:2 [0] NCCL INFO Using network IB"], "worker")
    assert net.transport == NET_SOCKET


def test_other_lines_are_not_network_lines() -> None:
    for line in ("[0]<stdout>:epoch 1 loss 0.3", "NCCL version 2.19.3+cuda12.2",
                 "8h200-2:6831:6840 [0] NCCL INFO NET/OFI Creating one domain per process",
                 "launcher 2026-01-01 INFO Using network IB"):
        assert chieflog.parse_nccl_net(line) is None, line
    assert chieflog.parse_nccl_net(EFA_P5EN[2].encode()) == chieflog.NcclNet("8h200-2", transport=NET_OFI)


@pytest.mark.parametrize(("lines", "host", "kind"), [
    (EFA_P5EN, "8h200-2", "efa"), (EFA_HOROVOD_2019, "ip-172-32-38-1", "efa"),
    (ROCE_NCCL_2_19, "dgxh100-3", "ib"), (IB_FOUR_HCAS, "e05r3n09", "ib"),
])
def test_the_fabric_asked_for_is_the_one_used(lines: list[str], host: str, kind: str) -> None:
    assert chieflog.fabric_mismatch(one(lines, host), kind) is None


def test_sockets_where_efa_was_asked_is_named() -> None:
    why = chieflog.fabric_mismatch(one(SOCKET_FALLBACK, "worker"), "efa")
    assert why is not None
    assert why.startswith("NCCL uses NET/Socket ([0]eno1:172.18.40.41<0>")
    assert "where the fabric efa was asked (NET/OFI)" in why and "FABRIC=efa" in why


def test_libfabrics_tcp_provider_is_not_efa() -> None:
    lines = ["ip-10-0-0-7:12:34 [0] NCCL INFO NET/OFI Selected Provider is tcp (found 1 nics)",
             "ip-10-0-0-7:12:34 [0] NCCL INFO Using network Libfabric"]
    why = chieflog.fabric_mismatch(one(lines, "ip-10-0-0-7"), "efa")
    assert why is not None and "libfabric's tcp provider over TCP rather than EFA" in why


def test_ib_where_efa_was_asked_and_efa_where_ib_was() -> None:
    ib_for_efa = chieflog.fabric_mismatch(one(IB_FOUR_HCAS, "e05r3n09"), "efa")
    efa_for_ib = chieflog.fabric_mismatch(one(EFA_P5EN, "8h200-2"), "ib")
    assert "where the fabric efa was asked" in str(ib_for_efa)
    assert "where the fabric ib was asked (NET/IB)" in str(efa_for_ib)


def test_the_preflights_verdict_as_the_manager_reads_it_from_the_chiefs_log() -> None:
    stamp = b"launcher 2026-11-26 12:00:00,000"
    running = [stamp + b" INFO pre-flight all-reduce check over 3 ranks (at most 120s)"]
    assert chieflog.read_preflight(running) is None  # not decided yet
    passed = [*running, stamp + b" INFO " + chieflog.PREFLIGHT_PASSED.encode(), b"epoch 1 loss 0.9"]
    assert chieflog.read_preflight(passed) == chieflog.PreflightVerdict(passed=True)
    blamed = chieflog.preflight_blamed(chieflog.PreflightBlame(("node-2",), ("10.244.2.2",))).encode()
    failed = [*running, stamp + b" ERROR " + blamed,
              stamp + b" ERROR the pre-flight all-reduce hung: 1 pod(s) never started their ranks: "
                      b"10.244.2.2 (node node-2); the training was not started"]
    assert chieflog.read_preflight(failed) == chieflog.PreflightVerdict(
        False, "the pre-flight all-reduce hung: 1 pod(s) never started their ranks: 10.244.2.2 (node node-2)",
        chieflog.PreflightBlame(("node-2",), ("10.244.2.2",)))
    # a failure that blamed nobody: no node to exclude
    unblamed = chieflog.read_preflight([*running, failed[-1]])
    assert unblamed is not None and unblamed.blame == chieflog.PreflightBlame((), ())
