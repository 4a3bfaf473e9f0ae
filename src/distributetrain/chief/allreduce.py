"""The pre-flight all-reduce check (nccl-tests' idea, with Horovod): before the user's command, the chief's
launcher runs this module on every rank under horovodrun (`python -m distributetrain.chief.allreduce`), and
reads what rank 0 prints (docs/images.md, "The pre-flight all-reduce check").

On every rank: Horovod starts (each rank says `ready`), then rank 0 and the first rank of each other pod
all-reduce the largest size pairwise, one pod at a time (the link from the chief to that pod: a hang here
names the pod), then all ranks together a few sizes, a few iterations each. NCCL reduces on GPUs (when
Horovod was built with it and a GPU is visible), Gloo on the CPU. Bandwidths as nccl-tests reports them:
algbw = bytes / time, busbw = algbw * 2(n-1)/n for an all-reduce over n ranks, in GB/s (10^9 bytes).

With a fabric (the chief's DT_FABRIC: efa or ib), the check also proves NCCL crossed nodes over it: every
pod's NCCL must name the fabric's transport in its log (NET/OFI with libfabric's efa provider, or NET/IB),
else the check fails naming the pod and its node (`fabric_verdict`). The bandwidth floor names the node of
the slowest pod too; `Blame` is what a caller that re-plans around a bad node reads.

Where its time goes: every rank stamps (unix time) when its process started, when TensorFlow and Horovod
were imported and when Horovod was initialised; rank 0 when the all-reduces were done (`phases`). A pair
below --min-busbw already decides the verdict: rank 0 then tells every rank to skip the sweep. Pairs use at
most PAIR_SIZE, so a link twenty times too slow costs seconds, not minutes.

Which node to blame (`blame_pairs`): a pod whose every measured link is below the floor, the pods with most
such links first; a slow link of two pods that are each fine elsewhere blames neither. With only the
chief and one pod the one link cannot say which end is slow: both are named.

The pure part (the lines, reading them back, the verdicts) is used by the launcher; `main` needs Horovod and
TensorFlow, as in the base image.
"""

from __future__ import annotations

import argparse
import re
import socket
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from distributetrain.hostfile import HostSlots
from distributetrain.observe import chieflog

STARTED = time.time()  # this module is the rank's main: its import is the process's start, within ~50 ms
MARKER = "dt-preflight"
DEFAULT_SIZES = (1 << 20, 16 << 20, 64 << 20)
DEFAULT_ITERATIONS = 5
PAIR_SIZE = 16 << 20  # the pairs' all-reduce: 1.6 s on a 84 Mbit/s link (1:20 here), ms on a fabric
_LINE = re.compile(r"(?:^|[\s:])dt-preflight (\w+)((?:\s+\S+=\S+)*)\s*$")


@dataclass(frozen=True)
class Measure:
    """One timed all-reduce: `ranks` ranks, `size` bytes each, `seconds` per iteration."""

    ranks: int
    size: int
    seconds: float
    host: str | None = None   # a pairwise measure: the pod whose link to the chief was measured

    @property
    def algbw(self) -> float:
        return self.size / self.seconds / 1e9 if self.seconds > 0 else float("inf")

    @property
    def busbw(self) -> float:
        return self.algbw * 2 * (self.ranks - 1) / self.ranks if self.ranks > 1 else self.algbw


@dataclass
class Report:
    """What the ranks said, read back from their output."""

    ready: set[int]
    pairs: list[Measure]
    sweep: list[Measure]
    started_pair: str | None = None  # the pod of a pairwise measure that started and did not end
    backend: str = ""
    done: bool = False
    hostnames: dict[int, str] = field(default_factory=dict)  # rank -> its pod's hostname (NCCL's HOST)
    stamps: dict[int, Stamps] = field(default_factory=dict)  # rank -> when it started, imported, initialised
    done_at: float | None = None  # when rank 0 had measured everything (unix time)
    skipped: bool = False  # the sweep skipped: a pair already fell below --min-busbw


@dataclass(frozen=True)
class Stamps:
    """When one rank's process started, had imported TensorFlow and Horovod, and had initialised Horovod
    (unix time, each from the rank's own clock: the pods of a node share it, nodes are NTP-close)."""

    start: float
    imported: float
    initialised: float


def parse_size(text: str) -> int:
    """`1M`, `16M`, `64M`, `512K`, `1G` or bytes."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = units.get(text[-1:], 1)
    number = text[:-1] if text[-1:] in units else text
    if not number.isdigit() or int(number) * scale < 4:
        raise ValueError(f"size {text!r}: give bytes, or a number with K, M or G (at least 4 bytes)")
    return int(number) * scale


def size_text(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def first_ranks(hosts: Sequence[HostSlots]) -> list[tuple[str, int]]:
    """Each pod's first rank (Horovod fills pods in hostfile order, every slot of one before the next)."""
    out, rank = [], 0
    for host in hosts:
        if host.slots:
            out.append((host.host, rank))
        rank += host.slots
    return out


def line(kind: str, **fields: object) -> str:
    return " ".join([MARKER, kind, *(f"{k}={v}" for k, v in fields.items())])


def read(lines: Iterable[str]) -> Report:
    """The ranks' lines (horovodrun's `[R]<stdout>:` prefixes and all) as a Report."""
    report = Report(ready=set(), pairs=[], sweep=[])
    for text in lines:
        match = _LINE.search(text.rstrip("\r\n"))
        if match is None:
            continue
        kind = match[1]
        fields = dict(item.split("=", 1) for item in match[2].split())
        try:
            if kind == "ready":
                report.ready.add(int(fields["rank"]))
                report.backend = fields.get("backend", report.backend)
                if "host" in fields:
                    report.hostnames[int(fields["rank"])] = fields["host"]
                if "start" in fields:
                    report.stamps[int(fields["rank"])] = Stamps(
                        float(fields["start"]), float(fields["imported"]), float(fields["init"]))
            elif kind == "pair" and "seconds" not in fields:
                report.started_pair = fields["host"]
            elif kind == "pair":
                report.pairs.append(Measure(2, int(fields["size"]), float(fields["seconds"]), fields["host"]))
                report.started_pair = None
            elif kind == "allreduce":
                report.sweep.append(Measure(int(fields["ranks"]), int(fields["size"]),
                                            float(fields["seconds"])))
            elif kind == "skip":
                report.skipped = True
            elif kind == "done":
                report.done = True
                report.done_at = float(fields["at"]) if "at" in fields else None
        except (KeyError, ValueError):
            continue
    return report


def slowest(report: Report) -> Measure | None:
    """The pod whose link to the chief measured slowest."""
    return min(report.pairs, key=lambda m: m.busbw) if report.pairs else None


def where(host: str, nodes: Mapping[str, str]) -> str:
    """A pod's address with its node when known: `10.244.2.2 (node gpu-2)`."""
    return f"{host} (node {nodes[host]})" if nodes.get(host) else host


@dataclass(frozen=True)
class Blame:
    """Why the check failed, and the pods (their hostfile addresses) and nodes it blames."""

    why: str
    pods: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()


def fabric_verdict(report: Report, networks: Mapping[str, chieflog.HostNet], *, hosts: Sequence[HostSlots],
                   fabric: str, nodes: Mapping[str, str]) -> Blame | None:
    """With the fabric `fabric` (efa, ib) asked for: every pod whose NCCL did not use it, named with its node;
    None when each one did. `networks`: what NCCL's lines said per pod hostname (chieflog.read_networks)."""
    blamed: list[tuple[str, str]] = []
    for address, rank in first_ranks(hosts):
        hostname = report.hostnames.get(rank, "")
        net = networks.get(hostname.split(".")[0]) if hostname else None
        if net is None or net.transport is None:
            using = "NCCL" if report.backend == "NCCL" else (report.backend or "no backend")
            why: str | None = (f"NCCL never said which network it uses (the check ran on {using}; "
                               f"{chieflog.FABRIC_HINT[fabric]})")
        else:
            why = chieflog.fabric_mismatch(net, fabric)
        if why:
            name = f"pod {hostname} at " if hostname else "pod at "
            blamed.append((address, f"{name}{where(address, nodes)}: {why}"))
    if not blamed:
        return None
    pods = tuple(address for address, _ in blamed)
    return Blame(f"the pre-flight all-reduce did not cross nodes over the fabric {fabric} on {len(blamed)} "
                 f"pod(s): " + "; ".join(text for _, text in blamed), pods,
                 tuple(sorted({nodes[a] for a in pods if nodes.get(a)})))


def verdict(report: Report, *, hosts: Sequence[HostSlots], ranks: int, min_busbw: float | None,
            timed_out: bool, exit_code: int, nodes: Mapping[str, str] | None = None) -> str | None:
    """Why the check failed, naming the pod to blame (and its node, from `nodes`: address -> node); None when
    it passed."""
    found = blame(report, hosts=hosts, ranks=ranks, min_busbw=min_busbw, timed_out=timed_out,
                  exit_code=exit_code, nodes=nodes or {})
    return None if found is None else found.why


def blame(report: Report, *, hosts: Sequence[HostSlots], ranks: int, min_busbw: float | None,
          timed_out: bool, exit_code: int, nodes: Mapping[str, str]) -> Blame | None:
    """Why the check failed and the pods (and their nodes) to blame; None when it passed. A pod whose ranks
    never started, or the pod of a pair that never ended, is blamed; below --min-busbw, the pods
    `blame_pairs` finds (none when the pairs cannot tell: the slowest is then named, not blamed)."""
    pods = first_ranks(hosts)
    if timed_out or exit_code or not report.done:
        how = "hung" if timed_out else f"failed (horovodrun exited with {exit_code})"
        missing = sorted({host for host, _ in _rank_hosts(hosts) if _ranks_of(hosts, host) - report.ready})
        if missing:
            return _blamed(f"the pre-flight all-reduce {how}: {len(missing)} pod(s) never started their "
                           f"ranks: {', '.join(where(m, nodes) for m in missing)} (unreachable from the "
                           "chief, or Horovod could not start there)", missing, nodes)
        if report.started_pair is not None:
            return _blamed(f"the pre-flight all-reduce {how} between the chief and "
                           f"{where(report.started_pair, nodes)}: that pod is unreachable on Horovod's ports "
                           "or far too slow", [report.started_pair], nodes)
        return Blame(f"the pre-flight all-reduce {how} with every rank started, after "
                     f"{len(report.sweep)} of its sizes; pods: {', '.join(h for h, _ in pods)}")
    if min_busbw is None:
        return None
    chief = pods[0][0] if pods else ""
    blamed = blame_pairs(report.pairs, chief=chief, floor=min_busbw)
    if report.sweep:
        largest = max(report.sweep, key=lambda m: m.size)
        if largest.busbw >= min_busbw:
            return None
        why = (f"the pre-flight all-reduce over {ranks} ranks reached {largest.busbw:.3g} GB/s bus bandwidth "
               f"at {size_text(largest.size)}, below --min-busbw {min_busbw:g} GB/s")
    elif report.skipped:
        why = (f"a pod's link to the chief measured below --min-busbw {min_busbw:g} GB/s (the sweep was "
               "skipped)")
    else:
        return None
    worst = slowest(report)
    if blamed:
        named = [f"the chief's pod {where(p, nodes)}" if p == chief else where(p, nodes) for p in blamed]
        links = ", ".join(f"{m.host} {m.busbw:.3g}" for m in report.pairs)
        why += (f"; to blame: {', '.join(named)}, every link measured from it below the floor (each pod's "
                f"link to the chief, GB/s: {links})")
    elif worst is not None:
        why += f"; the slowest pod is {where(str(worst.host), nodes)} ({worst.busbw:.3g} GB/s to the chief)"
    else:
        why += "; every rank is in the chief's pod"
    return _blamed(why, blamed, nodes)


def blame_pairs(pairs: Sequence[Measure], *, chief: str, floor: float) -> tuple[str, ...]:
    """The pods to blame for links below `floor` (GB/s of bus bandwidth): each measure is a link between
    `chief` and `host`. A pod is a suspect when every link measured from it is slow; suspects with the most
    slow links not yet explained are blamed first (a slow chief explains every slow link at once), until
    every slow link has a blamed end. A slow link with no suspect end blames nobody. Pods in address order."""
    links = [(chief, str(m.host), m.busbw < floor) for m in pairs if m.host]
    measured: dict[str, list[bool]] = {}
    for a, b, slow in links:
        measured.setdefault(a, []).append(slow)
        measured.setdefault(b, []).append(slow)
    suspects = {pod for pod, seen in measured.items() if all(seen)}
    unexplained = [(a, b) for a, b, slow in links if slow]
    blamed: set[str] = set()
    while unexplained:
        counts = {pod: sum(pod in link for link in unexplained) for pod in suspects - blamed}
        most = max(counts.values(), default=0)
        if most == 0:
            break
        blamed |= {pod for pod, n in counts.items() if n == most}
        unexplained = [link for link in unexplained if not blamed & set(link)]
    return tuple(sorted(blamed))


def _blamed(why: str, pods: Sequence[str], nodes: Mapping[str, str]) -> Blame:
    return Blame(why, tuple(pods), tuple(sorted({nodes[p] for p in pods if nodes.get(p)})))


def phases(report: Report, *, launched: float) -> str:
    """Where the check's time went, from the launcher's start (`launched`, unix time) and the ranks'
    stamps: each milestone when the last rank reached it."""
    if not report.stamps:
        return ""
    last = [max(getattr(s, name) for s in report.stamps.values())
            for name in ("start", "imported", "initialised")]
    tcp = report.backend == "TCP"  # tcpcheck.py: numpy, and horovodrun's rendezvous store
    marks = [("every rank's process running (horovodrun, ssh and Python)", last[0]),
             ("numpy imported" if tcp else "TensorFlow and Horovod imported", last[1]),
             ("the ranks met at the rendezvous" if tcp else "Horovod initialised", last[2])]
    if report.done_at is not None:
        marks.append(("the all-reduces done", report.done_at))
    out, before = [], launched
    for name, when in marks:
        out.append(f"{name} +{max(0.0, when - before):.1f}s")
        before = max(before, when)
    return "pre-flight phases: " + ", ".join(out)


def summary(report: Report) -> list[str]:
    """What the launcher logs: per size the time, algorithm and bus bandwidth; the pairs' slowest."""
    out = [f"pre-flight {size_text(m.size)} over {m.ranks} ranks ({report.backend or '?'}): "
           f"{m.seconds * 1000:.1f} ms, algbw {m.algbw:.3g} GB/s, busbw {m.busbw:.3g} GB/s"
           for m in report.sweep]
    worst = slowest(report)
    if worst is not None:
        out.append(f"pre-flight pods to the chief at {size_text(worst.size)}: "
                   + ", ".join(f"{m.host} {m.busbw:.3g} GB/s" for m in report.pairs)
                   + f"; slowest {worst.host}")
    return out


def _rank_hosts(hosts: Sequence[HostSlots]) -> list[tuple[str, int]]:
    out, rank = [], 0
    for host in hosts:
        for _ in range(host.slots):
            out.append((host.host, rank))
            rank += 1
    return out


def _ranks_of(hosts: Sequence[HostSlots], host: str) -> set[int]:
    return {rank for name, rank in _rank_hosts(hosts) if name == host}


# ---- on every rank (needs Horovod and TensorFlow) ---------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m distributetrain.chief.allreduce",
                                     description="The pre-flight all-reduce sweep; run under horovodrun.")
    parser.add_argument("--hosts", required=True, help="HOST:SLOTS,... in hostfile order (the chief first)")
    parser.add_argument("--sizes", default=",".join(str(s) for s in DEFAULT_SIZES))
    parser.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS)
    parser.add_argument("--min-busbw", type=float, default=None,
                        help="GB/s: a pair below it skips the sweep (the verdict is known)")
    args = parser.parse_args(argv)
    hosts = [HostSlots(h.rpartition(":")[0], int(h.rpartition(":")[2])) for h in args.hosts.split(",")]
    sizes = [parse_size(s) for s in args.sizes.split(",")]

    import horovod.tensorflow as hvd
    import tensorflow as tf

    imported = time.time()
    pods = first_ranks(hosts)
    pairs = [(host, hvd.ProcessSet([0, rank])) for host, rank in pods if rank != 0]
    hvd.init(process_sets=[s for _, s in pairs])
    initialised = time.time()
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        tf.config.set_visible_devices(gpus[hvd.local_rank() % len(gpus)], "GPU")
    backend = "NCCL" if gpus and hvd.nccl_built() else "Gloo"
    device = "/GPU:0" if gpus else "/CPU:0"
    rank = hvd.rank()
    print(line("ready", rank=rank, host=socket.gethostname(), backend=backend, start=f"{STARTED:.3f}",
               imported=f"{imported:.3f}", init=f"{initialised:.3f}"), flush=True)

    def timed(size: int, process_set: object, iterations: int) -> float:
        with tf.device(device):
            tensor = tf.ones([size // 4], dtype=tf.float32)
            # a warm-up first: connections, buffers
            hvd.allreduce(tensor, op=hvd.Sum, process_set=process_set).numpy()
            start = time.perf_counter()
            for _ in range(iterations):
                result = hvd.allreduce(tensor, op=hvd.Sum, process_set=process_set)
            result.numpy()  # wait for the last one
        return (time.perf_counter() - start) / iterations

    pair_size = min(max(sizes), PAIR_SIZE)
    slow = 0.0
    for host, process_set in pairs:
        if rank == 0:
            print(line("pair", host=host, size=pair_size), flush=True)
        if process_set.included():
            seconds = timed(pair_size, process_set, max(1, args.iterations // 2))
            if rank == 0:
                print(line("pair", host=host, size=pair_size, seconds=f"{seconds:.6f}"), flush=True)
                if args.min_busbw is not None and Measure(2, pair_size, seconds).busbw < args.min_busbw:
                    slow = 1.0
    # rank 0 alone saw the pairs: every rank learns from it whether the sweep still has anything to decide
    skip = int(hvd.broadcast(tf.constant([slow]), root_rank=0, name="dt_preflight_skip").numpy()[0] > 0)
    if skip and rank == 0:
        print(line("skip"), flush=True)
    for size in [] if skip else sizes:
        seconds = timed(size, hvd.global_process_set, args.iterations)
        if rank == 0:
            print(line("allreduce", ranks=hvd.size(), size=size, seconds=f"{seconds:.6f}"), flush=True)
    if rank == 0:
        print(line("done", at=f"{time.time():.3f}"), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
