"""The disruption controller: keeps every PodDisruptionBudget's status current (disruption.py decides).

A write to a budget, or to a pod one of its namespace's budgets selects (before or after the write), queues
the budget; a budget with pods in `disruptedPods` is looked at again when their deletion is overdue
(kubernetes v1.37 pkg/controller/disruption/disruption.go: addPod/updatePod/deletePod, the recheck queue).
The status is written only when it changed, and the sync's events recorded with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from localcluster._internal.controllers import disruption
from localcluster._internal.controllers.delayqueue import DelayQueue
from localcluster._internal.controllers.events import EventRecorder
from localcluster._internal.storage.registry import BY_KIND
from localcluster._internal.storage.store import DELETED, Event, NotFound, Store

log = logging.getLogger(__name__)
Obj = dict[str, Any]
PDBS = disruption.PDBS
COMPONENT = "controllermanager"
BATCH = 0.05


def served_kind(api_version: str, kind: str) -> str | None:
    r = BY_KIND.get((api_version, kind))
    if r is None:
        return None
    return r.plural if not r.group else f"{r.plural}.{r.group}"


class DisruptionController:
    def __init__(self, *, store: Store, events: EventRecorder) -> None:
        self.store = store
        self.events = events
        self._queue: DelayQueue[tuple[str, str]] = DelayQueue()
        store.add_listener(self._on_event)

    def _on_event(self, event: Event) -> None:
        meta = event.new.obj["metadata"]
        namespace = meta.get("namespace") or ""
        if event.resource == PDBS:
            if event.type != DELETED:
                self._queue.add((namespace, meta["name"]))
            return
        if event.resource != "pods":
            return
        pods = [event.new.obj] + ([event.old.obj] if event.old is not None else [])
        for pdb in self.store.objects(PDBS, namespace):
            if any(disruption.selects(pdb, pod) for pod in pods):
                self._queue.add((namespace, pdb["metadata"]["name"]), after=BATCH)

    async def run(self) -> None:
        while True:
            for key in self._queue.pop_due():
                try:
                    self.sync(*key)
                except Exception:
                    log.exception("syncing PodDisruptionBudget %s/%s failed", *key)
                    self._queue.add(key, after=1.0)
            await self._queue.wait()
            await asyncio.sleep(0)

    def sync(self, namespace: str, name: str) -> None:
        pdb = self.store.get(PDBS, namespace, name)
        if pdb is None:
            return
        result = disruption.sync(pdb, self.store.objects("pods", namespace), now=time.time(),
                                 resolve=served_kind)
        if result.recheck_after is not None:
            self._queue.add((namespace, name), after=result.recheck_after)
        if result.status == pdb.get("status"):
            return

        def change(obj: Obj) -> None:
            obj["status"] = result.status

        with contextlib.suppress(NotFound):
            updated = self.store.mutate(PDBS, namespace, name, change)
            for kind, reason, message in result.events:
                self.events.record(updated, reason=reason, message=message, type=kind, component=COMPONENT)
