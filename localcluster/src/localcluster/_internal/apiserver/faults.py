"""Failure injection for tests: make the next N matching requests fail the way a real API server can."""

from __future__ import annotations

from dataclasses import dataclass

from localcluster._internal.apimachinery import status as st

_REASONS = {400: "BadRequest", 403: "Forbidden", 404: "NotFound", 409: "Conflict", 410: "Expired",
            429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout"}


@dataclass
class Fault:
    """`count` matching requests answer `code`; None for verb/resource/namespace/name matches any.
    verb is the API verb (get, list, watch, create, update, patch, delete, deletecollection)."""

    code: int
    verb: str | None = None
    resource: str | None = None
    subresource: str | None = None
    namespace: str | None = None
    name: str | None = None
    count: int = 1
    retry_after: int | None = None
    message: str = ""
    hits: int = 0

    def matches(self, verb: str, resource: str, subresource: str | None, namespace: str | None,
                name: str | None) -> bool:
        return (self.count > 0 and self.verb in (None, verb) and self.resource in (None, resource)
                and self.subresource in (None, subresource) and self.namespace in (None, namespace)
                and self.name in (None, name))

    def error(self) -> st.ApiStatus:
        reason = _REASONS.get(self.code, "InternalError")
        message = self.message or {
            429: "Too many requests, please try again later.",
            503: "The server is currently unable to handle the request",
            409: "Operation cannot be fulfilled: the object has been modified; please apply your changes "
                 "to the latest version and try again",
            504: "Timeout: request did not complete within the allotted timeout",
        }.get(self.code, "Internal error occurred: injected fault")
        headers = {"Retry-After": str(self.retry_after)} if self.retry_after is not None else None
        details = {"retryAfterSeconds": self.retry_after} if self.retry_after is not None else None
        return st.ApiStatus(self.code, reason, message, details=details, headers=headers)


class Faults:
    def __init__(self) -> None:
        self.rules: list[Fault] = []

    def inject(self, fault: Fault) -> Fault:
        self.rules.append(fault)
        return fault

    def clear(self) -> None:
        self.rules.clear()

    def check(self, verb: str, resource: str, subresource: str | None, namespace: str | None = None,
              name: str | None = None) -> None:
        for fault in self.rules:
            if fault.matches(verb, resource, subresource, namespace, name):
                fault.count -= 1
                fault.hits += 1
                if fault.count <= 0:
                    self.rules.remove(fault)
                raise fault.error()
