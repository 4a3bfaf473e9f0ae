"""The slim pod decoder: a PodList page with only the fields GPU accounting reads; the rest is skipped,
never built.

At 150,000 pods (~2 KB of JSON each) decoding every field into dicts costs seconds and over a GiB; the
inventory needs a few dozen bytes of each pod. msgspec decodes straight into these TypedDicts (plain dicts,
so inventory.py and podrequests.py read them as they read full objects) and skips unknown fields while
parsing. Keep this schema in step with what podrequests.pod_requests, podrequests.holds_resources and
inventory.py read.
"""

from __future__ import annotations

from typing import Any, TypedDict

import msgspec


class _Meta(TypedDict, total=False):
    name: str
    namespace: str
    uid: str


class _Resources(TypedDict, total=False):
    requests: dict[str, Any]
    limits: dict[str, Any]


class _Container(TypedDict, total=False):
    name: str
    resources: _Resources
    restartPolicy: str  # a sidecar init container has "Always"


class _PodSpec(TypedDict, total=False):
    nodeName: str
    containers: list[_Container]
    initContainers: list[_Container]
    overhead: dict[str, Any]


class _PodStatus(TypedDict, total=False):
    phase: str


class _Pod(TypedDict, total=False):
    metadata: _Meta
    spec: _PodSpec
    status: _PodStatus


# `continue` is a Python keyword, hence the functional form
_ListMeta = TypedDict("_ListMeta", {"resourceVersion": str, "continue": str}, total=False)


class PodList(TypedDict, total=False):
    metadata: _ListMeta
    items: list[_Pod]


_DECODER = msgspec.json.Decoder(PodList)


def decode_pod_list(data: bytes) -> dict[str, Any]:
    """A PodList page with only its pods' accounting fields (and the list's continue token and version)."""
    return dict(_DECODER.decode(data))
