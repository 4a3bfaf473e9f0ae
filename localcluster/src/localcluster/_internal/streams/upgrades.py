"""Switching an HTTP request to a streaming protocol, as the API server does for exec, attach and
port-forward: a WebSocket (aiohttp speaks it), or a raw `Upgrade: SPDY/3.1` that aiohttp does not know, whose
101 we send and whose bytes we then read and write ourselves.

aiohttp parses only WebSocket upgrades as upgrades; for SPDY the handler installs a payload parser on the
connection before answering 101 (the hook aiohttp's own WebSocketResponse uses), so every byte the client
sends next reaches our reader instead of the HTTP parser, and writes go straight to the transport with
aiohttp's StreamWriter (which waits for the transport to drain).
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from aiohttp import WSMsgType, web
from aiohttp.http import StreamWriter

from localcluster._internal.apimachinery import status as st
from localcluster._internal.streams import channels

SPDY = "SPDY/3.1"
MAX_MESSAGE = 16 * 1024 * 1024


def wants_websocket(request: web.Request) -> bool:
    return request.headers.get("Upgrade", "").lower() == "websocket"


def wants_spdy(request: web.Request) -> bool:
    return SPDY.lower() in request.headers.get("Upgrade", "").lower()


def upgrade_required() -> st.ApiStatus:
    return st.bad_request("Upgrade request required")


async def accept_websocket(request: web.Request, protocols: tuple[str, ...]) -> web.WebSocketResponse:
    """The 101 with the first subprotocol the client offers among `protocols`; a client offering none of them
    is refused with 400 before anything is upgraded (kubectl then falls back to SPDY)."""
    offered = request.headers.getall("Sec-WebSocket-Protocol", [])
    chosen = channels.negotiate(offered, protocols)
    if chosen is None:
        raise st.bad_request(f"unable to upgrade: unable to negotiate protocol: client supports {offered}, "
                             f"server supports {list(protocols)}")
    ws = web.WebSocketResponse(protocols=(chosen,), max_msg_size=MAX_MESSAGE, autoping=True)
    await ws.prepare(request)
    return ws


class _Feed:
    """The payload parser aiohttp hands the connection's bytes to once the request is upgraded."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        self.reader.feed_data(data)
        return False, b""

    def feed_eof(self) -> None:
        self.reader.feed_eof()


class RawUpgrade:
    """The connection after a `101 Switching Protocols` to SPDY/3.1: bytes in (`reader`), bytes out."""

    def __init__(self, reader: asyncio.StreamReader, writer: StreamWriter,
                 response: web.StreamResponse) -> None:
        self.reader = reader
        self.response = response
        self._writer = writer

    async def write(self, data: bytes) -> None:
        await self._writer.write(data)


async def accept_spdy(request: web.Request, protocols: tuple[str, ...]) -> tuple[RawUpgrade, str]:
    """Answer 101 with the negotiated `X-Stream-Protocol-Version` (the kubelet's httpstream.Handshake)."""
    offered = request.headers.getall("X-Stream-Protocol-Version", [])
    chosen = channels.negotiate(offered, protocols)
    if chosen is None:
        raise st.ApiStatus(403, "Forbidden", f"unable to upgrade: unable to negotiate protocol: client "
                           f"supports {offered}, server supports {list(protocols)}")
    response = web.StreamResponse(status=101, headers={"Connection": "Upgrade", "Upgrade": SPDY,
                                                        "X-Stream-Protocol-Version": chosen})
    response.force_close()
    reader = asyncio.StreamReader(limit=MAX_MESSAGE)
    protocol = request.protocol
    cast(Any, protocol).set_parser(_Feed(reader))  # from now on the client's bytes are ours
    protocol.keep_alive(False)
    await response.prepare(request)
    writer = StreamWriter(protocol, asyncio.get_running_loop())
    return RawUpgrade(reader, writer, response), chosen


class WebSocketBytes:
    """The byte stream tunnelled in a WebSocket's binary messages (kubectl's SPDY over WebSocket)."""

    def __init__(self, ws: web.WebSocketResponse) -> None:
        self.ws = ws
        self._buffer = bytearray()

    async def readexactly(self, n: int) -> bytes:
        while len(self._buffer) < n:
            message = await self.ws.receive()
            if message.type == WSMsgType.BINARY:
                self._buffer += message.data
            elif message.type not in (WSMsgType.PING, WSMsgType.PONG):
                raise asyncio.IncompleteReadError(bytes(self._buffer), n)
        data = bytes(self._buffer[:n])
        del self._buffer[:n]
        return data

    async def write(self, data: bytes) -> None:
        await self.ws.send_bytes(data)
