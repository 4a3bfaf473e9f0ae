"""Label and field selectors as the API server parses and matches them.

How the API server calls this:
    labels = parse_label_selector(query.get("labelSelector", ""))       # raises SelectorError
    fields = parse_field_selector(query.get("fieldSelector", ""))       # raises SelectorError
    check_field_labels("pods", fields)                                  # raises SelectorError
    keep = [o for o in objs if labels.matches(labels_of(o)) and fields.matches(field_values("pods", o))]
A `SelectorError` becomes a 400 BadRequest Status whose message is `str(error)`. For an unsupported field
label, wrap it the way the real list handler does: `list_error_message("", "v1", "pods", ls, fs, error)`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from localcluster._internal.apimachinery.names import label_key_errors, label_value_errors


class SelectorError(ValueError):
    """A selector the real API server would refuse with 400 BadRequest; str() is its message."""


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # one of: =, ==, !=, in, notin, exists, !, gt, lt
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        op = self.operator
        if op in ("=", "==", "in"):
            return present and value in self.values
        if op in ("!=", "notin"):
            return not present or value not in self.values
        if op == "exists":
            return present
        if op == "!":
            return not present
        # gt / lt: the label must hold an integer (the real parser checks the bound is one too)
        try:
            number = int(value or "")
        except ValueError:
            return False
        bound = int(self.values[0])
        return number > bound if op == "gt" else number < bound


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        found = labels or {}
        return all(r.matches(found) for r in self.requirements)


_TOKEN = re.compile(r"\s*(!=|==|=|!|\(|\)|,|>|<|[^\s!=(),<>]+)")


def _tokens(text: str) -> list[str]:
    # every non-space character belongs to some token, so findall loses nothing
    return list(_TOKEN.findall(text))


def _check_key(key: str) -> None:
    errors = label_key_errors(key)
    if errors:
        raise SelectorError(f'unable to parse requirement: key: Invalid value: "{key}": {errors[0]}')


def _check_values(key: str, values: list[str]) -> None:
    for i, value in enumerate(values):
        errors = label_value_errors(value)
        if errors:
            raise SelectorError(
                f'unable to parse requirement: values[{i}][{key}]: Invalid value: "{value}": {errors[0]}')


_SPECIAL = ("", ",", "(", ")", "=", "==", "!=", "!", ">", "<")


def _parse_values(toks: list[str]) -> tuple[tuple[str, ...], int]:
    """The value set after `in (` / `notin (`, sorted like the real sets.String, and the tokens used."""
    values: set[str] = set()
    at = 0

    def peek() -> str:
        return toks[at] if at < len(toks) else ""

    if peek() == ")":
        return ("",), 1  # "()" is the set of the empty value
    if peek() not in (",",) and peek() in _SPECIAL:
        raise SelectorError(f"found '{peek()}', expected: ',', ')' or identifier")
    while True:
        tok = peek()
        at += 1
        if tok == ",":
            values.add("")
            if peek() == ")":
                at += 1
                break
            continue
        if tok in _SPECIAL:
            raise SelectorError(f"found '{tok}', expected: ',', or identifier")
        values.add(tok)
        if peek() == ")":
            at += 1
            break
        if peek() != ",":
            raise SelectorError(f"found '{peek()}', expected: ',' or ')'")
        at += 1
        if peek() == ")":
            values.add("")
            at += 1
            break
    return tuple(sorted(values)), at


def parse_label_selector(text: str) -> LabelSelector:
    """Parse `a=b,c!=d,e in (f,g),h notin (i),j,!k,l>3` into a selector; empty text selects everything."""
    toks = _tokens(text)
    reqs: list[Requirement] = []
    i = 0

    def take() -> str:
        nonlocal i
        tok = toks[i] if i < len(toks) else ""
        i += 1
        return tok

    while i < len(toks):
        tok = take()
        if tok == "!":
            key = take()
            if key in _SPECIAL:
                raise SelectorError(f"found '{key}', expected: identifier after '!'")
            _check_key(key)
            reqs.append(Requirement(key, "!"))
        else:
            key = tok
            if key in _SPECIAL:
                raise SelectorError(f"found '{key}', expected: !, identifier, or 'end of string'")
            _check_key(key)
            op = toks[i] if i < len(toks) else ""
            if op in ("", ","):
                reqs.append(Requirement(key, "exists"))
            elif op in ("=", "==", "!="):
                i += 1
                value = toks[i] if i < len(toks) and toks[i] not in _SPECIAL else ""
                if value:
                    i += 1
                _check_values(key, [value])
                reqs.append(Requirement(key, op, (value,)))
            elif op in (">", "<"):
                i += 1
                value = take()
                if not re.fullmatch(r"-?\d+", value):
                    raise SelectorError(f'unable to parse requirement: values[0]: Invalid value: "{value}": '
                                        "for 'Gt', 'Lt' operators, the value must be an integer")
                reqs.append(Requirement(key, "gt" if op == ">" else "lt", (value,)))
            elif op in ("in", "notin"):
                i += 1
                opening = take()
                if opening != "(":
                    raise SelectorError(f"found '{opening}' expected: '('")
                values, used = _parse_values(toks[i:])
                i += used
                _check_values(key, list(values))
                reqs.append(Requirement(key, op, values))
            else:
                raise SelectorError(f"found '{op}', expected: in, notin, =, ==, !=, gt, lt")
        if i < len(toks):
            sep = take()
            if sep != ",":
                raise SelectorError(f"found '{sep}', expected: ',' or 'end of string'")
            after = toks[i] if i < len(toks) else ""
            if after in _SPECIAL and after != "!":
                raise SelectorError(f"found '{after}', expected: identifier after ','")
    return LabelSelector(tuple(reqs))


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    operator: str  # "=" (also for "==") or "!="
    value: str


@dataclass(frozen=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...] = ()

    def matches(self, fields: Mapping[str, str]) -> bool:
        for req in self.requirements:
            equal = fields.get(req.field, "") == req.value
            if equal != (req.operator == "="):
                return False
        return True


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts, current, escaped = [], "", False
    for char in text:
        if escaped:
            current += "\\" + char
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == sep:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current + ("\\" if escaped else ""))
    return parts


def _unescape(value: str) -> str:
    out, i = "", 0
    while i < len(value):
        if value[i] == "\\":
            if i + 1 >= len(value) or value[i + 1] not in "\\,=":
                raise SelectorError("invalid field selector: invalid escape sequence")
            out += value[i + 1]
            i += 2
        else:
            out += value[i]
            i += 1
    return out


def parse_field_selector(text: str) -> FieldSelector:
    """Parse `metadata.name=x,status.phase!=Running` (also `==`); backslash escapes `,`, `=` and `\\`."""
    reqs: list[FieldRequirement] = []
    for part in _split_unescaped(text, ","):
        if not part:
            continue
        for op in ("!=", "==", "="):
            pieces = part.split(op, 1)
            if len(pieces) == 2:
                reqs.append(FieldRequirement(pieces[0], "!=" if op == "!=" else "=", _unescape(pieces[1])))
                break
        else:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{part}'")
    return FieldSelector(tuple(reqs))


def _get(obj: Mapping[str, Any], *path: str) -> str:
    node: Any = obj
    for key in path:
        if not isinstance(node, Mapping):
            return ""
        node = node.get(key)
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


# field label -> path into the object, per resource (the real server's ToSelectableFields)
_FIELDS: dict[str, dict[str, tuple[str, ...]]] = {
    "pods": {"spec.nodeName": ("spec", "nodeName"), "spec.restartPolicy": ("spec", "restartPolicy"),
             "spec.schedulerName": ("spec", "schedulerName"),
             "spec.serviceAccountName": ("spec", "serviceAccountName"),
             "spec.hostNetwork": ("spec", "hostNetwork"), "status.phase": ("status", "phase"),
             "status.podIP": ("status", "podIP"),
             "status.nominatedNodeName": ("status", "nominatedNodeName")},
    "events": {f"involvedObject.{k}": ("involvedObject", k) for k in
               ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")}
    | {"reason": ("reason",), "reportingComponent": ("reportingComponent",),
       "source": ("source", "component"), "type": ("type",)},
    "secrets": {"type": ("type",)},
    "nodes": {"spec.unschedulable": ("spec", "unschedulable")},
    "namespaces": {"status.phase": ("status", "phase")},
    "jobs": {"status.successful": ("status", "succeeded")},
}
CLUSTER_SCOPED = frozenset({"nodes", "namespaces", "clusterroles", "clusterrolebindings", "priorityclasses"})


def supported_field_labels(resource: str) -> frozenset[str]:
    base = {"metadata.name"} if resource in CLUSTER_SCOPED else {"metadata.name", "metadata.namespace"}
    return frozenset(base | set(_FIELDS.get(resource, {})))


def check_field_labels(resource: str, selector: FieldSelector) -> None:
    """Raise SelectorError(`field label not supported: X`) for a field the resource cannot be selected by."""
    allowed = supported_field_labels(resource)
    for req in selector.requirements:
        if req.field not in allowed:
            raise SelectorError(f"field label not supported: {req.field}")


def field_values(resource: str, obj: Mapping[str, Any]) -> dict[str, str]:
    """The selectable fields of one object, as strings (missing fields are "")."""
    out = {"metadata.name": _get(obj, "metadata", "name")}
    if resource not in CLUSTER_SCOPED:
        out["metadata.namespace"] = _get(obj, "metadata", "namespace")
    for label, path in _FIELDS.get(resource, {}).items():
        value = _get(obj, *path)
        if label == "spec.unschedulable" and value == "":
            value = "false"
        if label == "status.successful" and value == "":
            value = "0"
        out[label] = value
    return out


def list_error_message(group: str, version: str, resource: str, label_selector: str, field_selector: str,
                       error: Exception) -> str:
    """The real list handler's 400 message for a field selector it cannot convert."""
    gvr = f"{group}/{version}, Resource={resource}"
    return (f'Unable to find "{gvr}" that match label selector "{label_selector}", '
            f'field selector "{field_selector}": {error}')
