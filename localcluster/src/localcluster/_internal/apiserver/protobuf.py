"""Decoding the Kubernetes protobuf request bodies kubectl's typed clients send (`kubectl auth can-i`,
`create token|namespace|secret|configmap|serviceaccount|role|job|quota|service|poddisruptionbudget|
priorityclass`, `drain`, `debug --copy-to`).

kubectl 1.37 encodes request bodies of built-in types as `application/vnd.kubernetes.protobuf` and, unlike
for CBOR, never falls back to JSON, so the server must read them. Answers stay JSON (kubectl accepts both).
The wire format is decoded in general (varints, length-delimited fields, packed repeated integers, the
runtime.Unknown envelope behind the `k8s\\0` magic); what each field is comes from protoschema.py, the
field numbers of k8s.io/api's generated.proto. A body of another kind answers 415 as a server without that
type would; a field the schema lacks is refused rather than dropped, unless it holds its Go default.
"""

from __future__ import annotations

import base64
import datetime
import struct
from typing import Any

from localcluster._internal.apiserver.protoschema import KINDS, MESSAGES, SCALARS

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


def _zero(wire: int, value: Any) -> bool:
    """The wire value of a Go default (0, false, "", a message of defaults only, as a status nobody filled
    in), which JSON would have omitted."""
    if wire == 0:
        return bool(value == 0)
    if wire in (1, 5):
        return not any(bytes(value))
    if len(value) == 0:
        return True
    try:
        return all(_zero(w, v) for _n, w, v in _fields(bytes(value)))
    except ProtobufError:
        return False


def _time(data: bytes) -> str | None:
    parts = decode_message("Time", data)
    seconds = int(parts.get("seconds") or 0)
    if seconds == 0 and not parts.get("nanos"):
        return None
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _int_or_string(data: bytes) -> int | str:
    values = {n: v for n, _w, v in _fields(data)}
    if int(values.get(1, 0)) == 1:
        return bytes(values.get(3, b"")).decode("utf-8")
    return _signed(int(values.get(2, 0)))


def _value(kind: str, wire: int, value: Any, owner: str, number: int) -> Any:
    """One field's JSON value."""
    if kind == "string":
        return bytes(value).decode("utf-8")
    if kind == "bytes":
        return base64.b64encode(bytes(value)).decode()
    if kind == "int":
        return _signed(int(value))
    if kind == "bool":
        return bool(value)
    if kind == "double":
        return struct.unpack("<d", bytes(value))[0]
    if kind == "quantity":
        return bytes(dict((n, v) for n, _w, v in _fields(value)).get(1, b"")).decode("utf-8")
    if kind == "time":
        return _time(value)
    if kind == "intorstring":
        return _int_or_string(value)
    if kind in MESSAGES:
        return decode_message(kind, value)
    raise ProtobufError(f"field {number} of {owner} has the unknown type {kind}")


def _packed(data: bytes) -> list[int]:
    out, pos = [], 0
    while pos < len(data):
        item, pos = _varint(data, pos)
        out.append(_signed(item))
    return out


def decode_message(name: str, data: bytes) -> dict[str, Any]:
    """The JSON form of one message of protoschema.MESSAGES. A field the schema does not know is refused
    unless it carries its Go default (then JSON would not have shown it either)."""
    schema = MESSAGES[name]
    out: dict[str, Any] = {}
    for number, wire, value in _fields(data):
        field = schema.get(number)
        if field is None:
            if _zero(wire, value):
                continue
            raise ProtobufError(f"field {number} of {name} is not one the local cluster knows; send the "
                                "object as JSON or YAML")
        if field.kind.startswith("map:"):
            entry = {n: v for n, _w, v in _fields(value)}
            key = bytes(entry.get(1, b"")).decode("utf-8")
            item_kind = field.kind[4:]
            raw = entry.get(2, b"" if item_kind not in ("int", "bool") else 0)
            out.setdefault(field.name, {})[key] = _value(item_kind, 2, raw, name, number)
        elif field.repeated:
            items = out.setdefault(field.name, [])
            if field.kind == "int" and wire == 2:
                items.extend(_packed(bytes(value)))
            else:
                items.append(_value(field.kind, wire, value, name, number))
        elif field.inline:
            out.update(decode_message(field.kind, value))
        else:
            decoded = _value(field.kind, wire, value, name, number)
            plain = field.kind in ("string", "bytes")
            default = len(value) == 0 if plain else _zero(wire, value)
            if decoded is None or (field.kind in SCALARS and not field.keep_zero and default):
                out.pop(field.name, None)
                continue
            out[field.name] = decoded
    return out


ENVELOPE: dict[int, str] = {1: "typeMeta", 2: "raw", 3: "contentEncoding", 4: "contentType"}


def decode_object(data: bytes) -> dict[str, Any] | None:
    """The JSON form of a protobuf-encoded object (the `k8s\\0` envelope, runtime.Unknown, around the
    message); None when its kind is not one this server reads."""
    if not data.startswith(MAGIC):
        raise ProtobufError("missing the k8s protobuf envelope prefix")
    envelope = {ENVELOPE.get(n, ""): v for n, _w, v in _fields(data[len(MAGIC):])}
    type_meta = {n: bytes(v).decode("utf-8") for n, _w, v in _fields(envelope.get("typeMeta", b""))}
    kind, api_version = type_meta.get(2, ""), type_meta.get(1, "")
    if kind not in KINDS:
        return None
    obj = decode_message(kind, bytes(envelope.get("raw", b"")))
    obj["kind"] = kind
    if api_version:
        obj["apiVersion"] = api_version
    return obj
