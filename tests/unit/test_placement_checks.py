"""What a real cluster would refuse later, refused before anything is created: an IPv6-only pod network
(Horovod 0.28.1 is IPv4-only) and a volume claim the plan's nodes cannot share."""

from __future__ import annotations

from typing import Any

import pytest

from distributetrain.placement import checks


def node(*cidrs: str) -> dict[str, Any]:
    spec = {"podCIDR": cidrs[0], "podCIDRs": list(cidrs)} if cidrs else {}
    return {"metadata": {"name": "n"}, "spec": spec}


@pytest.mark.parametrize(("manager_ips", "nodes", "refused"), [
    ((), [node("10.244.1.0/24")], False),
    ((), [node("fd00:10:244:1::/64")], True),
    ((), [node("10.244.1.0/24", "fd00:10:244:1::/64")], False),      # dual-stack
    ((), [node()], False),                                           # nothing to tell by
    (("fd00::5",), [node("10.244.1.0/24")], True),                   # the manager's own addresses decide
    (("fd00::5", "10.244.1.5"), [node("fd00:10:244:1::/64")], False),
])
def test_ipv6_only(manager_ips: tuple[str, ...], nodes: list[dict[str, Any]], refused: bool) -> None:
    why = checks.ipv6_only(manager_ips=manager_ips, nodes=nodes)
    assert (why is not None) == refused
    if why:
        assert "IPv4-only" in checks.ipv6_message(why)


def claim(*modes: str, phase: str = "Bound") -> dict[str, Any]:
    return {"metadata": {"name": "data", "namespace": "ml"}, "spec": {"accessModes": list(modes)},
            "status": {"phase": phase}}


def test_claims_against_the_plan() -> None:
    assert checks.claim_problem(claim("ReadWriteMany"), nodes=["a", "b"]) is None
    assert checks.claim_problem(claim("ReadOnlyMany"), nodes=["a", "b"]) is None
    assert checks.claim_problem(claim("ReadWriteOnce"), nodes=["a"]) is None
    rwo = checks.claim_problem(claim("ReadWriteOnce"), nodes=["a", "b"])
    assert rwo is not None and "ReadWriteOnce" in rwo and "Multi-Attach" in rwo and "2 nodes (a, b)" in rwo
    rwop = checks.claim_problem(claim("ReadWriteOncePod"), nodes=["a", "b"])
    assert rwop is not None and "only one pod" in rwop
    assert "Lost" in str(checks.claim_problem(claim("ReadWriteMany", phase="Lost"), nodes=["a"]))
    assert checks.claim_read_only(claim("ReadOnlyMany"))
    assert not checks.claim_read_only(claim("ReadOnlyMany", "ReadWriteMany"))
