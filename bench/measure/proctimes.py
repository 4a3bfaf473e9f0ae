"""CPU seconds of a process and its descendants from /proc (Linux), standard library only: the scale bench
reads the local API server's CPU from its manager-side process (scale_manager.py), which must import nothing
else before its clock starts.

/proc/PID/stat's utime and stime (fields 14 and 15, in clock ticks) count every thread of the process; a
child's time is in its parent's cutime only once it has been waited for, so live children are read one by
one through /proc/PID/task/TID/children (proc(5)).
"""

from __future__ import annotations

import os
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def _own(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()  # the command name may hold spaces and parentheses
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime: fields 14 and 15 of the line


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(child) for child in (task / "children").read_text().split()]
        except OSError:  # the thread ended meanwhile
            continue
    return out


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) used so far by `pid` and every live descendant of it; a descendant that
    exits between two reads is counted in neither (the local cluster's simulated runtime starts none)."""
    total, pending = 0.0, [pid]
    while pending:
        current = pending.pop()
        try:
            total += _own(current)
            pending += _children(current)
        except (OSError, ValueError, IndexError):  # gone meanwhile
            continue
    return total
