"""The HTTP face of the local API server: authentication, authorization, the verbs on stored objects and
Status answers.

One catch-all aiohttp route takes every request. targets.py parses its path the way the real server's router
does, so unknown paths, groups and resources all get the real 404 Status instead of aiohttp's HTML; paths that
name no resource are discovery.py's, subresources and review resources subresources.py's, request bodies
bodies.py's. Objects are read from and written to the Store; everything that happens after a write
(scheduling, kubelets, garbage collection, graceful deletion) is the controllers'.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from localcluster._internal.admission import defaults
from localcluster._internal.admission.writes import check_escalation, validate
from localcluster._internal.apimachinery import status as st
from localcluster._internal.apiserver import tables
from localcluster._internal.apiserver.bodies import (
    APPLY,
    MAX_BODY,
    STRATEGIC,
    apply_patch,
    delete_options,
    parse_yaml_or_json,
    patch_object,
    read_limited,
    read_object,
)
from localcluster._internal.apiserver.discovery import SERVER_VERSION, non_resource
from localcluster._internal.apiserver.faults import Faults
from localcluster._internal.apiserver.listing import ListQuery, list_response, parse_list_query, serve_watch
from localcluster._internal.apiserver.responses import (
    json_response,
    raw_response,
    status_response,
    with_warnings,
)
from localcluster._internal.apiserver.subresources import Subresources
from localcluster._internal.apiserver.targets import Target, parse_target, stored, verb_of
from localcluster._internal.auth.access import Access, Attributes
from localcluster._internal.auth.identity import UserInfo
from localcluster._internal.controllers.loops import Controllers
from localcluster._internal.storage.registry import Resource
from localcluster._internal.storage.store import AlreadyExists, Conflict, NotFound, Store

log = logging.getLogger(__name__)

Obj = dict[str, Any]
CONNECT_SUBRESOURCES = ("exec", "attach", "portforward")


class ApiServer:
    def __init__(self, *, store: Store, access: Access, controllers: Controllers, subresources: Subresources,
                 faults: Faults, server_address: str, bookmark_interval: float = 5.0,
                 gate: Callable[[web.Request], Awaitable[web.StreamResponse | None]] | None = None,
                 served: frozenset[str] = frozenset()) -> None:
        self.store = store
        self.served = served  # the doubles whose kinds this cluster serves (storage/registry.py)
        self.access = access
        self.controllers = controllers
        self.subresources = subresources
        self.faults = faults
        self.server_address = server_address
        self.bookmark_interval = bookmark_interval
        self.ready = True
        self.requests = 0
        # asked first about every request: an answer of its own (an API outage, doubles/apioutage.py) or None
        self.gate = gate

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY + 1024)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        try:
            if self.gate is not None and (answer := await self.gate(request)) is not None:
                return answer
            return await self._handle(request)
        except st.ApiStatus as error:
            return status_response(error)
        except web.HTTPRequestEntityTooLarge:
            return status_response(st.too_large(MAX_BODY))
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as error:  # the server must answer, whatever a request does to it
            log.exception("internal error on %s %s", request.method, request.path)
            return status_response(st.internal(f"{type(error).__name__}: {error}"))

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        if path in ("/healthz", "/livez", "/readyz") or path.startswith(("/healthz/", "/livez/", "/readyz/")):
            if path.startswith("/readyz") and not self.ready:
                return web.Response(text="[-]ready failed\nreadyz check failed", status=500)
            return web.Response(text="ok", content_type="text/plain")
        if path.rstrip("/") == "/version":
            return json_response(SERVER_VERSION)
        user = self.access.authenticate(request.headers)
        user = self.access.impersonate(user, request.headers)
        query = dict(request.query)
        target = parse_target(path, self.served)
        if target is None:
            return non_resource(request, user, access=self.access, server_address=self.server_address,
                                served=self.served)
        _check_accept(request.headers.get("Accept", ""))
        verb = verb_of(request.method, target, query)
        # a Namespace's own path names its namespace (RequestInfoFactory): a Role there may grant `get` on it
        own = target.name if target.resource.key == "namespaces" and target.name else ""
        attrs = Attributes(verb=verb, group=target.resource.group, resource=target.resource.plural,
                           subresource=target.subresource or "", namespace=target.namespace or own,
                           name=target.name or "")
        if target.subresource == "log" or (target.subresource and request.method == "GET"):
            attrs = Attributes(verb="get", group=attrs.group, resource=attrs.resource,
                               subresource=attrs.subresource, namespace=attrs.namespace, name=attrs.name)
        if target.subresource in ("binding", "eviction", "token"):
            attrs = Attributes(verb="create", group=attrs.group, resource=attrs.resource,
                               subresource=attrs.subresource, namespace=attrs.namespace, name=attrs.name)
        self.faults.check(verb, target.resource.plural, target.subresource, target.namespace, target.name)
        self.access.authorize(user, attrs)
        if target.subresource in CONNECT_SUBRESOURCES and attrs.verb != "create":
            # a WebSocket upgrade (GET) needs `create` too, as on the real server since 1.31
            self.access.authorize(user, dataclasses.replace(attrs, verb="create"))
        if verb not in target.resource.verbs and target.subresource is None:
            raise st.method_not_allowed()
        if target.subresource is not None and target.subresource not in ("status",):
            return await self.subresources.handle(request, target)
        handler: dict[str, Callable[[web.Request, Target, UserInfo], Awaitable[web.StreamResponse]]] = {
            "get": self._get, "list": self._list, "watch": self._watch, "create": self._create,
            "update": self._update, "patch": self._patch, "delete": self._delete,
            "deletecollection": self._delete_collection}
        return await handler[verb](request, target, user)

    # ---- reading -------------------------------------------------------------------------------------------
    async def _get(self, request: web.Request, target: Target, user: UserInfo) -> web.StreamResponse:
        assert target.name is not None
        entry = self.store.entry(target.resource.key, target.namespace, target.name)
        if entry is None:
            raise st.not_found(target.resource.plural, target.name, target.resource.group)
        if tables.wants_table(request.headers.get("Accept", "")):
            return json_response(tables.table(target.resource, [entry.obj], self.store.resource_version,
                                              include_object=request.query.get("includeObject", "Metadata")))
        return raw_response(entry.raw)

    def _namespace_exists(self, target: Target) -> None:
        if target.namespace is not None and self.store.get("namespaces", None, target.namespace) is None:
            raise st.not_found("namespaces", target.namespace)

    async def _list(self, request: web.Request, target: Target, user: UserInfo) -> web.StreamResponse:
        query = parse_list_query(target.resource, request.query)
        if tables.wants_table(request.headers.get("Accept", "")):
            items, meta = self._select(target, query)
            doc = tables.table(target.resource, items, self.store.resource_version,
                               include_object=request.query.get("includeObject", "Metadata"))
            doc["metadata"].update(meta)
            return json_response(doc)
        return raw_response(list_response(self.store, target.resource, target.namespace, query))

    def _select(self, target: Target, query: ListQuery) -> tuple[list[Obj], dict[str, Any]]:
        body = orjson.loads(list_response(self.store, target.resource, target.namespace, query))
        return body["items"], {k: v for k, v in body["metadata"].items() if k != "resourceVersion"}

    async def _watch(self, request: web.Request, target: Target, user: UserInfo) -> web.StreamResponse:
        query = parse_list_query(target.resource, request.query)
        return await serve_watch(request, self.store, target.resource, target.namespace, query,
                                 bookmark_interval=self.bookmark_interval)

    # ---- writing -------------------------------------------------------------------------------------------
    async def _create(self, request: web.Request, target: Target, user: UserInfo) -> web.StreamResponse:
        r = target.resource
        if target.name is not None:
            raise st.method_not_allowed()
        if not r.stored:
            return await self.subresources.review(request, target, user)
        return self._create_object(request, target, await read_object(request, target), user)

    def _create_object(self, request: web.Request, target: Target, obj: Obj, user: UserInfo) -> web.Response:
        r = target.resource
        self._namespace_exists(target)
        if target.namespace and self.controllers.namespace_terminating(target.namespace):
            name = obj["metadata"].get("name", "")
            raise st.forbidden(f'{r.plural} "{name}" is forbidden: unable to create new content in'
                               f" namespace namespace {target.namespace} because it is being terminated",
                               resource=r.plural, name=obj["metadata"].get("name"), group=r.group)
        for server_field in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "selfLink"):
            obj["metadata"].pop(server_field, None)
        if r.key == "pods":
            obj.pop("status", None)
        defaults.apply(r.key, obj)
        name = obj["metadata"].get("name") or obj["metadata"].get("generateName", "")
        # mutating admission (LimitRange defaults) comes before validation, as in the generic registry
        self.controllers.mutate_create(r, obj, user)
        validate(r, obj, None)
        if not obj["metadata"].get("name") and not obj["metadata"].get("generateName"):
            raise st.invalid(r.kind, "", [{"reason": "FieldValueRequired", "message": "name or generateName "
                                           "is required", "field": "metadata.name"}], r.group)
        check_escalation(r, obj, None, user, self.access.policy, target.namespace or "")
        warnings = self.controllers.admit_create(r, obj, user, dry_run=request.query.get("dryRun") == "All")
        if request.query.get("dryRun") == "All":
            if self.store.get(r.key, target.namespace, obj["metadata"].get("name", "")) is not None:
                raise st.already_exists(r.plural, name, r.group)
            return with_warnings(json_response(obj, status=201), warnings)
        try:
            created = self.store.create(r.key, obj)
        except AlreadyExists:
            raise st.already_exists(r.plural, name, r.group) from None
        return with_warnings(json_response(created, status=201), warnings)

    def _keep_server_fields(self, r: Resource, obj: Obj, current: Obj, *, subresource: str | None) -> None:
        """What a writer may not change through this endpoint stays as stored."""
        meta, cur_meta = obj["metadata"], current["metadata"]
        for server_field in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"):
            if server_field in cur_meta:
                meta[server_field] = cur_meta[server_field]
            else:
                meta.pop(server_field, None)
        if "status" in r.subresources:
            if subresource == "status":
                # a status write changes the status only
                for key in list(obj):
                    if key not in ("status", "metadata", "kind", "apiVersion"):
                        obj.pop(key)
                for key, value in current.items():
                    if key not in ("status", "metadata"):
                        obj[key] = copy.deepcopy(value)
                for key in ("labels", "annotations", "ownerReferences", "finalizers"):
                    if key in cur_meta:
                        meta[key] = copy.deepcopy(cur_meta[key])
                    else:
                        meta.pop(key, None)
            elif "status" in current:
                obj["status"] = copy.deepcopy(current["status"])
            else:
                obj.pop("status", None)

    async def _update(self, request: web.Request, target: Target, user: UserInfo) -> web.StreamResponse:
        if target.name is None:
            raise st.method_not_allowed()
        obj = await read_object(request, target)
        if obj["metadata"].get("name") not in (None, "", target.name):
            raise st.bad_request(f"the name of the object ({obj['metadata'].get('name')}) does not match the "
                                 f"name on the URL ({target.name})")
        obj["metadata"]["name"] = target.name
        current = stored(self.store, target)
        return self._replace(request, target, obj, current, user)

    def _replace(self, request: web.Request, target: Target, obj: Obj, current: Obj,
                 user: UserInfo) -> web.Response:
        r = target.resource
        assert target.name is not None
        self._keep_server_fields(r, obj, current, subresource=target.subresource)
        if r.key == "secrets":
            defaults.secret(obj)
        validate(r, obj, current)
        check_escalation(r, obj, current, user, self.access.policy, target.namespace or "")
        warnings = self.controllers.admit_update(r, obj, current, user,
                                                 dry_run=request.query.get("dryRun") == "All",
                                                 subresource=target.subresource or "")
        if request.query.get("dryRun") == "All":
            return with_warnings(json_response(obj), warnings)
        try:
            updated = self.store.update(r.key, obj)
        except Conflict:
            raise st.conflict(r.plural, target.name, r.group) from None
        except NotFound:
            raise st.not_found(r.plural, target.name, r.group) from None
        self.controllers.after_update(r, updated)
        return with_warnings(json_response(updated), warnings)

    async def _patch(self, request: web.Request, target: Target, user: UserInfo) -> web.StreamResponse:
        if target.name is None:
            raise st.method_not_allowed()
        if request.headers.get("Content-Type", "").split(";")[0].strip() == APPLY:
            return await self._apply(request, target, user)
        current = stored(self.store, target)
        patched = await patch_object(request, current, MAX_BODY)
        if not isinstance(patched, dict) or not isinstance(patched.get("metadata"), dict):
            raise st.bad_request("the patch produced an object without metadata")
        if patched["metadata"].get("name") != target.name:
            raise st.bad_request("the patch may not change the object's name")
        patched["kind"], patched["apiVersion"] = target.resource.kind, target.resource.api_version
        if target.resource.namespaced:
            patched["metadata"]["namespace"] = target.namespace
        return self._replace(request, target, patched, current, user)

    async def _apply(self, request: web.Request, target: Target, user: UserInfo) -> web.StreamResponse:
        """Server-side apply without field ownership: create when absent, else merge the applied configuration
        the way a strategic merge patch would (fields left out of the configuration are kept)."""
        if not request.query.get("fieldManager"):
            raise st.ApiStatus(422, "Invalid", 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: '
                               "Required value: is required for apply patch", details={"group": "meta.k8s.io",
                                                                              "kind": "PatchOptions"})
        applied = parse_yaml_or_json(await read_limited(request, MAX_BODY))
        if not isinstance(applied, dict):
            raise st.bad_request("the applied configuration must be an object")
        applied.setdefault("metadata", {})
        if applied["metadata"].get("name") not in (None, target.name):
            raise st.bad_request(f"the name of the object ({applied['metadata'].get('name')}) does not match "
                                 f"the name on the URL ({target.name})")
        applied["metadata"]["name"] = target.name
        assert target.name is not None
        current = self.store.get(target.resource.key, target.namespace, target.name)
        if current is None:
            fake = await self._checked(target, applied)
            return self._create_object(request, target, fake, user)
        patched = apply_patch(STRATEGIC, current, applied)
        patched["kind"], patched["apiVersion"] = target.resource.kind, target.resource.api_version
        if target.resource.namespaced:
            patched["metadata"]["namespace"] = target.namespace
        return self._replace(request, target, patched, current, user)

    async def _checked(self, target: Target, obj: Obj) -> Obj:
        r = target.resource
        if obj.get("kind") not in (None, r.kind) or obj.get("apiVersion") not in (None, r.api_version):
            raise st.bad_request(f"the object provided is unrecognized (must be of type {r.kind})")
        obj["kind"], obj["apiVersion"] = r.kind, r.api_version
        if r.namespaced:
            if obj["metadata"].get("namespace") not in (None, "", target.namespace):
                raise st.bad_request("the namespace of the provided object does not match the namespace sent "
                                     "on the request")
            obj["metadata"]["namespace"] = target.namespace
        return obj

    async def _delete(self, request: web.Request, target: Target, user: UserInfo) -> web.StreamResponse:
        r = target.resource
        assert target.name is not None
        current = stored(self.store, target)
        options = await delete_options(request)
        pre = options.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != current["metadata"]["uid"]:
            raise st.conflict(r.plural, target.name, r.group,
                              f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: "
                              f"{current['metadata']['uid']}")
        if pre.get("resourceVersion") and pre["resourceVersion"] != current["metadata"]["resourceVersion"]:
            raise st.conflict(r.plural, target.name, r.group,
                              "Precondition failed: ResourceVersion in precondition: "
                              f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                              f"{current['metadata']['resourceVersion']}")
        dry_run = request.query.get("dryRun") == "All"
        warnings = _default_propagation(r, options) + self.controllers.admit_delete(r, current, user,
                                                                                    dry_run=dry_run)
        if dry_run:
            return with_warnings(json_response(current), warnings)
        result, immediate = self.controllers.delete(r, current, options)
        if r.key in ("pods", "namespaces") or not immediate:
            return with_warnings(json_response(result), warnings)
        return with_warnings(json_response(st.success(resource=r.plural, name=target.name, group=r.group,
                                                      uid=current["metadata"]["uid"])), warnings)

    async def _delete_collection(self, request: web.Request, target: Target,
                                 user: UserInfo) -> web.StreamResponse:
        r = target.resource
        query = parse_list_query(r, request.query)
        options = await delete_options(request)
        warnings = _default_propagation(r, options)
        items, _ = self._select(target, ListQuery(query.labels, query.fields, query.label_text,
                                                  query.field_text, None, None, None))
        deleted = []
        for item in items:
            current = self.store.get(r.key, item["metadata"].get("namespace"), item["metadata"]["name"])
            if current is None:
                continue
            self.controllers.admit_delete(r, current, user)
            result, _ = self.controllers.delete(r, current, options)
            deleted.append(result)
        return with_warnings(json_response({"kind": f"{r.kind}List", "apiVersion": r.api_version,
                                            "metadata": {"resourceVersion": str(self.store.resource_version)},
                                            "items": deleted}), warnings)


JOB_DELETE_WARNING = ("child pods are preserved by default when jobs are deleted; set "
                      "propagationPolicy=Background to remove them or set propagationPolicy=Orphan to "
                      "suppress this warning")


def _default_propagation(r: Resource, options: dict[str, Any]) -> list[str]:
    """batch/v1 Jobs orphan their pods unless told otherwise (the job registry's
    DefaultGarbageCollectionPolicy, kept for compatibility), and the server says so (pkg/registry/batch/job/
    storage/storage.go deleteOptionWarnings)."""
    chosen = options.get("propagationPolicy") or options.get("orphanDependents") is not None
    if r.key != "jobs.batch" or chosen:
        return []
    options["propagationPolicy"] = "Orphan"
    return [JOB_DELETE_WARNING]


def _check_accept(accept: str) -> None:
    """Answers are JSON: a client that takes only protobuf (kubectl's typed clients also take JSON) gets the
    real server's 406 for a media type it cannot produce."""
    types = {part.split(";")[0].strip().lower() for part in accept.split(",")}
    if types != {"application/vnd.kubernetes.protobuf"}:
        return
    raise st.ApiStatus(406, "NotAcceptable",
                       "only the following media types are accepted: application/json, application/yaml")

