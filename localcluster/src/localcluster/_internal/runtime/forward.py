"""A TCP splice from the pods' network to the API server, for a server that listens on 127.0.0.1 only.

TLS passes through untouched: pods verify the server's certificate, whose SANs must hold the address pods
dial (netns.POSSIBLE_API_HOSTS)."""

from __future__ import annotations

import asyncio
import contextlib


class TcpForwarder:
    def __init__(self, *, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self.listen = listen
        self.target = target
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, *self.listen)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            with contextlib.suppress(OSError, RuntimeError):
                writer.close()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            # connections still open (watches) would hold wait_closed() forever on 3.12+
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 1)
            self._server = None
