"""Request bodies: size limit, media types, JSON/YAML decoding, and the three patch kinds."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import yaml
from aiohttp import web

from localcluster import protobuf
from localcluster import status as st

JSON_TYPES = ("application/json", "")
PROTOBUF = "application/vnd.kubernetes.protobuf"
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml")
ACCEPTED = "application/json, application/yaml, application/vnd.kubernetes.protobuf"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"


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
    from localcluster import patch as patches

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
