"""`pods/exec`, `pods/attach` and `pods/portforward`: the API server's "connect" subresources and the
kubelet's streaming server in one, for `kubectl exec`, `attach`, `cp` and `port-forward`.

The request has been authenticated and authorised (`create` on the subresource, as the real server checks
for every upgrade since 1.31) by api.py. Here: the pod and container are found as the real server finds them
(its 400s and wording), the connection is upgraded to the protocol the client offers first that we speak
(WebSocket, else SPDY/3.1; channels.py, upgrades.py), and the runtime (runtime/base.py StreamingRuntime) runs
the command, follows the container, or dials the pod's port. The simulated runtime runs no processes: these
requests are refused there, before any upgrade, with a message saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, cast

from aiohttp import web

from localcluster._internal.apimachinery import status as st
from localcluster._internal.apiserver.targets import Target, stored
from localcluster._internal.runtime.base import ExecSession, StreamingError, StreamingRuntime
from localcluster._internal.storage.store import Store
from localcluster._internal.streams import channels as ch
from localcluster._internal.streams.execstreams import ExecStreams, SpdyStreams, WebSocketStreams, run_session
from localcluster._internal.streams.portforward import SpdyForwarder, serve_websocket
from localcluster._internal.streams.spdy import SpdyConnection
from localcluster._internal.streams.upgrades import (
    WebSocketBytes,
    accept_spdy,
    accept_websocket,
    upgrade_required,
    wants_spdy,
    wants_websocket,
)

Obj = dict[str, Any]
STREAMING_METHODS = ("exec_in_container", "attach_container", "open_pod_port")
TERMINAL = ("Succeeded", "Failed")


def pick_container(pod: Obj, wanted: str) -> str:
    """The container a request means, by the API server's rules (pod strategy's streamLocation)."""
    name = pod["metadata"]["name"]
    spec = pod.get("spec") or {}
    names = [str(c.get("name", "")) for c in spec.get("containers") or []]
    init = [str(c.get("name", "")) for c in spec.get("initContainers") or []]
    if not wanted:
        if len(names) == 1:
            return names[0]
        if not names:
            raise st.bad_request(f"a container name must be specified for pod {name}")
        message = f"a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]"
        if init:
            message += f" or one of the init containers: [{' '.join(init)}]"
        raise st.bad_request(message)
    if wanted not in names + init:
        raise st.bad_request(f"container {wanted} is not valid for pod {name}")
    return wanted


def require_host(pod: Obj) -> None:
    if not (pod.get("spec") or {}).get("nodeName"):
        raise st.bad_request(f"pod {pod['metadata']['name']} does not have a host assigned")


def require_running(pod: Obj, container: str) -> None:
    """Refused before the upgrade, so kubectl prints why rather than a broken stream."""
    status = pod.get("status") or {}
    for cs in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
        if cs.get("name") != container:
            continue
        state = cs.get("state") or {}
        if "running" in state:
            return
        detail = next(iter(state), "unknown")
        reason = (state.get(detail) or {}).get("reason")
        raise st.bad_request(f'container "{container}" in pod "{pod["metadata"]["name"]}" is not running '
                             f"({detail}{': ' + reason if reason else ''})")
    raise st.bad_request(f'container "{container}" in pod "{pod["metadata"]["name"]}" has not started')


async def pod_ended(store: Store, namespace: str, name: str, uid: str) -> None:
    """Returns once the pod is gone, replaced by another of its name, or finished."""
    def over(obj: Obj | None) -> bool:
        return obj is None or obj["metadata"].get("uid") != uid or \
            (obj.get("status") or {}).get("phase") in TERMINAL

    while True:  # a watch cut by the server (a test's cut_watches) is simply opened again
        watcher = store.watch("pods", namespace=namespace, predicate=lambda o: o["metadata"]["name"] == name)
        try:
            if over(store.get("pods", namespace, name)):
                return
            while (item := await watcher.queue.get()) is not None:
                kind, entry = item
                if kind == "DELETED" or over(entry.obj):
                    return
        finally:
            store.unwatch(watcher)


class PodConnect:
    def __init__(self, *, store: Store, runtime: object) -> None:
        self.store = store
        self.runtime = runtime

    def _streaming(self, sub: str) -> StreamingRuntime:
        if not all(hasattr(self.runtime, m) for m in STREAMING_METHODS):
            raise st.bad_request(f"pods/{sub} is not available in this local cluster: its simulated "
                                 "runtime (--runtime sim) runs no processes. Start it with `localcluster up "
                                 "--runtime process` for exec, attach, cp and port-forward")
        return cast(StreamingRuntime, self.runtime)

    async def handle(self, request: web.Request, target: Target) -> web.StreamResponse:
        sub = target.subresource or ""
        pod = stored(self.store, target)
        if sub == "portforward":
            require_host(pod)
            return await self._port_forward(request, pod, self._streaming(sub))
        # the API server's checks, then the kubelet's
        options = ch.StreamOptions.parse(request.query, attach=sub == "attach")
        container = pick_container(pod, options.container)
        require_host(pod)
        runtime = self._streaming(sub)
        require_running(pod, container)
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]

        async def start() -> ExecSession:
            if sub == "attach":
                return await runtime.attach_container(namespace, name, container, tty=options.tty)
            return await runtime.exec_in_container(namespace, name, container, list(options.command),
                                                   tty=options.tty, stdin=options.stdin)

        if wants_websocket(request):
            ws = await accept_websocket(request, ch.EXEC_WEBSOCKET_PROTOCOLS)
            await self._session(WebSocketStreams(ws), start, options)
            return ws
        if not wants_spdy(request):
            raise upgrade_required()
        raw, _ = await accept_spdy(request, ch.EXEC_SPDY_PROTOCOLS)
        streams = SpdyStreams(options)
        connection = SpdyConnection(reader=raw.reader, write=raw.write, on_stream=streams.on_stream)
        streams.connection, streams.gone = connection, connection.closed
        serving = asyncio.ensure_future(connection.serve())
        try:
            await streams.wait_ready()
            await self._session(streams, start, options)
        except StreamingError as e:  # the client never opened its streams
            await streams.finish(ch.internal_error(str(e)))
        finally:
            await connection.close()
            serving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await serving
        return raw.response

    @staticmethod
    async def _session(streams: ExecStreams, start: Callable[[], Awaitable[ExecSession]],
                       options: ch.StreamOptions) -> None:
        try:
            session = await start()
        except StreamingError as e:
            await streams.finish(ch.internal_error(str(e)))
            return
        await run_session(streams, session, options)

    async def _port_forward(self, request: web.Request, pod: Obj,
                            runtime: StreamingRuntime) -> web.StreamResponse:
        meta = pod["metadata"]
        namespace, name, uid = meta["namespace"], meta["name"], meta.get("uid", "")
        where = f"pod {name}, uid {uid}"
        ended = pod_ended(self.store, namespace, name, uid)

        async def dial(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            return await runtime.open_pod_port(namespace, name, port)

        try:
            if wants_websocket(request):
                ports = None if ch.SPDY_TUNNEL in request.headers.get("Sec-WebSocket-Protocol", "") else \
                    ch.parse_ports(request.query.getall("ports", []))
                ws = await accept_websocket(request, (ch.SPDY_TUNNEL, ch.PORT_FORWARD_WEBSOCKET))
                if ws.ws_protocol == ch.SPDY_TUNNEL:
                    tunnel = WebSocketBytes(ws)
                    await SpdyForwarder(dial=dial, where=where).serve(tunnel, tunnel.write, ended)
                    await ws.close()
                else:
                    await serve_websocket(ws, ports or [], dial, where, ended)
                return ws
            if not wants_spdy(request):
                raise upgrade_required()
            raw, _ = await accept_spdy(request, (ch.PORT_FORWARD,))
            await SpdyForwarder(dial=dial, where=where).serve(raw.reader, raw.write, ended)
            return raw.response
        finally:
            ended.close()  # never awaited when the request was refused before the upgrade
