"""A pod's quality-of-service class, by the API server's own rule (pkg/apis/core/helper/qos, ComputePodQOS).

Only cpu and memory count, summed over containers and init containers, zero amounts ignored:
- BestEffort: no container asks for or limits cpu or memory (a pod asking only for a GPU is BestEffort);
- Guaranteed: every container limits both cpu and memory, and the summed requests equal the summed limits
  (a request left out was defaulted to its limit before this runs);
- Burstable: anything else.
The API server sets status.qosClass once, on create, after admission has defaulted requests and limits.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from localcluster._internal.apimachinery.quantity import parse_quantity
from localcluster._internal.errors import InvalidQuantity

GUARANTEED, BURSTABLE, BEST_EFFORT = "Guaranteed", "Burstable", "BestEffort"
_QOS_RESOURCES = ("cpu", "memory")


def _amounts(entries: Mapping[str, Any]) -> dict[str, Fraction]:
    out: dict[str, Fraction] = {}
    for name in _QOS_RESOURCES:
        if name in entries:
            try:
                amount = parse_quantity(entries[name])
            except InvalidQuantity:
                continue
            if amount > 0:
                out[name] = amount
    return out


def qos_class(pod: Mapping[str, Any]) -> str:
    spec = pod.get("spec") or {}
    requests: dict[str, Fraction] = {}
    limits: dict[str, Fraction] = {}
    guaranteed = True
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = (container.get("resources") or {}) if isinstance(container, Mapping) else {}
        for name, amount in _amounts(resources.get("requests") or {}).items():
            requests[name] = requests.get(name, Fraction(0)) + amount
        found = _amounts(resources.get("limits") or {})
        for name, amount in found.items():
            limits[name] = limits.get(name, Fraction(0)) + amount
        if set(found) != set(_QOS_RESOURCES):
            guaranteed = False
    if not requests and not limits:
        return BEST_EFFORT
    if guaranteed and all(limits.get(name) == amount for name, amount in requests.items()) \
            and len(requests) == len(limits):
        return GUARANTEED
    return BURSTABLE
