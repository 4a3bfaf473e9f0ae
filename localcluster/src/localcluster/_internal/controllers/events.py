"""Events as the real recorders write them (client-go tools/record): core/v1 Events that `kubectl describe`
and `kubectl get events` read.

- An event names its object (kind, namespace, name, uid, apiVersion, resourceVersion, and for a container the
  fieldPath `spec.containers{NAME}`), its reason, message, type (Normal or Warning) and source (the component:
  default-scheduler, kubelet; the node, for the kubelet).
- Repeats aggregate as the event correlator does: the same source, object, type, reason and message within
  10 minutes raise `count` and `lastTimestamp` of the one event instead of writing another.
- Events expire `ttl` seconds after their last occurrence (the API server's --event-ttl, 1 h by default).
- Recording never fails what caused it: a namespace that is gone or terminating, or any store refusal,
  drops the event with a log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from localcluster._internal.storage.store import AlreadyExists, NotFound, Store, now_iso

log = logging.getLogger(__name__)
Obj = dict[str, Any]
AGGREGATION_WINDOW = 600.0     # seconds: the correlator's maxIntervalInSeconds
_CACHE_SIZE = 4096             # the correlator's LRU of recent events


class EventRecorder:
    def __init__(self, *, store: Store, ttl: float = 3600.0) -> None:
        self.store = store
        self.ttl = ttl
        # aggregation key -> (namespace, event name, monotonic time of the last occurrence)
        self._recent: OrderedDict[tuple[str, ...], tuple[str, str, float]] = OrderedDict()

    def record(self, obj: Mapping[str, Any], *, reason: str, message: str, type: str = "Normal",
               component: str = "kubelet", host: str = "", field_path: str = "") -> None:
        try:
            self._record(obj, reason=reason, message=message, type=type, component=component, host=host,
                         field_path=field_path)
        except Exception:  # an event is never worth failing the operation that caused it
            log.exception("event %s for %s not recorded", reason, (obj.get("metadata") or {}).get("name"))

    def _record(self, obj: Mapping[str, Any], *, reason: str, message: str, type: str, component: str,
                host: str, field_path: str) -> None:
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        ns = self.store.get("namespaces", None, namespace)
        if ns is None or ns["metadata"].get("deletionTimestamp"):
            return
        involved: Obj = {"kind": obj.get("kind", ""), "namespace": meta.get("namespace", ""),
                         "name": meta.get("name", ""), "uid": meta.get("uid", ""),
                         "apiVersion": obj.get("apiVersion", "v1"),
                         "resourceVersion": meta.get("resourceVersion", "")}
        if field_path:
            involved["fieldPath"] = field_path
        key = (component, host, *(str(involved.get(k, "")) for k in ("kind", "namespace", "name", "uid",
                                                                       "fieldPath")), type, reason, message)
        now, clock = now_iso(), time.monotonic()
        seen = self._recent.get(key)
        if seen is not None and clock - seen[2] < AGGREGATION_WINDOW and self._bump(seen[0], seen[1], now):
            self._recent[key] = (seen[0], seen[1], clock)
            self._recent.move_to_end(key)
            return
        source: Obj = {"component": component}
        if host:
            source["host"] = host
        event: Obj = {"apiVersion": "v1", "kind": "Event",
                      "metadata": {"namespace": namespace},
                      "involvedObject": involved, "reason": reason, "message": message, "source": source,
                      "firstTimestamp": now, "lastTimestamp": now, "count": 1, "type": type,
                      "eventTime": None, "reportingComponent": component, "reportingInstance": host}
        for attempt in range(5):
            event["metadata"]["name"] = f"{meta.get('name', '')}.{time.time_ns() + attempt:x}"
            with contextlib.suppress(AlreadyExists):
                self.store.create("events", event)
                break
        self._recent[key] = (namespace, event["metadata"]["name"], clock)
        while len(self._recent) > _CACHE_SIZE:
            self._recent.popitem(last=False)

    def _bump(self, namespace: str, name: str, now: str) -> bool:
        def change(ev: Obj) -> None:
            ev["count"] = int(ev.get("count") or 1) + 1
            ev["lastTimestamp"] = now

        try:
            self.store.mutate("events", namespace, name, change)
        except NotFound:
            return False
        return True

    def expire(self, *, now: datetime.datetime | None = None) -> int:
        """Delete the events last seen more than `ttl` seconds ago; returns how many."""
        now = now or datetime.datetime.now(datetime.UTC)
        removed = 0
        for ev in self.store.objects("events"):
            last = ev.get("lastTimestamp") or ev["metadata"].get("creationTimestamp") or ""
            try:
                when = datetime.datetime.strptime(str(last)[:19], "%Y-%m-%dT%H:%M:%S").replace(
                    tzinfo=datetime.UTC)
            except ValueError:
                continue
            if (now - when).total_seconds() > self.ttl:
                with contextlib.suppress(NotFound):
                    self.store.delete("events", ev["metadata"].get("namespace"), ev["metadata"]["name"])
                    removed += 1
        return removed

    async def run(self) -> None:
        """Expire events for as long as the cluster runs."""
        while True:
            await asyncio.sleep(min(60.0, max(self.ttl / 4, 0.5)))
            try:
                self.expire()
            except Exception:
                log.exception("expiring events failed")
