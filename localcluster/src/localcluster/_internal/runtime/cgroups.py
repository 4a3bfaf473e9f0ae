"""Memory and CPU limits of the process runtime's containers, with the cgroup v1 controllers.

A container with `resources.limits.memory` (or `.cpu`) runs in cgroups of its own,
`/sys/fs/cgroup/<controller>/localcluster-<cluster>-<pid>-<start>/<pod uid>/<container>-<n>` (its nth start):
memory.limit_in_bytes (and memory.memsw.limit_in_bytes where swap is accounted, so the limit cannot spill
into swap), and CFS quota as the kubelet sets it (quota = limit in millicores x period / 1000, at least 1 ms,
period 100 ms). The shim moves the container's PID 1 into them before `exec` (runtime/sandbox.py), so
everything the container runs is counted. When the container crosses its memory limit the kernel's OOM
killer kills it, and the cgroup's `oom_kill` counter tells the runtime to report `OOMKilled`, as the
container runtime does.

The parent is named after the server process (PID and start time), so a later start finds and removes the
cgroups a dead cluster left. Where the memory controller is not mounted or not writable, limits are not
enforced and `notice()` says so (`localcluster up` prints it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localcluster._internal.apimachinery.quantity import parse_quantity
from localcluster._internal.errors import InvalidQuantity
from localcluster._internal.runtime.netns import process_start_time

ROOT = Path("/sys/fs/cgroup")
PREFIX = "localcluster-"
CFS_PERIOD_US = 100_000
# the controllers the cluster makes cgroups in: limits (memory, cpu), and faults (freezer, and cpu for a
# throttle: runtime/processfaults.py)
CONTROLLERS = ("memory", "cpu", "freezer")
MIN_QUOTA_US = 1_000


def notice(root: Path = ROOT) -> str | None:
    """Why memory limits cannot be enforced on this machine, or None when they can."""
    memory = root / "memory"
    if not (memory / "memory.limit_in_bytes").exists():
        return (f"memory limits are not enforced: the cgroup v1 memory controller is not mounted at {memory} "
                "(containers never end OOMKilled)")
    if os.geteuid() != 0 or not os.access(memory, os.W_OK):
        return (f"memory limits are not enforced: {memory} is not writable (run as root); "
                "containers never end OOMKilled")
    return None


def _limits(container: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(memory limit in bytes, CPU limit in millicores) of a container, None where it sets none."""
    limits = (container.get("resources") or {}).get("limits") or {}
    memory = cpu = None
    with contextlib.suppress(InvalidQuantity, ValueError):
        if "memory" in limits:
            memory = int(-(-parse_quantity(str(limits["memory"])) // 1))
    with contextlib.suppress(InvalidQuantity, ValueError):
        if "cpu" in limits:
            cpu = int(-(-parse_quantity(str(limits["cpu"])) * 1000 // 1))
    return memory, cpu


def container_cpu_millicores(container: Mapping[str, Any]) -> int | None:
    """The container's CPU limit in millicores, None without one."""
    return _limits(container)[1]


def cfs_quota_us(millicores: int) -> int:
    return max(millicores * CFS_PERIOD_US // 1000, MIN_QUOTA_US)


@dataclass
class ContainerCgroups:
    """The cgroup directories of one start of one container."""

    directories: list[Path]
    memory: Path | None

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer killed in this container (memory.oom_control)."""
        if self.memory is None:
            return 0
        try:
            for line in (self.memory / "memory.oom_control").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            return 0
        return 0


async def _rmdir(path: Path) -> None:
    """Remove a cgroup (its processes may take a moment to leave it after they die)."""
    for _ in range(50):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            await asyncio.sleep(0.02)


class Cgroups:
    """The cluster's cgroups: one parent per controller, a child per pod and one per container."""

    def __init__(self, cluster_id: str, *, enabled: bool, root: Path = ROOT) -> None:
        self.enabled = enabled and notice(root) is None
        self.root = root
        pid = os.getpid()
        self.name = f"{PREFIX}{cluster_id}-{pid}-{process_start_time(pid)}"
        cpu = root / "cpu"
        self.cpu = self.enabled and (cpu / "cpu.cfs_quota_us").exists() and os.access(cpu, os.W_OK)

    def _pod_dir(self, controller: str, pod_uid: str) -> Path:
        return self.root / controller / self.name / pod_uid

    def create(self, pod_uid: str, container: Mapping[str, Any], *, start: int) -> ContainerCgroups:
        """The cgroups of one start of a container, its limits set (none when it sets no limit or they are
        off); a fresh one per start, so a restart never inherits the last start's OOM count."""
        memory, cpu = _limits(container)
        made = ContainerCgroups([], None)
        if not self.enabled:
            return made
        name = f"{container['name']}-{start}"
        if memory is not None:
            path = self._pod_dir("memory", pod_uid) / name
            path.mkdir(parents=True, exist_ok=True)
            (path / "memory.limit_in_bytes").write_text(str(memory))
            if (path / "memory.memsw.limit_in_bytes").exists():
                (path / "memory.memsw.limit_in_bytes").write_text(str(memory))
            made.directories.append(path)
            made.memory = path
        if cpu is not None and self.cpu:
            path = self._pod_dir("cpu", pod_uid) / name
            path.mkdir(parents=True, exist_ok=True)
            (path / "cpu.cfs_period_us").write_text(str(CFS_PERIOD_US))
            (path / "cpu.cfs_quota_us").write_text(str(cfs_quota_us(cpu)))
            made.directories.append(path)
        return made

    async def remove(self, cgroups: ContainerCgroups) -> None:
        for path in cgroups.directories:
            await _rmdir(path)

    async def remove_pod(self, pod_uid: str) -> None:
        for controller in ("memory", "cpu"):
            pod = self._pod_dir(controller, pod_uid)
            if pod.is_dir():
                for child in pod.iterdir():
                    if child.is_dir():
                        await _rmdir(child)
                await _rmdir(pod)

    async def teardown(self) -> None:
        for controller in CONTROLLERS:
            await _remove_tree(self.root / controller / self.name)


async def _remove_tree(path: Path) -> None:
    if not path.is_dir():
        return
    with contextlib.suppress(OSError):  # a frozen cgroup (runtime/processfaults.py) keeps nobody stopped
        if (path / "freezer.state").exists():
            (path / "freezer.state").write_text("THAWED")
    for child in path.iterdir():
        if child.is_dir():
            await _remove_tree(child)
    await _rmdir(path)


async def remove_stale(root: Path = ROOT) -> list[str]:
    """Parents left by local clusters whose server process is gone (or whose PID was reused)."""
    removed = []
    for controller in CONTROLLERS:
        base = root / controller
        if not base.is_dir() or not os.access(base, os.W_OK):
            continue
        for parent in base.glob(f"{PREFIX}*"):
            fields = parent.name[len(PREFIX):].split("-")
            if len(fields) != 3 or not fields[1].isdigit():
                continue
            if process_start_time(int(fields[1])) == fields[2]:
                continue
            await _remove_tree(parent)
            removed.append(str(parent))
    return removed
