"""The control socket of a cluster run by `localcluster up`: how `localcluster fault ...` (another process)
reaches the server, even while its API refuses connections. A Unix socket, DIR/control.sock, that only its
user may open (0600); one JSON request per connection, one JSON answer.

    {"op": "api-outage", "mode": "refuse", "seconds": 60}  {"op": "api-clear"}
    {"op": "freeze", "pod": "w", "namespace": "default", "match": "python"}  {"op": "thaw", "pod": "w"}
    {"op": "throttle", "pod": "w", "cpu": 0.5}  {"op": "unthrottle", "pod": "w"}
    {"op": "shutdown", "node": "node-2", "grace_period": 30, "critical_grace_period": 10}
    {"op": "status"}
    -> {"ok": true, "lines": ["..."]}  or  {"ok": false, "error": "...", "exit_code": 2}

A socket's path may be at most 107 bytes; a longer DIR is reached through /proc/self/fd/N/ of an open
descriptor of it (the socket itself stays at DIR/control.sock).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from localcluster._internal.cluster.assembly import LocalCluster
from localcluster._internal.errors import InvalidInput, LocalClusterError

SOCKET = "control.sock"
MAX_REQUEST = 64 * 1024
_MAX_PATH = 107


@contextlib.contextmanager
def _reachable(directory: Path) -> Iterator[str]:
    """A path of DIR/control.sock short enough for a Unix socket address."""
    path = str(directory / SOCKET)
    if len(path.encode()) <= _MAX_PATH:
        yield path
        return
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{descriptor}/{SOCKET}"
    finally:
        os.close(descriptor)


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{what}: expected a name")
    return value


def _optional(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{what}: expected a number")
    return float(value)


async def handle(cluster: LocalCluster, request: dict[str, Any]) -> list[str]:
    """Carry out one request; the lines to print. LocalClusterError for what cannot be done."""
    op = request.get("op")
    namespace = _optional(request.get("namespace")) or "default"
    if op == "api-outage":
        seconds, retry = request.get("seconds"), request.get("retry_after")
        outage = await cluster.aapi_outage(
            str(request.get("mode")), seconds=_number(seconds, "seconds") if seconds is not None else None,
            retry_after=int(_number(retry, "retry_after")) if retry is not None else None)
        return [outage.describe()]
    if op == "api-clear":
        ended = await cluster.aclear_api_outage()
        return [f"API outage ({ended.mode}) ended; the API answers again" if ended
                else "no API outage in force"]
    if op in ("freeze", "thaw", "throttle", "unthrottle"):
        pod = _text(request.get("pod"), "pod")
        match, container = _optional(request.get("match")), _optional(request.get("container"))
        if op == "freeze":
            fault = await cluster.afreeze(pod, namespace=namespace, match=match, container=container)
        elif op == "thaw":
            fault = await cluster.athaw(pod, namespace=namespace)
        elif op == "throttle":
            fault = await cluster.athrottle(pod, _number(request.get("cpu"), "cpu"), namespace=namespace,
                                            match=match, container=container)
        else:
            fault = await cluster.aunthrottle(pod, namespace=namespace)
        return [fault.describe()]
    if op == "shutdown":
        node = _text(request.get("node"), "node")
        grace = _number(request.get("grace_period", 30.0), "grace_period")
        critical = _number(request.get("critical_grace_period", 10.0), "critical_grace_period")
        done = await cluster.ashutdown_node(node, grace_period=grace, critical_grace_period=critical)
        lines = [f"node {node} shut down gracefully (NotReady: node is shutting down)"]
        lines += [f"pod {p.namespace}/{p.name}: SIGTERM, grace period {p.grace_seconds:g} s"
                  for p in done.pods]
        return lines if done.pods else [*lines, "no pod was running there"]
    if op == "status":
        return status_lines(cluster)
    raise InvalidInput(f"unknown request {op!r}")


def status_lines(cluster: LocalCluster) -> list[str]:
    """The faults in force, one per line (none: empty)."""
    lines = [cluster.outages.active.describe()] if cluster.outages.active is not None else []
    in_force = getattr(cluster.runtime, "faults_in_force", None)   # the process runtime's
    return lines + (list(in_force()) if in_force is not None else [])


async def serve_control(cluster: LocalCluster, directory: Path) -> asyncio.AbstractServer:
    """Listen on DIR/control.sock until the returned server is closed."""

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            raw = await reader.readline()
            try:
                request = json.loads(raw[:MAX_REQUEST])
                if not isinstance(request, dict):
                    raise InvalidInput("expected a JSON object")
                answer: dict[str, Any] = {"ok": True, "lines": await handle(cluster, request)}
            except LocalClusterError as error:
                answer = {"ok": False, "error": str(error), "exit_code": error.exit_code}
            except ValueError as error:
                answer = {"ok": False, "error": f"bad request: {error}", "exit_code": 2}
            writer.write(json.dumps(answer).encode() + b"\n")
            await writer.drain()
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    with contextlib.suppress(FileNotFoundError):
        (directory / SOCKET).unlink()
    with _reachable(directory) as path:
        server = await asyncio.start_unix_server(connection, path=path)
    os.chmod(directory / SOCKET, 0o600)
    return server


def request(directory: Path, body: dict[str, Any], *, timeout: float) -> dict[str, Any]:
    """Send one request to the cluster of DIR and return its answer; OSError when nothing listens."""
    with _reachable(directory) as path, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.sendall(json.dumps(body).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    answer: dict[str, Any] = json.loads(data)
    return answer
