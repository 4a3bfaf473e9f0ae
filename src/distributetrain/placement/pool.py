"""The gang's shape when the manager does not place it on free GPUs (pure): for a node pool that scales up,
or for a Kueue queue. Every pod asks for one node's worth of GPUs, the last one for the rest; the smallest
is the chief, as in every plan (planner.Plan: the last entry). No node is named: the scheduler places the
pods on the nodes the autoscaler adds, or that Kueue admits them on.

How many GPUs one node of the pool has: --gpus-per-node, else the most any eligible node has (busy or
not: the inventory's `allocatable`), else what a Karpenter NodePool requires of its instances
(`karpenter.k8s.aws/instance-gpu-count`, `karpenter.azure.com/sku-gpu-count`: the largest value an `In`
requirement allows).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from distributetrain.errors import InvalidInput
from distributetrain.placement.inventory import NodeGpus
from distributetrain.placement.planner import Entry, Plan

POLICY = "node-pool"
KARPENTER_GPU_KEYS = ("karpenter.k8s.aws/instance-gpu-count", "karpenter.azure.com/sku-gpu-count")


def gang_shape(gpus: int, per_node: int) -> Plan:
    """`gpus` as pods of `per_node` GPUs and one of the rest: 7 over 2 -> 2, 2, 2 and a chief of 1."""
    if per_node < 1:
        raise InvalidInput(f"gpus_per_node: {per_node} GPUs per node; at least 1 is needed")
    sizes = [per_node] * (gpus // per_node) + ([gpus % per_node] if gpus % per_node else [])
    return Plan(requested=gpus, allocation=tuple(Entry("", n) for n in sizes),
                free_after=MappingProxyType({}), policy=POLICY)


def karpenter_gpus(node_pools: Iterable[Mapping[str, Any]]) -> int | None:
    """The GPUs per node a Karpenter NodePool (karpenter.sh/v1) requires: its template's requirement on the
    instance GPU count (`In`: the largest value listed)."""
    found: list[int] = []
    for pool in node_pools:
        requirements = ((((pool.get("spec") or {}).get("template") or {}).get("spec") or {})
                        .get("requirements") or [])
        for req in requirements:
            if req.get("key") in KARPENTER_GPU_KEYS and req.get("operator") == "In":
                found += [int(v) for v in req.get("values") or [] if str(v).isdigit() and int(v) > 0]
    return max(found) if found else None


def node_gpus(rows: Sequence[NodeGpus], *, given: int | None, karpenter: int | None = None) -> int:
    """GPUs per pod of a gang the manager does not place (see the module's docstring)."""
    if given is not None:
        return given
    largest = max((row.allocatable for row in rows if row.eligible), default=0)
    if largest:
        return largest
    if karpenter:
        return karpenter
    raise InvalidInput("gpus_per_node: no eligible node exists to learn the pool's node size from (it "
                       "scales from zero) and no Karpenter NodePool says it; pass --gpus-per-node with the "
                       "GPUs of one node of the pool; nothing was created")
