"""Identities: service-account users, impersonation, and (Self)SubjectAccessReview evaluation.

How the API server calls this:
    user = service_account_user("ns", "sa", uid=...)         # the identity behind a ServiceAccount token
    user = admin_user()                                       # the kubeconfig's admin identity
    try:
        user = impersonate(user, request.headers.getall, policy)   # Impersonate-User / -Group / -Uid
    except ImpersonationError as e:
        return e.code, e.status                               # 400 BadRequest or the real 403 Forbidden
    attrs = rbac.RequestAttributes(user=user.name, groups=user.groups, ...)
    body = self_subject_access_review(request_body, user, policy)   # POST selfsubjectaccessreviews
    body = subject_access_review(request_body, policy)              # POST subjectaccessreviews
    body = self_subject_rules_review(request_body, user, policy)    # POST selfsubjectrulesreviews
Review functions raise `ReviewInvalid` (a 422 whose `status` is ready to send) for malformed specs.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from localcluster._internal.apimachinery import fielderrors
from localcluster._internal.auth import rbac

AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
ANONYMOUS = "system:anonymous"
SERVICE_ACCOUNTS = "system:serviceaccounts"
ADMIN_NAME = "kubernetes-admin"


@dataclass(frozen=True)
class UserInfo:
    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"username": self.name, "groups": list(self.groups)}
        if self.uid:
            out["uid"] = self.uid
        return out


def service_account_groups(namespace: str) -> tuple[str, ...]:
    return (SERVICE_ACCOUNTS, f"{SERVICE_ACCOUNTS}:{namespace}", AUTHENTICATED)


def service_account_user(namespace: str, name: str, *, uid: str = "") -> UserInfo:
    return UserInfo(rbac.sa_user(namespace, name), service_account_groups(namespace), uid)


def admin_user() -> UserInfo:
    return UserInfo(ADMIN_NAME, (rbac.MASTERS, AUTHENTICATED))


def anonymous_user() -> UserInfo:
    return UserInfo(ANONYMOUS, (UNAUTHENTICATED,))


def split_service_account(username: str) -> tuple[str, str] | None:
    """(namespace, name) for `system:serviceaccount:NS:NAME`, else None."""
    if not username.startswith(rbac.SA_PREFIX):
        return None
    parts = username[len(rbac.SA_PREFIX):].split(":")
    if len(parts) != 2 or not all(parts):
        return None
    return parts[0], parts[1]


def _bad_request(message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": "BadRequest", "code": 400}


class ImpersonationError(Exception):
    """The request may not act as someone else; `status` is the body to send with HTTP `code`."""

    def __init__(self, code: int, status: dict[str, Any]) -> None:
        super().__init__(status["message"])
        self.code = code
        self.status = status


def impersonation_checks(username: str, groups: Sequence[str], uid: str) -> list[rbac.RequestAttributes]:
    """The `impersonate` permissions the actor needs (user/serviceaccount, each group, the uid)."""
    wanted: list[rbac.RequestAttributes] = []
    sa = split_service_account(username)
    if sa:
        wanted.append(rbac.RequestAttributes(user="", verb="impersonate", resource="serviceaccounts",
                                             namespace=sa[0], name=sa[1]))
    else:
        wanted.append(rbac.RequestAttributes(user="", verb="impersonate", resource="users", name=username))
    for group in groups:
        wanted.append(rbac.RequestAttributes(user="", verb="impersonate", resource="groups", name=group))
    if uid:
        wanted.append(rbac.RequestAttributes(user="", verb="impersonate", api_group="authentication.k8s.io",
                                             resource="uids", name=uid))
    return wanted


def can_impersonate(actor: UserInfo, username: str, groups: Sequence[str], policy: rbac.Policy, *,
                    uid: str = "") -> tuple[bool, rbac.RequestAttributes | None, str]:
    """(allowed, the first refused check, its reason) for `actor` acting as `username` with `groups`."""
    for check in impersonation_checks(username, groups, uid):
        attrs = replace(check, user=actor.name, groups=actor.groups)
        decision = policy.authorize(attrs)
        if not decision.allowed:
            return False, attrs, decision.reason
    return True, None, ""


def impersonate(actor: UserInfo, header: Callable[[str], Sequence[str]], policy: rbac.Policy) -> UserInfo:
    """The identity a request acts as: `header(name)` returns every value of a request header."""
    users = list(header("Impersonate-User"))
    groups = list(header("Impersonate-Group"))
    uids = list(header("Impersonate-Uid"))
    if not users:
        if groups or uids:
            # Go's %v of the v1.ObjectReference list the real filter builds
            asked = [f"{{Group  {g}    }}" for g in groups] + [
                f"{{UID  {u}  authentication.k8s.io/v1  }}" for u in uids[:1]]
            raise ImpersonationError(400, _bad_request(
                f"requested [{' '.join(asked)}] without impersonating a user"))
        return actor
    username = users[0]
    uid = uids[0] if uids else ""
    allowed, refused, reason = can_impersonate(actor, username, groups, policy, uid=uid)
    if not allowed and refused is not None:
        raise ImpersonationError(403, rbac.forbidden_status(refused, reason))
    final_groups = list(groups)
    sa = split_service_account(username)
    if sa and not groups:
        final_groups = [SERVICE_ACCOUNTS, f"{SERVICE_ACCOUNTS}:{sa[0]}"]
    if username != ANONYMOUS and AUTHENTICATED not in final_groups and UNAUTHENTICATED not in final_groups:
        final_groups.append(AUTHENTICATED)
    return UserInfo(username, tuple(final_groups), uid)


class ReviewInvalid(Exception):
    """A malformed access review: `status` is the 422 body."""

    def __init__(self, status: dict[str, Any]) -> None:
        super().__init__(status["message"])
        self.status = status


def _attributes(spec: Mapping[str, Any], user: UserInfo) -> rbac.RequestAttributes:
    resource = spec.get("resourceAttributes")
    non_resource = spec.get("nonResourceAttributes")
    if resource:
        return rbac.RequestAttributes(
            user=user.name, groups=user.groups, verb=resource.get("verb", ""),
            api_group=resource.get("group", ""),
            resource=resource.get("resource", ""), subresource=resource.get("subresource", ""),
            name=resource.get("name", ""), namespace=resource.get("namespace", ""),
            api_version=resource.get("version", ""))
    assert non_resource is not None  # _check_spec made sure one of the two is there
    return rbac.RequestAttributes(user=user.name, groups=user.groups, verb=non_resource.get("verb", ""),
                                  resource_request=False, path=non_resource.get("path", ""))


def _check_spec(kind: str, spec: Mapping[str, Any], *, need_user: bool) -> None:
    causes: list[fielderrors.Cause] = []
    has_resource = bool(spec.get("resourceAttributes"))
    has_non_resource = bool(spec.get("nonResourceAttributes"))
    if has_resource == has_non_resource:
        value = "null" if not has_resource else "{...}"
        causes.append(fielderrors.Cause(
            "spec.resourceAttributes", fielderrors.INVALID,
            f"Invalid value: \"{value}\": exactly one of nonResourceAttributes or resourceAttributes must be "
            "specified"))
    if need_user and not spec.get("user") and not spec.get("groups"):
        causes.append(fielderrors.invalid("spec.user", "", "at least one of user or group must be specified"))
    if causes:
        raise ReviewInvalid(fielderrors.status_invalid(kind, "", causes, group="authorization.k8s.io"))


def _answer(body: Mapping[str, Any], decision: rbac.Decision, spec: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(body))
    out.setdefault("apiVersion", "authorization.k8s.io/v1")
    metadata = dict(out.get("metadata") or {})
    metadata.setdefault("creationTimestamp", None)
    out["metadata"] = metadata
    out["spec"] = copy.deepcopy(dict(spec))
    status: dict[str, Any] = {"allowed": decision.allowed}
    if decision.reason:
        status["reason"] = decision.reason
    out["status"] = status
    return out


def self_subject_access_review(body: Mapping[str, Any], user: UserInfo,
                               policy: rbac.Policy) -> dict[str, Any]:
    """Answer `kubectl auth can-i`: may the requesting user do what spec.resourceAttributes describes?"""
    spec = body.get("spec") or {}
    _check_spec("SelfSubjectAccessReview", spec, need_user=False)
    decision = policy.authorize(_attributes(spec, user))
    answer = _answer(body, decision, spec)
    answer.setdefault("kind", "SelfSubjectAccessReview")
    return answer


def subject_access_review(body: Mapping[str, Any], policy: rbac.Policy) -> dict[str, Any]:
    """Answer a SubjectAccessReview about spec.user / spec.groups (needs `create subjectaccessreviews`)."""
    spec = body.get("spec") or {}
    _check_spec("SubjectAccessReview", spec, need_user=True)
    user = UserInfo(spec.get("user", ""), tuple(spec.get("groups") or ()), spec.get("uid", ""))
    answer = _answer(body, policy.authorize(_attributes(spec, user)), spec)
    answer.setdefault("kind", "SubjectAccessReview")
    return answer


def self_subject_rules_review(body: Mapping[str, Any], user: UserInfo, policy: rbac.Policy) -> dict[str, Any]:
    """Answer `kubectl auth can-i --list`: every rule the user holds in spec.namespace."""
    spec = body.get("spec") or {}
    rules, errors = policy.rules_for(user.name, user.groups, str(spec.get("namespace") or ""))
    resource_rules = []
    non_resource_rules = []
    for rule in rules:
        if rule.get("nonResourceURLs"):
            non_resource_rules.append({"verbs": list(rule.get("verbs") or []),
                                       "nonResourceURLs": list(rule["nonResourceURLs"])})
        else:
            entry: dict[str, Any] = {"verbs": list(rule.get("verbs") or []),
                                     "apiGroups": list(rule.get("apiGroups") or []),
                                     "resources": list(rule.get("resources") or [])}
            if rule.get("resourceNames"):
                entry["resourceNames"] = list(rule["resourceNames"])
            resource_rules.append(entry)
    status: dict[str, Any] = {"resourceRules": resource_rules, "nonResourceRules": non_resource_rules,
                              "incomplete": bool(errors)}
    if errors:
        status["evaluationError"] = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
    answer = _answer(body, rbac.Decision(False), spec)
    answer["status"] = status
    answer.setdefault("kind", "SelfSubjectRulesReview")
    return answer
