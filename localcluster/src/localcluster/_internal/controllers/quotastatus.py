"""The resource quota controller: keeps every ResourceQuota's status (hard, used) current, and tells quota
admission what each quota uses right now.

A write to a counted resource in a namespace with quotas marks the namespace; a background loop then
recomputes its quotas' usage from the store (quota.py's rules) and writes the status only when it changed.
Admission does not wait for that loop: it computes the same usage at once, so two creates in a row can never
both slip under a limit (the real admission updates status.used itself for the same reason).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

from localcluster._internal.admission import quota
from localcluster._internal.storage.registry import BY_KEY
from localcluster._internal.storage.store import ADDED, DELETED, Event, NotFound, Store

log = logging.getLogger(__name__)
Obj = dict[str, Any]
QUOTAS = "resourcequotas"
_POD_PREFIXES = ("requests.", "limits.", "hugepages-")
_LEGACY = {"secrets", "configmaps", "services", "persistentvolumeclaims", "resourcequotas"}


def counted_resources(hard: Obj) -> set[str]:
    """The store keys whose objects a quota with these hard names counts."""
    keys = set()
    for name in hard:
        if name == "requests.storage":
            keys.add("persistentvolumeclaims")
        elif name in ("pods", "cpu", "memory", "ephemeral-storage") or name.startswith(_POD_PREFIXES):
            keys.add("pods")
        elif name in _LEGACY:
            keys.add(name)
        elif name.startswith("count/"):
            keys.add(name.removeprefix("count/"))
    return {k for k in keys if k in BY_KEY}


class QuotaController:
    def __init__(self, *, store: Store) -> None:
        self.store = store
        self._dirty: set[str] = set()
        self._wake = asyncio.Event()
        self._tracked: dict[str, set[str]] = {}   # namespace -> store keys its quotas count
        store.add_listener(self._on_event)

    def quotas(self, namespace: str) -> list[Obj]:
        return sorted(self.store.objects(QUOTAS, namespace), key=lambda q: q["metadata"]["name"])

    def _objects(self, namespace: str, keys: set[str]) -> Iterator[tuple[str, str, Obj]]:
        for key in sorted(keys):
            r = BY_KEY[key]
            for obj in self.store.objects(key, namespace):
                yield r.plural, r.group, obj

    def usage(self, q: Obj) -> quota.Usage:
        namespace = q["metadata"]["namespace"]
        keys = counted_resources((q.get("spec") or {}).get("hard") or {})
        return quota.used(q, self._objects(namespace, keys))

    def with_usage(self, namespace: str) -> list[tuple[Obj, quota.Usage]]:
        return [(q, self.usage(q)) for q in self.quotas(namespace)]

    # ---- keeping status current ----------------------------------------------------------------------------
    def _on_event(self, event: Event) -> None:
        namespace = event.key[0]
        if not namespace:
            return
        if event.resource == QUOTAS:
            old_spec = (event.old.obj.get("spec") if event.old is not None else None)
            if event.type == ADDED or event.type == DELETED or old_spec != event.new.obj.get("spec"):
                self._retrack(namespace)
                self._mark(namespace)
            return
        if event.resource in self._tracked.get(namespace, ()):
            self._mark(namespace)

    def _retrack(self, namespace: str) -> None:
        keys: set[str] = set()
        for q in self.store.objects(QUOTAS, namespace):
            keys |= counted_resources((q.get("spec") or {}).get("hard") or {})
        if keys:
            self._tracked[namespace] = keys
        else:
            self._tracked.pop(namespace, None)

    def _mark(self, namespace: str) -> None:
        self._dirty.add(namespace)
        self._wake.set()

    def sync(self) -> None:
        """Write the status of every quota of the marked namespaces."""
        dirty, self._dirty = self._dirty, set()
        for namespace in sorted(dirty):
            for q in self.quotas(namespace):
                status = quota.status_of(q, self.usage(q))
                if q.get("status") == status:
                    continue

                def change(obj: Obj, status: Obj = status) -> None:
                    obj["status"] = status

                try:
                    self.store.mutate(QUOTAS, namespace, q["metadata"]["name"], change)
                except NotFound:
                    continue

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                self.sync()
            except Exception:
                log.exception("resource quota sync failed")
            await asyncio.sleep(0)

