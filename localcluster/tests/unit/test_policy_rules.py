"""ValidatingAdmissionPolicy's pure rules (admission/policies.py, admission/cel.py) and the OpenShift SCC
double's (doubles/openshift.py): rule matching with subresources and scope, CEL's errors in cel-go's words,
the denial's text, and the SCC's mutation and messages."""

from __future__ import annotations

from typing import Any

import pytest

from localcluster._internal.admission import cel, policies
from localcluster._internal.admission.policies import Attributes
from localcluster._internal.doubles.openshift import Range, RestrictedV2, parse_range


def attributes(operation: str = "CREATE", resource: str = "pods", *, namespace: str = "ns",
               subresource: str = "", obj: dict[str, Any] | None = None) -> Attributes:
    return Attributes(operation=operation, group="", version="v1", resource=resource, kind="Pod", name="p",
                      namespace=namespace, user={"username": "alice", "groups": []}, subresource=subresource,
                      obj=obj if obj is not None else {"metadata": {"name": "p", "labels": {"a": "b"}}})


@pytest.mark.parametrize(("resources", "subresource", "matches"), [
    (["pods"], "", True), (["pods"], "status", False), (["pods/*"], "status", True), (["*"], "", True),
    (["*"], "status", False), (["*/*"], "status", True), (["*/status"], "status", True),
    (["configmaps"], "", False)])
def test_resource_rules_and_subresources(resources: list[str], subresource: str, matches: bool) -> None:
    rule = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"], "resources": resources}
    assert policies.rule_matches(rule, attributes(subresource=subresource)) is matches


def test_scope_and_selectors() -> None:
    rule = {"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["CREATE"], "resources": ["*"],
            "scope": "Cluster"}
    assert not policies.rule_matches(rule, attributes())
    assert policies.rule_matches(rule, attributes(namespace=""))
    match = {"resourceRules": [{**rule, "scope": "*"}], "objectSelector": {"matchLabels": {"a": "b"}},
             "namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "Exists"}]}}
    assert policies.resources_match(match, attributes(), {"team": "x"}, rules_required=True)
    assert not policies.resources_match(match, attributes(), {}, rules_required=True)


def test_cel_errors_read_as_cel_go_words() -> None:
    program = cel.compile_expression("object.metadata.labels.missing == 'x'", policies.VARIABLES)
    with pytest.raises(cel.EvalError, match=r"^no such key: missing$"):
        cel.evaluate(program, {"object": {"metadata": {"labels": {}}}})
    with pytest.raises(cel.CompileError, match=r"^compilation failed: ERROR: <input>:1:8: Syntax error"):
        cel.compile_expression("object.", policies.VARIABLES)
    assert cel.evaluate(cel.compile_expression("object.?spec.?x.orValue(3) + 1", policies.VARIABLES),
                        {"object": {}}) == 4
    assert cel.evaluate(cel.compile_expression("'a,b'.split(',')", policies.VARIABLES), {}) == ["a", "b"]


def test_the_first_denial_names_policy_and_binding() -> None:
    policy = {"metadata": {"name": "p"}, "spec": {
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                "operations": ["CREATE"], "resources": ["pods"]}]},
        "validations": [{"expression": "false", "reason": "Forbidden"}, {"expression": "1 == 1"}]}}
    binding = {"metadata": {"name": "b"}, "spec": {"policyName": "p", "validationActions": ["Deny", "Warn"]}}
    outcome = policies.admit([policy], [binding], attributes(), namespace=None, params=lambda *_: None)
    said = "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: failed expression: false"
    assert outcome.denial == policies.Denial(403, "Forbidden", said)
    assert outcome.warnings == (
        "Validation failed for ValidatingAdmissionPolicy 'p' with binding 'b': failed expression: false",)
    update = policies.admit([policy], [binding], attributes("UPDATE"), namespace=None, params=lambda *_: None)
    assert update.denial is None


def test_restricted_v2_assigns_then_validates() -> None:
    assert parse_range("1000680000/10000") == Range(1000680000, 10000)
    assert parse_range("5-9") == Range(5, 5) and parse_range("x") is None
    namespace = {"metadata": {"annotations": {"openshift.io/sa.scc.uid-range": "1000680000/10000"}}}
    scc = RestrictedV2()
    pod: dict[str, Any] = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
    scc.mutate_pod(pod, namespace, None)
    assert pod["spec"]["containers"][0]["securityContext"] == {
        "runAsUser": 1000680000, "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True}
    assert pod["spec"]["securityContext"] == {"fsGroup": 1000680000,
                                              "seccompProfile": {"type": "RuntimeDefault"}}
    scc.validate_pod(pod, namespace, None)
    fixed = {"spec": {"securityContext": {"fsGroup": 10001},
                      "containers": [{"name": "c",
                                      "securityContext": {"runAsUser": 10001, "privileged": True}}]}}
    assert RestrictedV2.violations(fixed, Range(1000680000, 10000), Range(1000680000, 10000)) == [
        "provider restricted-v2: .spec.securityContext.fsGroup: Invalid value: []int64{10001}: 10001 is not "
        "an allowed group",
        "provider restricted-v2: .containers[0].runAsUser: Invalid value: 10001: must be in the ranges: "
        "[1000680000, 1000689999]",
        "provider restricted-v2: .containers[0].privileged: Invalid value: true: Privileged containers are "
        "not allowed"]
    plain: dict[str, Any] = {"spec": {"containers": [{"name": "c"}]}}
    scc.mutate_pod(plain, {}, None)
    assert plain == {"spec": {"containers": [{"name": "c"}]}}
