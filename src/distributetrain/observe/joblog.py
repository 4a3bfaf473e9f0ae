"""The manager's log: what it says about a job, and `Reporter`, which stamps and writes it.

The manager's log is what a user watches (`kubectl logs -f distributetrain-manager`), so each line should let
them follow the job without reading the code. The formatting is pure functions (the inventory table, a pod
and where it runs, the hostfile); Reporter writes the manager's own lines to stderr, stamped in UTC with
milliseconds, and copies the chief's lines to stdout unchanged.
"""

from __future__ import annotations

import calendar
import re
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from distributetrain import hostfile, podstatus
from distributetrain.hostfile import HostSlots
from distributetrain.observe.jobstate import RankState
from distributetrain.placement.inventory import NodeGpus
from distributetrain.placement.planner import Entry

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

    # ---- what happened, step by step: no-ops here; observer.Observer records each as Events, the manager
    # pod's phase label and annotations, and the metrics (docs/observability.md). Pods and ConfigMaps are
    # the objects as the API returned them.
    def pod_created(self, pod: Mapping[str, Any]) -> None:
        """A worker or the chief was created."""

    def pods_ready(self, pods: Sequence[Mapping[str, Any]]) -> None:
        """Every worker is Running and Ready."""

    def hostfile_written(self, configmap: Mapping[str, Any], hosts: Sequence[HostSlots]) -> None:
        """The hostfile ConfigMap was created."""

    def chief_started(self, pod: Mapping[str, Any]) -> None:
        """The chief runs; its launcher starts."""

    def gang_failed(self, why: str, names: Sequence[str]) -> None:
        """The gang did not start; its pods `names` are being deleted before a re-plan (or the end)."""

    def preflight_excluded(self, why: str, nodes: Sequence[str], names: Sequence[str]) -> None:
        """The chief's pre-flight blamed `nodes`: they are excluded, the pods `names` deleted before a
        re-plan without them (or the end)."""
        self.say(why)

    def restarted(self, why: str) -> None:
        """The training was restarted (counted in the metrics)."""

    def supervising(self, pods: Sequence[Mapping[str, Any]]) -> None:
        """PostTraining found the job's pods (its chief and workers)."""

    def pod_failed(self, pod: Mapping[str, Any] | None, why: str) -> None:
        """A job pod failed or vanished (None: it is gone) while the job ran."""

    def hung(self, pods: Sequence[Mapping[str, Any]], why: str) -> None:
        """The watchdog found the training hung; `pods`: those of the rank(s) that stopped first."""
        self.say(why)

    def straggling(self, pod: Mapping[str, Any] | None, why: str) -> None:
        """A rank runs slower than the others (its pod, if known)."""
        self.say(why)

    def ranks(self, ranks: Sequence[RankState]) -> None:
        """Every training rank's latest step time, where it runs (the metrics)."""

    def finished(self, code: int, detail: str) -> None:
        """The chief ended with the training's exit code (`detail`: which rank failed, if one did)."""

    def cleaned_up(self, deleted: int, kept: str | None) -> None:
        """The job's objects were deleted (`kept`: the chief, kept for its log)."""

    def failed(self, error: BaseException) -> None:
        """The job failed (or was interrupted) before the training's end; its objects are deleted next."""


def inventory_lines(rows: Sequence[NodeGpus], *, resource: str, limit: int = INVENTORY_ROWS) -> list[str]:
    """A summary line, then a table of nodes: allocatable, requested, free, eligible (or why not). Clusters
    larger than `limit` nodes show the eligible nodes with the most free GPUs and count the rest."""
    eligible = [r for r in rows if r.eligible]
    free = sum(r.offered for r in eligible)
    allocatable = sum(r.allocatable for r in rows)
    lines = [f"inventory: {len(rows)} node(s), {len(eligible)} eligible; {free} of {allocatable} "
             f"{resource} free on eligible nodes"]
    rooms = [r.fabric for r in eligible if r.fabric is not None]
    if rooms:
        fabric = rooms[0].fabric
        share = (f"{fabric.per_pod} per pod" if fabric.per_pod is not None
                 else "in proportion to each pod's GPUs")
        lines.append(f"fabric: {fabric.resource} ({fabric.kind}), {sum(r.free for r in rooms)} of "
                     f"{sum(r.allocatable for r in rooms)} free on eligible nodes; pods that cross nodes "
                     f"request it {share}; {sum(r.offered for r in rooms)} GPU(s) free with it")
    shown = list(rows)
    if len(rows) > limit:
        shown = sorted(eligible, key=lambda r: (-r.offered, r.node))[:limit]
    table = [_HEADER] + [(r.node, str(r.allocatable), str(r.requested), str(r.free),
                          _verdict(r)) for r in shown]
    widths = [max(len(row[i]) for row in table) for i in range(len(_HEADER) - 1)]
    for row in table:
        lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[-1])
    hidden = [r for r in rows if r not in shown]
    if hidden:
        hidden_eligible = [r for r in hidden if r.eligible]
        lines.append(f"  ... and {len(hidden)} more node(s): {len(hidden_eligible)} eligible with "
                     f"{sum(r.offered for r in hidden_eligible)} free, {len(hidden) - len(hidden_eligible)} "
                     "not eligible (`distributetrain inventory` lists them all)")
    return lines


def _verdict(row: NodeGpus) -> str:
    """`yes`, `yes: 2 of 5: worker needs 48Gi memory for 3 GPUs, 40Gi free`, or `no: why`."""
    if not row.eligible:
        return f"no: {row.reason}"
    notes = [n for n in (row.note, row.fabric.note if row.fabric is not None else None) if n]
    return f"yes: {'; '.join(notes)}" if notes else "yes"


def entry_text(entry: Entry) -> str:
    """`6 on node-1`, with a fabric `6 on node-1 with 3 vpc.amazonaws.com/efa`."""
    if entry.fabric is None:
        return f"{entry.gpus} on {entry.node}"
    return f"{entry.gpus} on {entry.node} with {entry.fabric.devices} {entry.fabric.resource}"


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


# ---- the chief's log, followed by time --------------------------------------------------------------------
_STAMP = re.compile(rb"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$")


def split_stamp(line: bytes) -> tuple[int | None, bytes]:
    """A line of `logs?timestamps=true` as (its time in ns since the epoch, the line); (None, line) when it
    carries no timestamp."""
    stamp, space, rest = line.partition(b" ")
    match = _STAMP.match(stamp)
    if not space or match is None:
        return None, line
    year, month, day, hour, minute, second = (int(match[i]) for i in range(1, 7))
    nanos = int((match[7] or b"0").ljust(9, b"0"))
    seconds = calendar.timegm((year, month, day, hour, minute, second))
    if match[8] != b"Z":
        sign = 1 if match[8][:1] == b"+" else -1
        seconds -= sign * (int(match[8][1:3]) * 3600 + int(match[8][4:6]) * 60)
    return seconds * 10**9 + nanos, rest


@dataclass
class LogCursor:
    """How far a followed log has been copied, by time, so that a stream that was cut (or a log the kubelet
    rotated meanwhile) resumes with nothing lost or repeated: ask again from the second of the last line
    copied (`since_time`: the API passes whole seconds on), then skip the lines before it and as many lines
    stamped exactly as it as were copied already. A line count would skip new lines after a rotation."""

    last: int | None = None   # ns since the epoch of the last line copied
    at_last: int = 0          # how many copied lines carried exactly that time
    _replaying: bool = False  # a resumed stream that has not yet passed what was copied
    _replayed: int = 0

    def since_time(self) -> str | None:
        if self.last is None:
            return None
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.last // 10**9))

    def restart(self) -> None:
        """A new stream begins (from `since_time`): its first lines may have been copied already."""
        self._replaying, self._replayed = self.last is not None, 0

    def admit(self, stamp: int | None) -> bool:
        """Whether the next line of the stream, stamped `stamp`, is new (and so to be copied)."""
        if stamp is None:
            return True
        if self._replaying and self.last is not None:
            if stamp < self.last:
                return False
            if stamp == self.last:
                self._replayed += 1
                if self._replayed <= self.at_last:
                    return False
            self._replaying = False
        if self.last is None or stamp > self.last:
            self.last, self.at_last = stamp, 1
        elif stamp == self.last:
            self.at_last += 1
        return True
