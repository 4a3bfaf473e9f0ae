"""Field errors as the real server words them (k8s.io/apimachinery/pkg/util/validation/field), and the
422 Status that carries them. `str(cause)` is `<field>: <message>`, such as
`spec.containers[0].image: Required value`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

REQUIRED = "FieldValueRequired"
INVALID = "FieldValueInvalid"
DUPLICATE = "FieldValueDuplicate"
FORBIDDEN = "FieldValueForbidden"
NOT_SUPPORTED = "FieldValueNotSupported"
NOT_FOUND = "FieldValueNotFound"
TOO_LONG = "FieldValueTooLong"


@dataclass(frozen=True)
class Cause:
    """One field error: `reason` is the cause type, `message` what the real server prints after the path."""

    field: str
    reason: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"reason": self.reason, "message": self.message, "field": self.field}

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def fmt_value(value: Any) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        # Go prints a []string bad value with %#v
        return "[]string{" + ", ".join(fmt_value(v) for v in value) + "}"
    return str(value)


def required(field: str, detail: str = "") -> Cause:
    return Cause(field, REQUIRED, "Required value" + (f": {detail}" if detail else ""))


def invalid(field: str, value: Any, detail: str) -> Cause:
    return Cause(field, INVALID, f"Invalid value: {fmt_value(value)}" + (f": {detail}" if detail else ""))


def duplicate(field: str, value: Any) -> Cause:
    return Cause(field, DUPLICATE, f"Duplicate value: {fmt_value(value)}")


def not_supported(field: str, value: Any, supported: list[str]) -> Cause:
    return Cause(field, NOT_SUPPORTED,
                 f"Unsupported value: {fmt_value(value)}: supported values: "
                 + ", ".join(fmt_value(v) for v in supported))


def port_causes(field: str, number: Any) -> list[Cause]:
    if isinstance(number, int) and not isinstance(number, bool) and 0 < number < 65536:
        return []
    return [invalid(field, number, "must be between 1 and 65535, inclusive")]


def status_invalid(kind: str, name: str, causes: list[Cause], *, group: str = "") -> dict[str, Any]:
    """The 422 Status body: `Pod "x" is invalid: <cause>` or `... is invalid: [<cause>, <cause>]`."""
    qualified = f"{kind}.{group}" if group else kind
    messages: list[str] = []
    for cause in causes:
        if str(cause) not in messages:
            messages.append(str(cause))
    detail = messages[0] if len(messages) == 1 else "[" + ", ".join(messages) + "]"
    message = f'{qualified} "{name}" is invalid' + (f": {detail}" if messages else "")
    details: dict[str, Any] = {"name": name, "kind": kind, "causes": [c.to_dict() for c in causes]}
    if group:
        details["group"] = group
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": "Invalid", "details": details, "code": 422}
