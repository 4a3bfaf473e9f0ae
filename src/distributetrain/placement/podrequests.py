"""The resources a pod requests, by Kubernetes' own rules (shared by the inventory and the local scheduler).

- A container's limit stands in for its missing request (Kubernetes defaults requests to limits).
- Effective request of a pod = max(sum over app containers + sidecar init containers (restartPolicy Always),
  the largest regular init container plus the sidecars started before it), plus `spec.overhead`.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from distributetrain.podstatus import TERMINAL_PHASES
from distributetrain.quantity import parse_quantity


def container_requests(container: Mapping[str, Any]) -> dict[str, Fraction]:
    """Requests of one container, with limits standing in for missing requests."""
    resources = container.get("resources") or {}
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    out: dict[str, Fraction] = {}
    for name, value in limits.items():
        out[name] = parse_quantity(value, what=f"container {container.get('name')!r} limits.{name}")
    for name, value in requests.items():
        out[name] = parse_quantity(value, what=f"container {container.get('name')!r} requests.{name}")
    return out


def _add(into: dict[str, Fraction], more: Mapping[str, Fraction]) -> None:
    for name, amount in more.items():
        into[name] = into.get(name, Fraction(0)) + amount


def _max(into: dict[str, Fraction], more: Mapping[str, Fraction]) -> None:
    for name, amount in more.items():
        if amount > into.get(name, Fraction(0)):
            into[name] = amount


def pod_requests(pod: Mapping[str, Any]) -> dict[str, Fraction]:
    """The effective request of a pod for every resource it names."""
    spec = pod.get("spec") or {}
    total: dict[str, Fraction] = {}
    for container in spec.get("containers") or []:
        _add(total, container_requests(container))
    sidecars: dict[str, Fraction] = {}
    init_peak: dict[str, Fraction] = {}
    for init in spec.get("initContainers") or []:
        requests = container_requests(init)
        if init.get("restartPolicy") == "Always":
            _add(total, requests)
            _add(sidecars, requests)
        else:
            # a regular init container runs beside the sidecars that started before it
            running = dict(sidecars)
            _add(running, requests)
            _max(init_peak, running)
    _max(total, init_peak)
    for name, value in (spec.get("overhead") or {}).items():
        _add(total, {name: parse_quantity(value, what=f"spec.overhead.{name}")})
    return total


def holds_resources(pod: Mapping[str, Any], node: str | None = None) -> bool:
    """Whether a pod holds its requests on a node: bound (there, when `node` is given) and not terminated."""
    bound = (pod.get("spec") or {}).get("nodeName")
    if not bound or (node is not None and bound != node):
        return False
    return (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES
