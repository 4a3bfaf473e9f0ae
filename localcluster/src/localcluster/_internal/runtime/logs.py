"""A container's log as the kubelet serves it: the file the shim writes, its last lines (tailLines), and with
`follow` what the container writes next, until it ends, restarts or the pod is deleted.

Timestamps (`timestamps=true`, `sinceTime`): each line has one time, fixed for good the first time the line
is seen, as a CRI log line carries the time it was written. The simulated runtime stamps a line when it is
appended (`MemoryLog`); the process runtime, whose containers write their log file themselves, when the line
is first read (a follower reads within POLL_SECONDS). So a stream resumed from a time neither loses nor
repeats a line, and `MemoryLog.rotate` shows what a reader that counted lines would miss after the kubelet
rotated a log.
"""

from __future__ import annotations

import asyncio
import calendar
import re
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field

from localcluster._internal.runtime.pods import ContainerRun, PodRun

POLL_SECONDS = 0.1
_RFC3339 = re.compile(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$")


def format_time(ns: int) -> bytes:
    """RFC3339 with nanoseconds, always 9 digits, as the kubelet writes log timestamps."""
    return (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // 10**9)) + f".{ns % 10**9:09d}Z").encode()


def parse_time(text: str) -> int:
    """An RFC3339 time (fraction optional) in ns since the epoch; ValueError when it is not one."""
    match = _RFC3339.match(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not an RFC3339 time")
    seconds = calendar.timegm((*(int(match[i]) for i in range(1, 7)), 0, 0, 0))
    if match[8] != "Z":
        sign = 1 if match[8][0] == "+" else -1
        seconds -= sign * (int(match[8][1:3]) * 3600 + int(match[8][4:6]) * 60)
    return seconds * 10**9 + int((match[7] or "0").ljust(9, "0"))


@dataclass
class LineTimes:
    """The time of each line of one log, by its index from the log's start; never changed once given."""

    times: list[int] = field(default_factory=list)

    def stamp_upto(self, count: int) -> None:
        """The log holds at least `count` lines: those not stamped yet get the time now."""
        if count > len(self.times):
            now = time.time_ns()
            self.times.extend([now] * (count - len(self.times)))


@dataclass
class LineReader:
    """Cuts a growing byte stream into numbered lines, stamping each in `times`."""

    times: LineTimes
    index: int = 0
    pending: bytes = b""

    def feed(self, data: bytes, *, final: bool = False) -> list[tuple[int, bytes]]:
        """The lines `data` completes; with `final`, the unfinished last one too."""
        parts = (self.pending + data).splitlines(keepends=True)
        self.pending = b""
        if parts and not final and not parts[-1].endswith((b"\n", b"\r")):
            self.pending = parts.pop()
        self.times.stamp_upto(self.index + len(parts))
        out = [(self.index + k, line) for k, line in enumerate(parts)]
        self.index += len(parts)
        return out


def render(lines: list[tuple[int, bytes]], times: LineTimes, *, timestamps: bool, since: int | None) -> bytes:
    """The lines at or after `since`, each prefixed with its time when `timestamps`."""
    out = []
    for index, line in lines:
        stamp = times.times[index]
        if since is not None and stamp < since:
            continue
        out.append(format_time(stamp) + b" " + line if timestamps else line)
    return b"".join(out)


@dataclass
class MemoryLog:
    """A log kept in memory (the simulated runtime): lines stamped as they are appended."""

    chunks: list[bytes] = field(default_factory=list)
    closed: bool = False
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    times: LineTimes = field(default_factory=LineTimes)
    size: int = 0
    lines: int = 0
    start: int = 0          # byte offset readers begin at: the log rotated there
    start_line: int = 0

    def append(self, data: bytes) -> None:
        self.chunks.append(data)
        self.size += len(data)
        self.lines += data.count(b"\n")
        self.times.stamp_upto(self.lines)
        self._wake()

    def rotate(self) -> None:
        """As the kubelet's rotation: what was written so far goes to another file, which no reader sees."""
        self.start, self.start_line = self.size, self.lines

    def close(self) -> None:
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    async def read(self, *, follow: bool, tail_lines: int | None, timestamps: bool = False,
                   since: int | None = None) -> AsyncGenerator[bytes, None]:
        data = b"".join(self.chunks)[self.start:]
        sent = len(self.chunks)
        if not timestamps and since is None:
            if tail_lines is not None:
                lines = data.splitlines(keepends=True)
                data = b"".join(lines[-tail_lines:]) if tail_lines > 0 else b""
            if data:
                yield data
            while follow and not self.closed:
                await self.changed.wait()
                if sent < len(self.chunks):
                    yield b"".join(self.chunks[sent:])
                    sent = len(self.chunks)
            return
        reader = LineReader(self.times, index=self.start_line)
        first = _tail(reader.feed(data, final=not follow or self.closed), tail_lines)
        if chunk := render(first, self.times, timestamps=timestamps, since=since):
            yield chunk
        while follow and not self.closed:
            await self.changed.wait()
            more, sent = b"".join(self.chunks[sent:]), len(self.chunks)
            if chunk := render(reader.feed(more, final=self.closed), self.times, timestamps=timestamps,
                               since=since):
                yield chunk


def _tail(lines: list[tuple[int, bytes]], tail_lines: int | None) -> list[tuple[int, bytes]]:
    if tail_lines is None:
        return lines
    return lines[-tail_lines:] if tail_lines > 0 else []


async def container_log(run: PodRun, ctr: ContainerRun, *, follow: bool, tail_lines: int | None,
                        timestamps: bool = False, since: int | None = None,
                        offset: int | None = None) -> AsyncGenerator[bytes, None]:
    """The container's log (its raw bytes, or lines with their times when `timestamps` or `since`); `offset`:
    from that byte of the log file on, fixed by the caller when it asked (attach: what comes after the
    attach began, not after the first read)."""
    while follow and not ctr.log_path.exists() and not run.deleting and not ctr.view.is_terminated:
        await asyncio.sleep(POLL_SECONDS)
    path = ctr.log_path
    if not path.exists():
        return
    generation = ctr.generation
    reader = LineReader(ctr.line_times.setdefault(generation, LineTimes()))
    stamped = timestamps or since is not None

    def out(data: bytes, *, final: bool, first: bool = False) -> bytes:
        if not stamped:
            return data
        lines = reader.feed(data, final=final)
        return render(_tail(lines, tail_lines) if first else lines, reader.times, timestamps=timestamps,
                      since=since)

    with path.open("rb") as f:
        if offset is not None:
            f.seek(offset)
        data = f.read()
        if tail_lines is not None and not stamped:
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[-tail_lines:]) if tail_lines > 0 else b""
        if chunk := out(data, final=not follow or not ctr.is_running, first=True):
            yield chunk
        while follow:
            data = f.read(65536)
            if data:
                if chunk := out(data, final=False):
                    yield chunk
                continue
            if run.deleting or ctr.generation != generation or not ctr.is_running:
                if chunk := out(f.read(), final=True):
                    yield chunk
                return
            await asyncio.sleep(POLL_SECONDS)
