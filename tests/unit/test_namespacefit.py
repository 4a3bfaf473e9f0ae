"""A namespace's policies against a job's pods (placement/namespacefit.py, fit.check_namespace): the shaping
rule, what the API server would refuse (with the policy, the field and both numbers), the quota's room."""

from __future__ import annotations

from typing import Any

import pytest

from distributetrain.errors import CannotPlace, InvalidInput
from distributetrain.placement import fit
from distributetrain.placement.namespacefit import NamespacePolicies, problems, quota_shortfalls, shape


def pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {"containers": list(containers), **spec}}


def container(name: str = "job", *, requests: dict[str, str] | None = None,
              limits: dict[str, str] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return {"name": name, "resources": resources}


def limit_range(name: str = "lr", **item: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"limits": [{"type": item.pop("type", "Container"), **item}]}}


def quota(hard: dict[str, str], used: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "q"}, "spec": {"hard": hard, **spec}, "status": {"used": used or {}}}


def policies(*, ranges: tuple[dict[str, Any], ...] = (), quotas: tuple[dict[str, Any], ...] = (),
             labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None
             ) -> NamespacePolicies:
    namespace = {"metadata": {"name": "ml", "labels": labels or {}, "annotations": annotations or {}}}
    return NamespacePolicies.of("ml", namespace, ranges, quotas)


JOB = container(requests={"cpu": "10", "memory": "41Gi", "nvidia.com/gpu": "5"},
                limits={"memory": "41Gi", "nvidia.com/gpu": "5"})


def test_without_policies_cpu_stays_unlimited() -> None:
    shaped = shape(pod(JOB), policies())
    assert "cpu" not in shaped["spec"]["containers"][0]["resources"]["limits"]


def test_a_default_cpu_limit_makes_limit_equal_request() -> None:
    """The LimitRange's default cpu limit of 1 would land on the container and make it invalid."""
    lr = policies(ranges=(limit_range(default={"cpu": "1"}),))
    unshaped = pod(JOB)
    assert problems(unshaped, lr, what="the worker") == [
        "container job of the worker: requests cpu 10, above the limit of 1 the namespace's LimitRange "
        "defaults it to; give the container a cpu limit in the pod template"]
    shaped = shape(unshaped, lr)
    assert shaped["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "10"
    assert problems(shaped, lr, what="the worker") == []
    untouched = unshaped["spec"]["containers"][0]["resources"]["limits"]
    assert untouched == {"memory": "41Gi", "nvidia.com/gpu": "5"}


def test_a_limits_quota_makes_limit_equal_request_and_a_template_limit_is_kept() -> None:
    q = policies(quotas=(quota({"limits.cpu": "100"}),))
    sidecar = container("proxy", requests={"cpu": "100m"}, limits={"cpu": "500m"})
    shaped = shape(pod(JOB, sidecar), q)
    assert [c["resources"]["limits"]["cpu"] for c in shaped["spec"]["containers"]] == ["10", "500m"]
    bare = pod(JOB, container("logger"))
    assert problems(shape(bare, q), q, what="the chief") == [
        "ResourceQuota ml/q: must specify limits.cpu, and container(s) logger of the chief set no cpu limit; "
        "give them one in the pod template"]


def test_limit_range_min_max_and_ratio_name_the_range_and_both_numbers() -> None:
    lr = policies(ranges=(limit_range("team", max={"memory": "32Gi"}, min={"cpu": "12"},
                                      maxLimitRequestRatio={"memory": "1"}),))
    found = problems(shape(pod(JOB), lr), lr, what="worker 0 (5 GPUs)")
    assert found == [
        "LimitRange ml/team: minimum cpu usage per Container is 12, but request is 10 (container job of "
        "worker 0 (5 GPUs))",
        "LimitRange ml/team: maximum memory usage per Container is 32Gi, but limit is 41Gi (container job of "
        "worker 0 (5 GPUs))"]
    per_pod = policies(ranges=(limit_range("pods", type="Pod", max={"memory": "40Gi"}),))
    assert problems(pod(JOB), per_pod, what="the chief") == [
        "LimitRange ml/pods: maximum memory usage per Pod is 40Gi, but limit is 41Gi (the chief)"]


def test_quota_never_fits_is_exit_2_and_not_now_is_exit_3() -> None:
    pods = [("worker 0", pod(JOB)), ("the chief", pod(JOB))]
    never = policies(quotas=(quota({"requests.nvidia.com/gpu": "8"}),))
    with pytest.raises(InvalidInput) as caught:
        fit.check_namespace(pods, never, network_policy=True)
    assert ("ResourceQuota ml/q: requests.nvidia.com/gpu: the job needs 10, the quota allows 8 in all; ask "
            "for less or have the quota raised") in str(caught.value)
    later = policies(quotas=(quota({"requests.nvidia.com/gpu": "16", "count/secrets": "10"},
                                   {"requests.nvidia.com/gpu": "8", "count/secrets": "10"}),))
    with pytest.raises(CannotPlace) as waited:
        fit.check_namespace(pods, later, network_policy=True)
    assert "requests.nvidia.com/gpu: the job needs 10, 8 of 16 is used, 8 left" in str(waited.value)
    assert "count/secrets: the job needs 1, 10 of 10 is used, 0 left" in str(waited.value)
    roomy = policies(quotas=(quota({"requests.nvidia.com/gpu": "16", "requests.memory": "100Gi",
                                    "pods": "2"}),))
    fit.check_namespace(pods, roomy, network_policy=True)
    assert [s.resource for s in quota_shortfalls([p for _, p in pods], roomy, network_policy=False)] == []


def test_scoped_quotas_apply_to_the_pods_they_count() -> None:
    pods = [pod(JOB)]
    terminating = policies(quotas=(quota({"pods": "0"}, scopes=["Terminating"]),))
    assert quota_shortfalls(pods, terminating, network_policy=False) == []
    deadline = [pod(JOB, activeDeadlineSeconds=60)]
    assert [s.resource for s in quota_shortfalls(deadline, terminating, network_policy=False)] == ["pods"]


def test_openshift_uid_range_drops_the_managers_fixed_ids_only() -> None:
    ours = pod(JOB, securityContext={"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001,
                                     "fsGroup": 10001})
    ocp = policies(annotations={"openshift.io/sa.scc.uid-range": "1000680000/10000"})
    assert shape(ours, ocp, image_uid=10001)["spec"]["securityContext"] == {"runAsNonRoot": True}
    theirs = pod(JOB, securityContext={"runAsUser": 1000680005})
    assert shape(theirs, ocp, image_uid=10001)["spec"]["securityContext"] == {"runAsUser": 1000680005}
    assert "OpenShift UID range 1000680000/10000" in ocp.describe()[-1]


def test_pod_security_levels_refuse_what_a_template_can_add() -> None:
    restricted = policies(labels={"pod-security.kubernetes.io/enforce": "restricted"})
    root = pod(JOB, securityContext={"runAsNonRoot": False, "runAsUser": 0})
    assert problems(root, restricted, what="the chief") == [
        "namespace ml (pod-security.kubernetes.io/enforce=restricted) refuses the chief: container job may "
        "run as root (runAsNonRoot False, runAsUser 0)"]
    baseline = policies(labels={"pod-security.kubernetes.io/enforce": "baseline"})
    sshd_root = pod({**JOB, "securityContext": {"capabilities": {"add": ["SETUID", "SYS_ADMIN"]}}},
                    volumes=[{"name": "h", "hostPath": {"path": "/"}}])
    assert problems(sshd_root, baseline, what="the chief") == [
        "namespace ml (pod-security.kubernetes.io/enforce=baseline) refuses the chief: hostPath volume h",
        "namespace ml (pod-security.kubernetes.io/enforce=baseline) refuses the chief: container job adds "
        "capabilities SYS_ADMIN"]
    assert problems(root, policies(), what="the chief") == []
