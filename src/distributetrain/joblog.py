"""The manager's log: what it says about a job, and `Reporter`, which stamps and writes it.

The manager's log is what a user watches (`kubectl logs -f distributetrain-manager`), so each line should let
them follow the job without reading the code. The formatting is pure functions (the inventory table, a pod
and where it runs, the hostfile); Reporter writes the manager's own lines to stderr, stamped in UTC with
milliseconds, and copies the chief's lines to stdout unchanged.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Sequence
from typing import TextIO

from distributetrain import hostfile, podstatus
from distributetrain.hostfile import HostSlots
from distributetrain.inventory import NodeGpus

# a 1,000-node cluster must not flood the log: beyond this many nodes, the ones with the most free GPUs
INVENTORY_ROWS = 20
HOSTFILE_ENTRIES = 16
_HEADER = ("NODE", "ALLOCATABLE", "REQUESTED", "FREE", "ELIGIBLE")


class Reporter:
    """The manager's own log: what it decides and why, one timestamped line each; and the chief's lines,
    passed through unchanged. Tests subclass it to act at a given moment (e.g. right after a plan)."""

    def __init__(self, stream: TextIO | None = None, chief_stream: TextIO | None = None) -> None:
        self.stream = stream
        self.chief_stream = chief_stream
        self._lock = threading.Lock()

    def say(self, message: str) -> None:
        now = time.time()  # milliseconds: the phases of a job's start-up take fractions of a second
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z"
        with self._lock:
            out = self.stream or sys.stderr
            out.write(f"{stamp} distributetrain: {message}\n")
            out.flush()

    def chief_line(self, line: bytes) -> None:
        with self._lock:
            out = self.chief_stream or sys.stdout
            out.write(line.decode("utf-8", "replace") + "\n")
            out.flush()

    def planned(self, plan: object, attempt: int) -> None:
        """Called after each plan, before anything of it is created."""


def inventory_lines(rows: Sequence[NodeGpus], *, resource: str, limit: int = INVENTORY_ROWS) -> list[str]:
    """A summary line, then a table of nodes: allocatable, requested, free, eligible (or why not). Clusters
    larger than `limit` nodes show the eligible nodes with the most free GPUs and count the rest."""
    eligible = [r for r in rows if r.eligible]
    free = sum(r.free for r in eligible)
    allocatable = sum(r.allocatable for r in rows)
    lines = [f"inventory: {len(rows)} node(s), {len(eligible)} eligible; {free} of {allocatable} "
             f"{resource} free on eligible nodes"]
    shown = list(rows)
    if len(rows) > limit:
        shown = sorted(eligible, key=lambda r: (-r.free, r.node))[:limit]
    table = [_HEADER] + [(r.node, str(r.allocatable), str(r.requested), str(r.free),
                          "yes" if r.eligible else f"no: {r.reason}") for r in shown]
    widths = [max(len(row[i]) for row in table) for i in range(len(_HEADER) - 1)]
    for row in table:
        lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[-1])
    hidden = [r for r in rows if r not in shown]
    if hidden:
        hidden_eligible = [r for r in hidden if r.eligible]
        lines.append(f"  ... and {len(hidden)} more node(s): {len(hidden_eligible)} eligible with "
                     f"{sum(r.free for r in hidden_eligible)} free, {len(hidden) - len(hidden_eligible)} "
                     "not eligible (`distributetrain inventory` lists them all)")
    return lines


def gpus_text(count: int) -> str:
    return f"{count} GPU" + ("" if count == 1 else "s")


def pod_text(pod: podstatus.Pod) -> str:
    """`NAME (node-1, 5 GPUs)`: a job pod as the log names it."""
    where = podstatus.node(pod) or podstatus.planned_node(pod) or "no node yet"
    return f"{podstatus.name(pod)} ({where}, {gpus_text(podstatus.gpus(pod))})"


def listing(items: Sequence[str], *, limit: int = HOSTFILE_ENTRIES) -> str:
    """The first `limit` items joined with `, `, and how many more: a 1,000-pod job stays one line."""
    text = ", ".join(items[:limit])
    return text + (f", ... and {len(items) - limit} more" if len(items) > limit else "")


def hostfile_text(hosts: Sequence[HostSlots], *, limit: int = HOSTFILE_ENTRIES) -> str:
    """The hostfile's lines as written (sorted), joined with `; `, the first `limit` of them. IPs and slots
    are not secret."""
    lines = hostfile.render(hosts).splitlines()
    text = "; ".join(lines[:limit])
    return text + (f"; ... and {len(hosts) - limit} more" if len(hosts) > limit else "")
