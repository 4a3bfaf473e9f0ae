"""Who is asking and may they: bearer-token authentication, impersonation headers, RBAC authorization.

The RBAC decision itself is `rbac.Policy` (a pure module); this module feeds it the cluster's Roles and
bindings, rebuilt only when one of them changes, and turns a refusal into the real 403 Status.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from localcluster._internal.apimachinery import status as st
from localcluster._internal.auth import identity, rbac
from localcluster._internal.auth.identity import UserInfo, admin_user, service_account_user
from localcluster._internal.auth.tokens import TokenAuthority
from localcluster._internal.storage.store import Event, Store

RBAC_KEYS = frozenset(f"{plural}.rbac.authorization.k8s.io"
                      for plural in ("roles", "clusterroles", "rolebindings", "clusterrolebindings"))


@dataclass(frozen=True)
class Attributes:
    verb: str
    group: str
    resource: str
    subresource: str = ""
    namespace: str = ""
    name: str = ""


class Access:
    def __init__(self, *, store: Store, tokens: TokenAuthority) -> None:
        self.store = store
        self.tokens = tokens
        self._policy: rbac.Policy | None = None
        store.add_listener(self._on_event)

    def _on_event(self, event: Event) -> None:
        if event.resource in RBAC_KEYS:
            self._policy = None

    @property
    def policy(self) -> rbac.Policy:
        if self._policy is None:
            s = self.store
            self._policy = rbac.Policy.build(
                roles=s.objects("roles.rbac.authorization.k8s.io"),
                cluster_roles=s.objects("clusterroles.rbac.authorization.k8s.io"),
                role_bindings=s.objects("rolebindings.rbac.authorization.k8s.io"),
                cluster_role_bindings=s.objects("clusterrolebindings.rbac.authorization.k8s.io"))
        return self._policy

    # ---- authentication -----------------------------------------------------------------------------------
    def user_for_token(self, token: str) -> UserInfo | None:
        if token == self.tokens.admin_token:
            return admin_user()
        claims = self.tokens.verify_service_account(token)
        if claims is None:
            return None
        sa = self.store.get("serviceaccounts", claims.namespace, claims.name)
        if sa is None:
            return None
        return service_account_user(claims.namespace, claims.name, uid=sa["metadata"]["uid"])

    def authenticate(self, headers: Mapping[str, str]) -> UserInfo:
        header = headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        user = self.user_for_token(token.strip()) if scheme.lower() == "bearer" else None
        if user is None:
            raise st.unauthorized()
        return user

    # ---- impersonation ------------------------------------------------------------------------------------
    def impersonate(self, user: UserInfo, headers: Any) -> UserInfo:
        """Apply Impersonate-User/-Group/-Uid after checking the `impersonate` verb for each."""
        if "Impersonate-User" not in headers and "Impersonate-Group" not in headers and (
                "Impersonate-Uid" not in headers):
            return user
        try:
            return identity.impersonate(user, lambda name: headers.getall(name, []), self.policy)
        except identity.ImpersonationError as error:
            body = error.status
            raise st.ApiStatus(error.code, body["reason"], body["message"],
                               details=body.get("details")) from None

    # ---- authorization ------------------------------------------------------------------------------------
    def decide(self, user: UserInfo, attrs: Attributes) -> rbac.Decision:
        return self.policy.authorize(self.request_attributes(user, attrs))

    def request_attributes(self, user: UserInfo, attrs: Attributes) -> rbac.RequestAttributes:
        return rbac.RequestAttributes(user=user.name, groups=user.groups, verb=attrs.verb,
                                      api_group=attrs.group, resource=attrs.resource,
                                      subresource=attrs.subresource, name=attrs.name,
                                      namespace=attrs.namespace)

    def authorize(self, user: UserInfo, attrs: Attributes) -> None:
        if rbac.MASTERS in user.groups:
            return
        request = self.request_attributes(user, attrs)
        decision = self.policy.authorize(request)
        if not decision.allowed:
            raise _forbidden(request, decision.reason)

    def authorize_path(self, user: UserInfo, path: str, verb: str) -> None:
        if rbac.MASTERS in user.groups:
            return
        request = rbac.RequestAttributes(user=user.name, groups=user.groups, verb=verb,
                                         resource_request=False, path=path)
        decision = self.policy.authorize(request)
        if not decision.allowed:
            raise _forbidden(request, decision.reason)


def _forbidden(attrs: rbac.RequestAttributes, reason: str) -> st.ApiStatus:
    body = rbac.forbidden_status(attrs, reason)
    return st.ApiStatus(403, "Forbidden", body["message"], details=body["details"])
