"""The product's resource rules (quantity.py, placement/podrequests.py) agree with the local cluster's, an
independent implementation it shares no code with (`localcluster.pod_requests`, `parse_quantity`), on
generated pods: two implementations of one Kubernetes rule, so a mistake in either shows up here."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import localcluster
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distributetrain import quantity
from distributetrain.errors import InvalidQuantity
from distributetrain.placement import podrequests

_QUANTITIES = st.sampled_from(["0", "1", "2", "3", "8", "250m", "1500m", "1Gi", "512Mi", "1e3", "2k"])
_RESOURCES = st.sampled_from(["nvidia.com/gpu", "cpu", "memory"])
_AMOUNTS = st.dictionaries(_RESOURCES, _QUANTITIES, max_size=3)


@st.composite
def _containers(draw: st.DrawFn, *, init: bool) -> dict[str, Any]:
    requests, limits = draw(st.none() | _AMOUNTS), draw(st.none() | _AMOUNTS)
    resources = {k: v for k, v in (("requests", requests), ("limits", limits)) if v is not None}
    out: dict[str, Any] = {"name": "c", "image": "x", "resources": resources}
    if init and draw(st.booleans()):
        out["restartPolicy"] = "Always"
    return out


@st.composite
def _pods(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": draw(st.lists(_containers(init=False), max_size=3)),
                            "initContainers": draw(st.lists(_containers(init=True), max_size=4))}
    if draw(st.booleans()):
        spec["overhead"] = draw(_AMOUNTS)
    return {"spec": spec}


@settings(max_examples=300, deadline=None)
@given(_pods())
def test_the_product_inventory_and_the_cluster_agree_on_what_a_pod_takes(pod: dict[str, Any]) -> None:
    ours = {name: amount for name, amount in podrequests.pod_requests(pod).items() if amount}
    theirs = {name: amount for name, amount in localcluster.pod_requests(pod).items() if amount}
    assert ours == theirs


def _parsed(parse: Any, text: str, error: type[Exception]) -> Fraction | None:
    try:
        return parse(text)  # type: ignore[no-any-return]
    except error:
        return None


@pytest.mark.parametrize("text", ["1", "+2", "500m", "2Gi", "1e3", ".5", "1.", "abc", "1K", "", "1 Gi", "0x"])
def test_quantities_agree_with_the_cluster(text: str) -> None:
    assert _parsed(quantity.parse_quantity, text, InvalidQuantity) == _parsed(
        localcluster.parse_quantity, text, localcluster.InvalidQuantity)
