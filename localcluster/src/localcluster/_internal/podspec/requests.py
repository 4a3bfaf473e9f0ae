"""What a pod takes from its node, by Kubernetes' own rules: the scheduler's and the kubelet's view.

The local cluster's own implementation, written after k8s.io/component-helpers/resource (PodRequests,
AggregateContainerRequests), not shared with the product's inventory: if both used one implementation, the
manager's accounting and this scheduler would always agree, and a mistake in it would pass every test.

- A container's request for a resource is its `requests` entry, else its `limits` entry (the API server
  copies limits into missing requests when the pod is created; pods handed to the scheduler directly in
  tests may not have been through it).
- App containers and sidecars (init containers with restartPolicy Always) run together: their requests add.
- A regular init container runs alone, beside the sidecars started before it; the largest of those sums is
  the init peak. The pod takes, per resource, the larger of that peak and the app containers plus sidecars.
- `spec.overhead` (the RuntimeClass's) comes on top.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from localcluster._internal.apimachinery.quantity import parse_quantity

GPU_RESOURCE = "nvidia.com/gpu"  # what the GPU nodes advertise and the process runtime hands out
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
Amounts = dict[str, Fraction]


def container_requests(container: Mapping[str, Any]) -> Amounts:
    """One container's requests; a limit stands in for a request that is not given."""
    resources = container.get("resources") or {}
    amounts: Amounts = {}
    for kind in ("limits", "requests"):  # a request, when given, replaces the limit standing in for it
        for resource, value in (resources.get(kind) or {}).items():
            what = f"container {container.get('name')!r} {kind}.{resource}"
            amounts[resource] = parse_quantity(value, what=what)
    return amounts


def _add_into(total: Amounts, more: Mapping[str, Fraction]) -> None:
    for resource, amount in more.items():
        total[resource] = total.get(resource, Fraction(0)) + amount


def _max_into(peak: Amounts, more: Mapping[str, Fraction]) -> None:
    for resource, amount in more.items():
        if resource not in peak or amount > peak[resource]:
            peak[resource] = amount


def _sum(parts: Iterable[Mapping[str, Fraction]]) -> Amounts:
    total: Amounts = {}
    for part in parts:
        _add_into(total, part)
    return total


def pod_requests(pod: Mapping[str, Any]) -> Amounts:
    """The pod's effective request for every resource it names (PodRequests with overhead)."""
    spec = pod.get("spec") or {}
    requests = _sum(container_requests(c) for c in spec.get("containers") or [])
    sidecars: Amounts = {}
    init_peak: Amounts = {}
    for init in spec.get("initContainers") or []:
        own = container_requests(init)
        if init.get("restartPolicy") == "Always":
            _add_into(requests, own)
            _add_into(sidecars, own)
            _max_into(init_peak, sidecars)
        else:
            _max_into(init_peak, _sum((own, sidecars)))
    _max_into(requests, init_peak)
    overhead = spec.get("overhead") or {}
    _add_into(requests, {resource: parse_quantity(value, what=f"spec.overhead.{resource}")
                         for resource, value in overhead.items()})
    return requests


def holds_resources(pod: Mapping[str, Any], node: str | None = None) -> bool:
    """Whether the pod takes its requests from a node (from `node`, when given): it is bound there and has
    not terminated. A bound pod still Pending holds them: the kubelet has admitted it."""
    node_name = (pod.get("spec") or {}).get("nodeName")
    if not node_name or (node is not None and node_name != node):
        return False
    return (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES
