"""Decoding the Kubernetes protobuf request bodies kubectl's typed clients send (`kubectl auth can-i`,
`create token`, `create namespace|secret|configmap|serviceaccount|role|...`, `drain`).

kubectl 1.37 encodes request bodies of built-in types as `application/vnd.kubernetes.protobuf` and, unlike
for CBOR, never falls back to JSON, so the server must read them. Answers stay JSON (kubectl accepts both).
Only the message types listed in SCHEMAS are understood; their field numbers are those of k8s.io/api's
generated.proto.
A body of another kind answers 415 as a server without that type would.
"""

from __future__ import annotations

import base64
import datetime
from typing import Any

MAGIC = b"k8s\x00"
Schema = dict[int, tuple[str, str, Any]]  # field number -> (json name, type, nested schema or None)


class ProtobufError(ValueError):
    pass


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ProtobufError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise ProtobufError("varint too long")


def _fields(data: bytes) -> list[tuple[int, int, Any]]:
    out: list[tuple[int, int, Any]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise ProtobufError("truncated field")
            value, pos = data[pos:pos + length], pos + length
        elif wire == 1:
            value, pos = data[pos:pos + 8], pos + 8
        elif wire == 5:
            value, pos = data[pos:pos + 4], pos + 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")
        out.append((number, wire, value))
    return out


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _scalar(kind: str, value: Any) -> Any:
    if kind == "string":
        return bytes(value).decode("utf-8")
    if kind == "bytes":
        return base64.b64encode(bytes(value)).decode()
    if kind == "int":
        return _signed(int(value))
    if kind == "bool":
        return bool(value)
    raise ProtobufError(f"unknown scalar type {kind}")


def decode(schema: Schema, data: bytes) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for number, _wire, value in _fields(data):
        if number not in schema:
            continue
        name, kind, nested = schema[number]
        if kind == "message":
            out[name] = decode(nested, value)
        elif kind == "time":
            parts = decode({1: ("seconds", "int", None)}, value)
            out[name] = datetime.datetime.fromtimestamp(parts.get("seconds", 0), datetime.UTC).strftime(
                "%Y-%m-%dT%H:%M:%SZ")
        elif kind == "quantity":
            out[name] = decode({1: ("string", "string", None)}, value).get("string", "")
        elif kind.startswith("repeated:"):
            item = kind.split(":", 1)[1]
            element = decode(nested, value) if item == "message" else _scalar(item, value)
            out.setdefault(name, []).append(element)
        elif kind.startswith("map:"):
            item = kind.split(":", 1)[1]
            entry = {n: v for n, _w, v in _fields(value)}
            key = _scalar("string", entry.get(1, b""))
            raw = entry.get(2, b"")
            out.setdefault(name, {})[key] = decode(nested, raw) if item == "message" else _scalar(item, raw)
        else:
            scalar = _scalar(kind, value)
            # proto2 writes unset Go strings as "", which JSON would have omitted
            if scalar != "" or kind != "string":
                out[name] = scalar
    return out


def _s(name: str) -> tuple[str, str, None]:
    return (name, "string", None)


def _rs(name: str) -> tuple[str, str, None]:
    return (name, "repeated:string", None)


OWNER_REFERENCE: Schema = {1: _s("kind"), 3: _s("name"), 4: _s("uid"), 5: _s("apiVersion"),
                           6: ("controller", "bool", None), 7: ("blockOwnerDeletion", "bool", None)}
OBJECT_META: Schema = {1: _s("name"), 2: _s("generateName"), 3: _s("namespace"), 5: _s("uid"),
                       6: _s("resourceVersion"),
                       11: ("labels", "map:string", None), 12: ("annotations", "map:string", None),
                       13: ("ownerReferences", "repeated:message", OWNER_REFERENCE), 14: _rs("finalizers")}
OBJECT_REFERENCE: Schema = {1: _s("kind"), 2: _s("namespace"), 3: _s("name"), 4: _s("uid"),
                            5: _s("apiVersion"), 6: _s("resourceVersion"), 7: _s("fieldPath")}
POLICY_RULE: Schema = {1: _rs("verbs"), 2: _rs("apiGroups"), 3: _rs("resources"), 4: _rs("resourceNames"),
                       5: _rs("nonResourceURLs")}
SUBJECT: Schema = {1: _s("kind"), 2: _s("apiGroup"), 3: _s("name"), 4: _s("namespace")}
ROLE_REF: Schema = {1: _s("apiGroup"), 2: _s("kind"), 3: _s("name")}
BINDING: Schema = {1: ("metadata", "message", OBJECT_META), 2: ("subjects", "repeated:message", SUBJECT),
                   3: ("roleRef", "message", ROLE_REF)}
RESOURCE_ATTRIBUTES: Schema = {1: _s("namespace"), 2: _s("verb"), 3: _s("group"), 4: _s("version"),
                               5: _s("resource"), 6: _s("subresource"), 7: _s("name")}
NON_RESOURCE_ATTRIBUTES: Schema = {1: _s("path"), 2: _s("verb")}
ACCESS_SPEC: Schema = {1: ("resourceAttributes", "message", RESOURCE_ATTRIBUTES),
                       2: ("nonResourceAttributes", "message", NON_RESOURCE_ATTRIBUTES)}
SUBJECT_ACCESS_SPEC: Schema = {**ACCESS_SPEC, 3: _s("user"), 4: _rs("groups"),
                               5: ("extra", "map:message", {1: _rs("items")}), 6: _s("uid")}
DELETE_OPTIONS: Schema = {1: ("gracePeriodSeconds", "int", None),
                          2: ("preconditions", "message", {1: _s("uid"), 2: _s("resourceVersion")}),
                          3: ("orphanDependents", "bool", None), 4: _s("propagationPolicy"), 5: _rs("dryRun")}
_META = ("metadata", "message", OBJECT_META)

SCHEMAS: dict[str, Schema] = {
    "Namespace": {1: _META, 2: ("spec", "message", {1: _rs("finalizers")})},
    "Secret": {1: _META, 2: ("data", "map:bytes", None), 3: _s("type"), 4: ("stringData", "map:string", None),
               5: ("immutable", "bool", None)},
    "ConfigMap": {1: _META, 2: ("data", "map:string", None), 3: ("binaryData", "map:bytes", None),
                  4: ("immutable", "bool", None)},
    "ServiceAccount": {1: _META, 2: ("secrets", "repeated:message", OBJECT_REFERENCE),
                       3: ("imagePullSecrets", "repeated:message", {1: _s("name")}),
                       4: ("automountServiceAccountToken", "bool", None)},
    "Role": {1: _META, 2: ("rules", "repeated:message", POLICY_RULE)},
    "ClusterRole": {1: _META, 2: ("rules", "repeated:message", POLICY_RULE)},
    "RoleBinding": BINDING,
    "ClusterRoleBinding": BINDING,
    "TokenRequest": {1: _META, 2: ("spec", "message", {
        1: _rs("audiences"), 4: ("expirationSeconds", "int", None),
        3: ("boundObjectRef", "message", {1: _s("kind"), 2: _s("apiVersion"), 3: _s("name"),
                                          4: _s("uid")})})},
    "SelfSubjectAccessReview": {1: _META, 2: ("spec", "message", ACCESS_SPEC)},
    "SubjectAccessReview": {1: _META, 2: ("spec", "message", SUBJECT_ACCESS_SPEC)},
    "LocalSubjectAccessReview": {1: _META, 2: ("spec", "message", SUBJECT_ACCESS_SPEC)},
    "SelfSubjectRulesReview": {1: _META, 2: ("spec", "message", {1: _s("namespace")})},
    "SelfSubjectReview": {1: _META},
    "Eviction": {1: _META, 2: ("deleteOptions", "message", DELETE_OPTIONS)},
    "DeleteOptions": DELETE_OPTIONS,
    "Binding": {1: _META, 2: ("target", "message", OBJECT_REFERENCE)},
}


def decode_object(data: bytes) -> dict[str, Any] | None:
    """The JSON form of a protobuf-encoded object; None when its kind is not one this server reads."""
    if not data.startswith(MAGIC):
        raise ProtobufError("missing the k8s protobuf envelope prefix")
    envelope = decode({1: ("typeMeta", "message", {1: _s("apiVersion"), 2: _s("kind")}),
                       2: ("raw", "bytes", None), 4: _s("contentType")}, data[len(MAGIC):])
    type_meta = envelope.get("typeMeta") or {}
    kind = type_meta.get("kind", "")
    schema = SCHEMAS.get(kind)
    if schema is None:
        return None
    obj = decode(schema, base64.b64decode(envelope.get("raw", "")))
    obj["kind"] = kind
    if type_meta.get("apiVersion"):
        obj["apiVersion"] = type_meta["apiVersion"]
    return obj
