"""Pod Security's checks and policy, pure: each check of baseline and restricted on its own, with upstream's
reason and detail word for word; the labels, their versions, and the dry run on a namespace's new level."""

from __future__ import annotations

from typing import Any

import pytest

from localcluster._internal.admission import podsecurity
from localcluster._internal.admission.podsecurity import (
    LATEST,
    LevelVersion,
    Policy,
    admit_pod,
    evaluate,
    policy_of,
)

# a pod that passes restricted: every check below breaks one thing in a copy of it
RESTRICTED_OK: dict[str, Any] = {
    "metadata": {"name": "p"},
    "spec": {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": "app",
                "image": "busybox",
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }
        ],
    },
}


def pod(
    spec: dict[str, Any] | None = None,
    container: dict[str, Any] | None = None,
    meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    base = {
        "metadata": {**RESTRICTED_OK["metadata"], **(meta or {})},
        "spec": {**RESTRICTED_OK["spec"], **(spec or {})},
    }
    app = {**RESTRICTED_OK["spec"]["containers"][0], **(container or {})}
    base["spec"]["containers"] = [app]
    return base


def sc(**fields: Any) -> dict[str, Any]:
    return {
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, **fields}
    }


BASELINE_CASES = [
    (
        "hostNetwork",
        pod(spec={"hostNetwork": True, "hostPID": True}),
        ("host namespaces", "hostNetwork=true, hostPID=true"),
    ),
    (
        "privileged",
        pod(container=sc(privileged=True)),
        ("privileged", 'container "app" must not set securityContext.privileged=true'),
    ),
    (
        "capabilities",
        pod(container=sc(capabilities={"drop": ["ALL"], "add": ["SYS_ADMIN", "NET_RAW", "CHOWN"]})),
        (
            "non-default capabilities",
            'container "app" must not include "NET_RAW", "SYS_ADMIN" in securityContext.capabilities.add',
        ),
    ),
    (
        "hostPath",
        pod(spec={"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}),
        ("hostPath volumes", 'volume "root"'),
    ),
    (
        "hostPort",
        pod(container={"ports": [{"containerPort": 80, "hostPort": 8080}]}),
        ("hostPort", 'container "app" uses hostPort 8080'),
    ),
    (
        "appArmor",
        pod(container=sc(appArmorProfile={"type": "Unconfined"})),
        ("forbidden AppArmor profile", 'container "app" must not set AppArmor profile type to "Unconfined"'),
    ),
    (
        "seLinux",
        pod(
            spec={
                "securityContext": {
                    **RESTRICTED_OK["spec"]["securityContext"],
                    "seLinuxOptions": {"type": "spc_t"},
                }
            }
        ),
        ("seLinuxOptions", 'pod set forbidden securityContext.seLinuxOptions: type "spc_t"'),
    ),
    (
        "procMount",
        pod(container=sc(procMount="Unmasked")),
        ("procMount", 'container "app" must not set securityContext.procMount to "Unmasked"'),
    ),
    (
        "seccomp Unconfined",
        pod(spec={"securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "Unconfined"}}}),
        ("seccompProfile", 'pod must not set securityContext.seccompProfile.type to "Unconfined"'),
    ),
    (
        "sysctls",
        pod(
            spec={
                "securityContext": {
                    **RESTRICTED_OK["spec"]["securityContext"],
                    "sysctls": [
                        {"name": "kernel.msgmax", "value": "1"},
                        {"name": "net.ipv4.tcp_syncookies", "value": "1"},
                    ],
                }
            }
        ),
        ("forbidden sysctls", "kernel.msgmax"),
    ),
    (
        "probe host",
        pod(container={"readinessProbe": {"tcpSocket": {"port": 22, "host": "10.0.0.1"}}}),
        ("probe or lifecycle host", 'container "app" uses probe or lifecycle host "10.0.0.1"'),
    ),
]

RESTRICTED_CASES = [
    (
        "allowPrivilegeEscalation",
        pod(container={"securityContext": {"capabilities": {"drop": ["ALL"]}}}),
        (
            "allowPrivilegeEscalation != false",
            'container "app" must set securityContext.allowPrivilegeEscalation=false',
        ),
    ),
    (
        "drop ALL",
        pod(container=sc(capabilities={"add": ["NET_BIND_SERVICE"]})),
        ("unrestricted capabilities", 'container "app" must set securityContext.capabilities.drop=["ALL"]'),
    ),
    (
        "add beyond NET_BIND_SERVICE",
        pod(container=sc(capabilities={"drop": ["ALL"], "add": ["CHOWN"]})),
        (
            "unrestricted capabilities",
            'container "app" must not include "CHOWN" in securityContext.capabilities.add',
        ),
    ),
    (
        "volume types",
        pod(spec={"volumes": [{"name": "data", "nfs": {"server": "x", "path": "/"}}]}),
        ("restricted volume types", 'volume "data" uses restricted volume type "nfs"'),
    ),
    (
        "runAsNonRoot unset",
        pod(spec={"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}}),
        ("runAsNonRoot != true", 'pod or container "app" must set securityContext.runAsNonRoot=true'),
    ),
    (
        "runAsNonRoot false",
        pod(container=sc(runAsNonRoot=False)),
        ("runAsNonRoot != true", 'container "app" must not set securityContext.runAsNonRoot=false'),
    ),
    (
        "runAsUser 0",
        pod(container=sc(runAsUser=0)),
        ("runAsUser=0", 'container "app" must not set runAsUser=0'),
    ),
    (
        "seccomp unset",
        pod(spec={"securityContext": {"runAsNonRoot": True}}),
        (
            "seccompProfile",
            'pod or container "app" must set securityContext.seccompProfile.type to "RuntimeDefault" or '
            '"Localhost"',
        ),
    ),
]


@pytest.mark.parametrize(("what", "obj", "expected"), BASELINE_CASES, ids=[c[0] for c in BASELINE_CASES])
def test_each_baseline_check_names_what_is_wrong(
    what: str, obj: dict[str, Any], expected: tuple[str, str]
) -> None:
    assert evaluate("baseline", LATEST, obj["metadata"], obj["spec"]) == [expected]
    if what not in OVERRIDDEN:
        assert expected in evaluate("restricted", LATEST, obj["metadata"], obj["spec"])


# restricted replaces two baseline checks with stricter ones of its own, as upstream's overrides do
OVERRIDDEN = {
    "capabilities": (
        "unrestricted capabilities",
        'container "app" must not include "CHOWN", "NET_RAW", "SYS_ADMIN" in '
        "securityContext.capabilities.add",
    ),
    "hostPath": ("restricted volume types", 'volume "root" uses restricted volume type "hostPath"'),
}


@pytest.mark.parametrize("what", sorted(OVERRIDDEN))
def test_restricted_reports_overridden_baseline_checks_once_in_its_own_words(what: str) -> None:
    obj = next(case[1] for case in BASELINE_CASES if case[0] == what)
    assert evaluate("restricted", LATEST, obj["metadata"], obj["spec"]) == [OVERRIDDEN[what]]


@pytest.mark.parametrize(("what", "obj", "expected"), RESTRICTED_CASES, ids=[c[0] for c in RESTRICTED_CASES])
def test_each_restricted_check_names_what_is_wrong(
    what: str, obj: dict[str, Any], expected: tuple[str, str]
) -> None:
    assert evaluate("restricted", LATEST, obj["metadata"], obj["spec"]) == [expected]
    assert evaluate("baseline", LATEST, obj["metadata"], obj["spec"]) == []


def test_a_pod_that_follows_restricted_passes_every_level() -> None:
    for level in ("baseline", "restricted"):
        assert evaluate(level, LATEST, RESTRICTED_OK["metadata"], RESTRICTED_OK["spec"]) == []


def test_the_job_pods_today_pass_baseline_and_fail_restricted_for_root_and_capabilities() -> None:
    worker: dict[str, Any] = {
        "metadata": {"name": "w"},
        "spec": {
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "worker",
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {
                            "drop": ["ALL"],
                            "add": ["AUDIT_WRITE", "CHOWN", "KILL", "SETGID", "SETUID", "SYS_CHROOT"],
                        },
                    },
                }
            ],
        },
    }
    assert evaluate("baseline", LATEST, worker["metadata"], worker["spec"]) == []
    assert [r for r, _ in evaluate("restricted", LATEST, worker["metadata"], worker["spec"])] == [
        "unrestricted capabilities",
        "runAsNonRoot != true",
    ]


def test_the_forbidden_message_lists_reasons_in_upstream_order() -> None:
    bad = {
        "metadata": {"name": "x"},
        "spec": {"hostPID": True, "containers": [{"name": "a", "securityContext": {"privileged": True}}]},
    }
    verdict = admit_pod(bad, "x", Policy(enforce=LevelVersion("restricted")))
    assert verdict.forbidden == (
        'pods "x" is forbidden: violates PodSecurity "restricted:latest": host namespaces (hostPID=true), '
        'privileged (container "a" must not set securityContext.privileged=true), '
        'allowPrivilegeEscalation != false (container "a" must set '
        'securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "a" must set '
        'securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or container "a" must set '
        'securityContext.runAsNonRoot=true), seccompProfile (pod or container "a" must set '
        'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")'
    )
    assert verdict.warnings == ()  # no warning on a request refused anyway


def test_warn_and_audit_do_not_refuse() -> None:
    root = {"metadata": {"name": "r"}, "spec": {"containers": [{"name": "a"}]}}
    verdict = admit_pod(
        root,
        "r",
        Policy(
            enforce=LevelVersion("baseline"),
            warn=LevelVersion("restricted"),
            audit=LevelVersion("restricted"),
        ),
    )
    assert verdict.forbidden is None
    assert len(verdict.warnings) == 1
    assert verdict.warnings[0].startswith(
        'would violate PodSecurity "restricted:latest": allowPrivilegeEscalation'
    )
    assert verdict.audit == verdict.warnings[0]


def test_versions_run_the_checks_that_existed_then() -> None:
    root_user = pod(container=sc(runAsUser=0))
    assert evaluate("restricted", (1, 22), root_user["metadata"], root_user["spec"]) == []  # runAsUser: 1.23
    assert evaluate("restricted", (1, 23), root_user["metadata"], root_user["spec"]) != []
    probe = pod(container={"livenessProbe": {"httpGet": {"port": 80, "host": "example.com"}}})
    assert evaluate("baseline", (1, 33), probe["metadata"], probe["spec"]) == []
    assert evaluate("baseline", (1, 34), probe["metadata"], probe["spec"]) != []


def test_labels_choose_the_policy_and_bad_values_fail_closed_for_enforce_only() -> None:
    policy, causes = policy_of(
        {
            "pod-security.kubernetes.io/enforce": "baseline",
            "pod-security.kubernetes.io/enforce-version": "v1.30",
            "pod-security.kubernetes.io/warn": "restricted",
        }
    )
    assert causes == []
    assert str(policy.enforce) == "baseline:v1.30" and str(policy.warn) == "restricted:latest"
    assert str(policy.audit) == "privileged:latest"
    policy, causes = policy_of(
        {
            "pod-security.kubernetes.io/enforce": "strict",
            "pod-security.kubernetes.io/warn": "loud",
            "pod-security.kubernetes.io/audit-version": "1.30",
        }
    )
    assert [str(c) for c in causes] == [
        'metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "strict": must be one of '
        "privileged, baseline, restricted",
        'metadata.labels[pod-security.kubernetes.io/audit-version]: Invalid value: "1.30": must be "latest" '
        'or "v1.x"',
        'metadata.labels[pod-security.kubernetes.io/warn]: Invalid value: "loud": must be one of privileged, '
        "baseline, restricted",
    ]
    assert policy.enforce.level == "restricted" and policy.warn.level == "privileged"


def test_cluster_defaults_apply_where_a_namespace_has_no_label() -> None:
    defaults = podsecurity.defaults_from(podsecurity.parse_defaults("enforce=baseline, warn=restricted"))
    assert str(policy_of({}, defaults)[0].enforce) == "baseline:latest"
    assert str(policy_of({"pod-security.kubernetes.io/enforce": "privileged"}, defaults)[0].enforce) == (
        "privileged:latest"
    )
    for bad in ("enforce", "enforce=strict", "loud=baseline"):
        with pytest.raises(ValueError, match="pod security default"):
            podsecurity.parse_defaults(bad)


def test_raising_enforce_names_the_existing_pods_it_would_refuse() -> None:
    pods = [{"metadata": {"name": n}, "spec": {"containers": [{"name": "a"}]}} for n in ("b", "a", "c")]
    pods.append(
        {"metadata": {"name": "hostnet"}, "spec": {"hostNetwork": True, "containers": [{"name": "a"}]}}
    )
    warnings = podsecurity.namespace_update_warnings(
        "ns", Policy(enforce=LevelVersion("baseline")), Policy(), pods
    )
    assert warnings == [
        'existing pods in namespace "ns" violate the new PodSecurity enforce level "baseline:latest"',
        "hostnet: host namespaces",
    ]
    warnings = podsecurity.namespace_update_warnings(
        "ns", Policy(enforce=LevelVersion("restricted")), Policy(enforce=LevelVersion("baseline")), pods[:3]
    )
    assert warnings[1] == (
        "a (and 2 other pods): allowPrivilegeEscalation != false, unrestricted capabilities, "
        "runAsNonRoot != true, seccompProfile"
    )
    # lowering the level checks nothing
    assert (
        podsecurity.namespace_update_warnings(
            "ns", Policy(enforce=LevelVersion("baseline")), Policy(enforce=LevelVersion("restricted")), pods
        )
        == []
    )
