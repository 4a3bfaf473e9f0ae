"""Node links: what a pod's traffic to another node crosses (`localcluster up --node-link 1gbit[,0.2ms]`).

In netns mode every node has a bridge of its own (its switch: pods of the node talk through it at memory
speed) joined to the cluster's bridge (the network between nodes) by one veth pair, the node's uplink - its
NIC. A node link shapes both ends of every uplink with `htb`, so each node's traffic to the other nodes, and
from them, shares one link of that rate each way, whichever of its pods sends it: a 7+1 job pushes all of
its cross-node traffic through the one node's link, as through one NIC. The rate counts what a NIC counts,
Ethernet frames: TCP carries 1448 of every 1514 bytes (MTU 1500): a 1gbit link moves ~957 Mbit/s of payload.
Delay needs the `netem` qdisc; where the kernel has none (these machines) a delay is refused, never dropped.

Pure: parsing and the `tc` commands; runtime/netns.py runs them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from localcluster._internal.errors import InvalidInput

#: tc's rate units (decimal, in bits per second), as `tc` itself reads them
RATE_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12}
DELAY_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
MIN_RATE_BITS = 1_000_000        # below 1 Mbit/s the API server's own traffic to pods would crawl
MAX_RATE_BITS = 100 * 10**9
MAX_DELAY_S = 1.0
#: payload share of a full TCP segment on Ethernet: 1448 bytes of data (MSS with timestamps) per 1514-byte
#: frame; what an iperf-like transfer reads at most from a link of a given rate
TCP_PAYLOAD_SHARE = 1448 / 1514
# htb's bucket: at least one 64 KiB GSO packet (veths hand over up to 64 KiB at once; a smaller bucket makes
# htb fall short of its rate), else a millisecond at the link's rate. Measured here: 200mbit, 1gbit and 2gbit
# links carry 0.956 of their rate as TCP payload with these buckets, exactly the frame overhead above.
MIN_BURST_BYTES = 64 * 1024
BURST_SECONDS = 0.001
# the link's queue: 10 ms at its rate, at least 1 MiB (a switch port's buffer, not an unbounded pfifo)
QUEUE_SECONDS = 0.010
MIN_QUEUE_BYTES = 1 << 20
HTB_QUANTUM = 60_000  # one class only; set so htb does not warn that rate/r2q is too big

_RATE = re.compile(r"^(\d+(?:\.\d+)?)([a-z]+)$")


@dataclass(frozen=True)
class NodeLink:
    """Each node's link to the others: `rate_bits` per direction (bits per second on the wire), and a one-way
    `delay_s` added by each end it crosses (0: none)."""

    rate_bits: int
    delay_s: float = 0.0

    def __str__(self) -> str:
        text = format_rate(self.rate_bits)
        return f"{text},{format_delay(self.delay_s)}" if self.delay_s else text

    @property
    def payload_bytes_per_s(self) -> float:
        """What one TCP transfer across the link carries at most, in bytes per second."""
        return self.rate_bits / 8 * TCP_PAYLOAD_SHARE

    @property
    def burst_bytes(self) -> int:
        return max(MIN_BURST_BYTES, int(self.rate_bits / 8 * BURST_SECONDS))

    @property
    def queue_bytes(self) -> int:
        return max(MIN_QUEUE_BYTES, int(self.rate_bits / 8 * QUEUE_SECONDS))


def parse_node_link(text: str) -> NodeLink:
    """`RATE[,DELAY]`: RATE a number and one of bit, kbit, mbit, gbit, tbit (tc's units: 1gbit = 10^9 bit/s),
    DELAY a number and us, ms or s. Raises InvalidInput naming what is wrong."""
    rate_text, _, delay_text = text.strip().lower().partition(",")
    where = f"--node-link {text!r}"
    match = _RATE.match(rate_text.strip())
    if match is None or match[2] not in RATE_UNITS:
        raise InvalidInput(f"{where}: expected RATE[,DELAY] like 1gbit or 1gbit,0.2ms (rate units: "
                           f"{', '.join(RATE_UNITS)}; delay units: {', '.join(DELAY_UNITS)})")
    rate = round(float(match[1]) * RATE_UNITS[match[2]])
    if not MIN_RATE_BITS <= rate <= MAX_RATE_BITS:
        raise InvalidInput(f"{where}: the rate must be between {format_rate(MIN_RATE_BITS)} and "
                           f"{format_rate(MAX_RATE_BITS)}")
    delay = 0.0
    if delay_text.strip():
        found = re.match(r"^(\d+(?:\.\d+)?)(us|ms|s)$", delay_text.strip())
        if found is None:
            raise InvalidInput(f"{where}: the delay {delay_text.strip()!r} should read like 0.2ms or 50us")
        delay = float(found[1]) * DELAY_UNITS[found[2]]
        if delay > MAX_DELAY_S:
            raise InvalidInput(f"{where}: a delay of more than {MAX_DELAY_S:g} s is not a node link")
    return NodeLink(rate_bits=rate, delay_s=delay)


def format_rate(bits: int) -> str:
    for unit, size in sorted(RATE_UNITS.items(), key=lambda item: -item[1]):
        if bits >= size and bits % size == 0:
            return f"{bits // size}{unit}"
    return f"{bits}bit"


def format_delay(seconds: float) -> str:
    return f"{seconds * 1e3:g}ms"


def shaping_batch(device: str, link: NodeLink) -> str:
    """`tc -batch` lines shaping what leaves `device` to the link: one htb class at the rate, its queue a
    bfifo (or netem with the delay)."""
    rate, burst = link.rate_bits, link.burst_bytes
    leaf = (f"netem delay {format_delay(link.delay_s)} limit {max(1000, link.queue_bytes // 1500)}"
            if link.delay_s else f"bfifo limit {link.queue_bytes}")
    return (f"qdisc replace dev {device} root handle 1: htb default 1\n"
            f"class replace dev {device} parent 1: classid 1:1 htb rate {rate}bit ceil {rate}bit "
            f"burst {burst}b cburst {burst}b quantum {HTB_QUANTUM}\n"
            f"qdisc replace dev {device} parent 1:1 handle 10: {leaf}\n")


def probe_delay_batch(device: str) -> str:
    """Whether the kernel has netem: a qdisc added to `device` and removed again."""
    return (f"qdisc replace dev {device} root handle 1: netem delay 1us\n"
            f"qdisc del dev {device} root\n")
