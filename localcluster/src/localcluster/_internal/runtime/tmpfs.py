"""Memory-backed storage of the process runtime: /dev/shm and `emptyDir: {medium: Memory}` volumes.

Each container gets a 64 MiB tmpfs at /dev/shm (what container runtimes give), unless the pod mounts a volume
there. An emptyDir with `medium: Memory` is a tmpfs, shared by the pod's containers like any emptyDir, sized
as the kubelet sizes it: the node's allocatable memory, lowered to the pod's memory limit when every container
has one, lowered to `sizeLimit` when that is smaller. It is mounted on the host under the pod's directory
(root only; without root it stays a plain directory) and unmounted when the pod's directory goes.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from localcluster._internal.apimachinery.quantity import parse_quantity
from localcluster._internal.errors import InvalidQuantity

SHM_PATH = "/dev/shm"
DEFAULT_SHM_BYTES = 64 << 20
MS_NOSUID, MS_NODEV, MNT_DETACH = 2, 4, 2

_libc = ctypes.CDLL(None, use_errno=True)


def _bytes(value: Any) -> int | None:
    try:
        amount = parse_quantity(str(value))
    except (InvalidQuantity, ValueError):
        return None
    return int(-(-amount // 1)) if amount > 0 else None


def _pod_memory_limit(pod: Mapping[str, Any]) -> int | None:
    """The pod's memory limit as its cgroup would get it: the containers' sum (at least the largest init
    container's), only when every container sets one."""
    spec = pod.get("spec") or {}

    def limit(container: Mapping[str, Any]) -> int | None:
        return _bytes(((container.get("resources") or {}).get("limits") or {}).get("memory", 0))

    app = [limit(c) for c in spec.get("containers") or []]
    init = [limit(c) for c in spec.get("initContainers") or []]
    if not app or any(v is None for v in [*app, *init]):
        return None
    return max([sum(v or 0 for v in app), *(v or 0 for v in init)])


def memory_volume_bytes(volume: Mapping[str, Any], pod: Mapping[str, Any], allocatable_memory: Any) -> int:
    """The size of a memory-backed emptyDir's tmpfs, by the kubelet's rule."""
    size = _bytes(allocatable_memory) or DEFAULT_SHM_BYTES
    for smaller in (_pod_memory_limit(pod), _bytes((volume.get("emptyDir") or {}).get("sizeLimit"))):
        if smaller is not None and smaller <= size:
            size = smaller
    return size


def is_memory_backed(volume: Mapping[str, Any]) -> bool:
    return "emptyDir" in volume and (volume.get("emptyDir") or {}).get("medium") == "Memory"


def mount_tmpfs(target: Path, size: int) -> bool:
    """Mount a tmpfs of `size` bytes at `target` (as root); False when this process may not mount."""
    if os.geteuid() != 0:
        return False
    if os.path.ismount(target):
        return True
    result = _libc.mount(b"tmpfs", str(target).encode(), b"tmpfs", ctypes.c_ulong(MS_NOSUID | MS_NODEV),
                         f"size={size},mode=0777".encode())
    if result != 0:
        raise OSError(ctypes.get_errno(), f"mount tmpfs on {target}: {os.strerror(ctypes.get_errno())}")
    return True


def unmount_under(directory: Path) -> None:
    """Unmount whatever is mounted under `directory` (a pod's memory-backed volumes), deepest first."""
    prefix = str(directory).rstrip("/") + "/"
    points = []
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].encode().decode("unicode_escape")
            if point.startswith(prefix):
                points.append(point)
    for point in sorted(points, key=len, reverse=True):
        _libc.umount2(point.encode(), MNT_DETACH)


def shm_bytes(mount_paths: Iterable[str]) -> int | None:
    """The size of the container's own /dev/shm; None when a pod volume is mounted there instead."""
    if any(os.path.normpath(p) == SHM_PATH for p in mount_paths):
        return None
    return DEFAULT_SHM_BYTES
