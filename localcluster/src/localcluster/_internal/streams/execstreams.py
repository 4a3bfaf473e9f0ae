"""One exec or attach session between a client and a runtime's ExecSession, over a WebSocket (channels
v4/v5) or SPDY (a stream per channel): stdin and terminal resizes in, stdout and stderr out, and at the end
the Status on the error channel (exit code, or why the command could not start), then the connection closes.

A client that goes away ends the command: its stdin closes, and what still runs is stopped after a short
grace (the kubelet leaves such processes running; here nothing outlives its session unseen).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Protocol

from aiohttp import WSMsgType, web

from localcluster._internal.runtime.base import ExecSession, StreamingError
from localcluster._internal.streams import channels as ch
from localcluster._internal.streams.spdy import SpdyConnection, SpdyStream

log = logging.getLogger(__name__)

DRAIN_SECONDS = 2.0          # output still arriving after the command ended (a background child's pipe)
STREAM_CREATION_SECONDS = 30.0  # the kubelet's wait for a SPDY client's streams


class ExecStreams(Protocol):
    """The client's side of a session, whatever the protocol."""

    gone: asyncio.Event

    async def read_stdin(self) -> bytes:
        """b"" once the client's stdin has ended."""
        ...

    async def next_resize(self) -> tuple[int, int] | None:
        """None once the client sends no more sizes."""
        ...

    async def write(self, channel: int, data: bytes) -> None: ...

    async def finish(self, status: ch.Obj) -> None:
        """The Status on the error channel, then the end of every stream and of the connection."""
        ...


class WebSocketStreams:
    """Channels v4/v5: one reader task sorts the client's messages by their first byte."""

    def __init__(self, ws: web.WebSocketResponse) -> None:
        self.ws = ws
        self.gone = asyncio.Event()
        self._stdin: asyncio.Queue[bytes] = asyncio.Queue(16)
        self._resize: asyncio.Queue[tuple[int, int] | None] = asyncio.Queue()
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        try:
            async for message in self.ws:
                if message.type != WSMsgType.BINARY or not message.data:
                    continue
                channel, payload = message.data[0], message.data[1:]
                if channel == ch.STDIN and payload:
                    await self._stdin.put(payload)
                elif channel == ch.RESIZE:
                    for size in ch.parse_resize(payload)[0]:
                        self._resize.put_nowait(size)
                elif channel == ch.CLOSE and payload[:1] == bytes((ch.STDIN,)):
                    await self._stdin.put(b"")
        finally:
            self.gone.set()
            await self._stdin.put(b"")
            self._resize.put_nowait(None)

    async def read_stdin(self) -> bytes:
        return await self._stdin.get()

    async def next_resize(self) -> tuple[int, int] | None:
        return await self._resize.get()

    async def write(self, channel: int, data: bytes) -> None:
        if data and not self.ws.closed:
            with contextlib.suppress(ConnectionError):
                await self.ws.send_bytes(ch.frame(channel, data))

    async def finish(self, status: ch.Obj) -> None:
        with contextlib.suppress(ConnectionError):
            if not self.ws.closed:
                await self.ws.send_bytes(ch.frame(ch.ERROR, ch.status_bytes(status)))
            await self.ws.close()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


class SpdyStreams:
    """The client opens one stream per channel (`streamtype` header); the session starts once all the
    options call for are there."""

    def __init__(self, options: ch.StreamOptions) -> None:
        self.connection: SpdyConnection | None = None
        self.gone = asyncio.Event()
        self.streams: dict[int, SpdyStream] = {}
        self._expected = options.expected_streams()
        self.ready = asyncio.Event()
        self._resize_buffer = b""
        self._sizes: list[tuple[int, int]] = []

    def on_stream(self, stream: SpdyStream) -> bool:
        channel = ch.STREAM_TYPES.get(stream.header("streamtype"))
        if channel is None or channel in self.streams:
            return False
        self.streams[channel] = stream
        if self._expected <= set(self.streams):
            self.ready.set()
        return True

    async def wait_ready(self) -> None:
        assert self.connection is not None
        closed = asyncio.ensure_future(self.connection.closed.wait())
        ready = asyncio.ensure_future(self.ready.wait())
        try:
            await asyncio.wait({closed, ready}, timeout=STREAM_CREATION_SECONDS,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.cancel()
            ready.cancel()
        if not self.ready.is_set():
            raise StreamingError("timed out waiting for client to create streams")

    async def read_stdin(self) -> bytes:
        stream = self.streams.get(ch.STDIN)
        return await stream.read() if stream is not None else b""

    async def next_resize(self) -> tuple[int, int] | None:
        stream = self.streams.get(ch.RESIZE)
        while not self._sizes:
            chunk = await stream.read() if stream is not None else b""
            if not chunk:
                return None
            sizes, self._resize_buffer = ch.parse_resize(self._resize_buffer + chunk)
            self._sizes.extend(sizes)
        return self._sizes.pop(0)

    async def write(self, channel: int, data: bytes) -> None:
        stream = self.streams.get(channel)
        if stream is not None:
            await stream.write(data)

    async def finish(self, status: ch.Obj) -> None:
        error = self.streams.get(ch.ERROR)
        if error is not None:
            await error.write(ch.status_bytes(status))
        for stream in self.streams.values():
            await stream.close()
        if self.connection is not None:
            await self.connection.close()


async def _pump_in(streams: ExecStreams, session: ExecSession) -> None:
    while chunk := await streams.read_stdin():
        await session.write_stdin(chunk)
    await session.close_stdin()


async def _pump_resize(streams: ExecStreams, session: ExecSession) -> None:
    while (size := await streams.next_resize()) is not None:
        session.resize(*size)


async def _pump_out(streams: ExecStreams, read: ExecSession, channel: int) -> None:
    reader = read.read_stdout if channel == ch.STDOUT else read.read_stderr
    while chunk := await reader():
        await streams.write(channel, chunk)


async def run_session(streams: ExecStreams, session: ExecSession, options: ch.StreamOptions) -> None:
    """Stream until the command ends (or the client leaves), then send its Status and close."""
    background = [asyncio.ensure_future(_pump_resize(streams, session))]
    if options.stdin:
        background.append(asyncio.ensure_future(_pump_in(streams, session)))
    outputs = [asyncio.ensure_future(_pump_out(streams, session, channel))
               for channel, wanted in ((ch.STDOUT, options.stdout), (ch.STDERR, options.stderr)) if wanted]
    ended = asyncio.ensure_future(session.wait())
    gone = asyncio.ensure_future(streams.gone.wait())
    try:
        await asyncio.wait({ended, gone}, return_when=asyncio.FIRST_COMPLETED)
        if not ended.done():
            await session.kill()
            await asyncio.wait({ended}, timeout=DRAIN_SECONDS)
        elif outputs:
            await asyncio.wait(outputs, timeout=DRAIN_SECONDS)
        try:
            code = ended.result() if ended.done() else 0
            status = ch.exit_status(code, options.command)
        except StreamingError as e:
            status = ch.internal_error(str(e))
        await streams.finish(status)
    finally:
        for task in [*background, *outputs, ended, gone]:
            task.cancel()
        for task in [*background, *outputs, ended, gone]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if not ended.done() or ended.cancelled():
            await session.kill()
