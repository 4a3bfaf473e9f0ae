"""The pre-flight's TCP form (tcpcheck.py): its ring all-reduce sums right over real loopback sockets, for
every ring size and buffers that do not split evenly, and the launcher picks the form the job needs."""

from __future__ import annotations

import socket
import threading
from typing import Any

import numpy as np
import pytest

from distributetrain.chief import preflight, tcpcheck
from distributetrain.hostfile import HostSlots


def allreduce_in_threads(values: list[float], length: int) -> list[np.ndarray[Any, Any]]:
    """Each rank a thread with its own listener and Mesh on 127.0.0.1, all-reducing `length` floats."""
    listeners = [socket.create_server(("127.0.0.1", 0), backlog=8) for _ in values]
    addresses = {rank: ("127.0.0.1", s.getsockname()[1]) for rank, s in enumerate(listeners)}
    buffers = [np.full(length, value, dtype=np.float32) for value in values]
    errors: list[BaseException] = []
    meshes = [tcpcheck.Mesh(r, listeners[r], addresses) for r in range(len(values))]

    def rank(r: int) -> None:
        try:
            tcpcheck.ring_allreduce(buffers[r], list(range(len(values))), meshes[r])
        except BaseException as err:  # the test reports it
            errors.append(err)

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(len(values))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    for mesh in meshes:
        mesh.close()
    assert not errors and not any(t.is_alive() for t in threads), errors
    return buffers


@pytest.mark.parametrize(("values", "length"), [
    ([1.0, 2.0], 1000), ([1.0, 2.0, 3.0], 1001), ([0.5, 1.5, 2.5, 3.5, 4.5], 7),
    ([3.0, 4.0, 5.0, 6.0], 1 << 16)])
def test_the_ring_sums_every_ranks_buffer_on_every_rank(values: list[float], length: int) -> None:
    for buffer in allreduce_in_threads(values, length):
        assert np.all(buffer == sum(values))


def test_the_tcp_form_unless_nccl_must_be_proven_or_mpi_launches() -> None:
    assert preflight.form(fabric=None, transport="gloo") == preflight.TCP
    assert preflight.form(fabric="efa", transport="gloo") == preflight.HOROVOD
    assert preflight.form(fabric=None, transport="mpi") == preflight.HOROVOD
    argv = preflight.command([HostSlots("10.0.0.1", 2), HostSlots("10.0.0.2", 1)], sizes="1M,16M",
                             kind=preflight.TCP, min_busbw=0.5)
    assert argv[1:] == ["-m", "distributetrain.chief.tcpcheck", "--hosts", "10.0.0.1:2,10.0.0.2:1",
                        "--sizes", "1M,16M", "--iterations", "2", "--min-busbw", "0.5"]


def test_the_tcp_form_runs_one_rank_per_pod_the_horovod_form_every_rank() -> None:
    hosts = [HostSlots("10.0.0.1", 3), HostSlots("10.0.0.2", 0), HostSlots("10.0.0.3", 8)]
    assert preflight.ranks_of(hosts, preflight.TCP) == [HostSlots("10.0.0.1", 1), HostSlots("10.0.0.3", 1)]
    assert preflight.ranks_of(hosts, preflight.HOROVOD) == hosts
