"""Lines the chief's launcher writes for the manager to read: each one's format and its parser, side by side,
so the writer (chief/launcher.py) and the reader (manager/posttraining.py) cannot drift apart.

The chief runs in the base image and the manager in its own; they share no process, only the chief's log,
which the manager follows. The training's own lines (dt-progress, Train.py's recovery lines) are
observe/progress.py's and manager/recovery.py's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from distributetrain.hostfile import HostSlots

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
