"""Faults in a running pod's processes (the process runtime): frozen, as a collective that never returns or a
process someone stopped, and throttled, as a straggler on a slow or busy machine. The pod stays Running
and Ready; only its processes change.

- `freeze`: every process of the pod's containers (or, with `match`, those whose command line matches the
  regular expression, as `pgrep -f` matches, and what they started) stops running. With the cgroup v1
  freezer (/sys/fs/cgroup/freezer, root) the processes are moved into a cgroup of the pod's and frozen at
  once, `docker pause`'s way, so a process forked meanwhile is caught too; elsewhere each gets SIGSTOP.
  `thaw` resumes them (THAWED, or SIGCONT) and moves them back.
- `throttle`: the processes are moved into a cgroup of their container's with a CFS quota of `cpu` CPUs
  (quota = cpu x period, period 100 ms, the kubelet's arithmetic; never above the container's own CPU limit),
  so they run at that speed at most; what they start stays throttled. `unthrottle` moves them back. It
  needs the cgroup v1 cpu controller (root).

A container is its PID 1 and every process in its PID namespace (`kubectl exec` ones too), or, where
containers have no PID namespace (no root), PID 1 and its descendants. Frozen processes die as stopped ones
do: when the pod is deleted or its node shuts down, frozen processes get SIGSTOP and are thawed, so SIGTERM
waits for them and SIGKILL ends them, as for a process stopped with SIGSTOP. `undo_all` (the cluster's stop)
thaws and releases everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from localcluster._internal.errors import InvalidInput
from localcluster._internal.runtime.cgroups import CFS_PERIOD_US, ROOT, cfs_quota_us, container_cpu_millicores
from localcluster._internal.runtime.pods import ContainerRun, PodRun

FREEZE_WAIT = 2.0        # seconds a freezer takes at most to report FROZEN


@dataclass(frozen=True)
class ProcessFault:
    """What a fault did to a pod: `action` (frozen, thawed, throttled to 0.5 CPU, unthrottled), `method` (the
    cgroup freezer, signals, a cgroup CPU quota) and the processes: (container, host PID, command line)."""

    namespace: str
    pod: str
    action: str
    method: str
    processes: tuple[tuple[str, int, str], ...]

    def describe(self) -> str:
        names = ", ".join(f"{pid} {command[:60]!r}" for _, pid, command in self.processes) or "none"
        return (f"pod {self.namespace}/{self.pod}: {len(self.processes)} process(es) {self.action} "
                f"({self.method}): {names}")


# ---- processes -------------------------------------------------------------------------------------------
def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _all_pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def _pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _descendants(roots: Iterable[int], candidates: Iterable[int]) -> set[int]:
    """`roots` and every process among `candidates` descending from one of them."""
    parents = {pid: _parent(pid) for pid in candidates}
    found = set(roots)
    grew = True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if pid not in found and parent in found:
                found.add(pid)
                grew = True
    return found


def container_processes(pid1: int, *, own_namespace: bool) -> list[int]:
    """The container's processes, PID 1 first: its PID namespace's, or PID 1's descendants."""
    everyone = _all_pids()
    if own_namespace:
        namespace = _pid_namespace(pid1)
        members = [p for p in everyone if namespace is not None and _pid_namespace(p) == namespace]
    else:
        members = sorted(_descendants([pid1], everyone))
    return [pid1, *sorted(p for p in members if p != pid1)] if pid1 in members else sorted(members)


def selected(pids: list[int], pattern: re.Pattern[str] | None) -> list[int]:
    """`pids` whose command line matches `pattern` and what they started (all of them without a pattern)."""
    if pattern is None:
        return list(pids)
    matching = [p for p in pids if pattern.search(command_line(p))]
    return sorted(_descendants(matching, pids) & set(pids))


def _cgroup_of(pid: int, controller: str) -> str | None:
    """PID's cgroup path in the v1 hierarchy that holds `controller`."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3 and controller in parts[1].split(","):
            return parts[2]
    return None


def _move(pid: int, directory: Path) -> bool:
    try:
        (directory / "cgroup.procs").write_text(str(pid))
    except (ProcessLookupError, FileNotFoundError):
        return False
    except OSError as error:
        if error.errno == 3:  # ESRCH: gone meanwhile
            return False
        raise
    return True


def _signal(pids: Iterable[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def _writable(controller: Path, file: str) -> bool:
    return (controller / file).exists() and os.access(controller, os.W_OK)


async def _rmdir(path: Path) -> None:
    for _ in range(100):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            await asyncio.sleep(0.02)


# ---- the faults of every pod -----------------------------------------------------------------------------
@dataclass
class _Frozen:
    method: str                                   # "cgroup freezer" or "signals"
    pids: dict[int, str] = field(default_factory=dict)       # host PID -> the freezer cgroup it came from
    directory: Path | None = None


@dataclass
class _Throttled:
    cpu: float
    directories: dict[str, Path] = field(default_factory=dict)   # container -> its throttle cgroup
    origins: dict[int, tuple[str, str]] = field(default_factory=dict)  # pid -> (container, original cgroup)


class ProcessFaults:
    """The freezes and throttles in force, by pod uid. `parent` names the cluster's cgroups (Cgroups.name);
    `cgroups`: whether this process may use the v1 freezer and cpu controllers (root)."""

    def __init__(self, parent: str, *, cgroups: bool, own_namespaces: bool, root: Path = ROOT) -> None:
        self.parent = parent
        self.root = root
        self.freezer = cgroups and _writable(root / "freezer", "cgroup.procs")
        self.cpu = cgroups and _writable(root / "cpu", "cpu.cfs_quota_us")
        self.own_namespaces = own_namespaces
        self.frozen: dict[str, _Frozen] = {}
        self.throttled: dict[str, _Throttled] = {}

    def _targets(self, run: PodRun, *, match: str | None, container: str | None) -> list[tuple[ContainerRun,
                                                                                                list[int]]]:
        try:
            pattern = re.compile(match) if match else None
        except re.error as error:
            raise InvalidInput(f"--match {match!r} is not a regular expression: {error}") from None
        if container is not None and run.container(container) is None:
            names = ", ".join(c.name for c in run.all_containers)
            raise InvalidInput(f"pod {run.namespace}/{run.name} has no container {container!r} (it has "
                               f"{names})")
        running = [c for c in run.all_containers if c.pid is not None and container in (None, c.name)]
        if not running:
            raise InvalidInput(f"pod {run.namespace}/{run.name} has no running container"
                               + (f" named {container}" if container else "") + " to hold processes")
        out = [(c, selected(container_processes(c.pid, own_namespace=self.own_namespaces), pattern))
               for c in running if c.pid is not None]
        if not any(pids for _, pids in out):
            raise InvalidInput(f"no process of pod {run.namespace}/{run.name} matches {match!r}")
        return out

    @staticmethod
    def _listing(targets: list[tuple[ContainerRun, list[int]]]) -> tuple[tuple[str, int, str], ...]:
        return tuple((c.name, pid, command_line(pid)) for c, pids in targets for pid in pids)

    # ---- freeze and thaw -----------------------------------------------------------------------------------
    async def freeze(self, run: PodRun, *, match: str | None = None,
                     container: str | None = None) -> ProcessFault:
        targets = self._targets(run, match=match, container=container)
        record = self.frozen.setdefault(run.uid, _Frozen("cgroup freezer" if self.freezer else "signals"))
        wanted = [pid for _, pids in targets for pid in pids]
        if record.method == "cgroup freezer":
            await self._freeze_cgroup(run, record, wanted, targets, match)
        else:
            _signal(wanted, signal.SIGSTOP)
            record.pids.update(dict.fromkeys(wanted, ""))
            # a process forked before its parent stopped: stop it too
            for _ in range(10):
                again = [p for _, pids in self._targets_quiet(run, match, container) for p in pids
                         if p not in record.pids]
                if not again:
                    break
                _signal(again, signal.SIGSTOP)
                record.pids.update(dict.fromkeys(again, ""))
        return ProcessFault(run.namespace, run.name, "frozen", record.method, self._listing(targets))

    def _targets_quiet(self, run: PodRun, match: str | None,
                       container: str | None) -> list[tuple[ContainerRun, list[int]]]:
        try:
            return self._targets(run, match=match, container=container)
        except InvalidInput:
            return []

    async def _freeze_cgroup(self, run: PodRun, record: _Frozen, wanted: list[int],
                             targets: list[tuple[ContainerRun, list[int]]], match: str | None) -> None:
        directory = self.root / "freezer" / self.parent / run.uid
        directory.mkdir(parents=True, exist_ok=True)
        record.directory = directory
        containers = {c.name for c, _ in targets}
        for _ in range(10):
            new = [p for p in wanted if p not in record.pids]
            if not new:
                break
            for pid in new:
                origin = _cgroup_of(pid, "freezer") or "/"
                if _move(pid, directory):
                    record.pids[pid] = origin
            (directory / "freezer.state").write_text("FROZEN")
            # what the processes forked before they moved is caught here (moving into a frozen cgroup freezes)
            wanted = [p for c, pids in self._targets_quiet(run, match, None) if c.name in containers
                      for p in pids]
        for _ in range(int(FREEZE_WAIT / 0.02)):
            if (directory / "freezer.state").read_text().strip() == "FROZEN":
                return
            await asyncio.sleep(0.02)

    async def thaw(self, run: PodRun) -> ProcessFault:
        record = self.frozen.pop(run.uid, None)
        if record is None:
            raise InvalidInput(f"pod {run.namespace}/{run.name} has no frozen process")
        processes = tuple(("", pid, command_line(pid)) for pid in sorted(record.pids))
        await self._resume(record)
        return ProcessFault(run.namespace, run.name, "thawed", record.method, processes)

    async def _resume(self, record: _Frozen) -> None:
        if record.directory is None:
            _signal(record.pids, signal.SIGCONT)
            return
        with contextlib.suppress(OSError):
            (record.directory / "freezer.state").write_text("THAWED")
        with contextlib.suppress(OSError):
            pids = [int(line) for line in (record.directory / "cgroup.procs").read_text().split()]
            # a process before_stop turned into a stopped one (a liveness kill of another container) resumes
            _signal(pids, signal.SIGCONT)
            for pid in pids:
                _move(pid, self.root / "freezer" / record.pids.get(pid, "/").lstrip("/"))
        await _rmdir(record.directory)

    # ---- throttle ------------------------------------------------------------------------------------------
    async def throttle(self, run: PodRun, cpu: float, *, match: str | None = None,
                       container: str | None = None) -> ProcessFault:
        if not cpu > 0:
            raise InvalidInput(f"--cpu {cpu:g}: expected a share of CPUs above 0, e.g. 0.5")
        if not self.cpu:
            raise InvalidInput("throttling needs the cgroup v1 cpu controller at "
                               f"{self.root / 'cpu'}, writable (run the cluster as root)")
        targets = self._targets(run, match=match, container=container)
        if run.uid in self.throttled:
            await self.unthrottle(run)
        record = self.throttled[run.uid] = _Throttled(cpu)
        for ctr, pids in targets:
            millicores = int(cpu * 1000)
            limit = container_cpu_millicores(ctr.spec)
            if limit is not None:
                millicores = min(millicores, limit)  # a throttle never lifts the container's own limit
            directory = self.root / "cpu" / self.parent / run.uid / f"throttle-{ctr.name}"
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "cpu.cfs_period_us").write_text(str(CFS_PERIOD_US))
            (directory / "cpu.cfs_quota_us").write_text(str(cfs_quota_us(millicores)))
            record.directories[ctr.name] = directory
            for pid in pids:
                origin = _cgroup_of(pid, "cpu") or "/"
                if _move(pid, directory):
                    record.origins[pid] = (ctr.name, origin)
        return ProcessFault(run.namespace, run.name, f"throttled to {cpu:g} CPU", "cgroup cpu quota",
                            self._listing(targets))

    async def unthrottle(self, run: PodRun) -> ProcessFault:
        record = self.throttled.pop(run.uid, None)
        if record is None:
            raise InvalidInput(f"pod {run.namespace}/{run.name} is not throttled")
        moved = await self._release_throttle(record)
        return ProcessFault(run.namespace, run.name, "unthrottled", "cgroup cpu quota", moved)

    async def _release_throttle(self, record: _Throttled) -> tuple[tuple[str, int, str], ...]:
        """Every process in the throttle cgroups back where it came from (a process started since: where its
        container's processes came from), the cgroups removed."""
        moved: list[tuple[str, int, str]] = []
        for name, directory in record.directories.items():
            default = next((origin for ctr, origin in record.origins.values() if ctr == name), "/")
            with contextlib.suppress(OSError):
                for line in (directory / "cgroup.procs").read_text().split():
                    pid = int(line)
                    origin = record.origins.get(pid, (name, default))[1]
                    moved.append((name, pid, command_line(pid)))
                    _move(pid, self.root / "cpu" / origin.lstrip("/"))
            await _rmdir(directory)
        return tuple(moved)

    # ---- the pod's end, the cluster's end ------------------------------------------------------------------
    def before_stop(self, run: PodRun) -> None:
        """The pod's containers are about to be signalled: frozen processes become stopped ones (SIGSTOP,
        then THAWED), which SIGTERM waits for and SIGKILL ends, instead of a frozen task SIGKILL cannot end
        until it is thawed."""
        record = self.frozen.get(run.uid)
        if record is None or record.directory is None:
            return
        with contextlib.suppress(OSError):
            _signal((int(p) for p in (record.directory / "cgroup.procs").read_text().split()), signal.SIGSTOP)
            (record.directory / "freezer.state").write_text("THAWED")

    async def release(self, run: PodRun) -> None:
        """The pod's processes are gone: its cgroups go too."""
        record = self.frozen.pop(run.uid, None)
        if record is not None and record.directory is not None:
            await _rmdir(record.directory)
        throttled = self.throttled.pop(run.uid, None)
        for directory in (throttled.directories.values() if throttled is not None else ()):
            await _rmdir(directory)
        if throttled is not None:
            await _rmdir(self.root / "cpu" / self.parent / run.uid)

    async def undo_all(self) -> None:
        """Thaw every frozen process and release every throttled one (the cluster stops)."""
        for record in list(self.frozen.values()):
            await self._resume(record)
        self.frozen.clear()
        for throttled in list(self.throttled.values()):
            await self._release_throttle(throttled)
        self.throttled.clear()
