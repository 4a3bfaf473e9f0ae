"""API outages on demand: kube-apiserver unreachable, hung, throttled or unavailable, as clients meet it in
production, for a set time or until cleared. Followed: kube-apiserver v1.37 and the clients' view of it.

- `refuse`: the listeners are closed, so a connect is refused (ECONNREFUSED), as while kube-apiserver
  restarts on a single-endpoint control plane (an upgrade, a crash loop). They open again, same address and
  port, when the outage ends.
- `hang`: connections are accepted (TCP and TLS complete) and requests read, but nothing is answered until
  the outage ends; then each request still waiting is served as usual. A partitioned or overloaded server:
  a client without a read timeout waits as long as the outage lasts.
- `429`: every request answers 429 TooManyRequests the way API Priority and Fairness rejects one
  (staging/src/k8s.io/apiserver/pkg/server/filters/priority-and-fairness.go and maxinflight.go's
  `tooManyRequests`): `Retry-After: N`, the `X-Kubernetes-PF-FlowSchema-UID` and
  `X-Kubernetes-PF-PriorityLevel-UID` headers, and Go's `http.Error` plain-text body `Too many requests,
  please try again later.` (not a Status). APF computes N from recent drops (1 s, doubling up to 32 s,
  kubernetes/kubernetes#117734); here it is the N asked for. The real server exempts the health probes'
  flow schema and `system:masters`; here only the probes (/healthz, /livez, /readyz) are exempt, so an
  admin client meets the storm too.
- `503`: every request answers 503 with a ServiceUnavailable Status (`the server is currently unable to
  handle the request`, apimachinery's words for a 503), and `Retry-After` when one is given: what a load
  balancer in front of a restarting control plane, or an aggregated API that is down, answers.

When an outage starts every open connection is cut, watches and log follows included, as a restart cuts
them. The store lives on: resourceVersions continue after the outage, and a watch resumed from the last one
it saw gets every change made meanwhile without 410 Gone (as etcd keeps them), as long as the history holds
them (`ClusterSpec.history`). The cluster's own controllers and kubelets do not go through the network: they
go on running and writing (pods keep running, their status changes as it happens), so a client that comes
back finds the cluster as it is now.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web

from localcluster._internal.apimachinery import status as st
from localcluster._internal.errors import InvalidInput

log = logging.getLogger(__name__)

MODES = ("refuse", "hang", "429", "503")
PROBES = ("/healthz", "/livez", "/readyz")
TOO_MANY_REQUESTS = "Too many requests, please try again later."
UNAVAILABLE = "the server is currently unable to handle the request"
# the flow schema and priority level a request of a plain user falls into with the default APF configuration
# (global-default); stable made-up UIDs, as each real cluster has its own
FLOW_SCHEMA_UID = str(uuid.uuid5(uuid.NAMESPACE_URL, "flowschemas/global-default"))
PRIORITY_LEVEL_UID = str(uuid.uuid5(uuid.NAMESPACE_URL, "prioritylevelconfigurations/global-default"))


@dataclass(frozen=True)
class Outage:
    """One outage: its mode, how long it lasts (None: until cleared), the Retry-After it answers with
    (429 and 503), and when it started."""

    mode: str
    seconds: float | None = None
    retry_after: int | None = None
    started: float = field(default_factory=time.monotonic, compare=False)
    started_at: str = field(default_factory=lambda: datetime.datetime.now(datetime.UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ"), compare=False)

    def remaining(self, now: float | None = None) -> float | None:
        """Seconds until it ends by itself (None: until cleared)."""
        if self.seconds is None:
            return None
        return max(0.0, self.started + self.seconds - (time.monotonic() if now is None else now))

    def describe(self) -> str:
        retry = f", Retry-After {self.retry_after}" if self.retry_after is not None else ""
        how = {"refuse": "connections refused", "hang": "connections accepted, never answered",
               "429": f"every request answered 429 TooManyRequests{retry}",
               "503": f"every request answered 503 ServiceUnavailable{retry}"}[self.mode]
        left = self.remaining()
        until = "until cleared" if left is None else f"{left:.0f} s left of {self.seconds:g} s"
        return f"API outage ({self.mode}: {how}), {until}"


def checked(mode: str, seconds: float | None, retry_after: int | None) -> Outage:
    """The outage asked for, or InvalidInput saying what is wrong with it."""
    if mode not in MODES:
        raise InvalidInput(f"API outage mode {mode!r}: expected one of {', '.join(MODES)}")
    if seconds is not None and not seconds > 0:
        raise InvalidInput(f"API outage of {seconds:g} s: expected more than 0 seconds (or none: until "
                           "cleared)")
    if retry_after is not None and retry_after < 0:
        raise InvalidInput(f"Retry-After {retry_after}: expected 0 or more seconds")
    if mode == "429" and retry_after is None:
        retry_after = 1  # APF's first answer
    return Outage(mode, seconds, retry_after)


def too_many_requests(retry_after: int) -> web.Response:
    """APF's rejection: Go's http.Error text body with the Retry-After and flow-control headers."""
    return web.Response(status=429, body=(TOO_MANY_REQUESTS + "\n").encode(), headers={
        "Content-Type": "text/plain; charset=utf-8", "X-Content-Type-Options": "nosniff",
        "Retry-After": str(retry_after), "X-Kubernetes-PF-FlowSchema-UID": FLOW_SCHEMA_UID,
        "X-Kubernetes-PF-PriorityLevel-UID": PRIORITY_LEVEL_UID})


def unavailable(retry_after: int | None) -> st.ApiStatus:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    details = {"retryAfterSeconds": retry_after} if retry_after is not None else None
    return st.ApiStatus(503, "ServiceUnavailable", UNAVAILABLE, details=details, headers=headers)


def is_probe(path: str) -> bool:
    return path in PROBES or path.startswith(tuple(p + "/" for p in PROBES))


class ApiOutages:
    """The outage in force (at most one) and its effects on the HTTP face. `cut` ends every open connection
    and watch; `close` stops listening (and cuts); `reopen` listens again. `gate` is what the API server asks
    first about each request."""

    def __init__(self, *, cut: Callable[[], Awaitable[None]], close: Callable[[], Awaitable[None]],
                 reopen: Callable[[], Awaitable[None]]) -> None:
        self._cut = cut
        self._close = close
        self._reopen = reopen
        self.active: Outage | None = None
        self._ending: Outage | None = None       # cleared, its listeners not open yet
        self._answering = asyncio.Event()
        self._answering.set()
        self._timer: asyncio.TimerHandle | None = None

    async def start(self, mode: str, *, seconds: float | None = None,
                    retry_after: int | None = None) -> Outage:
        outage = checked(mode, seconds, retry_after)
        if self.active is not None:
            await self.clear()
        self.active = outage
        self._answering = asyncio.Event()
        if mode == "refuse":
            await self._close()
        else:
            await self._cut()
        if seconds is not None:
            self._timer = asyncio.get_running_loop().call_later(
                seconds, lambda: asyncio.ensure_future(self._expire(outage)))
        log.warning("%s", outage.describe())
        return outage

    async def _expire(self, outage: Outage) -> None:
        if self.active is outage:
            await self.clear()

    async def clear(self) -> Outage | None:
        """End the outage in force (None when there is none): listening again, waiting requests answered."""
        outage, self.active = self.active, None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if outage is None:
            return None
        self._ending = outage
        try:
            if outage.mode == "refuse":
                await self._reopen()
        finally:
            self._ending = None
        self._answering.set()
        log.warning("API outage (%s) over after %.1f s", outage.mode, time.monotonic() - outage.started)
        return outage

    def in_force(self, outage: Outage) -> bool:
        """Whether `outage` still keeps clients out (until its listeners are open again)."""
        return outage is self.active or outage is self._ending

    def forget(self) -> None:
        """The cluster stops: no timer left, nothing kept waiting (listening is the stop's business)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.active = None
        self._answering.set()

    async def gate(self, request: web.Request) -> web.StreamResponse | None:
        """The answer an outage gives this request instead of the server's, or None to serve it."""
        outage = self.active
        if outage is None:
            return None
        if outage.mode == "hang":
            await self._answering.wait()  # the client may give up first: its handler is cancelled
            return None
        if outage.mode == "429":
            if is_probe(request.path):
                return None
            return too_many_requests(outage.retry_after if outage.retry_after is not None else 1)
        if outage.mode == "503":
            error = unavailable(outage.retry_after)
            return web.json_response(error.body(), status=503, headers=error.headers or None)
        return None  # refuse: a request racing the listener's close is served
