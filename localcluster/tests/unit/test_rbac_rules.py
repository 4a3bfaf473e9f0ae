"""RBAC authorization, forbidden messages, impersonation and access reviews of the local cluster."""

from __future__ import annotations

from typing import Any

import pytest

from localcluster._internal.auth import escalation, identity, rbac
from localcluster._internal.auth.rbac import Decision, RequestAttributes

G = "rbac.authorization.k8s.io"
SA = "system:serviceaccount:team:trainer"
SA_GROUPS = ("system:serviceaccounts", "system:serviceaccounts:team", "system:authenticated")


def role(name: str, rules: list[dict[str, Any]], namespace: str = "team") -> dict[str, Any]:
    return {"kind": "Role", "metadata": {"name": name, "namespace": namespace}, "rules": rules}


def cluster_role(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {"kind": "ClusterRole", "metadata": {"name": name}, "rules": rules}


def binding(
    name: str, ref_kind: str, ref: str, subjects: list[dict[str, Any]], namespace: str | None = "team"
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {
        "kind": "RoleBinding" if namespace else "ClusterRoleBinding",
        "metadata": meta,
        "roleRef": {"apiGroup": G, "kind": ref_kind, "name": ref},
        "subjects": subjects,
    }


SA_SUBJECT = {"kind": "ServiceAccount", "name": "trainer", "namespace": "team"}
POLICY = rbac.Policy.build(
    roles=[
        role("pod-maker", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "list"]}]),
        role("log-reader", [{"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}]),
        role(
            "one-secret",
            [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["ssh"], "verbs": ["get"]}],
        ),
        role("scaler", [{"apiGroups": ["apps"], "resources": ["*/scale"], "verbs": ["update"]}]),
    ],
    cluster_roles=[
        *rbac.BOOTSTRAP_CLUSTER_ROLES,
        cluster_role("node-reader", [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}]),
        cluster_role("everything", [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]),
        cluster_role("metrics", [{"nonResourceURLs": ["/metrics", "/logs/*"], "verbs": ["get"]}]),
    ],
    role_bindings=[
        binding("makers", "Role", "pod-maker", [SA_SUBJECT]),
        binding("logs", "Role", "log-reader", [{"kind": "ServiceAccount", "name": "trainer"}]),
        binding("secret", "Role", "one-secret", [{"kind": "User", "name": "alice"}]),
        binding("scale", "Role", "scaler", [{"kind": "Group", "name": "ops"}]),
        binding(
            "all-sas",
            "ClusterRole",
            "everything",
            [{"kind": "Group", "name": "system:serviceaccounts:sandbox"}],
            namespace="sandbox",
        ),
        binding("dangling", "Role", "missing", [{"kind": "User", "name": "bob"}]),
    ],
    cluster_role_bindings=[
        *rbac.BOOTSTRAP_CLUSTER_ROLE_BINDINGS,
        binding("nodes", "ClusterRole", "node-reader", [SA_SUBJECT], namespace=None),
        binding("metrics", "ClusterRole", "metrics", [{"kind": "User", "name": "carol"}], namespace=None),
    ],
)


def sa(verb: str, resource: str, namespace: str = "team", **kw: Any) -> RequestAttributes:
    return RequestAttributes(
        user=SA, groups=SA_GROUPS, verb=verb, resource=resource, namespace=namespace, **kw
    )


CASES = [
    (
        "role binding grants create",
        sa("create", "pods"),
        Decision(
            True,
            'RBAC: allowed by RoleBinding "makers/team" of Role "pod-maker" to ServiceAccount "trainer/team"',
        ),
    ),
    ("verb not in rule", sa("delete", "pods"), Decision(False, "")),
    ("role binding is namespaced", sa("create", "pods", namespace="other"), Decision(False, "")),
    ("subresource needs its own rule", sa("get", "pods", subresource="exec"), Decision(False, "")),
    (
        "pods/log rule; subject namespace defaults to the binding's",
        sa("get", "pods", subresource="log"),
        Decision(
            True,
            'RBAC: allowed by RoleBinding "logs/team" of Role "log-reader" to ServiceAccount "trainer/team"',
        ),
    ),
    ("pods/log does not grant pods", sa("list", "pods", namespace="x"), Decision(False, "")),
    (
        "cluster role binding is cluster-wide",
        sa("list", "nodes", namespace=""),
        Decision(
            True,
            'RBAC: allowed by ClusterRoleBinding "nodes" of ClusterRole "node-reader" to '
            'ServiceAccount "trainer/team"',
        ),
    ),
    ("api group must match", sa("create", "pods", api_group="apps"), Decision(False, "")),
    (
        "resourceNames allow the named object",
        RequestAttributes(user="alice", verb="get", resource="secrets", name="ssh", namespace="team"),
        Decision(True, 'RBAC: allowed by RoleBinding "secret/team" of Role "one-secret" to User "alice"'),
    ),
    (
        "resourceNames refuse other names",
        RequestAttributes(user="alice", verb="get", resource="secrets", name="tls", namespace="team"),
        Decision(False, ""),
    ),
    (
        "resourceNames refuse list (no name)",
        RequestAttributes(user="alice", verb="list", resource="secrets", namespace="team"),
        Decision(False, ""),
    ),
    (
        "*/scale matches any scale subresource",
        RequestAttributes(
            user="dave",
            groups=("ops",),
            verb="update",
            api_group="apps",
            resource="deployments",
            subresource="scale",
            namespace="team",
        ),
        Decision(True, 'RBAC: allowed by RoleBinding "scale/team" of Role "scaler" to Group "ops"'),
    ),
    (
        "*/scale does not match the resource itself",
        RequestAttributes(
            user="dave",
            groups=("ops",),
            verb="update",
            api_group="apps",
            resource="deployments",
            namespace="team",
        ),
        Decision(False, ""),
    ),
    (
        "group system:serviceaccounts:NS with a ClusterRole in a RoleBinding",
        RequestAttributes(
            user="system:serviceaccount:sandbox:x",
            groups=("system:serviceaccounts", "system:serviceaccounts:sandbox"),
            verb="delete",
            api_group="batch",
            resource="jobs",
            namespace="sandbox",
        ),
        Decision(
            True,
            'RBAC: allowed by RoleBinding "all-sas/sandbox" of ClusterRole "everything" to '
            'Group "system:serviceaccounts:sandbox"',
        ),
    ),
    (
        "ClusterRole through a RoleBinding stays in its namespace",
        RequestAttributes(
            user="system:serviceaccount:sandbox:x",
            groups=("system:serviceaccounts:sandbox",),
            verb="delete",
            resource="pods",
            namespace="team",
        ),
        Decision(False, ""),
    ),
    (
        "system:masters bypasses RBAC",
        RequestAttributes(user="admin", groups=("system:masters",), verb="delete", resource="nodes"),
        Decision(True, ""),
    ),
    (
        "missing role is reported as the reason",
        RequestAttributes(user="bob", verb="get", resource="pods", namespace="team"),
        Decision(False, f'RBAC: role.{G} "missing" not found'),
    ),
    (
        "non-resource URL with a trailing *",
        RequestAttributes(user="carol", verb="get", resource_request=False, path="/logs/kubelet.log"),
        Decision(
            True, 'RBAC: allowed by ClusterRoleBinding "metrics" of ClusterRole "metrics" to User "carol"'
        ),
    ),
    (
        "non-resource URL exact",
        RequestAttributes(user="carol", verb="get", resource_request=False, path="/metricsx"),
        Decision(False, ""),
    ),
    (
        "discovery for every authenticated user",
        RequestAttributes(
            user="z",
            groups=("system:authenticated",),
            verb="get",
            resource_request=False,
            path="/apis/rbac.authorization.k8s.io/v1",
        ),
        Decision(
            True,
            'RBAC: allowed by ClusterRoleBinding "system:discovery" of ClusterRole "system:discovery" '
            'to Group "system:authenticated"',
        ),
    ),
    (
        "SelfSubjectAccessReview for every authenticated user",
        RequestAttributes(
            user="z",
            groups=("system:authenticated",),
            verb="create",
            api_group="authorization.k8s.io",
            resource="selfsubjectaccessreviews",
        ),
        Decision(
            True,
            'RBAC: allowed by ClusterRoleBinding "system:basic-user" of ClusterRole "system:basic-user" '
            'to Group "system:authenticated"',
        ),
    ),
    (
        "unauthenticated users get nothing but public info",
        RequestAttributes(
            user="system:anonymous",
            groups=("system:unauthenticated",),
            verb="get",
            resource_request=False,
            path="/api",
        ),
        Decision(False, ""),
    ),
]


@pytest.mark.parametrize(("attrs", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_authorize(attrs: RequestAttributes, expected: Decision) -> None:
    assert POLICY.authorize(attrs) == expected


def test_one_shot_authorize_matches_policy() -> None:
    attrs = sa("create", "pods")
    decision = rbac.authorize(
        attrs,
        roles=POLICY.roles.values(),
        cluster_roles=POLICY.cluster_roles.values(),
        role_bindings=[b for bs in POLICY.role_bindings.values() for b in bs],
        cluster_role_bindings=POLICY.cluster_role_bindings,
    )
    assert decision == POLICY.authorize(attrs)


def test_edit_and_view_roles() -> None:
    policy = rbac.Policy.build(
        cluster_roles=rbac.BOOTSTRAP_CLUSTER_ROLES,
        role_bindings=[
            binding("e", "ClusterRole", "edit", [{"kind": "User", "name": "ed"}]),
            binding("v", "ClusterRole", "view", [{"kind": "User", "name": "vi"}]),
        ],
    )
    answers = {
        (user, verb, resource): policy.authorize(
            RequestAttributes(user=user, verb=verb, resource=resource, namespace="team")
        ).allowed
        for user in ("ed", "vi")
        for verb in ("get", "create")
        for resource in ("pods", "secrets")
    }
    assert answers == {
        ("ed", "get", "pods"): True,
        ("ed", "create", "pods"): True,
        ("ed", "get", "secrets"): True,
        ("ed", "create", "secrets"): True,
        ("vi", "get", "pods"): True,
        ("vi", "create", "pods"): False,
        ("vi", "get", "secrets"): False,
        ("vi", "create", "secrets"): False,
    }


MESSAGES = [
    (
        sa("create", "pods"),
        "",
        'pods is forbidden: User "system:serviceaccount:team:trainer" cannot create resource '
        '"pods" in API group "" '
        'in the namespace "team"',
    ),
    (
        sa("get", "pods", subresource="log", name="w-0"),
        "",
        'pods "w-0" is forbidden: User "system:serviceaccount:team:trainer" cannot get resource '
        '"pods/log" in API '
        'group "" in the namespace "team"',
    ),
    (
        sa("list", "nodes", namespace=""),
        "",
        'nodes is forbidden: User "system:serviceaccount:team:trainer" cannot list resource '
        '"nodes" in API group "" '
        "at the cluster scope",
    ),
    (
        RequestAttributes(user="bob", verb="get", api_group=G, resource="roles", name="r", namespace="team"),
        f'RBAC: role.{G} "missing" not found',
        f'roles.{G} "r" is forbidden: User "bob" cannot get resource "roles" in API group "{G}" '
        f"in the namespace "
        f'"team": RBAC: role.{G} "missing" not found',
    ),
    (
        RequestAttributes(user="bob", verb="get", resource_request=False, path="/metrics"),
        "",
        'forbidden: User "bob" cannot get path "/metrics"',
    ),
]


@pytest.mark.parametrize(("attrs", "reason", "expected"), MESSAGES)
def test_forbidden_message(attrs: RequestAttributes, reason: str, expected: str) -> None:
    assert rbac.forbidden_message(attrs, reason) == expected


def test_forbidden_status_body() -> None:
    assert rbac.forbidden_status(sa("get", "pods", name="w-0")) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "w-0" is forbidden: User "system:serviceaccount:team:trainer" cannot get resource '
        '"pods" in API group "" in the namespace "team"',
        "reason": "Forbidden",
        "details": {"name": "w-0", "kind": "pods"},
        "code": 403,
    }


def test_service_account_identity() -> None:
    user = identity.service_account_user("team", "trainer", uid="u1")
    assert user == identity.UserInfo(SA, SA_GROUPS, "u1")
    assert identity.split_service_account(SA) == ("team", "trainer")
    assert identity.split_service_account("system:serviceaccount:team") is None
    assert identity.split_service_account("alice") is None


IMPERSONATOR_POLICY = rbac.Policy.build(
    cluster_roles=[
        cluster_role(
            "impersonator",
            [
                {
                    "apiGroups": [""],
                    "resources": ["users"],
                    "resourceNames": ["alice"],
                    "verbs": ["impersonate"],
                },
                {
                    "apiGroups": [""],
                    "resources": ["groups"],
                    "resourceNames": ["ops"],
                    "verbs": ["impersonate"],
                },
                {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"]},
            ],
        )
    ],
    cluster_role_bindings=[
        binding("imp", "ClusterRole", "impersonator", [{"kind": "User", "name": "ci"}], namespace=None)
    ],
)
CI = identity.UserInfo("ci", ("system:authenticated",))


def headers(**values: list[str]) -> Any:
    named = {k.replace("_", "-"): v for k, v in values.items()}
    return lambda name: named.get(name, [])


IMPERSONATIONS = [
    ("no headers: yourself", CI, headers(), identity.UserInfo("ci", ("system:authenticated",))),
    (
        "user gets system:authenticated",
        CI,
        headers(Impersonate_User=["alice"]),
        identity.UserInfo("alice", ("system:authenticated",)),
    ),
    (
        "user and allowed group",
        CI,
        headers(Impersonate_User=["alice"], Impersonate_Group=["ops"]),
        identity.UserInfo("alice", ("ops", "system:authenticated")),
    ),
    ("service account gets its groups", CI, headers(Impersonate_User=[SA]), identity.UserInfo(SA, SA_GROUPS)),
    (
        "masters may impersonate anyone",
        identity.admin_user(),
        headers(Impersonate_User=["x"], Impersonate_Group=["system:masters"]),
        identity.UserInfo("x", ("system:masters", "system:authenticated")),
    ),
]


@pytest.mark.parametrize(
    ("actor", "header", "expected"), [c[1:] for c in IMPERSONATIONS], ids=[c[0] for c in IMPERSONATIONS]
)
def test_impersonate(actor: identity.UserInfo, header: Any, expected: identity.UserInfo) -> None:
    assert identity.impersonate(actor, header, IMPERSONATOR_POLICY) == expected


REFUSALS = [
    (
        headers(Impersonate_User=["bob"]),
        403,
        'users "bob" is forbidden: User "ci" cannot impersonate resource "users" in API group '
        '"" at the cluster '
        "scope",
    ),
    (
        headers(Impersonate_User=["alice"], Impersonate_Group=["system:masters"]),
        403,
        'groups "system:masters" is forbidden: User "ci" cannot impersonate resource "groups" '
        'in API group "" at '
        "the cluster scope",
    ),
    (headers(Impersonate_Group=["ops"]), 400, "requested [{Group  ops    }] without impersonating a user"),
]


@pytest.mark.parametrize(("header", "code", "message"), REFUSALS)
def test_impersonation_refused(header: Any, code: int, message: str) -> None:
    with pytest.raises(identity.ImpersonationError) as caught:
        identity.impersonate(CI, header, IMPERSONATOR_POLICY)
    assert (caught.value.code, caught.value.status["message"]) == (code, message)


def test_impersonating_a_service_account_needs_namespace_permission() -> None:
    policy = rbac.Policy.build(
        cluster_roles=rbac.BOOTSTRAP_CLUSTER_ROLES,
        role_bindings=[binding("e", "ClusterRole", "edit", [{"kind": "User", "name": "ed"}])],
    )
    ed = identity.UserInfo("ed", ("system:authenticated",))
    assert identity.impersonate(ed, headers(Impersonate_User=[SA]), policy).name == SA
    with pytest.raises(identity.ImpersonationError) as caught:
        identity.impersonate(ed, headers(Impersonate_User=["system:serviceaccount:other:x"]), policy)
    assert caught.value.status["message"] == (
        'serviceaccounts "x" is forbidden: User "ed" cannot impersonate resource '
        '"serviceaccounts" in API group "" '
        'in the namespace "other"'
    )


def test_self_subject_access_review() -> None:
    body = {
        "kind": "SelfSubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {},
        "spec": {"resourceAttributes": {"namespace": "team", "verb": "create", "resource": "pods"}},
    }
    user = identity.service_account_user("team", "trainer")
    assert identity.self_subject_access_review(body, user, POLICY) == {
        "kind": "SelfSubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": None},
        "spec": {"resourceAttributes": {"namespace": "team", "verb": "create", "resource": "pods"}},
        "status": {
            "allowed": True,
            "reason": 'RBAC: allowed by RoleBinding "makers/team" of Role "pod-maker" to '
            'ServiceAccount "trainer/team"',
        },
    }
    body["spec"] = {"nonResourceAttributes": {"path": "/metrics", "verb": "get"}}
    assert identity.self_subject_access_review(body, user, POLICY)["status"] == {"allowed": False}


def test_subject_access_review_about_someone_else() -> None:
    body = {
        "kind": "SubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "spec": {
            "user": "alice",
            "resourceAttributes": {"namespace": "team", "verb": "get", "resource": "secrets", "name": "ssh"},
        },
    }
    assert identity.subject_access_review(body, POLICY)["status"] == {
        "allowed": True,
        "reason": 'RBAC: allowed by RoleBinding "secret/team" of Role "one-secret" to User "alice"',
    }


def test_malformed_review_is_invalid() -> None:
    with pytest.raises(identity.ReviewInvalid) as caught:
        identity.subject_access_review({"spec": {}}, POLICY)
    assert caught.value.status["message"] == (
        'SubjectAccessReview.authorization.k8s.io "" is invalid: [spec.resourceAttributes: '
        'Invalid value: "null": '
        "exactly one of nonResourceAttributes or resourceAttributes must be specified, "
        "spec.user: Invalid value: "
        '"": at least one of user or group must be specified]'
    )
    assert caught.value.status["code"] == 422


# ---- escalation prevention ----
ESCALATION_POLICY = rbac.Policy.build(
    roles=[
        role("pods-rw", [{"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "create"]}]),
        role(
            "rbac-writer", [{"apiGroups": [G], "resources": ["roles", "rolebindings"], "verbs": ["create"]}]
        ),
    ],
    cluster_roles=[
        cluster_role(
            "binder",
            [{"apiGroups": [G], "resources": ["clusterroles"], "verbs": ["bind"], "resourceNames": ["view"]}],
        ),
        cluster_role("view", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]),
        cluster_role("any-log", [{"apiGroups": [""], "resources": ["*/log"], "verbs": ["get"]}]),
    ],
    role_bindings=[
        binding("rw", "Role", "pods-rw", [SA_SUBJECT]),
        binding("writer", "Role", "rbac-writer", [SA_SUBJECT]),
        binding("bind-view", "ClusterRole", "binder", [SA_SUBJECT]),
    ],
)


def new_role(rules: list[dict[str, Any]]) -> dict[str, Any]:
    return role("new", rules)


ESCALATIONS = [
    (
        "a subset of what is held",
        "roles",
        new_role([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]),
        None,
    ),
    (
        "more verbs than held, compacted per resource",
        "roles",
        new_role([{"apiGroups": [""], "resources": ["pods", "secrets"], "verbs": ["get", "delete", "list"]}]),
        'roles.rbac.authorization.k8s.io "new" is forbidden: user "system:serviceaccount:team:trainer" '
        '(groups=["system:serviceaccounts" "system:serviceaccounts:team" '
        '"system:authenticated"]) is attempting '
        "to grant RBAC permissions not currently held:\n"
        '{APIGroups:[""], Resources:["pods"], Verbs:["delete" "list"]}\n'
        '{APIGroups:[""], Resources:["secrets"], Verbs:["get" "delete" "list"]}',
    ),
    (
        "a binding to a role whose rules are held",
        "rolebindings",
        binding("b", "Role", "pods-rw", [{"kind": "User", "name": "x"}]),
        None,
    ),
    (
        "bind permission on the named ClusterRole",
        "rolebindings",
        binding("b", "ClusterRole", "view", [{"kind": "User", "name": "x"}]),
        None,
    ),
    (
        "a binding granting what is not held",
        "rolebindings",
        binding("b", "ClusterRole", "any-log", [{"kind": "User", "name": "x"}]),
        'rolebindings.rbac.authorization.k8s.io "b" is forbidden: user "system:serviceaccount:team:trainer" '
        '(groups=["system:serviceaccounts" "system:serviceaccounts:team" '
        '"system:authenticated"]) is attempting '
        'to grant RBAC permissions not currently held:\n{APIGroups:[""], Resources:["*/log"], Verbs:["get"]}',
    ),
    (
        "a binding to a missing role",
        "rolebindings",
        binding("b", "Role", "ghost", []),
        'rolebindings.rbac.authorization.k8s.io "b" is forbidden: '
        'role.rbac.authorization.k8s.io "ghost" not found',
    ),
]


@pytest.mark.parametrize(
    ("resource", "obj", "message"), [c[1:] for c in ESCALATIONS], ids=[c[0] for c in ESCALATIONS]
)
def test_escalation(resource: str, obj: dict[str, Any], message: str | None) -> None:
    body = escalation.escalation_forbidden(
        ESCALATION_POLICY, SA, SA_GROUPS, resource=resource, obj=obj, namespace="team"
    )
    assert (body or {}).get("message") == message


def test_masters_and_escalate_verb_skip_the_check() -> None:
    everything = new_role([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}])
    assert (
        escalation.escalation_forbidden(
            ESCALATION_POLICY, "root", ("system:masters",), resource="roles", obj=everything, namespace="team"
        )
        is None
    )
    policy = rbac.Policy.build(
        cluster_roles=[
            cluster_role("esc", [{"apiGroups": [G], "resources": ["roles"], "verbs": ["escalate"]}])
        ],
        role_bindings=[binding("e", "ClusterRole", "esc", [{"kind": "User", "name": "eve"}])],
    )
    assert (
        escalation.escalation_forbidden(policy, "eve", (), resource="roles", obj=everything, namespace="team")
        is None
    )
    assert (
        escalation.escalation_forbidden(
            policy, "eve", (), resource="roles", obj=everything, namespace="other"
        )
        is not None
    )


@pytest.mark.parametrize(
    ("owner", "sub", "covers"),
    [
        (
            {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
            {"apiGroups": ["x"], "resources": ["y"], "verbs": ["z"]},
            True,
        ),
        (
            {"apiGroups": [""], "resources": ["*/scale"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["deployments/scale"], "verbs": ["get"]},
            True,
        ),
        (
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"], "resourceNames": ["a"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
            False,
        ),
        (
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"], "resourceNames": ["a"]},
            True,
        ),
        (
            {"nonResourceURLs": ["/logs/*"], "verbs": ["get"]},
            {"nonResourceURLs": ["/logs/x"], "verbs": ["get"]},
            True,
        ),
    ],
)
def test_rule_covers(owner: dict[str, Any], sub: dict[str, Any], covers: bool) -> None:
    assert escalation.rule_covers(owner, sub) is covers


def test_self_subject_rules_review_lists_what_can_i_do() -> None:
    body = {
        "kind": "SelfSubjectRulesReview",
        "apiVersion": "authorization.k8s.io/v1",
        "spec": {"namespace": "team"},
    }
    user = identity.UserInfo("bob", ("system:authenticated",))
    answer = identity.self_subject_rules_review(body, user, POLICY)
    assert answer["status"]["resourceRules"] == [
        {
            "verbs": ["create"],
            "apiGroups": ["authorization.k8s.io"],
            "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
        },
        {"verbs": ["create"], "apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"]},
    ]
    assert answer["status"]["nonResourceRules"][0]["nonResourceURLs"][:2] == ["/api", "/api/*"]
    assert (answer["status"]["incomplete"], answer["status"]["evaluationError"]) == (
        True,
        'role.rbac.authorization.k8s.io "missing" not found',
    )
    assert answer["kind"] == "SelfSubjectRulesReview"
