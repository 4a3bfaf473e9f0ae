"""`pods/portforward`: TCP connections from a client to localhost:PORT in a pod, as the kubelet serves them.

Over SPDY (kubectl's, directly or tunnelled in a WebSocket) the client opens, for every local connection it
accepts, an `error` and a `data` stream carrying the same `requestid` and `port`; once both are there the
kubelet dials the port in the pod and copies bytes both ways, as many connections at a time as the client
makes. A failure to connect is written on the error stream (kubectl prints it). Over the older WebSocket
form, one connection per port in `?ports=`, on channels 2i (data) and 2i+1 (error).

Half-closes are kept: the client's end of input shuts down the write side towards the pod; the pod closing
its side ends the forwarded connection. When the pod ends (deleted, replaced or finished) the whole
connection closes, and kubectl reports `lost connection to pod`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import WSMsgType, web

from localcluster._internal.runtime.base import StreamingError
from localcluster._internal.streams import channels as ch
from localcluster._internal.streams.spdy import ByteReader, SpdyConnection, SpdyStream

log = logging.getLogger(__name__)

CHUNK = 32 * 1024
STREAM_CREATION_SECONDS = 30.0

Dial = Callable[[int], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


class ClientSide(Protocol):
    """The client's end of one forwarded connection: a SPDY data stream or a WebSocket data channel."""

    async def read(self) -> bytes: ...

    async def write(self, payload: bytes) -> None: ...

    async def close(self) -> None: ...


async def relay(client: ClientSide, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy both ways until the pod's side ends."""
    async def upstream() -> None:
        with contextlib.suppress(ConnectionError):
            while chunk := await client.read():
                writer.write(chunk)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()

    up = asyncio.ensure_future(upstream())
    try:
        with contextlib.suppress(ConnectionError):
            while chunk := await reader.read(CHUNK):
                await client.write(chunk)
    finally:
        up.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await up
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
        await client.close()


@dataclass
class _Pair:
    request_id: str
    port: int
    data: SpdyStream | None = None
    error: SpdyStream | None = None
    timer: asyncio.TimerHandle | None = None


@dataclass
class SpdyForwarder:
    """Stream pairs of one SPDY connection, each forwarded on its own task."""

    dial: Dial
    where: str                       # `pod NAME, uid UID`, for the kubelet's error message
    pairs: dict[str, _Pair] = field(default_factory=dict)
    tasks: set[asyncio.Future[None]] = field(default_factory=set)

    def on_stream(self, stream: SpdyStream) -> bool:
        port_text, kind = stream.header("port"), stream.header("streamtype")
        if not port_text.isdigit() or not 0 < int(port_text) < 65536 or kind not in ("data", "error"):
            return False
        # old clients send no request id: the kubelet pairs consecutive stream ids instead
        request_id = stream.header("requestid") or str(stream.id if kind == "error" else stream.id - 2)
        pair = self.pairs.setdefault(request_id, _Pair(request_id, int(port_text)))
        if getattr(pair, kind) is not None:
            return False
        setattr(pair, kind, stream)
        if pair.data is not None and pair.error is not None:
            self.pairs.pop(request_id, None)
            if pair.timer is not None:
                pair.timer.cancel()
            self._spawn(self._forward(pair))
        elif pair.timer is None:
            pair.timer = asyncio.get_running_loop().call_later(
                STREAM_CREATION_SECONDS, lambda: self._spawn(self._incomplete(request_id)))
        return True

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _incomplete(self, request_id: str) -> None:
        pair = self.pairs.pop(request_id, None)
        if pair is not None and pair.error is not None:
            await pair.error.write(f"(request={request_id}) timed out waiting for streams".encode())
            await pair.error.close()

    async def _forward(self, pair: _Pair) -> None:
        assert pair.data is not None and pair.error is not None
        try:
            reader, writer = await self.dial(pair.port)
        except StreamingError as e:
            await pair.error.write(f"error forwarding port {pair.port} to {self.where}: {e}".encode())
            await pair.error.close()
            await pair.data.close()
            return
        try:
            await relay(pair.data, reader, writer)
        finally:
            await pair.error.close()

    async def serve(self, reader: ByteReader, write: Callable[[bytes], Awaitable[None]],
                    pod_ended: Awaitable[None]) -> None:
        connection = SpdyConnection(reader=reader, write=write, on_stream=self.on_stream)
        serving = asyncio.ensure_future(connection.serve())
        ended = asyncio.ensure_future(pod_ended)
        try:
            await asyncio.wait({serving, ended}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in [*self.tasks, ended]:
                task.cancel()
            for task in [*self.tasks, ended]:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await connection.close()
            serving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await serving
            for pair in self.pairs.values():
                if pair.timer is not None:
                    pair.timer.cancel()


class _WsChannel:
    def __init__(self, ws: web.WebSocketResponse, channel: int) -> None:
        self.ws = ws
        self.channel = channel
        self.incoming: asyncio.Queue[bytes] = asyncio.Queue(16)

    async def read(self) -> bytes:
        return await self.incoming.get()

    async def write(self, payload: bytes) -> None:
        if not self.ws.closed:
            await self.ws.send_bytes(ch.frame(self.channel, payload))

    async def close(self) -> None:
        pass


async def serve_websocket(ws: web.WebSocketResponse, ports: list[int], dial: Dial, where: str,
                          pod_ended: Awaitable[None]) -> None:
    """The older WebSocket protocol: one connection per port, for as long as the WebSocket lasts."""
    data = [_WsChannel(ws, 2 * i) for i in range(len(ports))]
    errors = [_WsChannel(ws, 2 * i + 1) for i in range(len(ports))]
    for port, d, e in zip(ports, data, errors, strict=True):
        await d.write(ch.port_prefix(port))
        await e.write(ch.port_prefix(port))

    async def read_client() -> None:
        async for message in ws:
            if message.type == WSMsgType.BINARY and message.data and message.data[0] % 2 == 0:
                index = message.data[0] // 2
                if index < len(data) and len(message.data) > 1:
                    await data[index].incoming.put(message.data[1:])
        for channel in data:
            channel.incoming.put_nowait(b"")

    async def forward(port: int, channel: _WsChannel, error: _WsChannel) -> None:
        try:
            reader, writer = await dial(port)
        except StreamingError as e:
            await error.write(f"error forwarding port {port} to {where}: {e}".encode())
            return
        await relay(channel, reader, writer)

    tasks = [asyncio.ensure_future(forward(p, d, e)) for p, d, e in zip(ports, data, errors, strict=True)]
    every: asyncio.Future[Any] = asyncio.gather(*tasks, return_exceptions=True)
    reading: asyncio.Future[Any] = asyncio.ensure_future(read_client())
    ended: asyncio.Future[Any] = asyncio.ensure_future(pod_ended)
    waited: list[asyncio.Future[Any]] = [*tasks, every, reading, ended]
    try:
        await asyncio.wait({every, reading, ended}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in waited:
            task.cancel()
        for task in waited:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await ws.close()
