"""The server side of a SPDY/3.1 connection, as kubectl opens one for `exec`, `attach`, `cp` and
`port-forward` (directly after an HTTP `Upgrade: SPDY/3.1`, or tunnelled in WebSocket binary messages).

The client opens every stream (SYN_STREAM with headers such as `streamtype: stdout`); the server answers each
with a SYN_REPLY before any data (spdystream drops data on a stream it has no reply for), then both sides send
DATA frames, a FIN flag half-closing a side. PINGs are echoed; SETTINGS and WINDOW_UPDATE are read and
ignored, as spdystream does (it implements no flow control). Frames are in spdyframes.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from localcluster._internal.streams import spdyframes as f

log = logging.getLogger(__name__)

CHUNK = 32 * 1024
STREAM_QUEUE = 64  # DATA frames buffered per stream before the connection waits for its reader


class ByteReader(Protocol):
    async def readexactly(self, n: int) -> bytes: ...


class SpdyStream:
    """One client-opened stream: its headers, what the client sends, and our half to write and close."""

    def __init__(self, connection: SpdyConnection, stream_id: int, headers: f.Headers, *, fin: bool) -> None:
        self.connection = connection
        self.id = stream_id
        self.headers = headers
        self._incoming: asyncio.Queue[bytes | None] = asyncio.Queue(STREAM_QUEUE)
        self._remote_done = fin
        self._local_done = False
        if fin:
            self._incoming.put_nowait(None)

    def header(self, name: str) -> str:
        values = self.headers.get(name.lower()) or [""]
        return values[0]

    async def read(self) -> bytes:
        """The next chunk the client sent; b"" once it closed its side (or the connection ended)."""
        if self._remote_done and self._incoming.empty():
            return b""
        chunk = await self._incoming.get()
        if chunk is None:
            self._remote_done = True
            return b""
        return chunk

    async def write(self, payload: bytes) -> None:
        if self._local_done or not payload:
            return
        for start in range(0, len(payload), CHUNK):
            await self.connection.send(f.data(self.id, payload[start:start + CHUNK]))

    async def close(self) -> None:
        """Half-close: FIN on our side."""
        if not self._local_done:
            self._local_done = True
            await self.connection.send(f.data(self.id, b"", fin=True))

    async def _feed(self, chunk: bytes | None) -> None:
        if not self._remote_done:
            await self._incoming.put(chunk)
            if chunk is None:
                self._remote_done = True

    def _end(self) -> None:
        """The connection is gone: readers see the end now."""
        if not self._remote_done:
            self._remote_done = True
            with contextlib.suppress(asyncio.QueueFull):
                self._incoming.put_nowait(None)
        self._local_done = True


# Called for each new stream, before its reply: True accepts it. Synchronous, so that nothing it starts can
# write on the stream before the SYN_REPLY is out.
StreamHandler = Callable[[SpdyStream], bool]


class SpdyConnection:
    """Reads frames until the transport ends; `on_stream` decides for each new stream whether to accept it
    (SYN_REPLY) or refuse it (RST_STREAM REFUSED_STREAM)."""

    def __init__(self, *, reader: ByteReader, write: Callable[[bytes], Awaitable[None]],
                 on_stream: StreamHandler) -> None:
        self._reader = reader
        self._write = write
        self._on_stream = on_stream
        self._codec = f.HeaderCodec()
        self._lock = asyncio.Lock()
        self.streams: dict[int, SpdyStream] = {}
        self.last_stream_id = 0
        self.closed = asyncio.Event()

    async def send(self, frame: bytes) -> None:
        if self.closed.is_set():
            return
        async with self._lock:
            try:
                await self._write(frame)
            except (ConnectionError, RuntimeError) as e:  # the client went away mid-write
                log.debug("spdy write failed: %s", e)
                self._finish()

    async def serve(self) -> None:
        """Read and dispatch frames until the client closes, sends GOAWAY or breaks the protocol."""
        try:
            while not self.closed.is_set():
                header = f.parse_header(await self._reader.readexactly(f.HEADER_SIZE))
                payload = await self._reader.readexactly(header.length) if header.length else b""
                if header.control:
                    if not await self._control(f.parse_control(header, payload, self._codec)):
                        break
                else:
                    await self._data(header.kind, payload, fin=bool(header.flags & f.FLAG_FIN))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except f.SpdyError as e:
            log.info("closing a SPDY connection: %s", e)
            await self.send(f.goaway(self.last_stream_id, 1))
        finally:
            self._finish()

    async def close(self) -> None:
        """GOAWAY, then every stream ends."""
        if not self.closed.is_set():
            await self.send(f.goaway(self.last_stream_id))
        self._finish()

    def _finish(self) -> None:
        self.closed.set()
        for stream in self.streams.values():
            stream._end()

    async def _control(self, frame: f.Control) -> bool:
        if isinstance(frame, f.SynStream):
            if frame.stream_id % 2 == 0 or frame.stream_id <= self.last_stream_id:
                await self.send(f.rst_stream(frame.stream_id, f.PROTOCOL_ERROR))
                return True
            self.last_stream_id = frame.stream_id
            stream = SpdyStream(self, frame.stream_id, frame.headers, fin=frame.fin)
            self.streams[stream.id] = stream
            if self._on_stream(stream):
                await self.send(f.syn_reply(self._codec, stream.id, {}))
            else:
                self.streams.pop(stream.id, None)
                await self.send(f.rst_stream(stream.id, f.REFUSED_STREAM))
        elif isinstance(frame, f.RstStream):
            reset = self.streams.pop(frame.stream_id, None)
            if reset is not None:
                reset._end()
        elif isinstance(frame, f.Ping):
            await self.send(f.ping(frame.ping_id))
        elif isinstance(frame, f.GoAway):
            return False
        return True

    async def _data(self, stream_id: int, payload: bytes, *, fin: bool) -> None:
        stream = self.streams.get(stream_id)
        if stream is None:
            return
        if payload:
            await stream._feed(payload)
        if fin:
            await stream._feed(None)
