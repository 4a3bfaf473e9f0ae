"""The shared fit rules (placement/fit.py) that the first gang, a replacement, `run --dry-run` and `plan` all
use: the resource check, the node sets to allow and avoid, one topology domain, and the refusal's text."""

from __future__ import annotations

from typing import Any

import pytest

from distributetrain.errors import CannotPlace, InvalidInput
from distributetrain.placement import fit


def node(name: str, gpus: int, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels},
            "spec": {},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


NODES = [node("a", 5, rack="r1"), node("b", 3, rack="r2"), node("c", 2, rack="r1"),
         {**node("d", 8, rack="r2"), "spec": {"unschedulable": True}}]


def rows() -> Any:
    return fit.survey(NODES, [], resource="nvidia.com/gpu", demands=None, job_gpus=6)


def split(plan: Any) -> dict[str, int]:
    return {e.node: e.gpus for e in plan.allocation}


def test_the_design_example_fits_over_the_eligible_nodes() -> None:
    assert split(fit.place(rows(), 6, policy="optimal")) == {"a": 5, "c": 1}


def test_a_resource_no_node_advertises_is_a_typo_not_a_shortage() -> None:
    with pytest.raises(InvalidInput, match=r"no node advertises 'amd\.com/gpu'.*nvidia\.com/gpu"):
        fit.survey(NODES, [], resource="amd.com/gpu", demands=None, job_gpus=1)


def test_avoid_and_allow_narrow_the_nodes() -> None:
    assert split(fit.place(rows(), 6, policy="optimal", avoid={"c"})) == {"a": 5, "b": 1}
    assert split(fit.place(rows(), 4, policy="optimal", allow={"b", "c"})) == {"b": 3, "c": 1}
    with pytest.raises(CannotPlace, match="6"):
        fit.place(rows(), 6, policy="optimal", allow={"b", "c"})


def test_a_domain_keeps_the_placement_inside_it() -> None:
    # rack r1 holds a (5) and c (2): 6 GPUs fit there; r2 has only b (3) eligible
    assert split(fit.place(rows(), 6, policy="optimal", topology_key="rack", domain="r1")) == {"a": 5, "c": 1}
    # 3 GPUs: b alone would do, but the replacement must stay in r1
    assert split(fit.place(rows(), 3, policy="optimal", topology_key="rack", domain="r1")) == {"a": 3}
    with pytest.raises(CannotPlace):
        fit.place(rows(), 4, policy="optimal", topology_key="rack", domain="r2")


def test_a_topology_label_no_eligible_node_has_is_refused_as_bad_input() -> None:
    with pytest.raises(InvalidInput, match=r"topology_key .*no eligible node has the label 'zone'"):
        fit.place(rows(), 2, policy="optimal", topology_key="zone")


def test_the_refusal_names_the_excluded_nodes() -> None:
    text = fit.excluded_text(rows())
    assert text.startswith("Excluded 1 of 4 node(s), with 8 GPU(s) free on them:")
    assert "  d (8 free): cordoned (spec.unschedulable)" in text
