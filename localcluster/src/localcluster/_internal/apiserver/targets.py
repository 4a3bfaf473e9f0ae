"""What a request's path names: the resource, namespace, name and subresource (as the real server's router
parses `/api/v1/namespaces/NS/pods/NAME/log` and `/apis/GROUP/VERSION/...`), the verb, and the stored object.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from localcluster._internal.apimachinery import status as st
from localcluster._internal.storage import registry
from localcluster._internal.storage.registry import Resource
from localcluster._internal.storage.store import Store


@dataclass(frozen=True)
class Target:
    """A parsed resource path."""

    resource: Resource
    namespace: str | None
    name: str | None
    subresource: str | None
    watch_path: bool  # the legacy /api/v1/watch/... form


def parse_target(path: str, served: Collection[str] = ()) -> Target | None:
    """None when the path names no resource this server knows (a 404); `served`: the doubles whose kinds
    the cluster serves (registry.py)."""
    parts = [p for p in path.split("/") if p]
    if len(parts) < 3:
        return None
    if parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif parts[0] == "apis" and len(parts) >= 4:
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    if not registry.group_known(group, version, served):
        return None
    watch_path = bool(rest) and rest[0] == "watch"
    if watch_path:
        rest = rest[1:]
    namespace: str | None = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        inner = registry.lookup(group, version, rest[2], served)
        if inner is not None and inner.namespaced:
            namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        return None
    resource = registry.lookup(group, version, rest[0], served)
    if resource is None or (resource.namespaced and namespace is None and len(rest) > 1):
        return None
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if sub is not None and sub not in resource.subresources:
        return None
    return Target(resource, namespace, name, sub, watch_path)


def verb_of(method: str, target: Target, query: dict[str, str]) -> str:
    watching = target.watch_path or query.get("watch") in ("true", "1")
    if method in ("GET", "HEAD"):
        if target.name is None:
            return "watch" if watching else "list"
        return "watch" if watching else "get"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "delete" if target.name is not None else "deletecollection"
    raise st.method_not_allowed()


def stored(store: Store, target: Target) -> dict[str, Any]:
    """The object the target names, or the real 404."""
    assert target.name is not None
    obj = store.get(target.resource.key, target.namespace, target.name)
    if obj is None:
        raise st.not_found(target.resource.plural, target.name, target.resource.group)
    return obj
