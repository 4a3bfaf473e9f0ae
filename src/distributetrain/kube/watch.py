"""A watched set of objects (one kind, one label selector) that neither loses nor duplicates an event.

List once, then watch from the list's resourceVersion; every event and bookmark advances it. When a stream
ends (the server's timeout, an API server restart, a cut connection) the next watch resumes from the last
version seen; when that version is too old (410 Gone) the set is listed again. The consumer sees snapshots
(name -> object), so a missed ADDED/DELETED pair can never leave it with a stale picture.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

from distributetrain.errors import ApiError, ApiUnreachable, Gone, StreamBroken
from distributetrain.kube.gateway import Kube

log = logging.getLogger(__name__)

Snapshot = Mapping[str, dict[str, Any]]


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


class Watched:
    """The objects of `kind` in `namespace` matching `selector`, kept current by one watch at a time."""

    def __init__(self, kube: Kube, kind: str, namespace: str | None, selector: str, *,
                 watch_seconds: int = 60, max_breaks: int = 8,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.kube = kube
        self.kind = kind
        self.namespace = namespace
        self.selector = selector
        self.watch_seconds = watch_seconds
        self.max_breaks = max_breaks
        self.objects: dict[str, dict[str, Any]] = {}
        self.resource_version = ""
        self.relists = 0
        self._clock = clock
        self._sleep = sleep

    def snapshot(self) -> Snapshot:
        return MappingProxyType(dict(self.objects))

    def relist(self) -> Snapshot:
        items, version = self.kube.list(self.kind, self.namespace, label_selector=self.selector)
        self.objects = {_name(item): item for item in items}
        self.resource_version = version
        self.relists += 1
        return self.snapshot()

    def changes(self, *, deadline: float | None) -> Iterator[Snapshot]:
        """The current snapshot at once, then one after every change, until `deadline` (monotonic seconds;
        None: forever). The caller stops iterating when it has seen what it waits for."""
        yield self.relist() if not self.resource_version else self.snapshot()
        breaks = 0
        broken_since: float | None = None
        while deadline is None or self._clock() < deadline:
            remaining = self.watch_seconds if deadline is None else deadline - self._clock()
            timeout = max(1, min(self.watch_seconds, int(remaining + 0.999)))
            try:
                stream = self.kube.watch(self.kind, self.namespace, resource_version=self.resource_version,
                                         label_selector=self.selector, timeout_seconds=timeout)
                for event in stream:
                    breaks, broken_since = 0, None
                    if self._apply(event):
                        yield self.snapshot()
                    if deadline is not None and self._clock() >= deadline:
                        return
            except Gone:
                log.info("watch %s %s: resourceVersion %s is too old; listing again", self.kind,
                         self.selector, self.resource_version)
                yield self.relist()
            except StreamBroken as err:
                breaks += 1
                broken_since = self._clock() if broken_since is None else broken_since
                patience = self.kube.patience
                if patience is None and breaks > self.max_breaks:
                    raise ApiError(f"watch {self.kind} {self.selector}: the stream broke {breaks} times in a "
                                   f"row; last: {err}") from err
                silent = self._clock() - broken_since
                if patience is not None and silent >= patience:
                    raise ApiUnreachable(
                        f"watch {self.kind} {self.selector}: no event for {silent:.0f}s, the stream broke "
                        f"{breaks} times; longer than --api-outage-tolerance ({patience:g}s)") from err
                log.warning("watch %s %s broke (%s); resuming from %s", self.kind, self.selector, err,
                            self.resource_version)
                self._sleep(min(5.0, 0.2 * 2 ** breaks))

    def _apply(self, event: Mapping[str, Any]) -> bool:
        """Fold one event into the set; True when the set changed."""
        kind = event.get("type")
        obj = event.get("object") or {}
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        if version:
            self.resource_version = version
        if kind == "BOOKMARK":
            return False
        name = _name(obj)
        if kind == "DELETED":
            return self.objects.pop(name, None) is not None
        if kind in ("ADDED", "MODIFIED"):
            self.objects[name] = dict(obj)
            return True
        return False
