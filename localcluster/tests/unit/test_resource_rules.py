"""The local cluster's own Kubernetes resource rules (apimachinery/quantity.py, podspec/requests.py):
quantities as exact fractions, a pod's effective requests (init containers, sidecars, overhead), and which
pods hold their node's resources."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from localcluster import InvalidInput, InvalidQuantity
from localcluster._internal.apimachinery.quantity import format_quantity, parse_count, parse_quantity
from localcluster._internal.podspec.requests import (
    GPU_RESOURCE,
    container_requests,
    holds_resources,
    pod_requests,
)

GPU = GPU_RESOURCE


@pytest.mark.parametrize(("text", "expected"), [
    ("8", Fraction(8)), ("+3", Fraction(3)), ("-2", Fraction(-2)), ("500m", Fraction(1, 2)),
    ("250u", Fraction(1, 4000)), ("5n", Fraction(5, 10**9)), ("1k", Fraction(1000)),
    ("2E", Fraction(2 * 10**18)), ("1Ki", Fraction(1024)), ("1.5Gi", Fraction(3 * 2**29)),
    ("1Ei", Fraction(2**60)), (".5", Fraction(1, 2)),
    ("1.", Fraction(1)), ("1e3", Fraction(1000)), ("1E-3", Fraction(1, 1000)), ("12e+2", Fraction(1200)),
    (" 4 ", Fraction(4)), (7, Fraction(7)), (0.1, Fraction(1, 10)),
])
def test_parse_quantity(text: str | int | float, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "1K", "1e", "--1", "1 Gi", "Gi", "1.2.3", "0x10", "1gi",
                                  "\u0665", True])
def test_parse_quantity_rejects_what_kubernetes_rejects(text: str) -> None:
    with pytest.raises(InvalidQuantity, match=r"^node n1 allocatable: .* is not a Kubernetes") as caught:
        parse_quantity(text, what="node n1 allocatable")
    assert isinstance(caught.value, InvalidInput)


@pytest.mark.parametrize(("text", "expected"), [("8", 8), ("1000m", 1), ("2k", 2000), (3, 3), ("1e1", 10)])
def test_parse_count(text: str | int, expected: int) -> None:
    assert parse_count(text, what="gpus") == expected


@pytest.mark.parametrize(("text", "message"), [("500m", "not a whole number"), ("-1", "negative"),
                                               ("two", "not a Kubernetes quantity")])
def test_parse_count_refuses_fractions_and_negatives(text: str, message: str) -> None:
    with pytest.raises(InvalidQuantity, match=message):
        parse_count(text, what="container c nvidia.com/gpu")


@pytest.mark.parametrize(("amount", "expected"), [(Fraction(8), "8"), (Fraction(3, 2), "1500m"),
                                                  (Fraction(1, 1000), "1m"), (Fraction(1, 3), str(1 / 3))])
def test_format_quantity(amount: Fraction, expected: str) -> None:
    assert format_quantity(amount) == expected


def ctr(name: str, requests: dict[str, str] | None = None, limits: dict[str, str] | None = None,
        restart_policy: str | None = None) -> dict[str, Any]:
    resources = {k: v for k, v in (("requests", requests), ("limits", limits)) if v is not None}
    out: dict[str, Any] = {"name": name, "image": "x", "resources": resources}
    if restart_policy:
        out["restartPolicy"] = restart_policy
    return out


def pod(containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None,
        overhead: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers, "initContainers": init or []}
    if overhead is not None:
        spec["overhead"] = overhead
    return {"metadata": {"name": "p", "namespace": "ml"}, "spec": spec}


def test_container_requests_limits_stand_in_and_requests_win() -> None:
    assert container_requests(ctr("a", limits={GPU: "4", "cpu": "2"}, requests={"cpu": "500m"})) == {
        GPU: Fraction(4), "cpu": Fraction(1, 2)}
    assert container_requests({"name": "bare"}) == {}
    assert container_requests({"name": "nulls", "resources": {"requests": None, "limits": None}}) == {}


@pytest.mark.parametrize(("spec", "gpus", "why"), [
    (pod([ctr("a", limits={GPU: "2"}), ctr("b", limits={GPU: "3"})]), 5, "app containers add up"),
    (pod([ctr("a", limits={GPU: "1"})], init=[ctr("i", limits={GPU: "4"})]), 4, "the init peak wins"),
    (pod([ctr("a", limits={GPU: "3"})], init=[ctr("i", limits={GPU: "2"})]), 3, "a small init adds nothing"),
    (pod([ctr("a", limits={GPU: "2"})], init=[ctr("s", limits={GPU: "1"}, restart_policy="Always")]), 3,
     "a sidecar runs beside the app containers"),
    (pod([ctr("a", limits={GPU: "1"})],
         init=[ctr("s", limits={GPU: "1"}, restart_policy="Always"), ctr("i", limits={GPU: "4"})]), 5,
     "an init container runs beside the sidecars started before it"),
    (pod([ctr("a", limits={GPU: "1"})],
         init=[ctr("i", limits={GPU: "4"}), ctr("s", limits={GPU: "1"}, restart_policy="Always")]), 4,
     "...and not beside those started after it"),
    (pod([ctr("a", limits={GPU: "1"})], init=[ctr("i", limits={GPU: "4"})], overhead={GPU: "1"}), 5,
     "overhead comes on top of the init peak"),
])
def test_pod_requests(spec: dict[str, Any], gpus: int, why: str) -> None:
    assert pod_requests(spec)[GPU] == gpus, why


def test_pod_requests_of_an_empty_pod() -> None:
    assert pod_requests({}) == {} and pod_requests({"spec": None}) == {}


@pytest.mark.parametrize(("spec", "status", "node", "expected"), [
    ({"nodeName": "n1"}, {"phase": "Pending"}, "n1", True),  # bound, admitted, not started: holds
    ({"nodeName": "n1"}, {}, None, True),
    ({"nodeName": "n1"}, {"phase": "Succeeded"}, "n1", False),
    ({"nodeName": "n1"}, {"phase": "Failed"}, None, False),
    ({}, {"phase": "Pending"}, None, False),
    ({"nodeName": "n2"}, {"phase": "Running"}, "n1", False),
])
def test_holds_resources(spec: dict[str, Any], status: dict[str, Any], node: str | None,
                         expected: bool) -> None:
    assert holds_resources({"spec": spec, "status": status}, node) is expected
