"""Request bodies: size limit, media types, JSON/YAML/protobuf decoding, the object a write sends (checked
against its path), DeleteOptions, and the three patch kinds."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import yaml
from aiohttp import web

from localcluster._internal.apimachinery import status as st
from localcluster._internal.apiserver import protobuf
from localcluster._internal.apiserver.targets import Target

JSON_TYPES = ("application/json", "")
PROTOBUF = "application/vnd.kubernetes.protobuf"
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml")
ACCEPTED = "application/json, application/yaml, application/vnd.kubernetes.protobuf"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"
MAX_BODY = 3 * 1024 * 1024


async def read_limited(request: web.Request, limit: int) -> bytes:
    if request.content_length is not None and request.content_length > limit:
        raise st.too_large(limit)
    chunks, size = [], 0
    async for chunk in request.content.iter_chunked(1 << 16):
        size += len(chunk)
        if size > limit:
            raise st.too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _media_type(request: web.Request) -> str:
    return request.headers.get("Content-Type", "").split(";")[0].strip().lower()


def _decode(raw: bytes, media: str) -> Any:
    if not raw.strip():
        raise st.bad_request("the body of the request is empty")
    if media in YAML_TYPES:
        try:
            return yaml.safe_load(raw)
        except yaml.YAMLError as error:
            raise st.bad_request(f"error converting YAML to JSON: {error}") from None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise st.bad_request(f"couldn't get version/kind; json parse error: {error}") from None


async def decode_body(request: web.Request, limit: int) -> Any:
    media = _media_type(request)
    if media == PROTOBUF:
        return decode_protobuf(await read_limited(request, limit))
    if media not in JSON_TYPES and media not in YAML_TYPES:
        raise st.unsupported_media(media, ACCEPTED)
    return _decode(await read_limited(request, limit), media)


async def read_object(request: web.Request, target: Target, *, kind: str | None = None,
                      api_version: str | None = None) -> dict[str, Any]:
    """The object a create or update sends: its kind and apiVersion those of the target's resource (or the
    given ones, for a subresource's body), its namespace the one on the path."""
    obj = await decode_body(request, MAX_BODY)
    if not isinstance(obj, dict):
        raise st.bad_request("the object provided is unrecognized: expected a JSON object")
    want_kind = kind or target.resource.kind
    want_version = api_version or target.resource.api_version
    if obj.get("kind") not in (None, "", want_kind):
        raise st.bad_request(f"the object provided is unrecognized (must be of type {want_kind}): "
                             f"kind {obj.get('kind')!r} is not {want_kind!r}")
    if obj.get("apiVersion") not in (None, "", want_version):
        raise st.bad_request(f"the API version in the data ({obj.get('apiVersion')}) does not match the "
                             f"expected API version ({want_version})")
    obj["kind"], obj["apiVersion"] = want_kind, want_version
    meta = obj.get("metadata")
    if meta is None:
        meta = obj["metadata"] = {}
    if not isinstance(meta, dict):
        raise st.bad_request("metadata: expected an object")
    if target.resource.namespaced and kind is None:
        if meta.get("namespace") not in (None, "", target.namespace):
            raise st.bad_request("the namespace of the provided object does not match the namespace sent "
                                 "on the request")
        meta["namespace"] = target.namespace
    elif kind is None:
        meta.pop("namespace", None)
    return obj


async def delete_options(request: web.Request) -> dict[str, Any]:
    """DeleteOptions from the body (JSON or protobuf) and the query, which wins."""
    options: dict[str, Any] = {}
    if request.can_read_body:
        body = await read_limited(request, MAX_BODY)
        if body.strip():
            if request.headers.get("Content-Type", "").startswith(PROTOBUF):
                parsed = decode_protobuf(body)
            else:
                try:
                    parsed = orjson.loads(body)
                except orjson.JSONDecodeError as error:
                    raise st.bad_request(f"DeleteOptions: {error}") from None
            if isinstance(parsed, dict):
                options = parsed
    for key in ("gracePeriodSeconds", "propagationPolicy", "orphanDependents"):
        if key in request.query:
            options[key] = request.query[key]
    if "gracePeriodSeconds" in options:
        try:
            options["gracePeriodSeconds"] = int(options["gracePeriodSeconds"])
        except (TypeError, ValueError):
            raise st.bad_request("gracePeriodSeconds must be an integer") from None
    policy = options.get("propagationPolicy")
    if policy not in (None, "Orphan", "Background", "Foreground"):
        raise st.bad_request(f"propagationPolicy: Unsupported value: {policy!r}: supported values: "
                             '"Foreground", "Background", "Orphan"')
    return options


def decode_protobuf(raw: bytes) -> Any:
    try:
        obj = protobuf.decode_object(raw)
    except (protobuf.ProtobufError, ValueError) as error:
        raise st.bad_request(f"unable to decode the protobuf request body: {error}") from None
    if obj is None:
        raise st.unsupported_media(PROTOBUF, "application/json, application/yaml")
    return obj


async def patch_object(request: web.Request, current: dict[str, Any], limit: int) -> Any:
    media = _media_type(request)
    if media not in (MERGE, STRATEGIC, JSON_PATCH):
        raise st.ApiStatus(415, "UnsupportedMediaType",
                           f"the server does not support the patch type {media or '(none)'}: accepted patch "
                           f"types are {JSON_PATCH}, {MERGE}, {STRATEGIC}")
    patch = _decode(await read_limited(request, limit), "application/json")
    return apply_patch(media, current, patch)


def parse_yaml_or_json(raw: bytes) -> Any:
    return _decode(raw, "application/yaml")


def apply_patch(media: str, current: dict[str, Any], patch: Any) -> Any:
    from localcluster._internal.apimachinery import patch as patches

    try:
        if media == JSON_PATCH:
            return patches.json_patch(current, patch)
        if media == MERGE:
            return patches.merge_patch(current, patch)
        return patches.strategic_merge_patch(current, patch, kind=current.get("kind", ""))
    except patches.PatchError as error:
        body = error.status()
        raise st.ApiStatus(error.code, body["reason"], body["message"], details=body.get("details")) from None


def deep(obj: Any) -> Any:
    return copy.deepcopy(obj)
