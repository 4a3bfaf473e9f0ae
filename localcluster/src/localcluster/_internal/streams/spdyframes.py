"""SPDY/3 frames as kubectl's streaming connections speak them (moby/spdystream, `SPDY/3.1` upgrades): the
8-byte frame headers, the control frames a server receives and sends, and the zlib header blocks.

Pure: bytes in, values out. The connection that uses them is spdy.py.

A frame starts with a 32-bit word whose top bit tells a control frame (version 3, a 16-bit type) from a data
frame (a 31-bit stream id), then 8 bits of flags and a 24-bit length. Header blocks (SYN_STREAM, SYN_REPLY,
HEADERS) are a count and length-prefixed name/value pairs, compressed by one zlib stream per direction for the
whole connection, primed with the protocol's dictionary and flushed (Z_SYNC_FLUSH) after every block.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

VERSION = 3
SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE = 1, 2, 3, 4, 6, 7, 8, 9
FLAG_FIN = 0x01
MAX_DATA = (1 << 24) - 1  # a frame's 24-bit length
HEADER_SIZE = 8

# RST_STREAM status codes
PROTOCOL_ERROR, INVALID_STREAM, REFUSED_STREAM, CANCEL, INTERNAL_ERROR = 1, 2, 3, 5, 6

# The SPDY/3 header compression dictionary (draft 3, section 2.6.10.1): length-prefixed words, then text.
_WORDS = (
    "options", "head", "post", "put", "delete", "trace", "accept", "accept-charset", "accept-encoding",
    "accept-language", "accept-ranges", "age", "allow", "authorization", "cache-control", "connection",
    "content-base", "content-encoding", "content-language", "content-length", "content-location",
    "content-md5", "content-range", "content-type", "date", "etag", "expect", "expires", "from", "host",
    "if-match", "if-modified-since", "if-none-match", "if-range", "if-unmodified-since", "last-modified",
    "location", "max-forwards", "pragma", "proxy-authenticate", "proxy-authorization", "range", "referer",
    "retry-after", "server", "te", "trailer", "transfer-encoding", "upgrade", "user-agent", "vary", "via",
    "warning", "www-authenticate", "method", "get", "status", "200 OK", "version", "HTTP/1.1", "url",
    "public", "set-cookie", "keep-alive", "origin",
)
_TEXT = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized"
    "403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable"
    "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT"
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,"
    "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
)
DICTIONARY = b"".join(struct.pack(">I", len(w)) + w.encode() for w in _WORDS) + _TEXT.encode()

Headers = dict[str, list[str]]


class SpdyError(Exception):
    """The peer sent something that is not SPDY/3."""


@dataclass(frozen=True)
class FrameHeader:
    control: bool
    kind: int        # the control frame's type, or the data frame's stream id
    flags: int
    length: int


def parse_header(raw: bytes) -> FrameHeader:
    first, flags_length = struct.unpack(">II", raw)
    length = flags_length & 0xFFFFFF
    flags = flags_length >> 24
    if first & 0x80000000:
        version = (first >> 16) & 0x7FFF
        if version != VERSION:
            raise SpdyError(f"unsupported SPDY version {version}; this server speaks SPDY/3.1")
        return FrameHeader(True, first & 0xFFFF, flags, length)
    return FrameHeader(False, first & 0x7FFFFFFF, flags, length)


@dataclass(frozen=True)
class SynStream:
    stream_id: int
    headers: Headers
    fin: bool


@dataclass(frozen=True)
class RstStream:
    stream_id: int
    status: int


@dataclass(frozen=True)
class Ping:
    ping_id: int


@dataclass(frozen=True)
class GoAway:
    last_stream_id: int


@dataclass(frozen=True)
class Ignored:
    """SETTINGS, WINDOW_UPDATE, HEADERS, SYN_REPLY: spdystream sends no flow control we must honour."""

    kind: int


Control = SynStream | RstStream | Ping | GoAway | Ignored


class HeaderCodec:
    """The two zlib streams of one connection: what we send, what we read."""

    def __init__(self) -> None:
        self._compress = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, 15, zdict=DICTIONARY)
        self._decompress = zlib.decompressobj(zdict=DICTIONARY)

    def encode(self, headers: Headers) -> bytes:
        block = struct.pack(">I", len(headers))
        for name, values in headers.items():
            raw_name, raw_value = name.lower().encode(), "\0".join(values).encode()
            block += struct.pack(">I", len(raw_name)) + raw_name
            block += struct.pack(">I", len(raw_value)) + raw_value
        return self._compress.compress(block) + self._compress.flush(zlib.Z_SYNC_FLUSH)

    def decode(self, compressed: bytes) -> Headers:
        try:
            block = self._decompress.decompress(compressed)
        except zlib.error as e:
            raise SpdyError(f"bad header block: {e}") from e
        headers: Headers = {}
        try:
            (count,), offset = struct.unpack_from(">I", block), 4
            for _ in range(count):
                (size,) = struct.unpack_from(">I", block, offset)
                name = block[offset + 4:offset + 4 + size].decode().lower()
                offset += 4 + size
                (size,) = struct.unpack_from(">I", block, offset)
                value = block[offset + 4:offset + 4 + size].decode()
                offset += 4 + size
                headers.setdefault(name, []).extend(value.split("\0"))
        except (struct.error, UnicodeDecodeError) as e:
            raise SpdyError(f"bad header block: {e}") from e
        return headers


def parse_control(header: FrameHeader, payload: bytes, codec: HeaderCodec) -> Control:
    try:
        if header.kind == SYN_STREAM:
            stream_id = struct.unpack_from(">I", payload)[0] & 0x7FFFFFFF
            # associated-to stream id (4 bytes), priority and slot (2 bytes) carry nothing we use
            return SynStream(stream_id, codec.decode(payload[10:]), bool(header.flags & FLAG_FIN))
        if header.kind == RST_STREAM:
            stream_id, status = struct.unpack_from(">II", payload)
            return RstStream(stream_id & 0x7FFFFFFF, status)
        if header.kind == PING:
            return Ping(struct.unpack_from(">I", payload)[0])
        if header.kind == GOAWAY:
            return GoAway(struct.unpack_from(">I", payload)[0] & 0x7FFFFFFF)
        if header.kind in (SYN_REPLY, HEADERS):
            codec.decode(payload[4:])  # keeps the shared zlib stream in step
    except struct.error as e:
        raise SpdyError(f"control frame {header.kind} too short ({len(payload)} bytes)") from e
    return Ignored(header.kind)


def _control(kind: int, flags: int, payload: bytes) -> bytes:
    return struct.pack(">HHI", 0x8000 | VERSION, kind, (flags << 24) | len(payload)) + payload


def syn_stream(codec: HeaderCodec, stream_id: int, headers: Headers, *, fin: bool = False) -> bytes:
    """What a client sends to open a stream (the server never does; tests play the client)."""
    body = struct.pack(">IIBB", stream_id, 0, 0, 0) + codec.encode(headers)
    return _control(SYN_STREAM, FLAG_FIN if fin else 0, body)


def syn_reply(codec: HeaderCodec, stream_id: int, headers: Headers, *, fin: bool = False) -> bytes:
    return _control(SYN_REPLY, FLAG_FIN if fin else 0, struct.pack(">I", stream_id) + codec.encode(headers))


def rst_stream(stream_id: int, status: int) -> bytes:
    return _control(RST_STREAM, 0, struct.pack(">II", stream_id, status))


def ping(ping_id: int) -> bytes:
    return _control(PING, 0, struct.pack(">I", ping_id))


def goaway(last_stream_id: int, status: int = 0) -> bytes:
    return _control(GOAWAY, 0, struct.pack(">II", last_stream_id, status))


def data(stream_id: int, payload: bytes, *, fin: bool = False) -> bytes:
    if len(payload) > MAX_DATA:
        raise ValueError(f"a data frame holds at most {MAX_DATA} bytes, not {len(payload)}")
    return struct.pack(">II", stream_id, ((FLAG_FIN if fin else 0) << 24) | len(payload)) + payload
