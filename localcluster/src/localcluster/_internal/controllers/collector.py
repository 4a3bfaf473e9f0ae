"""The garbage collector as a controller: an index of dependents by owner uid, kept current from every store
event, and passes of the pure rules (gc.py) over one owner's neighbourhood at a time, so a collection never
scans the store. Deleting goes through the controllers' own delete (graceful pods, finalizers, namespaces).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from typing import Any

from localcluster._internal.controllers import gc
from localcluster._internal.storage.registry import BY_KEY, RESOURCES, Resource
from localcluster._internal.storage.store import DELETED, MODIFIED, Event, NotFound, Store

log = logging.getLogger(__name__)
Obj = dict[str, Any]
OBJ_KEY = tuple[str, str, str]  # (resource key, namespace, name)
GC_FINALIZERS = frozenset({gc.FOREGROUND_FINALIZER, gc.ORPHAN_FINALIZER})
# an ownerReference to a kind this server does not serve cannot be resolved: leave its dependent alone
_SERVED_KINDS = frozenset(r.kind for r in RESOURCES if r.stored)
Delete = Callable[[Resource, Obj, Obj], Any]            # Controllers.delete(resource, current, options)
AfterUpdate = Callable[[Resource, Obj], None]          # Controllers.after_update(resource, updated)


class GarbageCollector:
    def __init__(self, *, store: Store, delete: Delete, after_update: AfterUpdate) -> None:
        self.store = store
        self._delete = delete
        self._after_update = after_update
        self._queue: list[str] = []              # owner uids to look at
        self._wake = asyncio.Event()
        self._dependents: dict[str, set[OBJ_KEY]] = {}  # owner uid -> dependents
        self._uids: dict[str, OBJ_KEY] = {}      # uid -> key, for every live object that may own others

    def on_event(self, event: Event) -> None:
        """Index the write's owner references and queue the owners it concerns (a store listener: it only
        queues)."""
        meta = event.new.obj["metadata"]
        uid = meta.get("uid", "")
        self._index_owners(event)
        finalizing = event.type == MODIFIED and bool(meta.get("deletionTimestamp")) and bool(
            set(meta.get("finalizers") or ()) & GC_FINALIZERS)
        if (event.type == DELETED and uid in self._dependents) or finalizing:
            self.queue(uid)
        if event.type == DELETED:
            # an owner deleting in the foreground waits for this dependent
            for ref in meta.get("ownerReferences") or []:
                if ref.get("uid") in self._uids:
                    self.queue(ref["uid"])

    def _index_owners(self, event: Event) -> None:
        meta = event.new.obj["metadata"]
        key = (event.resource, meta.get("namespace") or "", meta["name"])
        uid = meta.get("uid", "")
        old_refs = {r.get("uid") for r in (event.old.obj["metadata"].get("ownerReferences") or [])} if (
            event.old is not None) else set()
        new_refs = set() if event.type == DELETED else {r.get("uid")
                                                         for r in meta.get("ownerReferences") or []}
        for owner in old_refs - new_refs:
            dependents = self._dependents.get(owner)
            if dependents is not None:
                dependents.discard(key)
                if not dependents:
                    del self._dependents[owner]
        for owner in new_refs - old_refs:
            self._dependents.setdefault(owner, set()).add(key)
            if owner not in self._uids:
                # the owner does not exist (or not yet): the real collector deletes such orphans
                self.queue(owner)
        if event.type == DELETED:
            self._uids.pop(uid, None)
        else:
            self._uids[uid] = key

    def queue(self, uid: str) -> None:
        self._queue.append(uid)
        self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            # let a burst of writes settle (an owner created right after its dependent)
            await asyncio.sleep(0.05)
            queue, self._queue = self._queue, []
            for uid in dict.fromkeys(queue):
                try:
                    self.collect(uid)
                except Exception:
                    log.exception("garbage collection of %s failed", uid)

    def _closure(self, uids: set[str]) -> list[Obj]:
        """The objects one gc pass must see (gc.collect's contract): these and their dependents, every owner
        of anything in the set, and every dependent of an owner in the set that is being deleted with
        finalizers (else a foreground owner would look unblocked, or an orphaning owner orphan only some)."""
        keys: set[OBJ_KEY] = set()
        objs: dict[OBJ_KEY, Obj] = {}
        todo: list[OBJ_KEY] = []

        def add(key: OBJ_KEY) -> None:
            if key not in keys:
                keys.add(key)
                todo.append(key)

        for uid in uids:
            if uid in self._uids:
                add(self._uids[uid])
            for key in self._dependents.get(uid, ()):
                add(key)
        while todo:
            key = todo.pop()
            obj = self.store.get(key[0], key[1], key[2])
            if obj is None:
                continue
            objs[key] = obj
            meta = obj["metadata"]
            for ref in meta.get("ownerReferences") or []:
                owner = self._uids.get(ref.get("uid", ""))
                if owner is not None:
                    add(owner)
            if meta.get("deletionTimestamp") and set(meta.get("finalizers") or ()) & GC_FINALIZERS:
                for dependent in self._dependents.get(meta.get("uid", ""), ()):
                    add(dependent)
        return [objs[key] for key in sorted(objs)]

    def collect(self, owner_uid: str) -> None:
        """Run the gc module's passes over one owner's neighbourhood until it asks for nothing more."""
        uids = {owner_uid}
        for _ in range(20):
            actions = gc.collect(self._closure(uids), known_kinds=_SERVED_KINDS)
            if not actions:
                return
            for d in actions.delete:
                key = self._uids.get(d.key.uid)
                current = self.store.get(*key) if key else None
                if key is not None and current is not None:
                    uids.add(d.key.uid)
                    self._delete(BY_KEY[key[0]], current, {"propagationPolicy": d.policy})
            for p in actions.set_owner_references:
                key = self._uids.get(p.key.uid)
                if key is not None:
                    refs = [dict(r) for r in p.owner_references]
                    with contextlib.suppress(NotFound):
                        self.store.mutate(*key, functools.partial(_set_refs, refs=refs))
            for f in actions.remove_finalizers:
                key = self._uids.get(f.key.uid)
                if key is None:
                    continue
                with contextlib.suppress(NotFound):
                    drop = functools.partial(_drop_finalizer, finalizer=f.finalizer)
                    updated = self.store.mutate(*key, drop)
                    self._after_update(BY_KEY[key[0]], updated)


def _set_refs(obj: Obj, refs: list[Obj]) -> None:
    if refs:
        obj["metadata"]["ownerReferences"] = refs
    else:
        obj["metadata"].pop("ownerReferences", None)


def _drop_finalizer(obj: Obj, finalizer: str) -> None:
    remaining = [f for f in obj["metadata"].get("finalizers") or [] if f != finalizer]
    if remaining:
        obj["metadata"]["finalizers"] = remaining
    else:
        obj["metadata"].pop("finalizers", None)
