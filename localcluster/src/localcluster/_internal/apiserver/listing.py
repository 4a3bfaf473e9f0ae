"""list and watch: selectors, limit/continue, resourceVersion semantics, and the watch event stream.

A list is built from each object's cached JSON bytes, never re-serialised; a watch line is
`{"type":...,"object":<cached bytes>}`. A watch from a resourceVersion the history no longer holds answers an
ERROR event carrying a 410 Expired Status inside a 200 stream, as the real watch cache does.
"""

from __future__ import annotations

import asyncio
import base64
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from localcluster._internal.apimachinery import status as st
from localcluster._internal.apimachinery.selectors import (
    FieldSelector,
    LabelSelector,
    SelectorError,
    check_field_labels,
    field_values,
    list_error_message,
    parse_field_selector,
    parse_label_selector,
)
from localcluster._internal.apiserver import tables
from localcluster._internal.storage.registry import Resource
from localcluster._internal.storage.store import ADDED, BOOKMARK, ERROR, Entry, Gone, Key, Store

DEFAULT_WATCH_TIMEOUT = 1800.0
IDLE_CHECK = 5.0  # how often an idle watch checks that its client is still connected


@dataclass(frozen=True)
class ListQuery:
    labels: LabelSelector
    fields: FieldSelector
    label_text: str
    field_text: str
    limit: int | None
    continue_key: Key | None
    resource_version: str | None
    timeout: float = DEFAULT_WATCH_TIMEOUT
    bookmarks: bool = False
    send_initial_events: bool = False

    @property
    def selects_all(self) -> bool:
        return not self.labels.requirements and not self.fields.requirements


def _bool(value: str | None) -> bool:
    return value in ("true", "1", "True")


def parse_list_query(resource: Resource, query: Mapping[str, str]) -> ListQuery:
    label_text = query.get("labelSelector", "")
    field_text = query.get("fieldSelector", "")
    try:
        labels = parse_label_selector(label_text)
    except SelectorError as error:
        raise st.bad_request(f"unable to parse requirement: {error}" if "unable to parse" not in str(error)
                             else str(error)) from None
    try:
        fields = parse_field_selector(field_text)
        check_field_labels(resource.plural, fields)
    except SelectorError as error:
        raise st.bad_request(list_error_message(resource.group, resource.version, resource.plural,
                                                label_text, field_text, error)) from None
    limit: int | None = None
    if query.get("limit"):
        try:
            limit = int(query["limit"])
        except ValueError:
            raise st.bad_request(f"limit: Invalid value: {query['limit']!r}: must be an integer") from None
        if limit <= 0:
            limit = None
    continue_key: Key | None = None
    rv = query.get("resourceVersion") or None
    if query.get("continue"):
        try:
            raw = query["continue"]
            token = orjson.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
            continue_key = (str(token["start"][0]), str(token["start"][1]))
        except (ValueError, KeyError, TypeError, IndexError):
            raise st.bad_request("continue key is not valid: incorrect encoded start resourceVersion "
                                 "(version meta.k8s.io/v1)") from None
    if rv is not None and rv != "0":
        try:
            if int(rv) < 0:
                raise ValueError(rv)
        except ValueError:
            raise st.bad_request(f'resourceVersion: Invalid value: "{rv}": must be a non-negative integer'
                                 ) from None
    timeout = DEFAULT_WATCH_TIMEOUT * (1 + random.random())
    if query.get("timeoutSeconds"):
        try:
            timeout = float(int(query["timeoutSeconds"]))
        except ValueError:
            raise st.bad_request("timeoutSeconds must be an integer") from None
    return ListQuery(labels, fields, label_text, field_text, limit, continue_key, rv, timeout,
                     _bool(query.get("allowWatchBookmarks")), _bool(query.get("sendInitialEvents")))


def predicate_of(resource: Resource, query: ListQuery) -> Any:
    if query.selects_all:
        return None
    labels, fields, plural = query.labels, query.fields, resource.plural
    check_fields = bool(fields.requirements)

    def keep(obj: dict[str, Any]) -> bool:
        if not labels.matches(obj["metadata"].get("labels")):
            return False
        return not check_fields or fields.matches(field_values(plural, obj))

    return keep


def select(store: Store, resource: Resource, namespace: str | None, query: ListQuery,
           *, after: Key | None = None) -> list[Entry]:
    entries = store.entries(resource.key, namespace, after=after)
    keep = predicate_of(resource, query)
    if keep is None:
        return entries
    return [e for e in entries if keep(e.obj)]


def _page(store: Store, resource: Resource, namespace: str | None,
          query: ListQuery) -> tuple[list[Entry], bool, int | None]:
    """(this page's entries, whether more follow, how many remain when that is known). A page reads only
    as far as it needs: a limited list costs its page, not the whole collection."""
    keys = store.keys(resource.key, namespace, after=query.continue_key)
    keep = predicate_of(resource, query)
    if query.limit is None:
        entries = list(store.entries_of(resource.key, keys))
        return (entries if keep is None else [e for e in entries if keep(e.obj)]), False, None
    if keep is None:
        entries = list(store.entries_of(resource.key, keys[:query.limit]))
        remaining = len(keys) - len(entries)
        return entries, remaining > 0, remaining
    matched: list[Entry] = []
    for entry in store.entries_of(resource.key, keys):
        if keep(entry.obj):
            if len(matched) == query.limit:
                # with a selector the real server cannot count what remains: no remainingItemCount
                return matched, True, None
            matched.append(entry)
    return matched, False, None


def list_response(store: Store, resource: Resource, namespace: str | None, query: ListQuery) -> bytes:
    entries, more, remaining = _page(store, resource, namespace, query)
    meta: dict[str, Any] = {"resourceVersion": str(store.resource_version)}
    if more:
        last = entries[-1].obj["metadata"]
        token = {"v": "meta.k8s.io/v1", "rv": store.resource_version,
                 "start": [last.get("namespace") or "", last["name"]]}
        meta["continue"] = base64.urlsafe_b64encode(orjson.dumps(token)).decode().rstrip("=")
        if remaining is not None:
            meta["remainingItemCount"] = remaining
    head = orjson.dumps({"kind": f"{resource.kind}List", "apiVersion": resource.api_version,
                         "metadata": meta})
    return head[:-1] + b',"items":[' + b",".join(e.raw for e in entries) + b"]}"


def _line(kind: str, raw: bytes) -> bytes:
    return b'{"type":"' + kind.encode() + b'","object":' + raw + b"}\n"


async def serve_watch(request: web.Request, store: Store, resource: Resource, namespace: str | None,
                      query: ListQuery, *, bookmark_interval: float) -> web.StreamResponse:
    as_table = tables.wants_table(request.headers.get("Accept", ""))
    keep = predicate_of(resource, query)
    rv = query.resource_version
    since = int(rv) if rv not in (None, "0") and not query.send_initial_events else None
    response = web.StreamResponse(status=200, headers={"Content-Type": "application/json",
                                                       "Cache-Control": "no-cache, private"})
    response.enable_chunked_encoding()
    try:
        watcher = store.watch(resource.key, namespace=namespace, predicate=keep, since=since)
    except Gone as error:
        await response.prepare(request)
        await response.write(_line(ERROR, orjson.dumps(st.gone(str(error)).body())))
        await response.write_eof()
        return response

    def encode(kind: str, entry: Entry) -> bytes:
        if as_table:
            return _line(kind, orjson.dumps(tables.table(resource, [entry.obj], store.resource_version,
                                                         include_object="Object")))
        return _line(kind, entry.raw)

    def bookmark(initial_end: bool = False) -> bytes:
        meta: dict[str, Any] = {"resourceVersion": str(store.resource_version)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return _line(BOOKMARK, orjson.dumps({"kind": resource.kind, "apiVersion": resource.api_version,
                                             "metadata": meta}))

    try:
        # initial state is taken in the same tick the watcher registered: no event can fall between them
        initial = select(store, resource, namespace, query) if since is None and rv != "now" and (
            rv is None or rv == "0" or query.send_initial_events) else []
        await response.prepare(request)
        if initial:
            chunk = [encode(ADDED, e) for e in initial]
            for start in range(0, len(chunk), 500):
                await response.write(b"".join(chunk[start:start + 500]))
        if query.send_initial_events and query.bookmarks:
            await response.write(bookmark(initial_end=True))
        deadline = time.monotonic() + query.timeout
        queue = watcher.queue
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            wait = min(left, bookmark_interval if query.bookmarks else IDLE_CHECK)
            try:
                item = await asyncio.wait_for(queue.get(), wait)
            except TimeoutError:
                transport = request.transport
                if transport is None or transport.is_closing():
                    break  # the client went away without a word: stop holding its watch
                if query.bookmarks and time.monotonic() < deadline and queue.empty():
                    await response.write(bookmark())
                continue
            if item is None:
                break
            lines = [encode(*item)]
            while not queue.empty() and len(lines) < 1000:
                more = queue.get_nowait()
                if more is None:
                    watcher.closed = True
                    break
                lines.append(encode(*more))
            await response.write(b"".join(lines))
            if watcher.closed and queue.empty():
                break
        await response.write_eof()
    except ConnectionResetError:
        pass
    finally:
        store.unwatch(watcher)
    return response
