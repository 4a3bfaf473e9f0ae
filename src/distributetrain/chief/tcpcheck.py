"""The pre-flight check's cheap form: the same measures as allreduce.py (each pod's link to the chief as a
pair, then every rank together), as ring all-reduces of float32 buffers over TCP between the ranks, with
numpy alone: no TensorFlow, no Horovod in the ranks. On the local cluster the Horovod form spends 16.5 of
its 26 s starting six ranks that each import TensorFlow and Horovod (docs/manager.md, "The pre-flight").

horovodrun starts it as it starts the training (the same ssh, interface and pods), one rank per pod: it
measures the links between pods, and each rank's start (one ssh, one Python) is most of what it costs
(preflight.ranks_of). The ranks meet at horovodrun's own rendezvous server, the
HTTP key-value store Gloo's ranks use (horovod/runner/http/http_server.py, Horovod 0.28.1: `PUT` and `GET`
of `/SCOPE/KEY`, 404 until a key is there), whose address horovodrun gives every rank in
HOROVOD_GLOO_RENDEZVOUS_ADDR and _PORT beside HOROVOD_RANK, HOROVOD_SIZE and HOROVOD_HOSTNAME (the rank's
host as the hostfile names it: its pod's IP). Each rank listens on a port of its own, publishes it, and
links to a peer once, the lower rank connecting. An all-reduce is the ring algorithm Gloo's and NCCL's rings
run: n-1 reduce-scatter steps, then n-1 all-gather steps, each sending one chunk to the next rank while
receiving one from the previous; every rank checks the sum it ends with. It is Gloo's transport (TCP over
the pod network), not NCCL's: a job whose NCCL must cross nodes over a fabric is checked by allreduce.py,
which proves it (preflight.form).

It prints allreduce.py's `dt-preflight` lines (backend `TCP`), so the launcher reads, judges and blames them
the same way.
"""

from __future__ import annotations

import argparse
import http.client
import os
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from distributetrain.chief.allreduce import PAIR_SIZE, Measure, first_ranks, line, parse_size
from distributetrain.hostfile import HostSlots

STARTED = time.time()  # this module is the rank's main: its import is the process's start, within ~50 ms
SCOPE = "dtpreflight"  # an ad-hoc scope of horovodrun's store (the training's Gloo uses its own)
CONNECT_TIMEOUT = 30.0
_HELLO = struct.Struct("!i")


class Store:
    """horovodrun's rendezvous store: `put` a value, `wait` for one (polling its 404s)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port

    def _send(self, method: str, key: str, body: bytes | None = None) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            conn.request(method, f"/{SCOPE}/{key}", body=body)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def put(self, key: str, value: bytes) -> None:
        status, _ = self._send("PUT", key, value)
        if status != 200:
            raise ConnectionError(f"the rendezvous store at {self.host}:{self.port} refused {key}: {status}")

    def wait(self, key: str, *, timeout: float) -> bytes:
        until = time.monotonic() + timeout
        while True:
            status, body = self._send("GET", key)
            if status == 200:
                return body
            if time.monotonic() > until:
                raise TimeoutError(f"no {key} at the rendezvous store after {timeout:g}s")
            time.sleep(0.05)


class Mesh:
    """One TCP connection per pair of ranks that talk, made when first needed: the lower rank connects and
    says its rank, the higher one accepts."""

    def __init__(self, rank: int, listener: socket.socket, addresses: dict[int, tuple[str, int]]) -> None:
        self.rank, self.listener, self.addresses = rank, listener, addresses
        self.links: dict[int, socket.socket] = {}

    def link(self, peer: int) -> socket.socket:
        if self.rank < peer and peer not in self.links:
            sock = socket.create_connection(self.addresses[peer], timeout=CONNECT_TIMEOUT)
            sock.sendall(_HELLO.pack(self.rank))
            self.links[peer] = sock
        while peer not in self.links:  # a connection from a lower rank, maybe another than `peer` first
            sock, _ = self.listener.accept()
            hello = bytearray(_HELLO.size)
            _receive(sock, memoryview(hello))
            self.links[_HELLO.unpack(hello)[0]] = sock
        sock = self.links[peer]
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock


    def close(self) -> None:
        for sock in self.links.values():
            sock.close()
        self.listener.close()


def _receive(sock: socket.socket, into: memoryview) -> None:
    got = 0
    while got < len(into):
        count = sock.recv_into(into[got:])
        if count == 0:
            raise ConnectionError("a peer closed its connection mid-all-reduce")
        got += count


def _exchange(out: socket.socket, send: Any, inp: socket.socket, into: Any) -> None:
    """Send `send` to the next rank while receiving `into` from the previous one (full duplex)."""
    sender = threading.Thread(target=out.sendall, args=(memoryview(send).cast("B"),), daemon=True)
    sender.start()
    _receive(inp, memoryview(into).cast("B"))
    sender.join()


def ring_allreduce(buffer: Any, group: Sequence[int], mesh: Mesh) -> None:
    """Sum `buffer` (a 1-D numpy array) over the ranks of `group`, in place, as a ring."""
    n = len(group)
    if n < 2:
        return
    import numpy as np

    at = group.index(mesh.rank)
    after, before = mesh.link(group[(at + 1) % n]), mesh.link(group[(at - 1) % n])
    chunks = np.array_split(buffer, n)
    scratch = np.empty_like(chunks[0])
    for step in range(n - 1):  # reduce-scatter: chunk at+1 ends up summed here
        into = chunks[(at - step - 1) % n]
        _exchange(after, chunks[(at - step) % n], before, scratch[:len(into)])
        into += scratch[:len(into)]
    for step in range(n - 1):  # all-gather: every summed chunk goes round
        _exchange(after, chunks[(at + 1 - step) % n], before, chunks[(at - step) % n])


def main(argv: Sequence[str] | None = None, env: dict[str, str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m distributetrain.chief.tcpcheck",
                                     description="The pre-flight's TCP all-reduces; run under horovodrun.")
    parser.add_argument("--hosts", required=True, help="HOST:SLOTS,... in hostfile order (the chief first)")
    parser.add_argument("--sizes", default="1M,16M,64M")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--min-busbw", type=float, default=None,
                        help="GB/s: a pair below it skips the sweep (the verdict is known)")
    args = parser.parse_args(argv)
    env = dict(os.environ) if env is None else env
    hosts = [HostSlots(h.rpartition(":")[0], int(h.rpartition(":")[2])) for h in args.hosts.split(",")]
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    rank, ranks = int(env["HOROVOD_RANK"]), int(env["HOROVOD_SIZE"])
    import numpy as np

    imported = time.time()
    store = Store(env["HOROVOD_GLOO_RENDEZVOUS_ADDR"], int(env["HOROVOD_GLOO_RENDEZVOUS_PORT"]))
    listener = socket.create_server(("", 0), backlog=max(8, ranks))
    store.put(f"rank-{rank}", f"{env['HOROVOD_HOSTNAME']}:{listener.getsockname()[1]}".encode())
    addresses: dict[int, tuple[str, int]] = {}
    for peer in range(ranks):
        host, _, port = store.wait(f"rank-{peer}", timeout=CONNECT_TIMEOUT).decode().rpartition(":")
        addresses[peer] = (host, int(port))
    mesh = Mesh(rank, listener, addresses)
    initialised = time.time()
    print(line("ready", rank=rank, host=socket.gethostname(), backend="TCP", start=f"{STARTED:.3f}",
               imported=f"{imported:.3f}", init=f"{initialised:.3f}"), flush=True)

    def timed(size: int, group: Sequence[int], iterations: int) -> float:
        buffer = np.ones(size // 4, dtype=np.float32)
        ring_allreduce(buffer, group, mesh)  # a warm-up first: connections, buffers
        start = time.perf_counter()
        for _ in range(iterations):
            buffer.fill(1.0)
            ring_allreduce(buffer, group, mesh)
        seconds = (time.perf_counter() - start) / iterations
        if buffer[0] != len(group) or buffer[-1] != len(group):
            raise ArithmeticError(f"rank {rank}: the all-reduce summed {buffer[0]:g}, not {len(group)}")
        return seconds

    pair_size = min(max(sizes), PAIR_SIZE)
    slow = False
    for host, peer in first_ranks(hosts):
        if peer == 0:
            continue
        if rank == 0:
            print(line("pair", host=host, size=pair_size), flush=True)
        if rank in (0, peer):
            seconds = timed(pair_size, [0, peer], max(1, args.iterations // 2))
            if rank == 0:
                print(line("pair", host=host, size=pair_size, seconds=f"{seconds:.6f}"), flush=True)
                slow |= args.min_busbw is not None and Measure(2, pair_size, seconds).busbw < args.min_busbw
    # rank 0 alone saw the pairs: every rank learns from it whether the sweep still has anything to decide
    if rank == 0:
        store.put("skip", b"1" if slow else b"0")
    skip = store.wait("skip", timeout=3600) == b"1"
    if skip and rank == 0:
        print(line("skip"), flush=True)
    everyone = list(range(ranks))
    for size in [] if skip else sizes:
        seconds = timed(size, everyone, args.iterations)
        if rank == 0:
            print(line("allreduce", ranks=ranks, size=size, seconds=f"{seconds:.6f}"), flush=True)
    if rank == 0:
        print(line("done", at=f"{time.time():.3f}"), flush=True)
    mesh.close()
    return 0


def run(target: Callable[[], int]) -> int:
    try:
        return target()
    except (OSError, TimeoutError, ArithmeticError) as err:
        print(f"dt-preflight tcp check failed: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(run(main))
