"""RBAC escalation prevention: nobody grants permissions they do not hold (pkg/registry/rbac).

How the API server calls this, on create and update of roles, clusterroles, rolebindings and
clusterrolebindings (after ordinary authorization and validation succeeded):
    body = escalation_forbidden(policy, user.name, user.groups, resource="rolebindings", obj=new_obj,
                                namespace=request_namespace)     # namespace "" for cluster-scoped kinds
    if body is not None:
        return 403, body
Members of system:masters skip the check; a user allowed `escalate` on the role (or `bind` on the
referenced role, for bindings) may grant what they do not hold, as on a real server.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from localcluster._internal.auth.rbac import MASTERS, RBAC_GROUP, Policy, RequestAttributes

Rule = Mapping[str, Any]


def breakdown(rule: Rule) -> list[dict[str, list[str]]]:
    """BreakdownRule: one group, resource, verb and resource name (or one URL and verb) per rule."""
    out: list[dict[str, list[str]]] = []
    names = list(rule.get("resourceNames") or [])
    for group in rule.get("apiGroups") or []:
        for resource in rule.get("resources") or []:
            for verb in rule.get("verbs") or []:
                base = {"apiGroups": [group], "resources": [resource], "verbs": [verb]}
                out += [{**base, "resourceNames": [n]} for n in names] if names else [base]
    for url in rule.get("nonResourceURLs") or []:
        for verb in rule.get("verbs") or []:
            out.append({"nonResourceURLs": [url], "verbs": [verb]})
    return out


def _resources_cover(owned: Sequence[str], wanted: Sequence[str]) -> bool:
    if "*" in owned or all(w in owned for w in wanted):
        return True
    for path in wanted:
        if path in owned:
            continue
        if "/" not in path or "*/" + path.split("/", 1)[1] not in owned:
            return False
    return True


def _url_covers(owner: str, path: str) -> bool:
    return owner == path or (owner.endswith("*") and path.startswith(owner.rstrip("*")))


def rule_covers(owner: Rule, sub: Rule) -> bool:
    """ruleCovers: does one held rule cover one broken-down rule?"""
    verbs, groups = list(owner.get("verbs") or []), list(owner.get("apiGroups") or [])
    owned_names, names = list(owner.get("resourceNames") or []), list(sub.get("resourceNames") or [])
    return (("*" in verbs or all(v in verbs for v in sub.get("verbs") or []))
            and ("*" in groups or all(g in groups for g in sub.get("apiGroups") or []))
            and _resources_cover(list(owner.get("resources") or []), list(sub.get("resources") or []))
            and all(any(_url_covers(o, p) for o in owner.get("nonResourceURLs") or [])
                    for p in sub.get("nonResourceURLs") or [])
            and (not owned_names if not names else (not owned_names or all(n in owned_names for n in names))))


def uncovered(owner_rules: Iterable[Rule], rules: Iterable[Rule]) -> list[dict[str, list[str]]]:
    """Covers: the broken-down rules that no held rule covers."""
    held = list(owner_rules)
    return [sub for rule in rules for sub in breakdown(rule) if not any(rule_covers(o, sub) for o in held)]


def _compact(rules: list[dict[str, list[str]]]) -> list[dict[str, list[str]]]:
    """CompactRules: merge the verbs of rules naming one group, one resource and at most one name."""
    simple: dict[tuple[str, str, str | None], dict[str, list[str]]] = {}
    other: list[dict[str, list[str]]] = []
    for rule in rules:
        names = rule.get("resourceNames") or []
        if (rule.get("nonResourceURLs") or len(names) > 1 or len(rule.get("apiGroups") or []) != 1
                or len(rule.get("resources") or []) != 1):
            other.append(rule)
            continue
        key = (rule["apiGroups"][0], rule["resources"][0], names[0] if names else None)
        if key in simple:
            simple[key]["verbs"] = simple[key]["verbs"] + list(rule.get("verbs") or [])
        else:
            simple[key] = {k: list(v) for k, v in rule.items()}
    return other + list(simple.values())


def _go_strings(values: Sequence[str]) -> str:
    return "[" + " ".join(f'"{v}"' for v in values) + "]"


def compact_string(rule: Mapping[str, Sequence[str]]) -> str:
    """CompactString: `{APIGroups:[""], Resources:["pods"], Verbs:["create"]}`."""
    parts = [f"{label}:{_go_strings(rule[key])}" for label, key in (
        ("APIGroups", "apiGroups"), ("Resources", "resources"), ("NonResourceURLs", "nonResourceURLs"),
        ("ResourceNames", "resourceNames"), ("Verbs", "verbs")) if rule.get(key)]
    return "{" + ", ".join(parts) + "}"


def escalation_message(user: str, groups: Sequence[str], missing: list[dict[str, list[str]]],
                       errors: Sequence[str] = ()) -> str:
    descriptions = sorted({compact_string(r) for r in _compact(missing)})
    message = (f'user "{user}" (groups={_go_strings(groups)}) is attempting to grant RBAC permissions not '
               "currently held:\n" + "\n".join(descriptions))
    if errors:
        message += f"; resolution errors: [{', '.join(errors)}]"
    return message


def _forbidden(resource: str, name: str, text: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": f'{resource}.{RBAC_GROUP} "{name}" is forbidden: {text}', "reason": "Forbidden",
            "details": {"name": name, "group": RBAC_GROUP, "kind": resource}, "code": 403}


def escalation_forbidden(policy: Policy, user: str, groups: Sequence[str], *, resource: str,
                         obj: Mapping[str, Any], namespace: str) -> dict[str, Any] | None:
    """The 403 Status body when writing this RBAC object would grant more than the user holds, else None."""
    if MASTERS in groups:
        return None
    name = str((obj.get("metadata") or {}).get("name") or "")
    if resource in ("roles", "clusterroles"):
        escalate = RequestAttributes(user=user, groups=tuple(groups), verb="escalate", api_group=RBAC_GROUP,
                                     resource=resource, name=name, namespace=namespace)
        if policy.authorize(escalate).allowed:
            return None
        wanted: list[Rule] = list(obj.get("rules") or [])
    elif resource in ("rolebindings", "clusterrolebindings"):
        ref = obj.get("roleRef") or {}
        bind = RequestAttributes(user=user, groups=tuple(groups), verb="bind",
                                 api_group=str(ref.get("apiGroup") or ""),
                                 resource="clusterroles" if ref.get("kind") == "ClusterRole" else "roles",
                                 name=str(ref.get("name") or ""), namespace=namespace)
        if ref.get("kind") in ("Role", "ClusterRole") and policy.authorize(bind).allowed:
            return None
        wanted, error = policy.role_rules(ref, namespace)
        if error:
            return _forbidden(resource, name, error)
    else:
        return None
    held, errors = policy.rules_for(user, groups, namespace)
    missing = uncovered(held, wanted)
    if not missing:
        return None
    return _forbidden(resource, name, escalation_message(user, groups, missing, errors))
