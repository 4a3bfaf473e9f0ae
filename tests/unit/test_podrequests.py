"""Pod resource requests by Kubernetes' rules, and which pods hold their requests on a node."""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

import pytest

from distributetrain.errors import InvalidQuantity
from distributetrain.placement.podrequests import container_requests, holds_resources, pod_requests

GPU = "nvidia.com/gpu"


def ctr(name: str, requests: dict[str, str] | None = None, limits: dict[str, str] | None = None,
        restart_policy: str | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    out: dict[str, Any] = {"name": name, "image": "x", "resources": resources}
    if restart_policy:
        out["restartPolicy"] = restart_policy
    return out


def pod(containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None,
        overhead: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers}
    if init is not None:
        spec["initContainers"] = init
    if overhead is not None:
        spec["overhead"] = overhead
    return {"metadata": {"name": "p", "namespace": "ml"}, "spec": spec}


@pytest.mark.parametrize(("container", "expected"), [
    (ctr("a", requests={GPU: "2"}, limits={GPU: "2"}), {GPU: Fraction(2)}),
    # limits stand in for missing requests (how extended resources are usually written)
    (ctr("a", limits={GPU: "4", "memory": "1Gi"}), {GPU: Fraction(4), "memory": Fraction(2**30)}),
    # a request, when given, wins over the limit
    (ctr("a", requests={"cpu": "500m"}, limits={"cpu": "2"}), {"cpu": Fraction(1, 2)}),
    (ctr("a"), {}),
    ({"name": "bare", "image": "x"}, {}),
    ({"name": "nulls", "resources": {"requests": None, "limits": None}}, {}),
])
def test_container_requests(container: dict[str, Any], expected: dict[str, Fraction]) -> None:
    assert container_requests(container) == expected


@pytest.mark.parametrize(("spec", "expected_gpus", "why"), [
    (pod([ctr("a", limits={GPU: "2"}), ctr("b", limits={GPU: "3"})]), 5, "app containers add up"),
    (pod([ctr("a", limits={GPU: "1"})], init=[ctr("i", limits={GPU: "4"})]), 4,
     "a regular init container bigger than the app containers sets the peak"),
    (pod([ctr("a", limits={GPU: "3"})], init=[ctr("i", limits={GPU: "2"})]), 3,
     "a smaller regular init container does not add"),
    (pod([ctr("a", limits={GPU: "1"})], init=[ctr("i1", limits={GPU: "2"}), ctr("i2", limits={GPU: "3"})]), 3,
     "regular init containers run one at a time: the largest counts"),
    (pod([ctr("a", limits={GPU: "2"})], init=[ctr("side", limits={GPU: "1"}, restart_policy="Always")]), 3,
     "a sidecar init container (restartPolicy Always) runs beside the app containers"),
    (pod([ctr("a", limits={GPU: "1"})],
         init=[ctr("side", limits={GPU: "1"}, restart_policy="Always"), ctr("i", limits={GPU: "4"})]), 5,
     "a regular init container runs beside the sidecars started before it"),
    (pod([ctr("a", limits={GPU: "1"})],
         init=[ctr("i", limits={GPU: "4"}), ctr("side", limits={GPU: "1"}, restart_policy="Always")]), 4,
     "a sidecar started after a regular init container does not run beside it"),
    (pod([ctr("a", limits={GPU: "2"})], overhead={GPU: "1"}), 3, "spec.overhead is added"),
    (pod([ctr("a", limits={GPU: "1"})], init=[ctr("i", limits={GPU: "4"})], overhead={GPU: "1"}), 5,
     "overhead is added on top of the init peak"),
    (pod([ctr("a", requests={"cpu": "1"})]), None, "a pod without GPUs requests none"),
])
def test_pod_requests(spec: dict[str, Any], expected_gpus: int | None, why: str) -> None:
    got = pod_requests(spec).get(GPU)
    assert got == (None if expected_gpus is None else Fraction(expected_gpus)), why


def test_pod_requests_per_resource_peak_is_independent() -> None:
    spec = pod([ctr("a", requests={"cpu": "2", "memory": "1Gi"})],
               init=[ctr("i", requests={"cpu": "1", "memory": "4Gi"})])
    assert pod_requests(spec) == {"cpu": Fraction(2), "memory": Fraction(4 * 2**30)}


def test_pod_requests_of_an_empty_pod() -> None:
    assert pod_requests({}) == {}
    assert pod_requests({"spec": None}) == {}


def test_bad_quantity_names_the_container() -> None:
    with pytest.raises(InvalidQuantity, match=re.escape("container 'trainer' limits.nvidia.com/gpu")):
        pod_requests(pod([ctr("trainer", limits={GPU: "lots"})]))


@pytest.mark.parametrize(("spec", "status", "node", "expected"), [
    ({"nodeName": "n1"}, {"phase": "Running"}, "n1", True),
    ({"nodeName": "n1"}, {"phase": "Pending"}, "n1", True),  # bound but not started: holds its GPUs
    ({"nodeName": "n1"}, {}, "n1", True),
    ({"nodeName": "n1"}, {"phase": "Unknown"}, "n1", True),
    ({"nodeName": "n1"}, {"phase": "Succeeded"}, "n1", False),
    ({"nodeName": "n1"}, {"phase": "Failed"}, "n1", False),
    ({}, {"phase": "Pending"}, "n1", False),  # unbound: holds nothing
    ({"nodeName": ""}, {"phase": "Pending"}, None, False),
    ({"nodeName": "n2"}, {"phase": "Running"}, "n1", False),
    ({"nodeName": "n2"}, {"phase": "Running"}, None, True),
])
def test_holds_resources(spec: dict[str, Any], status: dict[str, Any], node: str | None,
                         expected: bool) -> None:
    assert holds_resources({"spec": spec, "status": status}, node) is expected
