"""GPU accounting per node and whether a worker may go there, from Node and Pod objects as the API gives them.

Input is plain JSON dicts (camelCase, as `kubectl get -o json` or a raw API list gives them), so the same code
serves a live cluster, a file, and the local cluster. Eligibility follows the scheduler's own filters that a
worker pod meets: Ready, not cordoned, taints (NoSchedule/NoExecute only) against the worker's tolerations,
and the worker's node selector.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from distributetrain.errors import InvalidInput, InvalidQuantity
from distributetrain.naming import DEFAULT_RESOURCE
from distributetrain.podrequests import holds_resources, pod_requests
from distributetrain.quantity import parse_count
from distributetrain.tolerations import Toleration, default_tolerations, tolerates

_EXCLUDING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})  # PreferNoSchedule is only a preference


@dataclass(frozen=True)
class NodeGpus:
    """One node's GPU accounting; `reason` says why a worker may not go there (None when eligible)."""

    node: str
    allocatable: int
    requested: int
    free: int
    eligible: bool
    reason: str | None
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), compare=False, hash=False)

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "allocatable": self.allocatable, "requested": self.requested,
                "free": self.free, "eligible": self.eligible, "reason": self.reason}


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _pod_label(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


def _ready(node: Mapping[str, Any]) -> str | None:
    """None when Ready is True, else what it is."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            status = condition.get("status")
            return None if status == "True" else f"not Ready (Ready={status})"
    return "not Ready (no Ready condition)"


def _taint_text(taint: Mapping[str, Any]) -> str:
    value = taint.get("value")
    return f"{taint.get('key')}{'=' + str(value) if value else ''}:{taint.get('effect')}"


def node_exclusions(node: Mapping[str, Any], *, tolerations: Sequence[Toleration],
                    node_selector: Mapping[str, str]) -> list[str]:
    """Every reason a worker pod may not be scheduled on `node` (empty when it may)."""
    reasons: list[str] = []
    not_ready = _ready(node)
    if not_ready:
        reasons.append(not_ready)
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        reasons.append("cordoned (spec.unschedulable)")
    for taint in spec.get("taints") or []:
        if taint.get("effect") in _EXCLUDING_EFFECTS and not any(tolerates(t, taint) for t in tolerations):
            reasons.append(f"untolerated taint {_taint_text(taint)}")
    labels = (node.get("metadata") or {}).get("labels") or {}
    for key, wanted in node_selector.items():
        if labels.get(key) != wanted:
            have = f"{key}={labels[key]}" if key in labels else f"no label {key}"
            reasons.append(f"node selector {key}={wanted} does not match ({have})")
    return reasons


def _mentions(pod: Mapping[str, Any], resource: str) -> bool:
    """Whether any container, init container or the overhead names `resource`: most pods in a cluster do not,
    and skipping their exact quantity arithmetic keeps a 100,000-pod inventory fast."""
    spec = pod.get("spec") or {}
    if resource in (spec.get("overhead") or {}):
        return True
    for container in (*(spec.get("containers") or ()), *(spec.get("initContainers") or ())):
        resources = container.get("resources") or {}
        if resource in (resources.get("limits") or {}) or resource in (resources.get("requests") or {}):
            return True
    return False


def _pod_count(pod: Mapping[str, Any], resource: str, node: str) -> int:
    if not _mentions(pod, resource):
        return 0
    try:
        amount = pod_requests(pod).get(resource)
    except InvalidQuantity as err:
        raise InvalidQuantity(f"pod {_pod_label(pod)} on node {node}: {err}") from None
    if amount is None:
        return 0
    if amount.denominator != 1:
        raise InvalidQuantity(f"pod {_pod_label(pod)} on node {node} requests {float(amount):g} {resource}: "
                              "not a whole number; extended resources such as GPUs cannot be fractional")
    return int(amount)


def inventory(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]], *,
              resource: str = DEFAULT_RESOURCE, tolerations: Sequence[Toleration] | None = None,
              node_selector: Mapping[str, str] | None = None) -> tuple[NodeGpus, ...]:
    """Per node, sorted by name: allocatable, requested by pods holding resources there, free, eligibility.

    `tolerations` are exactly those the worker pods carry (default: `default_tolerations(resource)`); to add
    some, pass them together with the defaults.
    """
    tolerations = default_tolerations(resource) if tolerations is None else tuple(tolerations)
    selector = dict(node_selector or {})
    requested: dict[str, int] = {}
    for pod in pods:
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound and holds_resources(pod):
            count = _pod_count(pod, resource, bound)
            if count:
                requested[bound] = requested.get(bound, 0) + count
    rows: list[NodeGpus] = []
    for node in nodes:
        name = _name(node)
        if not name:
            raise InvalidInput("a Node object has no metadata.name")
        raw = ((node.get("status") or {}).get("allocatable") or {}).get(resource, 0)
        allocatable = parse_count(raw, what=f"node {name} status.allocatable.{resource}")
        used = requested.get(name, 0)
        reasons = node_exclusions(node, tolerations=tolerations, node_selector=selector)
        if allocatable == 0:
            reasons.insert(0, f"no {resource} allocatable")
        labels = (node.get("metadata") or {}).get("labels") or {}
        rows.append(NodeGpus(node=name, allocatable=allocatable, requested=used,
                             free=max(0, allocatable - used),
                             eligible=not reasons, reason="; ".join(reasons) or None,
                             labels=MappingProxyType(dict(labels))))
    return tuple(sorted(rows, key=lambda row: row.node))


def free_gpus(rows: Iterable[NodeGpus]) -> dict[str, int]:
    """What the planner takes: eligible node -> free GPUs."""
    return {row.node: row.free for row in rows if row.eligible}


def topology(rows: Iterable[NodeGpus], label: str) -> dict[str, str]:
    """Eligible node -> the value of its `label` (nodes without the label are left out: the planner treats
    each as a domain of its own)."""
    return {row.node: row.labels[label] for row in rows if row.eligible and label in row.labels}
