"""Admission that says no where a real server does, through the real kubectl: LimitRange defaults land before
validation (a pod requesting more cpu than the default limit is invalid), ValidatingAdmissionPolicy and its
binding evaluated with CEL (object, oldObject, request, params, namespaceObject, variables, matchConditions,
messageExpression, failurePolicy, validationActions), and OpenShift's restricted-v2 SCC in a namespace with a
UID range (doubles/openshift.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from localcluster import TestCluster

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: {namespace}
  labels: {labels}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: busybox:1.36
    resources: {resources}
    securityContext: {context}
"""

POLICY = """\
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: only-labelled
spec:
  failurePolicy: {failure}
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE"]
      resources: ["pods", "configmaps"]
  matchConditions:
  - name: only-the-robot
    expression: "request.userInfo.username == 'system:serviceaccount:default:robot'"
  variables:
  - name: labels
    expression: "has(object.metadata.labels) ? object.metadata.labels : {{}}"
  validations:
  - expression: "'team' in variables.labels && variables.labels['team'] == namespaceObject.metadata.name"
    messageExpression: "'the ' + request.resource.resource + ' must carry team=' +
      namespaceObject.metadata.name"
  - expression: "object.kind != 'Pod' || object.spec.containers.all(c, !has(c.securityContext) ||
      !has(c.securityContext.privileged) || !c.securityContext.privileged)"
    message: no privileged containers
    reason: Forbidden
  - expression: "object.metadata.labels.missing == 'x'"
"""

BINDING = """\
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: only-labelled-binding
spec:
  policyName: only-labelled
  validationActions: [{actions}]
"""


def kubectl_json(cluster: TestCluster, *args: str) -> Any:
    return json.loads(cluster.kubectl(*args, "-o", "json").stdout)


def make_pod(cluster: TestCluster, name: str, *, namespace: str = "default", labels: str = "{}",
             resources: str = "{}", context: str = "{}", token: str | None = None) -> Any:
    return cluster.kubectl("create", "-f", "-", token=token, input=POD.format(
        name=name, namespace=namespace, labels=labels, resources=resources, context=context))


def test_limit_range_default_limit_applies_before_validation(local_cluster: TestCluster) -> None:
    """A LimitRange's default cpu limit of 1 lands on a pod asking 10 cpu with no limit: validation then
    refuses it (kube-apiserver's order: mutating admission, validation, validating admission)."""
    assert local_cluster.kubectl("create", "-f", "-", input=(
        "apiVersion: v1\nkind: LimitRange\nmetadata:\n  name: cpu\nspec:\n  limits:\n"
        "  - type: Container\n    default: {cpu: '1'}\n")).returncode == 0
    refused = make_pod(local_cluster, "greedy", resources="{requests: {cpu: '10'}}")
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        'The Pod "greedy" is invalid: spec.containers[0].resources.requests: Invalid value: "10": must be '
        "less than or equal to cpu limit of 1")
    assert local_cluster.kubectl("get", "pods", "-o", "name").stdout == ""


@pytest.fixture
def robot(local_cluster: TestCluster) -> str:
    """The token of the ServiceAccount default/robot, which may create pods and configmaps."""
    local_cluster.kubectl("create", "serviceaccount", "robot")
    local_cluster.kubectl("create", "role", "maker", "--verb=create,update,delete,get",
                          "--resource=pods,configmaps")
    local_cluster.kubectl("create", "rolebinding", "maker", "--role=maker", "--serviceaccount=default:robot")
    local_cluster.kubectl("label", "namespace", "default", "team=default")
    return local_cluster.token_for("default", "robot")


def apply_policy(cluster: TestCluster, *, failure: str = "Fail", actions: str = "Deny") -> None:
    for doc in (POLICY.format(failure=failure), BINDING.format(actions=actions)):
        result = cluster.kubectl("apply", "-f", "-", input=doc)
        assert result.returncode == 0, result.stderr


def test_policy_refuses_with_its_message_and_reason(local_cluster: TestCluster, robot: str) -> None:
    apply_policy(local_cluster)
    unlabelled = make_pod(local_cluster, "bare", token=robot)
    assert unlabelled.returncode == 1
    # reason Invalid (422): kubectl words it "is invalid", the Status message is the policy's
    assert unlabelled.stderr.strip() == (
        "The pods \"bare\" is invalid: : ValidatingAdmissionPolicy 'only-labelled' with binding "
        "'only-labelled-binding' denied request: the pods must carry team=default")
    privileged = make_pod(local_cluster, "root", labels="{team: default}", context="{privileged: true}",
                          token=robot)
    assert "Error from server (Forbidden)" in privileged.stderr
    assert ("pods \"root\" is forbidden: ValidatingAdmissionPolicy 'only-labelled' with binding "
            "'only-labelled-binding' denied request: no privileged containers") in privileged.stderr
    # a runtime error under failurePolicy Fail: cel's own words, "resulted in error"
    labelled = make_pod(local_cluster, "fine", labels="{team: default}", token=robot)
    assert ("denied request: expression 'object.metadata.labels.missing == 'x'' resulted in error: no such "
            "key: missing") in labelled.stderr
    # the admin is not the robot: the match condition skips the policy
    assert make_pod(local_cluster, "admins", labels="{team: default}").returncode == 0
    names = local_cluster.kubectl("get", "pods", "-o", "name").stdout.split()
    assert names == ["pod/admins"]


def test_ignore_and_warn(local_cluster: TestCluster, robot: str) -> None:
    apply_policy(local_cluster, failure="Ignore", actions="Warn")
    made = make_pod(local_cluster, "warned", token=robot)
    assert made.returncode == 0
    assert ("Warning: Validation failed for ValidatingAdmissionPolicy 'only-labelled' with binding "
            "'only-labelled-binding': the pods must carry team=default") in made.stderr
    assert "resulted in error" not in made.stderr  # Ignore: an evaluation error is not a finding


def test_params_from_a_configmap_and_old_object_on_update(local_cluster: TestCluster) -> None:
    """paramKind ConfigMap and a paramRef by name; oldObject on an update; a missing param under Deny."""
    policy = """\
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: max-replicas}
spec:
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE", "UPDATE"], resources: ["configmaps"]}
    objectSelector: {matchLabels: {checked: "yes"}}
  validations:
  - expression: "int(object.data.size) <= int(params.data.max)"
    messageExpression: "'size ' + object.data.size + ' is above ' + params.data.max"
  - expression: "oldObject == null || object.data.size >= oldObject.data.size"
    message: size may only grow
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: max-replicas}
spec:
  policyName: max-replicas
  validationActions: [Deny]
  paramRef: {name: limits, parameterNotFoundAction: Deny}
"""
    assert local_cluster.kubectl("apply", "-f", "-", input=policy).returncode == 0

    def configmap(size: str) -> Callable[[], Any]:
        doc = f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  labels: {{checked: 'yes'}}\n" \
              f"data: {{size: '{size}'}}\n"
        return lambda: local_cluster.kubectl("apply", "-f", "-", input=doc)

    missing = configmap("3")()
    assert ("failed to configure binding: no params found for policy binding with `Deny` "
            "parameterNotFoundAction") in missing.stderr
    local_cluster.kubectl("create", "configmap", "limits", "--from-literal=max=5")
    assert configmap("3")().returncode == 0
    assert "size 7 is above 5" in configmap("7")().stderr
    assert "size may only grow" in configmap("2")().stderr
    assert local_cluster.kubectl("get", "configmap", "c", "-o", "jsonpath={.data.size}").stdout == "3"


def test_a_policy_that_does_not_compile_is_invalid(local_cluster: TestCluster) -> None:
    broken = POLICY.format(failure="Fail").replace("object.metadata.labels.missing == 'x'",
                                                   "object.metadata.labels.all(k, ")
    result = local_cluster.kubectl("apply", "-f", "-", input=broken)
    assert result.returncode == 1
    assert "spec.validations[2].expression: Invalid value: \"object.metadata.labels.all(k, \": compilation " \
           "failed: ERROR: <input>:1:31: Syntax error" in result.stderr


def test_a_delete_meets_the_policies(local_cluster: TestCluster, robot: str) -> None:
    policy = """\
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: keep-unlabelled}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: ["v1"], operations: ["DELETE"], resources: ["configmaps"]}
  validations:
  - expression: "has(oldObject.metadata.labels) && 'mine' in oldObject.metadata.labels"
    message: only configmaps labelled mine may be deleted
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: keep-unlabelled}
spec: {policyName: keep-unlabelled, validationActions: [Deny]}
"""
    assert local_cluster.kubectl("apply", "-f", "-", input=policy).returncode == 0
    local_cluster.kubectl("create", "configmap", "theirs")
    local_cluster.kubectl("create", "configmap", "ours")
    local_cluster.kubectl("label", "configmap", "ours", "mine=yes")
    refused = local_cluster.kubectl("delete", "configmap", "theirs", token=robot)
    assert "only configmaps labelled mine may be deleted" in refused.stderr
    assert local_cluster.kubectl("delete", "configmap", "ours", token=robot).returncode == 0
    names = local_cluster.kubectl("get", "configmaps", "-o", "name").stdout.split()
    assert "configmap/theirs" in names and "configmap/ours" not in names


OPENSHIFT_NS = """\
apiVersion: v1
kind: Namespace
metadata:
  name: team
  annotations:
    openshift.io/sa.scc.uid-range: 1000680000/10000
    openshift.io/sa.scc.supplemental-groups: 1000680000/10000
"""


def test_openshift_namespace_assigns_uids_and_refuses_others(local_cluster_factory: Any) -> None:
    cluster = local_cluster_factory(openshift=True)
    assert cluster.kubectl("apply", "-f", "-", input=OPENSHIFT_NS).returncode == 0
    fixed = make_pod(cluster, "fixed", namespace="team", context="{runAsUser: 10001}")
    assert fixed.returncode == 1
    others = ", ".join(f'provider "{name}": Forbidden: not usable by user or serviceaccount' for name in (
        "restricted", "nonroot-v2", "nonroot", "hostmount-anyuid", "hostnetwork-v2", "hostnetwork",
        "hostaccess", "privileged"))
    assert fixed.stderr.strip() == (
        'Error from server (Forbidden): error when creating "STDIN": pods "fixed" is forbidden: unable to '
        'validate against any security context constraint: [provider "anyuid": Forbidden: not usable by user '
        "or serviceaccount, provider restricted-v2: .containers[0].runAsUser: Invalid value: 10001: must be "
        f"in the ranges: [1000680000, 1000689999], {others}]")
    assert make_pod(cluster, "assigned", namespace="team").returncode == 0
    pod = kubectl_json(cluster, "get", "pod", "assigned", "-n", "team")
    assert pod["spec"]["containers"][0]["securityContext"]["runAsUser"] == 1000680000
    assert pod["spec"]["securityContext"]["fsGroup"] == 1000680000
    assert pod["metadata"]["annotations"]["openshift.io/scc"] == "restricted-v2"
    # a namespace without the annotation is plain Kubernetes
    assert make_pod(cluster, "plain", context="{runAsUser: 10001}").returncode == 0
