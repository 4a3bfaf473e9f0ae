"""Lines the chief's launcher writes for the manager to read: each one's format and its parser, side by side,
so the writer (chief/launcher.py) and the reader (manager/posttraining.py) cannot drift apart.

The chief runs in the base image and the manager in its own; they share no process, only the chief's log,
which the manager follows. The training's own lines (dt-progress, Train.py's recovery lines) are
observe/progress.py's and manager/recovery.py's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_RANK_FAILED = re.compile(rb"rank (\d+) on (\S+) exited with (-?\d+)")


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
