"""What keeps a job at its size while it trains (pure): which worker counts as lost, how many GPUs to add now,
when a job short of GPUs has waited too long, and what the chief's log says about the recovery.

Two modes (JobSpec.recovery): elastic Horovod (`--min-gpus`: the other ranks go on while the manager
replaces the lost worker, and the job grows up to `--max-gpus` when GPUs free up) and restart (`--restarts`:
the chief's launcher relaunches the training from its checkpoint once the manager has replaced the lost
workers).
keeper.py does the I/O with these decisions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from distributetrain import naming, podstatus
from distributetrain.hostfile import HostSlots

# Train.py's elastic form, from rank 0 each time Horovod (re)forms: `elastic size=S from_epoch=E`
ELASTIC_LINE = re.compile(rb"elastic size=(\d+) from_epoch=(\d+)")
# Train.py on a relaunch, from rank 0: `resumed_from_epoch=E` (0: no checkpoint, from the start)
RESUMED_LINE = re.compile(rb"resumed_from_epoch=(\d+)")
WORKER_NAME = re.compile(r"-worker-(\d+)$")


@dataclass(frozen=True)
class Recovery:
    """How one job survives a lost worker, from its request."""

    mode: str            # naming.RECOVERY_ELASTIC or RECOVERY_RESTART
    target: int          # --gpus: the size the job returns to
    minimum: int         # the fewest GPUs it trains on (a restart job: all of them)
    maximum: int         # the most it grows to (a restart job: its target)
    restarts: int        # relaunches allowed (elastic: none, Horovod goes on instead)
    replace_timeout: float
    grow_interval: float

    @property
    def elastic(self) -> bool:
        return self.mode == naming.RECOVERY_ELASTIC

    @staticmethod
    def of(*, mode: str | None, gpus: int, min_gpus: int | None, max_gpus: int | None, restarts: int,
           replace_timeout: float, grow_interval: float) -> Recovery | None:
        if mode is None:
            return None
        elastic = mode == naming.RECOVERY_ELASTIC
        return Recovery(mode=mode, target=gpus, minimum=(min_gpus or gpus) if elastic else gpus,
                        maximum=(max_gpus or gpus) if elastic else gpus, restarts=0 if elastic else restarts,
                        replace_timeout=replace_timeout, grow_interval=grow_interval)


def lost_reason(pod: podstatus.Pod | None, *, node_ready: bool | None = None) -> str | None:
    """Why a worker that was running counts as lost, None while it is not: its pod deleted or ended, or its
    node NotReady (a real cluster marks such a pod not Ready long before it evicts it)."""
    if pod is None:
        return "its pod disappeared (deleted, or its node was removed)"
    if podstatus.is_deleting(pod):
        return "its pod is being deleted"
    if podstatus.is_terminated(pod):
        return podstatus.why(pod) or f"its pod ended ({podstatus.phase(pod)})"
    if node_ready is False:
        return f"its node {podstatus.node(pod)} is NotReady"
    return None


def gpus_to_add(recovery: Recovery, *, running: int, free: int) -> int:
    """GPUs to place now, given those the job holds or is starting (`running`) and those free for a worker on
    eligible nodes. Short of the target: elastic takes what is free (it trains meanwhile), a restart job only
    the whole shortfall (its relaunch needs every GPU). At or over it, an elastic job grows to its maximum
    with what is free."""
    short = recovery.target - running
    if short > 0:
        if recovery.elastic:
            return min(short, free)
        return short if free >= short else 0
    if recovery.elastic and running < recovery.maximum:
        return min(recovery.maximum - running, free)
    return 0


def worker_index(name: str) -> int | None:
    match = WORKER_NAME.search(name)
    return int(match[1]) if match else None


def next_index(names: Iterable[str]) -> int:
    """The next worker's number: after every one the job ever had (a name is never reused)."""
    return max((i for i in map(worker_index, names) if i is not None), default=-1) + 1


@dataclass(frozen=True)
class Member:
    """A worker in the job's hostfile: its pod, node, address and GPUs."""

    name: str
    node: str
    ip: str
    gpus: int


def hostfile_entries(members: Iterable[Member]) -> tuple[list[HostSlots], dict[str, str]]:
    """The hostfile's `IP slots=N` entries and the address -> pod map of its `names` key."""
    members = list(members)
    return [HostSlots(m.ip, m.gpus) for m in members], {m.ip: m.name for m in members}


def elastic_size(line: bytes) -> tuple[int, int] | None:
    """(size, epoch) from Train.py's `elastic size=S from_epoch=E` line, else None."""
    match = ELASTIC_LINE.search(line)
    return (int(match[1]), int(match[2])) if match else None


def resumed_epoch(line: bytes) -> int | None:
    """E from Train.py's `resumed_from_epoch=E` line, else None."""
    match = RESUMED_LINE.search(line)
    return int(match[1]) if match else None


def describe_members(members: Mapping[str, Member]) -> str:
    return ", ".join(f"{m.name} ({m.node}, {m.gpus} GPU{'s' if m.gpus != 1 else ''})"
                     for m in sorted(members.values(), key=lambda m: m.name)) or "none"


def node_is_ready(node: Mapping[str, Any]) -> bool:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False
