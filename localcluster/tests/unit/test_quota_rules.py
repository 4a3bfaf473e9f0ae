"""ResourceQuota, LimitRange and QoS, pure: what a pod counts, the quota admission's and LimitRanger's
verdicts in the real wording, the QoS class, and quantities printed as Quantity.String() prints them."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from localcluster._internal.admission import limitranges, quota
from localcluster._internal.apimachinery.quantity import canonical, parse_quantity
from localcluster._internal.podspec.qos import qos_class


def container(
    name: str = "app",
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return {"name": name, "image": "busybox", "resources": resources, **extra}


def pod(
    *containers: dict[str, Any],
    phase: str = "Pending",
    init: list[dict[str, Any]] | None = None,
    name: str = "p",
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = init
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": spec, "status": {"phase": phase}}


def a_quota(name: str, **hard: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": {"hard": dict(hard)}}


def used_by(q: dict[str, Any], *pods: dict[str, Any]) -> quota.Usage:
    return quota.used(q, [("pods", "", p) for p in pods])


@pytest.mark.parametrize(
    ("text", "binary", "printed"),
    [
        ("1500m", False, "1500m"),
        ("2000", False, "2k"),
        ("1500", False, "1500"),
        ("0.5", False, "500m"),
        ("1Gi", True, "1Gi"),
        ("1536Mi", True, "1536Mi"),
        ("512", True, "512"),
        ("1G", False, "1G"),
    ],
)
def test_quantities_print_as_the_real_server_prints_them(text: str, binary: bool, printed: str) -> None:
    assert canonical(parse_quantity(text), binary=binary) == printed


def test_a_pod_counts_its_effective_requests_and_limits_until_it_ends() -> None:
    running = pod(
        container(
            requests={"cpu": "500m", "memory": "1Gi"},
            limits={"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"},
        ),
        container("side", requests={"cpu": "500m"}),
        init=[container("setup", requests={"cpu": "2"})],
    )
    usage = {k: str(v) for k, v in quota.pod_usage(running).items()}
    assert usage == {
        "count/pods": "1",
        "pods": "1",
        "cpu": "2",
        "requests.cpu": "2",
        "limits.cpu": "1",
        "memory": "1Gi",
        "requests.memory": "1Gi",
        "limits.memory": "1Gi",
        "requests.nvidia.com/gpu": "2",
    }
    done = {**running, "status": {"phase": "Succeeded"}}
    assert {k: str(v) for k, v in quota.pod_usage(done).items()} == {"count/pods": "1"}


def test_exceeding_a_quota_names_requested_used_and_limited() -> None:
    q = a_quota("compute", **{"requests.cpu": "2", "pods": "10"})
    existing = pod(container(requests={"cpu": "1"}), name="old")
    new = pod(container(requests={"cpu": "1500m"}), name="new")
    assert quota.admit("pods", "", new, [(q, used_by(q, existing))]) == (
        "exceeded quota: compute, requested: requests.cpu=1500m, used: requests.cpu=1, "
        "limited: requests.cpu=2"
    )
    assert quota.admit("pods", "", pod(container(requests={"cpu": "1"})), [(q, used_by(q, existing))]) is None


def test_an_extended_resource_and_the_pod_count_are_limited_too() -> None:
    q = a_quota("gpus", **{"requests.nvidia.com/gpu": "4", "count/pods": "2"})
    holders = [pod(container(limits={"nvidia.com/gpu": "3"}), name=f"h{i}") for i in range(1)]
    new = pod(container(limits={"nvidia.com/gpu": "2"}))
    assert quota.admit("pods", "", new, [(q, used_by(q, *holders))]) == (
        "exceeded quota: gpus, requested: requests.nvidia.com/gpu=2, used: requests.nvidia.com/gpu=3, "
        "limited: requests.nvidia.com/gpu=4"
    )
    finished = [pod(container(), phase="Succeeded", name=f"f{i}") for i in range(2)]
    assert quota.admit("pods", "", pod(container()), [(q, used_by(q, *finished))]) == (
        "exceeded quota: gpus, requested: count/pods=1, used: count/pods=2, limited: count/pods=2"
    )


def test_a_quota_on_cpu_or_memory_needs_every_container_to_name_it() -> None:
    q = a_quota("compute", **{"limits.cpu": "4", "requests.memory": "1Gi"})
    new = pod(container("a", limits={"cpu": "1"}), container("b"), init=[container("init")])
    assert quota.admit("pods", "", new, [(q, used_by(q))]) == (
        "failed quota: compute: must specify limits.cpu for: b,init; "
        "must specify requests.memory for: a,b,init"
    )


def test_other_objects_count_by_their_resource() -> None:
    q = a_quota("objects", **{"count/configmaps": "1", "secrets": "5"})
    cm = {"metadata": {"name": "c", "namespace": "ns"}}
    current = quota.used(q, [("configmaps", "", cm)])
    assert quota.admit("configmaps", "", cm, [(q, current)]) == (
        "exceeded quota: objects, requested: count/configmaps=1, used: count/configmaps=1, "
        "limited: count/configmaps=1"
    )
    assert quota.admit("secrets", "", cm, [(q, current)]) is None


def test_scopes_narrow_a_quota_to_some_pods() -> None:
    q = {**a_quota("be", pods="1"), "spec": {"hard": {"pods": "1"}, "scopes": ["BestEffort"]}}
    best_effort, burstable = pod(container(), name="be"), pod(container(requests={"cpu": "1"}), name="bu")
    assert str(used_by(q, best_effort, burstable)["pods"]) == "1"
    assert quota.admit("pods", "", burstable, [(q, used_by(q, best_effort))]) is None
    assert quota.admit("pods", "", best_effort, [(q, used_by(q, best_effort))]) is not None


def test_status_lists_hard_and_used_in_canonical_form() -> None:
    q = a_quota("compute", **{"limits.memory": "2048Mi", "pods": "3"})
    p = pod(container(limits={"memory": "512Mi"}))
    assert quota.status_of(q, used_by(q, p, p)) == {
        "hard": {"limits.memory": "2Gi", "pods": "3"},
        "used": {"limits.memory": "1Gi", "pods": "2"},
    }


@pytest.mark.parametrize(
    ("containers", "expected"),
    [
        ([container(limits={"cpu": "1", "memory": "1Gi"})], "Guaranteed"),
        (
            [
                container(requests={"cpu": "1", "memory": "1Gi"}, limits={"cpu": "1", "memory": "1Gi"}),
                container("b", limits={"cpu": "500m", "memory": "64Mi"}),
            ],
            "Guaranteed",
        ),
        ([container(requests={"cpu": "500m"}, limits={"cpu": "1", "memory": "1Gi"})], "Burstable"),
        ([container(limits={"cpu": "1", "memory": "1Gi"}), container("b")], "Burstable"),
        ([container()], "BestEffort"),
        ([container(limits={"nvidia.com/gpu": "2"})], "BestEffort"),  # only cpu and memory count
    ],
)
def test_qos_class_follows_cpu_and_memory_only(containers: list[dict[str, Any]], expected: str) -> None:
    obj = pod(*containers)
    for c in obj["spec"]["containers"]:  # the API server's defaulting: requests from limits
        for k, v in (c["resources"].get("limits") or {}).items():
            c["resources"].setdefault("requests", {}).setdefault(k, v)
    assert qos_class(obj) == expected


LIMITS = {
    "metadata": {"name": "limits"},
    "spec": {
        "limits": [
            {
                "type": "Container",
                "max": {"memory": "1Gi"},
                "min": {"cpu": "100m"},
                "default": {"cpu": "500m"},
                "maxLimitRequestRatio": {"cpu": "4"},
            },
            {"type": "Pod", "max": {"cpu": "2"}},
        ]
    },
}


def test_a_limit_range_defaults_itself_as_the_api_server_does() -> None:
    lr = {
        "spec": {
            "limits": [
                {
                    "type": "Container",
                    "max": {"memory": "1Gi"},
                    "min": {"cpu": "100m"},
                    "default": {"cpu": "500m"},
                }
            ]
        }
    }
    limitranges.default_limit_range(lr)
    assert lr["spec"]["limits"][0]["default"] == {"cpu": "500m", "memory": "1Gi"}
    assert lr["spec"]["limits"][0]["defaultRequest"] == {"cpu": "500m", "memory": "1Gi"}


def test_defaults_fill_only_what_a_container_leaves_out_and_say_so() -> None:
    lr = {
        "spec": {
            "limits": [
                {
                    "type": "Container",
                    "default": {"cpu": "500m", "memory": "256Mi"},
                    "defaultRequest": {"cpu": "250m", "memory": "256Mi"},
                }
            ]
        }
    }
    obj = pod(container("a"), container("b", requests={"cpu": "1"}, limits={"cpu": "2"}))
    limitranges.apply_defaults(obj, [lr])
    a, b = obj["spec"]["containers"]
    assert a["resources"] == {
        "limits": {"cpu": "500m", "memory": "256Mi"},
        "requests": {"cpu": "250m", "memory": "256Mi"},
    }
    assert b["resources"] == {
        "limits": {"cpu": "2", "memory": "256Mi"},
        "requests": {"cpu": "1", "memory": "256Mi"},
    }
    assert obj["metadata"]["annotations"]["kubernetes.io/limit-ranger"] == (
        "LimitRanger plugin set: cpu, memory request for container a; cpu, memory limit for container a; "
        "memory request for container b; memory limit for container b"
    )


def test_min_max_and_ratio_are_checked_with_the_real_messages() -> None:
    ok = pod(container(requests={"cpu": "500m", "memory": "512Mi"}, limits={"cpu": "1", "memory": "1Gi"}))
    assert limitranges.violations(ok, [LIMITS]) == []
    bad = pod(container(requests={"cpu": "50m", "memory": "1Gi"}, limits={"cpu": "1", "memory": "2Gi"}))
    errors = limitranges.violations(bad, [LIMITS])
    assert errors == [
        "minimum cpu usage per Container is 100m, but request is 50m",
        "maximum memory usage per Container is 1Gi, but limit is 2Gi",
        "cpu max limit to request ratio per Container is 4, but provided ratio is 20.000000",
    ]
    assert limitranges.message(errors).startswith("[minimum cpu usage")
    assert limitranges.message(errors[1:2]) == "maximum memory usage per Container is 1Gi, but limit is 2Gi"
    no_limit = pod(container(requests={"cpu": "1"}))
    assert "maximum memory usage per Container is 1Gi.  No limit is specified" in limitranges.violations(
        no_limit, [LIMITS]
    )
    wide = pod(
        *[
            container(f"c{i}", requests={"cpu": "1", "memory": "1Gi"}, limits={"cpu": "1", "memory": "1Gi"})
            for i in range(3)
        ]
    )
    assert limitranges.violations(wide, [LIMITS]) == ["maximum cpu usage per Pod is 2, but limit is 3"]


def test_pod_limits_count_init_containers_at_their_peak() -> None:
    obj = pod(container(limits={"cpu": "1"}), init=[container("i", limits={"cpu": "3"})])
    assert quota.pod_limits(obj) == {"cpu": Fraction(3)}
