"""Kubernetes RBAC authorization, rule for rule (plugin/pkg/auth/authorizer/rbac), on plain RBAC dicts.

How the API server calls this:
    policy = Policy.build(roles=..., cluster_roles=..., role_bindings=..., cluster_role_bindings=...)
    attrs = RequestAttributes(user="system:serviceaccount:ns:sa", groups=(...), verb="create",
                              resource="pods", namespace="ns")
    decision = policy.authorize(attrs)          # or authorize(attrs, roles=..., ...) in one call
    if not decision.allowed:
        body = forbidden_status(attrs, decision.reason)   # the 403 Status, message and details as real
Seed the store with BOOTSTRAP_CLUSTER_ROLES and BOOTSTRAP_CLUSTER_ROLE_BINDINGS at start-up. Rebuild the
Policy when any RBAC object changes (building is linear in the number of RBAC objects).
Members of `system:masters` are allowed everything before RBAC is consulted, as on a real server.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

MASTERS = "system:masters"
SA_PREFIX = "system:serviceaccount:"
RBAC_GROUP = "rbac.authorization.k8s.io"


@dataclass(frozen=True)
class RequestAttributes:
    """What is being asked: `resource_request=False` means a non-resource URL (`path`)."""

    user: str
    groups: tuple[str, ...] = ()
    verb: str = "get"
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    namespace: str = ""
    resource_request: bool = True
    path: str = ""
    api_version: str = "v1"


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""


def _matches(values: Iterable[str], wanted: str) -> bool:
    return any(v == "*" or v == wanted for v in values)


def resource_matches(rule_resources: Iterable[str], resource: str, subresource: str) -> bool:
    combined = f"{resource}/{subresource}" if subresource else resource
    for item in rule_resources:
        if item in ("*", combined):
            return True
        if subresource and item == f"*/{subresource}":
            return True
    return False


def non_resource_url_matches(rule_urls: Iterable[str], path: str) -> bool:
    for url in rule_urls:
        if url in ("*", path):
            return True
        if url.endswith("*") and path.startswith(url[:-1]):
            return True
    return False


def rule_allows(attrs: RequestAttributes, rule: Mapping[str, Any]) -> bool:
    """RuleAllows: one PolicyRule against one request."""
    if not _matches(rule.get("verbs") or [], attrs.verb):
        return False
    if not attrs.resource_request:
        return non_resource_url_matches(rule.get("nonResourceURLs") or [], attrs.path)
    names = rule.get("resourceNames") or []
    return (_matches(rule.get("apiGroups") or [], attrs.api_group)
            and resource_matches(rule.get("resources") or [], attrs.resource, attrs.subresource)
            and (not names or attrs.name in names))


def sa_user(namespace: str, name: str) -> str:
    return f"{SA_PREFIX}{namespace}:{name}"


def applies_to(subject: Mapping[str, Any], user: str, groups: Iterable[str], namespace: str) -> bool:
    """Whether one binding subject is this user; a ServiceAccount without namespace means the binding's."""
    kind, name = subject.get("kind"), subject.get("name", "")
    if kind == "User":
        return bool(user == name)
    if kind == "Group":
        return name in groups
    if kind == "ServiceAccount":
        sa_namespace = subject.get("namespace") or namespace
        return bool(sa_namespace) and user == sa_user(sa_namespace, name)
    return False


def describe_subject(subject: Mapping[str, Any], binding_namespace: str) -> str:
    kind, name = subject.get("kind", ""), subject.get("name", "")
    if kind == "ServiceAccount":
        return f'{kind} "{name}/{subject.get("namespace") or binding_namespace}"'
    return f'{kind} "{name}"'


def _meta(obj: Mapping[str, Any], key: str) -> str:
    return str((obj.get("metadata") or {}).get(key) or "")


@dataclass(frozen=True)
class Policy:
    """Every Role, ClusterRole and binding, indexed for authorizing requests."""

    roles: Mapping[tuple[str, str], Mapping[str, Any]] = field(default_factory=dict)
    cluster_roles: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    role_bindings: Mapping[str, tuple[Mapping[str, Any], ...]] = field(default_factory=dict)
    cluster_role_bindings: tuple[Mapping[str, Any], ...] = ()

    @classmethod
    def build(cls, *, roles: Iterable[Mapping[str, Any]] = (),
              cluster_roles: Iterable[Mapping[str, Any]] = (),
              role_bindings: Iterable[Mapping[str, Any]] = (),
              cluster_role_bindings: Iterable[Mapping[str, Any]] = ()) -> Policy:
        by_namespace: dict[str, list[Mapping[str, Any]]] = {}
        for binding in role_bindings:
            by_namespace.setdefault(_meta(binding, "namespace"), []).append(binding)
        return cls(roles={(_meta(r, "namespace"), _meta(r, "name")): r for r in roles},
                   cluster_roles={_meta(r, "name"): r for r in cluster_roles},
                   role_bindings={ns: tuple(b) for ns, b in by_namespace.items()},
                   cluster_role_bindings=tuple(cluster_role_bindings))

    def role_rules(self, role_ref: Mapping[str, Any], namespace: str) -> tuple[list[Mapping[str, Any]], str]:
        """The rules a roleRef points at, or the error the real resolver reports for a missing role."""
        kind, name = role_ref.get("kind"), role_ref.get("name", "")
        if kind == "Role":
            role = self.roles.get((namespace, name))
            if role is None:
                return [], f'role.{RBAC_GROUP} "{name}" not found'
        elif kind == "ClusterRole":
            role = self.cluster_roles.get(name)
            if role is None:
                return [], f'clusterrole.{RBAC_GROUP} "{name}" not found'
        else:
            return [], f'unsupported role reference kind: "{kind}"'
        return list(role.get("rules") or []), ""

    def rules_for(self, user: str, groups: Iterable[str],
                  namespace: str) -> tuple[list[Mapping[str, Any]], list[str]]:
        """RulesFor: every rule the user holds in `namespace` ("" = cluster-wide only), plus the errors of
        bindings whose role is missing."""
        groups = tuple(groups)
        rules: list[Mapping[str, Any]] = []
        errors: list[str] = []
        bindings = [(b, "") for b in self.cluster_role_bindings]
        if namespace:
            bindings += [(b, namespace) for b in self.role_bindings.get(namespace, ())]
        for binding, where in bindings:
            if any(applies_to(s, user, groups, where) for s in binding.get("subjects") or []):
                found, error = self.role_rules(binding.get("roleRef") or {}, where)
                rules += found
                if error:
                    errors.append(error)
        return rules, errors

    def authorize(self, attrs: RequestAttributes) -> Decision:
        if MASTERS in attrs.groups:
            return Decision(True, "")
        errors: list[str] = []
        for binding in self.cluster_role_bindings:
            decision = self._visit(binding, attrs, "", errors)
            if decision:
                return decision
        if attrs.namespace:
            for binding in self.role_bindings.get(attrs.namespace, ()):
                decision = self._visit(binding, attrs, attrs.namespace, errors)
                if decision:
                    return decision
        if not errors:
            return Decision(False, "")
        joined = errors[0] if len(errors) == 1 else "[" + ", ".join(dict.fromkeys(errors)) + "]"
        return Decision(False, f"RBAC: {joined}")

    def _visit(self, binding: Mapping[str, Any], attrs: RequestAttributes, namespace: str,
               errors: list[str]) -> Decision | None:
        subject = next((s for s in binding.get("subjects") or []
                        if applies_to(s, attrs.user, attrs.groups, namespace)), None)
        if subject is None:
            return None
        ref = binding.get("roleRef") or {}
        rules, error = self.role_rules(ref, namespace)
        if error:
            errors.append(error)
            return None
        if any(rule_allows(attrs, rule) for rule in rules):
            name = _meta(binding, "name")
            source = f'RoleBinding "{name}/{namespace}"' if namespace else f'ClusterRoleBinding "{name}"'
            return Decision(True, f'RBAC: allowed by {source} of {ref.get("kind")} "{ref.get("name")}" to '
                                  f"{describe_subject(subject, namespace)}")
        return None


def authorize(attrs: RequestAttributes, *, roles: Iterable[Mapping[str, Any]] = (),
              cluster_roles: Iterable[Mapping[str, Any]] = (),
              role_bindings: Iterable[Mapping[str, Any]] = (),
              cluster_role_bindings: Iterable[Mapping[str, Any]] = ()) -> Decision:
    """One-shot authorization; build a `Policy` once instead when authorizing many requests."""
    return Policy.build(roles=roles, cluster_roles=cluster_roles, role_bindings=role_bindings,
                        cluster_role_bindings=cluster_role_bindings).authorize(attrs)


def forbidden_message(attrs: RequestAttributes, reason: str = "") -> str:
    """The message of the real 403: `pods "x" is forbidden: User "u" cannot get resource "pods" in ...`."""
    if not attrs.resource_request:
        text = f'User "{attrs.user}" cannot {attrs.verb} path "{attrs.path}"'
    else:
        resource = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
        scope = (f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope")
        text = (f'User "{attrs.user}" cannot {attrs.verb} resource "{resource}" in API group '
                f'"{attrs.api_group}" {scope}')
    if reason:
        text = f"{text}: {reason}"
    if not attrs.resource_request or not attrs.resource:
        return f"forbidden: {text}"
    qualified = f"{attrs.resource}.{attrs.api_group}" if attrs.api_group else attrs.resource
    if attrs.name:
        return f'{qualified} "{attrs.name}" is forbidden: {text}'
    return f"{qualified} is forbidden: {text}"


def forbidden_status(attrs: RequestAttributes, reason: str = "") -> dict[str, Any]:
    """The whole 403 Status body the real server sends."""
    details: dict[str, Any] = {}
    if attrs.name:
        details["name"] = attrs.name
    if attrs.resource_request and attrs.api_group:
        details["group"] = attrs.api_group
    if attrs.resource_request and attrs.resource:
        details["kind"] = attrs.resource
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": forbidden_message(attrs, reason), "reason": "Forbidden", "details": details,
            "code": 403}


def _rule(groups: list[str], resources: list[str], verbs: list[str]) -> dict[str, Any]:
    return {"apiGroups": groups, "resources": resources, "verbs": verbs}


READ = ["get", "list", "watch"]
WRITE = ["create", "delete", "deletecollection", "patch", "update"]
_VIEW_CORE = ["configmaps", "endpoints", "persistentvolumeclaims", "persistentvolumeclaims/status", "pods",
              "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts", "services",
              "services/status", "bindings", "events", "limitranges", "namespaces/status", "pods/log",
              "pods/status", "replicationcontrollers/status", "resourcequotas", "resourcequotas/status"]
_VIEW_RULES = [_rule([""], _VIEW_CORE, READ), _rule([""], ["namespaces"], READ),
               _rule(["apps"], ["daemonsets", "deployments", "deployments/scale", "replicasets",
                                "replicasets/scale", "statefulsets", "statefulsets/scale"], READ),
               _rule(["batch"], ["cronjobs", "jobs", "cronjobs/status", "jobs/status"], READ),
               _rule(["networking.k8s.io"], ["ingresses", "networkpolicies"], READ),
               _rule(["policy"], ["poddisruptionbudgets"], READ)]
_EDIT_RULES = [_rule([""], ["pods/attach", "pods/exec", "pods/portforward", "pods/proxy", "secrets",
                            "services/proxy"], READ),
               _rule([""], ["serviceaccounts"], ["impersonate"]),
               _rule([""], ["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"], WRITE),
               _rule([""], ["pods/eviction"], ["create"]),
               _rule([""], ["configmaps", "events", "persistentvolumeclaims", "replicationcontrollers",
                            "replicationcontrollers/scale", "secrets", "serviceaccounts", "services",
                            "services/proxy"], WRITE),
               _rule([""], ["serviceaccounts/token"], ["create"]),
               _rule(["apps"], ["daemonsets", "deployments", "deployments/rollback", "deployments/scale",
                                "replicasets", "replicasets/scale", "statefulsets", "statefulsets/scale"],
                     WRITE),
               _rule(["batch"], ["cronjobs", "jobs"], WRITE),
               _rule(["networking.k8s.io"], ["ingresses", "networkpolicies"], WRITE),
               _rule(["policy"], ["poddisruptionbudgets"], WRITE)]
_ADMIN_RULES = [_rule(["authorization.k8s.io"], ["localsubjectaccessreviews"], ["create"]),
                _rule([RBAC_GROUP], ["rolebindings", "roles"], [*READ, *WRITE])]


def _cluster_role(name: str, rules: list[dict[str, Any]], *, aggregate: bool = False) -> dict[str, Any]:
    labels = {"kubernetes.io/bootstrapping": "rbac-defaults"}
    if aggregate:
        labels[f"rbac.authorization.k8s.io/aggregate-to-{name}"] = "true"
    return {"apiVersion": f"{RBAC_GROUP}/v1", "kind": "ClusterRole",
            "metadata": {"name": name, "labels": labels,
                         "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
            "rules": rules}


def _cluster_binding(name: str, role: str, groups: list[str]) -> dict[str, Any]:
    return {"apiVersion": f"{RBAC_GROUP}/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
                         "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": RBAC_GROUP, "kind": "Group", "name": g} for g in groups]}


_DISCOVERY_URLS = ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*",
                   "/readyz", "/version", "/version/"]
# The roles a fresh cluster carries (admin/edit/view are the aggregated roles flattened, core groups only).
BOOTSTRAP_CLUSTER_ROLES: tuple[dict[str, Any], ...] = (
    _cluster_role("cluster-admin", [_rule(["*"], ["*"], ["*"]), {"nonResourceURLs": ["*"], "verbs": ["*"]}]),
    _cluster_role("admin", _VIEW_RULES + _EDIT_RULES + _ADMIN_RULES),
    _cluster_role("edit", _VIEW_RULES + _EDIT_RULES),
    _cluster_role("view", _VIEW_RULES),
    _cluster_role("system:discovery", [{"nonResourceURLs": _DISCOVERY_URLS, "verbs": ["get"]}]),
    _cluster_role("system:public-info-viewer", [
        {"nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"], "verbs": ["get"]}]),
    _cluster_role("system:basic-user", [
        _rule(["authorization.k8s.io"], ["selfsubjectaccessreviews", "selfsubjectrulesreviews"], ["create"]),
        _rule(["authentication.k8s.io"], ["selfsubjectreviews"], ["create"])]),
)
BOOTSTRAP_CLUSTER_ROLE_BINDINGS: tuple[dict[str, Any], ...] = (
    _cluster_binding("cluster-admin", "cluster-admin", [MASTERS]),
    _cluster_binding("system:discovery", "system:discovery", ["system:authenticated"]),
    _cluster_binding("system:basic-user", "system:basic-user", ["system:authenticated"]),
    _cluster_binding("system:public-info-viewer", "system:public-info-viewer",
                     ["system:authenticated", "system:unauthenticated"]),
)
