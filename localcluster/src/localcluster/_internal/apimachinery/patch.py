"""The three patch types the API server accepts: JSON merge (RFC 7386), strategic merge, JSON patch (6902).

How the API server calls this (bodies.apply_patch):
    new = merge_patch(current, patch)                         # application/merge-patch+json
    new = strategic_merge_patch(current, patch, kind="Pod")   # application/strategic-merge-patch+json
    new = json_patch(current, patch)                          # application/json-patch+json
    except PatchError as e: answer e.status() (HTTP e.code; str(e) is the Status message)
Inputs are never modified. Strategic merge follows k8s.io/apimachinery/pkg/util/strategicpatch as the server
applies it: lists of containers/env/ports/volumes/volumeMounts/... merge by their keys, new items come before
the live-only ones the way mergeSortedSlice puts them, `$patch: replace|delete`, `$retainKeys`,
`$setElementOrder/<list>` and `$deleteFromPrimitiveList/<list>` are honoured.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

GENERIC_422 = "the server rejected our request due to an error in our request"


class PatchError(Exception):
    """A patch the real server refuses: `code` 400 (malformed) or 422 (does not apply); `detail` the cause."""

    def __init__(self, message: str, *, code: int = 400, detail: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.detail = detail

    def status(self) -> dict[str, Any]:
        reason = "Invalid" if self.code == 422 else "BadRequest"
        body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                "message": str(self), "reason": reason, "code": self.code}
        if self.detail:
            body["details"] = {"causes": [{"reason": "UnexpectedServerResponse", "message": self.detail}]}
        return body


# ---- JSON merge patch ----
def merge_patch(current: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, null deletes, anything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(copy.deepcopy(current)) if isinstance(current, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


# ---- strategic merge patch ----
@dataclass(frozen=True)
class Field:
    """Patch metadata of one struct field: `strategy` "merge" for merge lists; `key` the patchMergeKey."""

    strategy: str = ""
    key: str = ""
    schema: Mapping[str, Field] | None = None


_META = {"metadata": Field(schema={"finalizers": Field("merge"), "ownerReferences": Field("merge", "uid")})}
_CONTAINER = {"ports": Field("merge", "containerPort"), "env": Field("merge", "name"),
              "volumeMounts": Field("merge", "mountPath"), "volumeDevices": Field("merge", "devicePath")}
_POD_SPEC = {"volumes": Field("merge", "name"), "containers": Field("merge", "name", _CONTAINER),
             "initContainers": Field("merge", "name", _CONTAINER),
             "ephemeralContainers": Field("merge", "name", _CONTAINER),
             "imagePullSecrets": Field("merge", "name"), "hostAliases": Field("merge", "ip"),
             "topologySpreadConstraints": Field("merge", "topologyKey"),
             "resourceClaims": Field("merge", "name"), "schedulingGates": Field("merge", "name")}
_POD_STATUS = {"conditions": Field("merge", "type"), "podIPs": Field("merge", "ip"),
               "hostIPs": Field("merge", "ip")}
SCHEMAS: dict[str, Mapping[str, Field]] = {
    "Pod": {**_META, "spec": Field(schema=_POD_SPEC), "status": Field(schema=_POD_STATUS)},
    "Node": {**_META, "spec": Field(schema={"podCIDRs": Field("merge")}),
             "status": Field(schema={"conditions": Field("merge", "type"),
                                     "addresses": Field("merge", "type")})},
    "Service": {**_META, "spec": Field(schema={"ports": Field("merge", "port")})},
    "ServiceAccount": {**_META, "secrets": Field("merge", "name"),
                       "imagePullSecrets": Field("merge", "name")},
    "Namespace": {**_META, "status": Field(schema={"conditions": Field("merge", "type")})},
    "Job": {**_META, "spec": Field(schema={"template": Field(schema={"spec": Field(schema=_POD_SPEC)})}),
            "status": Field(schema={"conditions": Field("merge", "type")})},
    "PodDisruptionBudget": {**_META, "spec": Field(schema={"selector": Field("replace")}),
                            "status": Field(schema={"conditions": Field("merge", "type")})},
}


def _clean(value: Any) -> Any:
    """A value added wholesale, without the directives that only make sense inside a patch."""
    if isinstance(value, Mapping):
        # nulls in an added map mean "absent" once the server decodes the object
        return {k: _clean(v) for k, v in value.items() if not str(k).startswith("$") and v is not None}
    if isinstance(value, list):
        return [_clean(v) for v in value if not (isinstance(v, Mapping) and "$patch" in v)]
    return value


def _key_of(item: Any, key: str) -> Any:
    return item.get(key) if key and isinstance(item, Mapping) else item


def _index(order: list[Any], item: Any, key: str) -> int:
    wanted = _key_of(item, key)
    for i, other in enumerate(order):
        if _key_of(other, key) == wanted:
            return i
    return -1


def _sorted_by(items: list[Any], order: list[Any], key: str) -> list[Any]:
    return sorted(items, key=lambda item: _index(order, item, key))


def _normalize(patch_items: list[Any], server_only: list[Any], patch_order: list[Any],
               server_order: list[Any], key: str) -> list[Any]:
    """normalizeElementOrder + mergeSortedSlice: interleave by the live order, patch items win ties."""
    right = _sorted_by(patch_items, patch_order, key)
    left = _sorted_by(server_only, server_order, key)
    out: list[Any] = []
    i = j = 0
    while i < len(left) or j < len(right):
        if j >= len(right):
            out.append(left[i])
            i += 1
        elif i >= len(left):
            out.append(right[j])
            j += 1
        else:
            li, ri = _index(server_order, left[i], key), _index(server_order, right[j], key)
            if li >= 0 and ri >= 0 and li < ri:
                out.append(left[i])
                i += 1
            else:
                out.append(right[j])
                j += 1
    return out


def _partition(merged: list[Any], by: list[Any], key: str) -> tuple[list[Any], list[Any]]:
    wanted = [_key_of(item, key) for item in by]
    inside = [item for item in merged if _key_of(item, key) in wanted]
    outside = [item for item in merged if _key_of(item, key) not in wanted]
    return inside, outside


def _merge_list(original: list[Any], patch: list[Any], field: Field) -> list[Any]:
    if not original and not patch:
        return original
    kinds = {type(v) for v in [*original, *patch]}
    if any(k is list for k in kinds):
        raise PatchError("lists of lists are not supported", code=422)
    if len(kinds) > 1:
        raise PatchError(f"list element types are not identical: {original} {patch}")
    if dict not in kinds:
        merged = list(dict.fromkeys([*original, *patch])) if all(
            isinstance(v, str | int | float | bool) for v in [*original, *patch]) else original + patch
        inside, outside = _partition(merged, patch, "")
        return _normalize(inside, outside, patch, original, "")
    key = field.key
    if not key:
        raise PatchError("cannot merge lists without merge key")
    live = [copy.deepcopy(v) for v in original]
    plain: list[Any] = []
    replace = False
    for item in patch:
        directive = item.get("$patch")
        if directive is None:
            plain.append(item)
        elif directive == "delete":
            if key not in item:
                raise PatchError(f"map: {item} does not contain declared merge key: {key}")
            live = [v for v in live if v.get(key) != item[key]]
        elif directive == "replace":
            replace = True
        elif directive == "merge":
            raise PatchError("merging lists cannot yet be specified in the patch")
        else:
            raise PatchError(f"Unknown patch type: {directive} in map: {item}")
    if replace:
        return [_clean(v) for v in plain]
    for item in plain:
        if key not in item:
            raise PatchError(f"map: {item} does not contain declared merge key: {key}")
        at = next((i for i, v in enumerate(live) if v.get(key) == item[key]), None)
        if at is None:
            live.append(_clean(item))
        else:
            live[at] = _merge_map(live[at], item, field.schema or {})
    inside, outside = _partition(live, plain, key)
    return _normalize(inside, outside, plain, original, key)


def _retain_keys(original: dict[str, Any], patch: dict[str, Any]) -> None:
    keep = patch.pop("$retainKeys")
    if not isinstance(keep, list):
        raise PatchError("invalid patch format of retainKeys")
    for key, value in patch.items():
        if value is not None and not key.startswith("$") and key not in keep:
            raise PatchError("patch content doesn't match retainKeys list", code=422)
    for key in list(original):
        if key not in keep:
            del original[key]


def _set_element_order(original: dict[str, Any], patch: dict[str, Any], schema: Mapping[str, Field]) -> None:
    for directive in [k for k in patch if k.startswith("$setElementOrder/")]:
        order = patch.pop(directive)
        name = directive.split("/", 1)[1]
        if not isinstance(order, list):
            raise PatchError("invalid patch format of setElementOrder list")
        field = schema.get(name, Field())
        in_original, in_patch = name in original, name in patch
        if not in_original and not in_patch:
            continue
        if in_original and in_patch:
            merged = _merge_list(original[name], patch.pop(name), field)
        elif in_original:
            merged = original[name]
        else:
            merged = _clean(patch.pop(name))
        inside, outside = _partition(merged, order, field.key)
        original[name] = _normalize(inside, outside, order, original.get(name) or [], field.key)


def _merge_map(original: Mapping[str, Any] | None, patch: Mapping[str, Any],
               schema: Mapping[str, Field]) -> dict[str, Any]:
    work = dict(patch)
    if "$patch" in work:
        directive = work.pop("$patch")
        if directive == "replace":
            return _clean(work)  # type: ignore[no-any-return]
        if directive == "delete":
            return {}
        raise PatchError(f"Unknown patch type: {directive} in map: {dict(patch)}")
    out = copy.deepcopy(dict(original or {}))
    if "$retainKeys" in work:
        _retain_keys(out, work)
    _set_element_order(out, work, schema)
    for key, value in work.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            key = key.split("/", 1)[1]
            if isinstance(out.get(key), list) and isinstance(value, list):
                out[key] = [v for v in out[key] if v not in value]
            continue
        if value is None:
            out.pop(key, None)
            continue
        field = schema.get(key, Field())
        if key not in out or type(out[key]) is not type(value):
            out[key] = _clean(value)
        elif isinstance(value, dict):
            out[key] = _clean(value) if field.strategy == "replace" else _merge_map(out[key], value,
                                                                                     field.schema or {})
        elif isinstance(value, list):
            out[key] = _merge_list(out[key], value, field) if field.strategy == "merge" else _clean(value)
        else:
            out[key] = value
    return out


def strategic_merge_patch(current: Mapping[str, Any], patch: Any, *, kind: str) -> dict[str, Any]:
    """Apply a strategic merge patch to an object of `kind` (unknown kinds merge maps and replace lists)."""
    if not isinstance(patch, Mapping):
        raise PatchError("invalid JSON document")
    return _merge_map(current, patch, SCHEMAS.get(kind, _META))


# ---- JSON patch ----
def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f'invalid JSON pointer: "{path}"', code=422)
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str], path: str, op: str) -> Any:
    node = doc
    for part in parts[:-1]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise _fail(f'{op} operation does not apply: doc is missing path: "{path}": missing value')
    return node


def _fail(detail: str) -> PatchError:
    return PatchError(GENERIC_422, code=422, detail=detail)


def _list_index(node: list[Any], part: str, *, adding: bool) -> int:
    if adding and part == "-":
        return len(node)
    if not part.lstrip("-").isdigit():
        raise _fail(f"Unable to access invalid index: {part}: invalid index referenced")
    index = int(part)
    limit = len(node) if adding else len(node) - 1
    if index < 0 or index > limit:
        raise _fail(f"Unable to access invalid index: {index}: invalid index referenced")
    return index


def _get(doc: Any, path: str, op: str) -> Any:
    node = doc
    for part in _pointer(path):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise _fail(f'{op} operation does not apply: doc is missing path: "{path}": missing value')
    return node


def _remove(doc: Any, path: str, op: str = "remove") -> Any:
    parts = _pointer(path)
    if not parts:
        raise _fail("unable to remove the whole document")
    parent = _parent(doc, parts, path, op)
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _fail(f"Unable to remove nonexistent key: {last}: missing value")
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_list_index(parent, last, adding=False))
    raise _fail(f'{op} operation does not apply: doc is missing path: "{path}": missing value')


def _add(doc: Any, path: str, value: Any, op: str = "add") -> Any:
    parts = _pointer(path)
    if not parts:
        return copy.deepcopy(value)
    parent = _parent(doc, parts, path, op)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = copy.deepcopy(value)
    elif isinstance(parent, list):
        parent.insert(_list_index(parent, last, adding=True), copy.deepcopy(value))
    else:
        raise _fail(f'{op} operation does not apply: doc is missing path: "{path}": missing value')
    return doc


def json_patch(current: Any, patch: Any) -> Any:
    """RFC 6902: add, remove, replace, move, copy, test, applied in order to a copy of `current`."""
    if not isinstance(patch, list):
        raise PatchError("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    doc = copy.deepcopy(current)
    for operation in patch:
        if not isinstance(operation, Mapping) or "op" not in operation:
            raise PatchError("Unexpected kind: unknown", code=422)
        op, path = operation["op"], operation.get("path")
        if not isinstance(path, str):
            raise _fail(f"{op} operation missing path")
        if op in ("add", "replace", "test") and "value" not in operation:
            raise _fail(f"{op} operation missing value")
        if op == "add":
            doc = _add(doc, path, operation["value"])
        elif op == "remove":
            _remove(doc, path)
        elif op == "replace":
            parts = _pointer(path)
            if not parts:
                doc = copy.deepcopy(operation["value"])
                continue
            parent = _parent(doc, parts, path, "replace")
            if isinstance(parent, dict) and parts[-1] not in parent:
                raise _fail(f"replace operation does not apply: doc is missing key: {path}: missing value")
            _remove(doc, path, "replace")
            doc = _add(doc, path, operation["value"], "replace")
        elif op in ("move", "copy"):
            source = operation.get("from")
            if not isinstance(source, str):
                raise _fail(f"{op} operation missing from")
            value = _remove(doc, source, op) if op == "move" else copy.deepcopy(_get(doc, source, op))
            doc = _add(doc, path, value, op)
        elif op == "test":
            try:
                found = _get(doc, path, "test")
            except PatchError:
                found = None
            if found != operation["value"]:
                raise _fail(f"testing value {path} failed: test failed")
        else:
            raise _fail(f"Unexpected kind: {op}")
    return doc
