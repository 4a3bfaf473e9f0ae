"""Pod Security admission through the real kubectl and the official client: namespace labels choose the
level; enforce refuses with the real 403, warn answers the Warning kubectl prints, bad labels are 422, and
raising a namespace's level warns about the pods already there. The cluster-wide default is a cluster
option."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from kubeclient import api_status, as_body
from localcluster import TestCluster

LABEL = "pod-security.kubernetes.io/"

ROOT_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  containers:
  - name: main
    image: busybox:1.36
    command: ["sleep", "3600"]
{extra}"""

RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def status_message(error: ApiException) -> str:
    message: str = api_status(error)["message"]
    return message


def namespace(cluster: TestCluster, name: str, **levels: str) -> None:
    labels = [f"{LABEL}{mode.replace('_', '-')}={level}" for mode, level in levels.items()]
    assert cluster.kubectl("create", "namespace", name).returncode == 0
    if labels:
        result = cluster.kubectl("label", "namespace", name, *labels)
        assert result.returncode == 0, result.stderr


def test_enforce_refuses_with_the_real_message_and_creates_nothing(local_cluster: TestCluster) -> None:
    namespace(local_cluster, "strict", enforce="baseline")
    privileged = ROOT_POD.format(name="priv", extra="    securityContext:\n      privileged: true\n")
    result = local_cluster.kubectl("apply", "-n", "strict", "-f", "-", input=privileged)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        'Error from server (Forbidden): error when creating "STDIN": pods "priv" is forbidden: violates '
        'PodSecurity "baseline:latest": privileged (container "main" must not set '
        "securityContext.privileged=true)"
    )
    assert "NotFound" in local_cluster.kubectl("get", "pod", "priv", "-n", "strict").stderr
    plain = local_cluster.kubectl(
        "apply", "-n", "strict", "-f", "-", input=ROOT_POD.format(name="ok", extra="")
    )
    assert (plain.returncode, plain.stdout.strip(), plain.stderr) == (0, "pod/ok created", "")


def test_warn_lets_the_pod_in_and_kubectl_prints_the_warning(local_cluster: TestCluster) -> None:
    namespace(local_cluster, "warned", enforce="baseline", warn="restricted")
    result = local_cluster.kubectl(
        "apply", "-n", "warned", "-f", "-", input=ROOT_POD.format(name="root", extra="")
    )
    assert result.returncode == 0 and result.stdout.strip() == "pod/root created"
    assert result.stderr.strip() == (
        'Warning: would violate PodSecurity "restricted:latest": allowPrivilegeEscalation != false '
        '(container "main" must set securityContext.allowPrivilegeEscalation=false), unrestricted '
        'capabilities (container "main" must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != '
        'true (pod or container "main" must set securityContext.runAsNonRoot=true), seccompProfile (pod or '
        'container "main" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")'
    )


def test_a_pod_that_follows_restricted_is_admitted_without_warning(local_cluster: TestCluster) -> None:
    namespace(local_cluster, "tight", enforce="restricted", warn="restricted")
    extra = (
        "    securityContext:\n      allowPrivilegeEscalation: false\n      capabilities:\n"
        "        drop: [ALL]\n  securityContext:\n    runAsNonRoot: true\n    runAsUser: 1000\n"
        "    seccompProfile:\n      type: RuntimeDefault\n"
    )
    result = local_cluster.kubectl(
        "apply", "-n", "tight", "-f", "-", input=ROOT_POD.format(name="good", extra=extra)
    )
    assert (result.returncode, result.stderr) == (0, "")


CHECKS: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    # (what, pod spec fields, container fields, the reason in the refusal)
    ("hostNetwork", {"hostNetwork": True}, {}, "host namespaces (hostNetwork=true)"),
    ("hostPID", {"hostPID": True}, {}, "host namespaces (hostPID=true)"),
    ("hostIPC", {"hostIPC": True}, {}, "host namespaces (hostIPC=true)"),
    ("privileged", {}, {"securityContext": {"privileged": True}}, "privileged (container"),
    (
        "capabilities",
        {},
        {"securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}},
        'non-default capabilities (container "main" must not include "NET_ADMIN"',
    ),
    (
        "hostPath",
        {"volumes": [{"name": "h", "hostPath": {"path": "/tmp"}}]},
        {},
        'hostPath volumes (volume "h")',
    ),
    ("hostPort", {}, {"ports": [{"containerPort": 80, "hostPort": 80}]}, "hostPort (container"),
    (
        "appArmor",
        {"securityContext": {"appArmorProfile": {"type": "Unconfined"}}},
        {},
        'forbidden AppArmor profile (pod must not set AppArmor profile type to "Unconfined")',
    ),
    (
        "seLinux",
        {},
        {"securityContext": {"seLinuxOptions": {"user": "root"}}},
        'seLinuxOptions (container "main" set forbidden securityContext.seLinuxOptions: user may not be set)',
    ),
    ("procMount", {}, {"securityContext": {"procMount": "Unmasked"}}, "procMount (container"),
    (
        "seccomp",
        {"securityContext": {"seccompProfile": {"type": "Unconfined"}}},
        {},
        'seccompProfile (pod must not set securityContext.seccompProfile.type to "Unconfined")',
    ),
    (
        "sysctls",
        {"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}},
        {},
        "forbidden sysctls (kernel.msgmax)",
    ),
]


@pytest.mark.parametrize(("what", "spec", "fields", "reason"), CHECKS, ids=[c[0] for c in CHECKS])
def test_each_baseline_rule_refuses_on_its_own(
    local_cluster_factory: Any, what: str, spec: dict[str, Any], fields: dict[str, Any], reason: str
) -> None:
    cluster: TestCluster = local_cluster_factory(pod_security_defaults={"enforce": "baseline"})
    v1 = client.CoreV1Api(cluster.api_client())
    body = {
        "metadata": {"name": "p"},
        "spec": {**spec, "containers": [{"name": "main", "image": "busybox:1.36", **fields}]},
    }
    with pytest.raises(ApiException) as refused:
        v1.create_namespaced_pod("default", as_body(body))
    assert refused.value.status == 403
    assert status_message(refused.value).startswith(
        f'pods "p" is forbidden: violates PodSecurity "baseline:latest": {reason}'
    )
    assert v1.list_namespaced_pod("default").items == []


RESTRICTED_RULES: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    ("allowPrivilegeEscalation", {}, {"allowPrivilegeEscalation": None}, "allowPrivilegeEscalation != false"),
    ("drop ALL", {}, {"capabilities": {"drop": ["NET_RAW"]}}, "unrestricted capabilities"),
    ("runAsNonRoot", {"runAsNonRoot": None}, {}, "runAsNonRoot != true"),
    ("runAsUser 0", {"runAsUser": 0}, {}, "runAsUser=0"),
    ("seccompProfile", {"seccompProfile": None}, {}, "seccompProfile"),
]


@pytest.mark.parametrize(
    ("what", "pod_sc", "container_sc", "reason"), RESTRICTED_RULES, ids=[r[0] for r in RESTRICTED_RULES]
)
def test_each_restricted_rule_refuses_on_its_own(
    local_cluster: TestCluster, what: str, pod_sc: dict[str, Any], container_sc: dict[str, Any], reason: str
) -> None:
    v1 = client.CoreV1Api(local_cluster.api_client())
    v1.patch_namespace("default", {"metadata": {"labels": {LABEL + "enforce": "restricted"}}})
    pod_level = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}, **pod_sc}
    container_level = {**RESTRICTED_CONTAINER, **container_sc}
    body: dict[str, Any] = {
        "metadata": {"name": "p"},
        "spec": {
            "securityContext": {k: v for k, v in pod_level.items() if v is not None},
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1.36",
                    "securityContext": {k: v for k, v in container_level.items() if v is not None},
                }
            ],
        },
    }
    with pytest.raises(ApiException) as refused:
        v1.create_namespaced_pod("default", as_body(body))
    assert refused.value.status == 403
    assert status_message(refused.value).startswith(
        f'pods "p" is forbidden: violates PodSecurity "restricted:latest": {reason} ('
    )
    body["spec"]["securityContext"] = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    body["spec"]["containers"][0]["securityContext"] = RESTRICTED_CONTAINER
    assert v1.create_namespaced_pod("default", as_body(body)).metadata.name == "p"


def test_bad_labels_are_refused_and_raising_the_level_names_the_pods_already_there(
    local_cluster: TestCluster,
) -> None:
    bad = local_cluster.kubectl("label", "namespace", "default", LABEL + "enforce=strict")
    assert bad.returncode == 1
    assert bad.stderr.strip() == (
        'The Namespace "default" is invalid: metadata.labels[pod-security.kubernetes.io/enforce]: '
        "Invalid value: "
        '"strict": must be one of privileged, baseline, restricted'
    )
    for name in ("b", "a"):
        assert (
            local_cluster.kubectl("apply", "-f", "-", input=ROOT_POD.format(name=name, extra="")).returncode
            == 0
        )
    raised = local_cluster.kubectl("label", "namespace", "default", LABEL + "enforce=restricted")
    assert raised.returncode == 0
    assert raised.stderr.splitlines() == [
        'Warning: existing pods in namespace "default" violate the new PodSecurity enforce level '
        '"restricted:latest"',
        "Warning: a (and 1 other pod): allowPrivilegeEscalation != false, unrestricted capabilities, "
        "runAsNonRoot != true, seccompProfile",
    ]
    # the pods already running stay: only new ones are refused
    assert local_cluster.kubectl("get", "pod", "a", "b").returncode == 0


def test_the_cluster_default_applies_to_unlabelled_namespaces_only(local_cluster_factory: Any) -> None:
    cluster: TestCluster = local_cluster_factory(pod_security_defaults={"enforce": "restricted"})
    refused = cluster.kubectl("apply", "-f", "-", input=ROOT_POD.format(name="root", extra=""))
    assert 'violates PodSecurity "restricted:latest"' in refused.stderr
    namespace(cluster, "relaxed", enforce="privileged")
    allowed = cluster.kubectl(
        "apply", "-n", "relaxed", "-f", "-", input=ROOT_POD.format(name="root", extra="")
    )
    assert allowed.returncode == 0, allowed.stderr
