"""The remote-command and port-forward protocols of `pods/exec`, `pods/attach` and `pods/portforward`, as
kubectl 1.37 and the official clients speak them (k8s.io/apimachinery/pkg/util/remotecommand, the kubelet's
streaming server). Pure: options from the query, protocol negotiation, message framing, Status objects.

- WebSocket `v5.channel.k8s.io` / `v4.channel.k8s.io` (kubectl tries it first): each binary message starts
  with a channel byte: 0 stdin, 1 stdout, 2 stderr, 3 error (a metav1.Status, once, at the end), 4 resize
  (`{"Width":W,"Height":H}`); v5 adds 255 = close, followed by the channel closed (kubectl sends `255 0` when
  its stdin ends).
- SPDY/3.1 (the fallback kubectl tries when the WebSocket upgrade is refused; `X-Stream-Protocol-Version`
  negotiated like the kubelet does): one client-opened stream per channel, named by its `streamtype` header.
- port-forward: SPDY (`portforward.k8s.io`), directly or tunnelled in WebSocket binary messages
  (`SPDY/3.1+portforward.k8s.io`, kubectl's first try); per forwarded connection a `data` and an `error`
  stream carrying `port` and `requestid` headers. The older WebSocket form (`v4.channel.k8s.io`, `?ports=`,
  the official Python client's) gives each port a data channel 2i and an error channel 2i+1, each starting
  with the port as two little-endian bytes.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from localcluster._internal.apimachinery import status as st

V5, V4, V3, V2, V1 = ("v5.channel.k8s.io", "v4.channel.k8s.io", "v3.channel.k8s.io", "v2.channel.k8s.io",
                      "channel.k8s.io")
EXEC_WEBSOCKET_PROTOCOLS = (V5, V4)   # v1-v3 (text, no resize, no Status) are not spoken
EXEC_SPDY_PROTOCOLS = (V5, V4)        # what the kubelet answers over SPDY; v5 adds nothing there
PORT_FORWARD = "portforward.k8s.io"
SPDY_TUNNEL = "SPDY/3.1+" + PORT_FORWARD
PORT_FORWARD_WEBSOCKET = V4

STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
STREAM_TYPES = {"stdin": STDIN, "stdout": STDOUT, "stderr": STDERR, "error": ERROR, "resize": RESIZE}

Obj = dict[str, Any]


def _flag(query: Mapping[str, str], name: str) -> bool:
    return query.get(name, "").lower() in ("true", "1")


@dataclass(frozen=True)
class StreamOptions:
    """PodExecOptions / PodAttachOptions, from the query kubectl sends."""

    command: tuple[str, ...]
    container: str
    stdin: bool
    stdout: bool
    stderr: bool
    tty: bool

    @staticmethod
    def parse(query: Any, *, attach: bool) -> StreamOptions:
        """`query` is a multidict (the command is one `command=` per word). Raises the apiserver's 400s."""
        command = tuple(query.getall("command", [])) if hasattr(query, "getall") else ()
        options = StreamOptions(command=command, container=query.get("container", ""),
                                stdin=_flag(query, "stdin"), stdout=_flag(query, "stdout"),
                                stderr=_flag(query, "stderr"), tty=_flag(query, "tty"))
        if not (options.stdin or options.stdout or options.stderr):
            raise st.bad_request("you must specify at least 1 of stdin, stdout, stderr")
        if not attach and not command:
            raise st.bad_request("you must specify at least one command for the container")
        if options.tty and options.stderr:  # a terminal has one output, as the kubelet decides
            options = StreamOptions(command, options.container, options.stdin, options.stdout, False, True)
        return options

    def expected_streams(self) -> set[int]:
        """The channels a SPDY client opens for these options."""
        wanted = {ERROR}
        wanted |= {STDIN} if self.stdin else set()
        wanted |= {STDOUT} if self.stdout else set()
        wanted |= {STDERR} if self.stderr else set()
        wanted |= {RESIZE} if self.tty else set()
        return wanted


def negotiate(offered: list[str], supported: tuple[str, ...]) -> str | None:
    """The first protocol the client offers that we speak (the client's order wins, as in the kubelet)."""
    for header in offered:
        for protocol in (p.strip() for p in header.split(",")):
            if protocol in supported:
                return protocol
    return None


def exit_status(code: int, command: tuple[str, ...]) -> Obj:
    """What the error channel carries when the command ended: Success, or the NonZeroExitCode failure that
    kubectl turns into `command terminated with exit code N` (and its own exit code N)."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {"metadata": {}, "status": "Failure",
            "message": f"command terminated with non-zero exit code: error executing command "
                       f"[{' '.join(command)}], exit code {code}",
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}


def internal_error(message: str) -> Obj:
    """The command could not be started (kubectl prints `error: Internal error occurred: ...`)."""
    return {**st.internal(f"error executing command in container: {message}").body(), "metadata": {}}


def status_bytes(status: Obj) -> bytes:
    return json.dumps({"kind": "Status", "apiVersion": "v1", **status}).encode()


def frame(channel: int, payload: bytes) -> bytes:
    return bytes((channel,)) + payload


def parse_resize(data: bytes) -> tuple[list[tuple[int, int]], bytes]:
    """The terminal sizes in `data` (JSON objects, back to back or newline-separated, as Go's json.Encoder
    writes them) and what is left of an incomplete one."""
    decoder = json.JSONDecoder()
    text = data.decode(errors="replace")
    sizes: list[tuple[int, int]] = []
    position = 0
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position >= len(text):
            return sizes, b""
        try:
            value, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError:
            return sizes, text[position:].encode()
        if isinstance(value, dict):
            sizes.append((int(value.get("Width") or 0), int(value.get("Height") or 0)))


def port_prefix(port: int) -> bytes:
    """The first bytes of each channel of the WebSocket port-forward protocol."""
    return struct.pack("<H", port)


def parse_ports(values: list[str]) -> list[int]:
    """`?ports=8080,8081&ports=9090` of the WebSocket port-forward protocol, with the kubelet's messages."""
    if not values:
        raise st.bad_request('query parameter "port" is required')
    ports = []
    for value in values:
        if not value:
            raise st.bad_request('query parameter "port" cannot be empty')
        for item in value.split(","):
            if not item.isdigit() or not 0 < int(item) < 65536:
                raise st.bad_request(f'unable to parse "{value}" as a port')
            ports.append(int(item))
    return ports
