"""JSON answers: objects, cached raw JSON, Status errors, aggregated discovery."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from localcluster._internal.apimachinery import status as st

AGGREGATED_TYPE = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


def json_response(body: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json",
                        headers=headers)


def with_warnings(response: web.Response, warnings: list[str]) -> web.Response:
    """Add one `Warning: 299 - "..."` header per warning, as the real server does (kubectl prints each)."""
    for text in warnings:
        escaped = text.replace("\\", "\\\\").replace('"', '\\"')
        response.headers.add("Warning", f'299 - "{escaped}"')
    return response


def raw_response(raw: bytes, *, status: int = 200) -> web.Response:
    return web.Response(body=raw, status=status, content_type="application/json")


def status_response(error: st.ApiStatus) -> web.Response:
    return json_response(error.body(), status=error.code, headers=error.headers or None)


def aggregated_response(doc: dict[str, Any]) -> web.Response:
    return web.Response(body=orjson.dumps(doc), status=200, headers={"Content-Type": AGGREGATED_TYPE})
