"""The SPDY/3.1 server kubectl's exec and port-forward fall back to: frames, header blocks, and a connection
driven by a client written from the same frame functions (kubectl itself is the check in the e2e tests)."""

from __future__ import annotations

import asyncio
import struct
import zlib

import pytest

from localcluster._internal.streams import spdyframes as f
from localcluster._internal.streams.spdy import SpdyConnection, SpdyStream

# The first bytes of the first header block kubectl 1.37 sent in a SPDY exec (captured): a zlib header with
# FDICT set, then the Adler-32 of the dictionary it compresses with. zlib refuses any other dictionary.
KUBECTL_FIRST_BLOCK = bytes.fromhex("78f9e3c6a7c2")


def test_the_dictionary_is_the_one_kubectl_compresses_with() -> None:
    assert len(f.DICTIONARY) == 1423
    assert zlib.adler32(f.DICTIONARY).to_bytes(4, "big") == KUBECTL_FIRST_BLOCK[2:]


def test_header_blocks_survive_the_shared_zlib_stream_in_both_directions() -> None:
    client, server = f.HeaderCodec(), f.HeaderCodec()
    first = {"streamtype": ["error"], "requestid": ["0"], "port": ["2222"]}
    second = {"streamtype": ["data"], "requestid": ["0"], "port": ["2222"], "x-multi": ["a", "b"]}
    # one zlib stream per direction: the second block only decodes after the first
    assert server.decode(client.encode(first)) == first
    assert server.decode(client.encode(second)) == second
    assert struct.unpack(">H", client.encode({"a": ["b"]})[:2])[0] != 0x7801  # no new zlib header mid-stream


def test_frame_headers_tell_control_from_data() -> None:
    control = f.parse_header(f.ping(7)[:8])
    assert (control.control, control.kind, control.length) == (True, f.PING, 4)
    data = f.parse_header(f.data(5, b"hello", fin=True)[:8])
    assert (data.control, data.kind, data.flags, data.length) == (False, 5, f.FLAG_FIN, 5)
    with pytest.raises(f.SpdyError, match="unsupported SPDY version 2"):
        f.parse_header(struct.pack(">HHI", 0x8002, f.PING, 4))


class Client:
    """A test peer: writes client frames into the server's reader, decodes what the server wrote."""

    def __init__(self) -> None:
        self.to_server = asyncio.StreamReader()
        self.from_server = bytearray()
        self.codec = f.HeaderCodec()
        self.reply_codec = f.HeaderCodec()

    async def write(self, data: bytes) -> None:
        self.from_server += data

    def send(self, frame: bytes) -> None:
        self.to_server.feed_data(frame)

    def frames(self) -> list[tuple[bool, int, int, bytes]]:
        out, raw = [], bytes(self.from_server)
        while raw:
            header = f.parse_header(raw[:8])
            out.append((header.control, header.kind, header.flags, raw[8:8 + header.length]))
            raw = raw[8 + header.length:]
        return out


@pytest.mark.asyncio
async def test_a_connection_replies_to_streams_carries_data_and_echoes_pings() -> None:
    client = Client()
    accepted: list[SpdyStream] = []

    def on_stream(stream: SpdyStream) -> bool:
        if stream.header("streamtype") == "bogus":
            return False
        accepted.append(stream)
        return True

    connection = SpdyConnection(reader=client.to_server, write=client.write, on_stream=on_stream)
    serving = asyncio.ensure_future(connection.serve())
    client.send(f.syn_stream(client.codec, 1, {"streamtype": ["stdin"]}))
    client.send(f.data(1, b"typed"))
    client.send(f.data(1, b"", fin=True))
    client.send(f.syn_stream(client.codec, 3, {"streamtype": ["bogus"]}))
    client.send(f.syn_stream(client.codec, 4, {"streamtype": ["stdout"]}))  # even ids are the server's
    client.send(f.ping(9))
    await asyncio.sleep(0.05)
    stream = accepted[0]
    assert (await stream.read(), await stream.read()) == (b"typed", b"")
    await stream.write(b"x" * 40_000)  # cut into frames of at most 32 KiB
    await stream.close()
    client.send(f.goaway(3))
    await asyncio.wait_for(serving, 5)

    frames = client.frames()
    reply = frames[0]
    assert reply[:2] == (True, f.SYN_REPLY) and struct.unpack(">I", reply[3][:4])[0] == 1
    assert (True, f.RST_STREAM, 0, struct.pack(">II", 3, f.REFUSED_STREAM)) in frames
    assert (True, f.RST_STREAM, 0, struct.pack(">II", 4, f.PROTOCOL_ERROR)) in frames
    assert (True, f.PING, 0, struct.pack(">I", 9)) in frames
    data = [(flags, len(payload)) for control, kind, flags, payload in frames if not control and kind == 1]
    assert data == [(0, 32 * 1024), (0, 40_000 - 32 * 1024), (f.FLAG_FIN, 0)]
    assert connection.closed.is_set()


@pytest.mark.asyncio
async def test_streams_end_when_the_client_goes_away() -> None:
    client = Client()
    streams: list[SpdyStream] = []

    def accept(stream: SpdyStream) -> bool:
        streams.append(stream)
        return True

    connection = SpdyConnection(reader=client.to_server, write=client.write, on_stream=accept)
    serving = asyncio.ensure_future(connection.serve())
    client.send(f.syn_stream(client.codec, 1, {"streamtype": ["data"]}))
    await asyncio.sleep(0.02)
    client.to_server.feed_eof()
    await asyncio.wait_for(serving, 5)
    assert await asyncio.wait_for(streams[0].read(), 1) == b""
