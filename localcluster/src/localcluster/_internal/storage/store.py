"""The object store of the local API server: what etcd plus the watch cache are to a real one.

Objects live by resource key ("pods", "roles.rbac.authorization.k8s.io"), namespace and name. Every write
takes the next value of one global resourceVersion, and every write becomes a watch event that is fanned out
to the matching watchers and kept in a bounded history, so a watch may resume from any resourceVersion still
in it; older ones are Gone (410), exactly as after an etcd compaction.

Stored objects are never mutated in place: a write replaces the dict. That lets each version's JSON be
serialised once (orjson) and reused by every list and watch that sends it, which is what keeps a 10,000-pod
list cheap. Everything here runs on the cluster's one event loop; nothing is thread-safe.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)
Predicate = Callable[[Obj], bool]

ADDED, MODIFIED, DELETED, BOOKMARK, ERROR = "ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"
WATCH_QUEUE_LIMIT = 200_000  # a consumer this far behind is cut off, as the real server drops slow watchers


class StoreError(Exception):
    """Base of the store's refusals; the API layer maps each to its Status."""


class NotFound(StoreError):
    pass


class AlreadyExists(StoreError):
    pass


class Conflict(StoreError):
    pass


class Gone(StoreError):
    """The resourceVersion asked for was compacted out of the history."""


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Entry:
    """One stored version of an object and, once asked for, its JSON."""

    __slots__ = ("_raw", "obj")

    def __init__(self, obj: Obj) -> None:
        self.obj = obj
        self._raw: bytes | None = None

    @property
    def raw(self) -> bytes:
        if self._raw is None:
            self._raw = orjson.dumps(self.obj)
        return self._raw


@dataclass(frozen=True)
class Event:
    rv: int
    resource: str
    type: str
    key: Key
    new: Entry          # for DELETED: the last state with the deletion's resourceVersion
    old: Entry | None   # the previous state: tells a watcher with a selector that an object left or joined it


@dataclass(eq=False)
class Watcher:
    """One watch: the events it should see, in order, on an asyncio queue of (type, Entry)."""

    resource: str
    namespace: str | None
    predicate: Predicate | None
    queue: asyncio.Queue[tuple[str, Entry] | None] = field(default_factory=asyncio.Queue)
    closed: bool = False

    def _matches(self, entry: Entry | None) -> bool:
        if entry is None:
            return False
        if self.namespace is not None and entry.obj["metadata"].get("namespace") != self.namespace:
            return False
        return self.predicate is None or self.predicate(entry.obj)

    def offer(self, event: Event) -> None:
        """Translate a store event into what this watcher sees (an object leaving a selector is DELETED)."""
        if self.closed:
            return
        now = self._matches(event.new)
        if event.type == DELETED:
            kind = DELETED if now else None
        elif event.type == ADDED:
            kind = ADDED if now else None
        else:
            before = self._matches(event.old)
            kind = (MODIFIED if before else ADDED) if now else (DELETED if before else None)
        if kind is None:
            return
        if self.queue.qsize() >= WATCH_QUEUE_LIMIT:
            self.close()
            return
        self.queue.put_nowait((kind, event.new))

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.queue.put_nowait(None)


class Store:
    def __init__(self, *, history: int = 100_000) -> None:
        self._objects: dict[str, dict[Key, Entry]] = {}
        self._sorted: dict[str, list[Key] | None] = {}
        self._history: deque[Event] = deque(maxlen=history)
        self._compacted_rv = 0   # events at or below this resourceVersion are no longer in the history
        self._rv = 0
        self._watchers: dict[str, set[Watcher]] = {}
        self._listeners: list[Callable[[Event], None]] = []

    # ---- reading -------------------------------------------------------------------------------------------
    @property
    def resource_version(self) -> int:
        return self._rv

    def get(self, resource: str, namespace: str | None, name: str) -> Obj | None:
        """The stored object itself; callers must not mutate it (use `copy_of` for a private copy)."""
        entry = self._objects.get(resource, {}).get((namespace or "", name))
        return entry.obj if entry is not None else None

    def entry(self, resource: str, namespace: str | None, name: str) -> Entry | None:
        return self._objects.get(resource, {}).get((namespace or "", name))

    def copy_of(self, resource: str, namespace: str | None, name: str) -> Obj | None:
        obj = self.get(resource, namespace, name)
        return copy.deepcopy(obj) if obj is not None else None

    def keys(self, resource: str, namespace: str | None = None, *, after: Key | None = None) -> list[Key]:
        """Keys in order (namespace, name), as etcd returns them; optionally only those after a key."""
        bucket = self._objects.get(resource)
        if not bucket:
            return []
        keys = self._sorted.get(resource)
        if keys is None:
            keys = sorted(bucket)
            self._sorted[resource] = keys
        if namespace is not None:
            keys = _key_range(keys, (namespace, ""), (namespace, "\U0010ffff"))
        if after is not None:
            keys = _key_range(keys, after, None, inclusive=False)
        return keys

    def entries(self, resource: str, namespace: str | None = None, *,
                after: Key | None = None) -> list[Entry]:
        """Entries in key order; optionally only those after a key."""
        bucket = self._objects.get(resource, {})
        return [bucket[k] for k in self.keys(resource, namespace, after=after)]

    def entries_of(self, resource: str, keys: Iterable[Key]) -> Iterator[Entry]:
        """The entries of these keys (from `keys`), lazily: a page stops reading once it is full."""
        bucket = self._objects.get(resource, {})
        return (bucket[k] for k in keys)

    def objects(self, resource: str, namespace: str | None = None) -> list[Obj]:
        return [e.obj for e in self.entries(resource, namespace)]

    def count(self, resource: str) -> int:
        return len(self._objects.get(resource, {}))

    # ---- writing -------------------------------------------------------------------------------------------
    def create(self, resource: str, obj: Obj) -> Obj:
        """Store a new object, setting name (from generateName), uid, creationTimestamp, resourceVersion."""
        meta = obj.setdefault("metadata", {})
        bucket = self._objects.setdefault(resource, {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = _generate_name(meta["generateName"], lambda n: (meta.get("namespace") or "", n)
                                          in bucket)
        key = (meta.get("namespace") or "", meta["name"])
        if key in bucket:
            raise AlreadyExists(meta["name"])
        # a uid handed in is the registry's own (a Job's generated labels carry it); the API drops a client's
        meta["uid"] = meta.get("uid") or str(uuid.uuid4())
        meta["creationTimestamp"] = now_iso()
        meta.pop("deletionTimestamp", None)
        meta.setdefault("generation", 1)
        self._rv += 1
        meta["resourceVersion"] = str(self._rv)
        entry = Entry(obj)
        bucket[key] = entry
        self._sorted[resource] = None
        self._emit(Event(self._rv, resource, ADDED, key, entry, None))
        return obj

    def update(self, resource: str, obj: Obj, *, check_version: bool = True) -> Obj:
        """Replace an object. With `check_version`, a resourceVersion that is not the current one is a
        Conflict; an empty one always wins (as `kubectl replace --force`-style unconditional updates do)."""
        meta = obj["metadata"]
        key = (meta.get("namespace") or "", meta["name"])
        bucket = self._objects.get(resource, {})
        current = bucket.get(key)
        if current is None:
            raise NotFound(meta["name"])
        cur_meta = current.obj["metadata"]
        asked = meta.get("resourceVersion")
        if check_version and asked and asked != cur_meta["resourceVersion"]:
            raise Conflict(meta["name"])
        # identity and bookkeeping are the server's, not the writer's
        meta["uid"] = cur_meta["uid"]
        meta["creationTimestamp"] = cur_meta["creationTimestamp"]
        if "deletionTimestamp" in cur_meta:
            meta["deletionTimestamp"] = cur_meta["deletionTimestamp"]
            if "deletionGracePeriodSeconds" in cur_meta:
                meta["deletionGracePeriodSeconds"] = cur_meta["deletionGracePeriodSeconds"]
        if current.obj.get("spec") != obj.get("spec"):
            meta["generation"] = int(cur_meta.get("generation", 1)) + 1
        else:
            meta["generation"] = cur_meta.get("generation", 1)
        self._rv += 1
        meta["resourceVersion"] = str(self._rv)
        entry = Entry(obj)
        bucket[key] = entry
        self._emit(Event(self._rv, resource, MODIFIED, key, entry, current))
        return obj

    def mutate(self, resource: str, namespace: str | None, name: str, change: Callable[[Obj], None]) -> Obj:
        """Apply `change` to a private copy of the current object and store it (no version check)."""
        current = self.get(resource, namespace, name)
        if current is None:
            raise NotFound(name)
        obj = copy.deepcopy(current)
        change(obj)
        return self.update(resource, obj, check_version=False)

    def delete(self, resource: str, namespace: str | None, name: str) -> Obj:
        """Remove an object now; watchers see it DELETED with a fresh resourceVersion."""
        key = (namespace or "", name)
        bucket = self._objects.get(resource, {})
        current = bucket.pop(key, None)
        if current is None:
            raise NotFound(name)
        self._sorted[resource] = None
        self._rv += 1
        last = dict(current.obj)
        last["metadata"] = dict(current.obj["metadata"], resourceVersion=str(self._rv))
        entry = Entry(last)
        self._emit(Event(self._rv, resource, DELETED, key, entry, current))
        return last

    # ---- watching ------------------------------------------------------------------------------------------
    def add_listener(self, listener: Callable[[Event], None]) -> None:
        """Controllers (scheduler, gc, runtime driver) hear every event synchronously, after it is stored."""
        self._listeners.append(listener)

    def watch(self, resource: str, *, namespace: str | None = None, predicate: Predicate | None = None,
              since: int | None = None) -> Watcher:
        """A watcher seeing every event after resourceVersion `since` (None: only future events).
        Raises Gone when `since` is older than the history holds."""
        watcher = Watcher(resource, namespace, predicate)
        if since is not None:
            if since < self._compacted_rv:
                raise Gone(f"too old resource version: {since} ({self._compacted_rv + 1})")
            for event in self._history:
                if event.rv > since and event.resource == resource:
                    watcher.offer(event)
        self._watchers.setdefault(resource, set()).add(watcher)
        return watcher

    def unwatch(self, watcher: Watcher) -> None:
        self._watchers.get(watcher.resource, set()).discard(watcher)
        watcher.closed = True

    def close_watches(self) -> int:
        """Test hook: end every open watch, as an API server restart would. Returns how many were cut."""
        cut = 0
        for watchers in self._watchers.values():
            for watcher in list(watchers):
                watcher.close()
                cut += 1
            watchers.clear()
        return cut

    def compact(self, *, keep: int = 0) -> None:
        """Test hook: forget history so older resourceVersions answer 410 Gone."""
        while len(self._history) > keep:
            self._compacted_rv = self._history.popleft().rv
        if not self._history:
            self._compacted_rv = self._rv

    def _emit(self, event: Event) -> None:
        if len(self._history) == self._history.maxlen:
            self._compacted_rv = self._history[0].rv
        self._history.append(event)
        for watcher in list(self._watchers.get(event.resource, ())):
            watcher.offer(event)
            if watcher.closed:
                self._watchers[event.resource].discard(watcher)
        for listener in self._listeners:
            listener(event)


def _key_range(keys: list[Key], low: Key, high: Key | None, *, inclusive: bool = True) -> list[Key]:
    import bisect

    start = bisect.bisect_left(keys, low) if inclusive else bisect.bisect_right(keys, low)
    end = bisect.bisect_right(keys, high) if high is not None else len(keys)
    return keys[start:end]


_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # the same consonant-and-digit alphabet the real server draws from


def _generate_name(prefix: str, taken: Callable[[str], bool]) -> str:
    import random

    for _ in range(100):
        name = prefix[:58] + "".join(random.choice(_ALPHABET) for _ in range(5))
        if not taken(name):
            return name
    raise AlreadyExists(prefix)


def deep_items(entries: Iterable[Entry]) -> list[Obj]:
    return [copy.deepcopy(e.obj) for e in entries]
