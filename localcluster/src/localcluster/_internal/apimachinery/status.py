"""Status objects: every refusal of the local API server, with the real server's codes, reasons, wording."""

from __future__ import annotations

from typing import Any


class ApiStatus(Exception):
    """An error answer; `body()` is the Status object the real API server would send."""

    def __init__(self, code: int, reason: str, message: str, *, details: dict[str, Any] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                               "message": self.message, "reason": self.reason}
        if self.details is not None:
            out["details"] = self.details
        out["code"] = self.code
        return out


def _details(resource: str, name: str | None, group: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if name:
        out["name"] = name
    if group:
        out["group"] = group
    out["kind"] = resource
    return out


def _qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def success(*, resource: str, name: str, group: str = "", uid: str | None = None) -> dict[str, Any]:
    details = _details(resource, name, group)
    if uid:
        details["uid"] = uid
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}


def not_found(resource: str, name: str, group: str = "") -> ApiStatus:
    return ApiStatus(404, "NotFound", f'{_qualified(resource, group)} "{name}" not found',
                     details=_details(resource, name, group))


def no_such_path() -> ApiStatus:
    return ApiStatus(404, "NotFound", "the server could not find the requested resource", details={})


def already_exists(resource: str, name: str, group: str = "") -> ApiStatus:
    return ApiStatus(409, "AlreadyExists", f'{_qualified(resource, group)} "{name}" already exists',
                     details=_details(resource, name, group))


def conflict(resource: str, name: str, group: str = "", why: str = "") -> ApiStatus:
    why = why or "the object has been modified; please apply your changes to the latest version and try again"
    return ApiStatus(409, "Conflict",
                     f'Operation cannot be fulfilled on {_qualified(resource, group)} "{name}": {why}',
                     details=_details(resource, name, group))


def bad_request(message: str) -> ApiStatus:
    return ApiStatus(400, "BadRequest", message)


def unauthorized() -> ApiStatus:
    return ApiStatus(401, "Unauthorized", "Unauthorized")


def forbidden(message: str, *, resource: str = "", name: str | None = None, group: str = "") -> ApiStatus:
    return ApiStatus(403, "Forbidden", message, details=_details(resource, name, group))


def method_not_allowed() -> ApiStatus:
    return ApiStatus(405, "MethodNotAllowed",
                     "the server does not allow this method on the requested resource", details={})


def gone(message: str) -> ApiStatus:
    return ApiStatus(410, "Expired", message)


def too_large(limit: int) -> ApiStatus:
    return ApiStatus(413, "RequestEntityTooLarge", f"Request entity too large: limit is {limit}")


def unsupported_media(content_type: str, accepted: str) -> ApiStatus:
    return ApiStatus(415, "UnsupportedMediaType",
                     "the body of the request was in an unknown format - accepted media types include: "
                     f"{accepted}"
                     if content_type else "the body of the request was in an unknown format")


def invalid(kind: str, name: str, causes: list[dict[str, str]], group: str = "") -> ApiStatus:
    """422 Invalid with causes: `Pod "x" is invalid: [spec.containers: Required value, ...]`."""
    parts = [f"{c.get('field', '')}: {c.get('message', '')}" if c.get("field") else c.get("message", "")
             for c in causes]
    summary = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    details["causes"] = causes
    return ApiStatus(422, "Invalid", f'{kind}{"." + group if group else ""} "{name}" is invalid: {summary}',
                     details=details)


def internal(message: str) -> ApiStatus:
    return ApiStatus(500, "InternalError", f"Internal error occurred: {message}",
                     details={"causes": [{"message": message}]})
