"""The paths that name no resource: /version, discovery (/api, /apis, legacy or aggregated v2), /openapi/v3
and the path list. Resource paths are the API server's (api.py)."""

from __future__ import annotations

from collections.abc import Collection

from aiohttp import web

from localcluster._internal.apimachinery import status as st
from localcluster._internal.apiserver import openapi
from localcluster._internal.apiserver.responses import aggregated_response, json_response
from localcluster._internal.auth.access import Access
from localcluster._internal.auth.identity import UserInfo
from localcluster._internal.storage import registry

SERVER_VERSION = {"major": "1", "minor": "37", "gitVersion": "v1.37.0-localcluster", "gitCommit": "local",
                  "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.25",
                  "compiler": "gc", "platform": "linux/amd64"}
_AGGREGATED = "as=APIGroupDiscoveryList"


def non_resource(request: web.Request, user: UserInfo, *, access: Access, server_address: str,
                 served: Collection[str] = ()) -> web.Response:
    path = request.path.rstrip("/") or "/"
    if request.method not in ("GET", "HEAD"):
        raise st.no_such_path() if not path.startswith(("/api", "/apis")) else st.method_not_allowed()
    access.authorize_path(user, path, "get")
    aggregated = _AGGREGATED in request.headers.get("Accept", "")
    if path == "/api":
        if aggregated:
            return aggregated_response(registry.aggregated_discovery(legacy=True, served=served))
        return json_response(registry.api_versions(server_address))
    if path == "/apis":
        if aggregated:
            return aggregated_response(registry.aggregated_discovery(legacy=False, served=served))
        return json_response(registry.api_group_list(served))
    if path == "/openapi/v3" or path.startswith("/openapi/v3/"):
        doc = openapi.lookup(path, served)
        if doc is None:
            raise st.no_such_path()
        return json_response(doc)
    parts = path.strip("/").split("/")
    if parts[0] == "api" and len(parts) == 2 and parts[1] == "v1":
        return json_response(registry.resource_list("", "v1", served))
    if parts[0] == "apis" and len(parts) == 2 and parts[1] in registry.group_versions(served):
        return json_response(registry.api_group(parts[1]))
    if parts[0] == "apis" and len(parts) == 3 and registry.group_known(parts[1], parts[2], served):
        return json_response(registry.resource_list(parts[1], parts[2], served))
    if path in ("/", "/paths"):
        return json_response({"paths": ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz",
                                        "/version", *sorted(f"/apis/{g}/{v}" for g, v in
                                                            registry.group_versions(served).items() if g)]})
    raise st.no_such_path()
