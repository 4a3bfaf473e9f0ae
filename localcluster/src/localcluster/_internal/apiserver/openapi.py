"""Just enough OpenAPI v3 for kubectl: per group-version documents whose PATCH operations carry the
`fieldValidation` parameter and `x-kubernetes-group-version-kind`, so kubectl's query-param verifier finds
that the server validates fields itself and sends `fieldValidation=Strict` instead of asking for schemas; and
one schema per kind (with the GVK extension and no properties), so `kubectl apply` computes its patches with
the schema lookups succeeding (lists then merge by replacement, which the server applies as sent)."""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from typing import Any

import orjson

from localcluster._internal.storage.registry import GROUP_VERSIONS, RESOURCES, group_versions, visible

Obj = dict[str, Any]
_PARAM = {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True},
          "description": "fieldValidation instructs the server on how to handle objects in the request "
                         "containing unknown or duplicate fields."}


def _gv_path(group: str) -> str:
    return "api/v1" if not group else f"apis/{group}/{GROUP_VERSIONS[group]}"


def _schema_name(group: str, version: str, kind: str) -> str:
    prefix = "io.k8s.api.core" if not group else "io.k8s.api." + group.split(".")[0]
    return f"{prefix}.{version}.{kind}"


def group_version_doc(group: str, served: Collection[str] = ()) -> Obj:
    version = GROUP_VERSIONS[group]
    paths: dict[str, Obj] = {}
    schemas: dict[str, Obj] = {}
    for r in RESOURCES:
        if r.group != group or not r.stored or not visible(r, served):
            continue
        gvk = {"group": group, "version": version, "kind": r.kind}
        base = "/" + _gv_path(group)
        item = (f"{base}/namespaces/{{namespace}}/{r.plural}/{{name}}" if r.namespaced
                else f"{base}/{r.plural}/{{name}}")
        collection = item.rsplit("/", 1)[0]
        operation = {"x-kubernetes-group-version-kind": gvk, "parameters": [_PARAM],
                     "responses": {"200": {"description": "OK"}}}
        paths[item] = {"patch": {**operation, "x-kubernetes-action": "patch"},
                       "put": {**operation, "x-kubernetes-action": "put"}}
        paths[collection] = {"post": {**operation, "x-kubernetes-action": "post"}}
        schemas[_schema_name(group, version, r.kind)] = {
            "type": "object", "x-kubernetes-group-version-kind": [gvk],
            "description": f"{r.kind} (schema details are not served by the local cluster)"}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.37.0"}, "paths": paths,
            "components": {"schemas": schemas}}


def _hash(group: str, served: Collection[str]) -> str:
    return hashlib.sha256(orjson.dumps(group_version_doc(group, served))).hexdigest()[:16].upper()


def root_doc(served: Collection[str] = ()) -> Obj:
    return {"paths": {_gv_path(g): {"serverRelativeURL": f"/openapi/v3/{_gv_path(g)}?hash={_hash(g, served)}"}
                      for g in group_versions(served)}}


def lookup(path: str, served: Collection[str] = ()) -> Obj | None:
    """The document for /openapi/v3[/GV]; None for anything else."""
    rest = path[len("/openapi/v3"):].strip("/")
    if not rest:
        return root_doc(served)
    for group in group_versions(served):
        if rest == _gv_path(group):
            return group_version_doc(group, served)
    return None
