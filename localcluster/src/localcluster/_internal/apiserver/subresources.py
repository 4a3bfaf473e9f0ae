"""Subresources and review resources: pods/log, pods/binding (and bindings), pods/eviction,
serviceaccounts/token (TokenRequest), SelfSubjectAccessReview, SubjectAccessReview, SelfSubjectRulesReview,
SelfSubjectReview; pods/exec, pods/attach and pods/portforward are podconnect.py's."""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from aiohttp import web

from localcluster._internal.apimachinery import status as st
from localcluster._internal.apiserver.bodies import MAX_BODY, decode_body, read_object
from localcluster._internal.apiserver.podconnect import PodConnect
from localcluster._internal.apiserver.responses import json_response
from localcluster._internal.apiserver.targets import Target, stored
from localcluster._internal.auth import identity
from localcluster._internal.auth.access import Access
from localcluster._internal.auth.identity import UserInfo
from localcluster._internal.controllers import disruption
from localcluster._internal.runtime.logs import parse_time
from localcluster._internal.storage.registry import BY_KEY
from localcluster._internal.storage.store import Store

if TYPE_CHECKING:
    from localcluster._internal.auth.tokens import TokenAuthority
    from localcluster._internal.controllers.loops import Controllers
    from localcluster._internal.runtime.base import PodRuntime

Obj = dict[str, Any]
MAX_TOKEN_SECONDS = 48 * 3600
LOG_IDLE_CHECK = 5.0  # how often a quiet `logs -f` checks that its client is still there


def _json(body: Any, status: int = 200) -> web.Response:
    return json_response(body, status=status)


async def _until_gone(request: web.Request, stream: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The stream's chunks until it ends or the client disconnects (checked while the stream is quiet,
    without cancelling the stream mid-read)."""
    iterator = stream.__aiter__()
    following: asyncio.Future[bytes] | None = None
    try:
        while True:
            if following is None:
                following = asyncio.ensure_future(iterator.__anext__())
            done, _ = await asyncio.wait({following}, timeout=LOG_IDLE_CHECK)
            if not done:
                transport = request.transport
                if transport is None or transport.is_closing():
                    return
                continue
            try:
                chunk = following.result()
            except StopAsyncIteration:
                return
            following = None
            yield chunk
    finally:
        if following is not None and not following.done():
            following.cancel()
        close = getattr(iterator, "aclose", None)
        if close is not None and following is None:
            await close()


class Subresources:
    """Answers for the subresources and the create-only review resources; the API server (api.py) has
    authenticated and authorised the request and hands over its parsed target."""

    def __init__(self, *, store: Store, access: Access, controllers: Controllers, runtime: PodRuntime,
                 tokens: TokenAuthority) -> None:
        self.store = store
        self.access = access
        self.controllers = controllers
        self.runtime = runtime
        self.tokens = tokens
        self.connect = PodConnect(store=store, runtime=runtime)

    async def handle(self, request: web.Request, target: Target) -> web.StreamResponse:
        sub = target.subresource
        if sub == "log" and request.method == "GET":
            return await self.log(request, target)
        if sub == "binding" and request.method == "POST":
            return await self.binding(request, target)
        if sub == "eviction" and request.method == "POST":
            return await self.eviction(request, target)
        if sub == "token" and request.method == "POST":
            return await self.token(request, target)
        if sub == "finalize" and request.method == "PUT":
            obj = await read_object(request, target)
            current = stored(self.store, target)
            current_finalizers = (obj.get("spec") or {}).get("finalizers") or []

            def change(o: Obj) -> None:
                o.setdefault("spec", {})["finalizers"] = current_finalizers

            assert target.name is not None
            return _json(self.store.mutate("namespaces", None, current["metadata"]["name"], change))
        if sub in ("exec", "attach", "portforward") and request.method in ("GET", "POST"):
            return await self.connect.handle(request, target)
        if sub == "ephemeralcontainers" and request.method == "GET":
            return _json(stored(self.store, target))
        raise st.method_not_allowed()

    # ---- pods/log ------------------------------------------------------------------------------------------
    async def log(self, request: web.Request, target: Target) -> web.StreamResponse:
        pod = stored(self.store, target)
        q = request.query
        containers = [c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or []]
        container = q.get("container") or ""
        if not container:
            if len(containers) != 1:
                raise st.bad_request(f"a container name must be specified for pod {target.name}, choose one "
                                     f"of: [{' '.join(containers)}]")
            container = containers[0]
        elif container not in containers + [c.get("name", "")
                                            for c in pod["spec"].get("initContainers") or []]:
            raise st.bad_request(f"container {container} is not valid for pod {target.name}")
        started = any(cs.get("name") == container and ("running" in (cs.get("state") or {}) or
                                                       "terminated" in (cs.get("state") or {}))
                      for cs in (pod.get("status") or {}).get("containerStatuses") or [])
        if not started:
            raise st.bad_request(f'container "{container}" in pod "{target.name}" is waiting to start: '
                                 "ContainerCreating")
        tail: int | None = None
        if q.get("tailLines"):
            try:
                tail = int(q["tailLines"])
            except ValueError:
                raise st.bad_request("tailLines must be an integer") from None
        follow = q.get("follow") in ("true", "1")
        timestamps = q.get("timestamps") in ("true", "1")
        since: int | None = None
        try:
            if q.get("sinceTime"):
                since = parse_time(q["sinceTime"])
            elif q.get("sinceSeconds"):
                since = time.time_ns() - int(q["sinceSeconds"]) * 10**9
        except ValueError:
            raise st.bad_request("sinceTime must be an RFC3339 time, sinceSeconds an integer") from None
        response = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        assert target.namespace is not None and target.name is not None
        stream = self.runtime.logs(target.namespace, target.name, container, follow=follow, tail_lines=tail,
                                   timestamps=timestamps, since=since)
        try:
            async for chunk in _until_gone(request, stream):
                await response.write(chunk)
            await response.write_eof()
        except ConnectionResetError:
            pass
        return response

    # ---- pods/binding and bindings -----------------------------------------------------------------------
    async def binding(self, request: web.Request, target: Target) -> web.Response:
        body = await read_object(request, target, kind="Binding", api_version="v1")
        pod = stored(self.store, target)
        return self._bind(pod, body)

    def _bind(self, pod: Obj, body: Obj) -> web.Response:
        node = (body.get("target") or {}).get("name")
        if not node:
            raise st.invalid("Binding", pod["metadata"]["name"], [
                {"reason": "FieldValueRequired", "message": "Required value", "field": "target.name"}])
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound:
            raise st.conflict("pods/binding", pod["metadata"]["name"], "",
                              f"pod {pod['metadata']['name']} is already assigned to node \"{bound}\"")
        self.controllers.bind(pod, node)
        return _json(st.success(resource="pods/binding", name=pod["metadata"]["name"]), status=201)

    async def bindings_create(self, request: web.Request, target: Target) -> web.Response:
        body = await read_object(request, target, kind="Binding", api_version="v1")
        name = (body.get("metadata") or {}).get("name", "")
        pod = self.store.get("pods", target.namespace, name)
        if pod is None:
            raise st.not_found("pods", name)
        return self._bind(pod, body)

    # ---- pods/eviction ------------------------------------------------------------------------------------
    async def eviction(self, request: web.Request, target: Target) -> web.Response:
        """EvictionREST.Create (kubernetes v1.37 pkg/registry/core/pod/storage/eviction.go): the pod's
        disruption budget takes one disruption or the eviction is refused with 429, then the pod gets the
        DisruptionTarget condition and is deleted with the eviction's options (its grace period)."""
        body = await decode_body(request, MAX_BODY)
        if not isinstance(body, dict):
            raise st.bad_request("not a Eviction object")
        if (body.get("metadata") or {}).get("name") not in (None, "", target.name):
            raise st.bad_request("name in URL does not match name in Eviction object")
        options = dict(body.get("deleteOptions") or {})
        dry_run = "All" in (options.get("dryRun") or []) or request.query.get("dryRun") == "All"
        pod = stored(self.store, target)
        pdbs = self.store.objects(disruption.PDBS, target.namespace)
        verdict = disruption.evict(pod, pdbs, now=time.time(), dry_run=dry_run)
        if not verdict.allowed:
            details: dict[str, Any] = {}
            if verdict.causes:
                details["causes"] = [dict(c) for c in verdict.causes]
            if verdict.retry_after:
                details["retryAfterSeconds"] = verdict.retry_after
            headers = {"Retry-After": str(verdict.retry_after)} if verdict.retry_after else None
            raise st.ApiStatus(verdict.code, verdict.reason, verdict.message, details=details or None,
                               headers=headers)
        if verdict.pdb_status is not None:
            status = verdict.pdb_status

            def budget(obj: dict[str, Any]) -> None:
                obj["status"] = status

            self.store.mutate(disruption.PDBS, target.namespace, verdict.pdb_name, budget)
        if not dry_run:
            stamp = time.time()

            def condition(obj: dict[str, Any]) -> None:
                current = obj.setdefault("status", {})
                current["conditions"] = disruption.disruption_target(current.get("conditions") or [], stamp)

            assert target.namespace is not None and target.name is not None
            pod = self.store.mutate("pods", target.namespace, target.name, condition)
            self.controllers.delete(BY_KEY["pods"], pod, options)
        return _json({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201},
                     status=201)

    # ---- serviceaccounts/token ----------------------------------------------------------------------------
    async def token(self, request: web.Request, target: Target) -> web.Response:
        body = await read_object(request, target, kind="TokenRequest", api_version="authentication.k8s.io/v1")
        sa = stored(self.store, target)
        spec = body.get("spec") or {}
        seconds = int(spec.get("expirationSeconds") or 3600)
        if seconds < 600:
            raise st.invalid("TokenRequest", sa["metadata"]["name"], [
                {"reason": "FieldValueInvalid", "message": "may not specify a duration less than 10 minutes",
                 "field": "spec.expirationSeconds"}], "authentication.k8s.io")
        seconds = min(seconds, MAX_TOKEN_SECONDS)
        assert target.namespace is not None and target.name is not None
        token, expires = self.tokens.issue(target.namespace, target.name, expiration_seconds=seconds)
        stamp = datetime.datetime.fromtimestamp(expires, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        answer = {"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
                  "metadata": {"name": target.name, "namespace": target.namespace, "creationTimestamp": None},
                  "spec": {"audiences": spec.get("audiences") or ["https://kubernetes.default.svc.cluster.local"],
                           "expirationSeconds": seconds, "boundObjectRef": spec.get("boundObjectRef")},
                  "status": {"token": token, "expirationTimestamp": stamp}}
        return _json(answer, status=201)

    # ---- review resources (create-only, nothing stored) ----------------------------------------------------
    async def review(self, request: web.Request, target: Target, user: UserInfo) -> web.Response:
        r = target.resource
        if r.plural == "bindings":
            return await self.bindings_create(request, target)
        body = await read_object(request, target, kind=r.kind, api_version=r.api_version)
        policy = self.access.policy
        try:
            if r.plural == "selfsubjectaccessreviews":
                return _json(identity.self_subject_access_review(body, user, policy), status=201)
            if r.plural == "subjectaccessreviews":
                return _json(identity.subject_access_review(body, policy), status=201)
            if r.plural == "localsubjectaccessreviews":
                spec = body.get("spec") or {}
                attrs = spec.get("resourceAttributes") or {}
                if attrs.get("namespace") not in (None, "", target.namespace):
                    raise st.bad_request("spec.resourceAttributes.namespace must match the request namespace")
                spec = body.setdefault("spec", {})
                spec.setdefault("resourceAttributes", {})["namespace"] = target.namespace
                answer = identity.subject_access_review(body, policy)
                answer["kind"] = "LocalSubjectAccessReview"
                return _json(answer, status=201)
        except identity.ReviewInvalid as error:
            raise st.ApiStatus(422, "Invalid", error.status["message"], details=error.status.get("details")
                               ) from None
        if r.plural == "selfsubjectrulesreviews":
            return _json(identity.self_subject_rules_review(body, user, policy), status=201)
        if r.plural == "selfsubjectreviews":
            return _json({"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1",
                          "metadata": {"creationTimestamp": None}, "status": {"userInfo": user.to_dict()}},
                         status=201)
        raise st.method_not_allowed()
