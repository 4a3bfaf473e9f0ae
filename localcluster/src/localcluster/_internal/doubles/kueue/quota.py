"""Kueue's admission of one Workload against its ClusterQueue's nominal quota, pure (kueue v0.10,
pkg/scheduler/flavorassigner/flavorassigner.go): each pod set's requests (count x the pod's effective
requests) take, per resource group, the first flavor in the ClusterQueue's order whose node labels agree with
the pods' node selector, whose taints the pods tolerate, and whose quota left covers every resource of the
group. A resource no group covers, or a pod set no flavor takes, makes the workload wait with the scheduler's
words: `couldn't assign flavors to pod set P: insufficient unused quota for nvidia.com/gpu in flavor F, 2 more
needed` (or `insufficient quota for R in flavor F, request > maximum capacity (N > M)` when even an empty
queue could not take it). Left out: borrowing in a cohort, preemption, fair sharing, flavor fungibility
options, Topology Aware Scheduling.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from localcluster._internal.apimachinery.quantity import format_quantity, parse_quantity
from localcluster._internal.podspec.requests import pod_requests

Obj = dict[str, Any]
Usage = dict[tuple[str, str], Fraction]  # (flavor, resource) -> amount reserved


@dataclass(frozen=True)
class PodSetAssignment:
    name: str
    count: int
    flavors: Mapping[str, str]       # resource -> flavor
    usage: Mapping[str, Fraction]    # resource -> the pod set's total

    def to_dict(self) -> Obj:
        return {"name": self.name, "count": self.count, "flavors": dict(self.flavors),
                "resourceUsage": {r: format_quantity(a) for r, a in self.usage.items()}}


def reserved(workload: Mapping[str, Any]) -> Usage:
    """What an admitted workload holds of its ClusterQueue (status.admission)."""
    out: Usage = {}
    for assignment in ((workload.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []:
        for resource, amount in (assignment.get("resourceUsage") or {}).items():
            flavor = (assignment.get("flavors") or {}).get(resource, "")
            key = (flavor, resource)
            out[key] = out.get(key, Fraction(0)) + parse_quantity(amount)
    return out


def pod_set_requests(pod_set: Mapping[str, Any]) -> dict[str, Fraction]:
    per_pod = pod_requests({"spec": ((pod_set.get("template") or {}).get("spec") or {})})
    count = int(pod_set.get("count") or 1)
    return {resource: amount * count for resource, amount in per_pod.items() if amount > 0}


def assign(workload: Mapping[str, Any], queue: Mapping[str, Any], flavors: Mapping[str, Obj],
           used: Usage) -> list[PodSetAssignment] | str:
    """The flavors for every pod set, or why the workload must wait."""
    taken = dict(used)
    out = []
    groups = (queue.get("spec") or {}).get("resourceGroups") or []
    for pod_set in (workload.get("spec") or {}).get("podSets") or []:
        name = str(pod_set.get("name"))
        wanted = pod_set_requests(pod_set)
        chosen: dict[str, str] = {}
        for resource in wanted:
            if not any(resource in (g.get("coveredResources") or []) for g in groups):
                return (f"couldn't assign flavors to pod set {name}: resource {resource} unavailable in "
                        "ClusterQueue")
        for group in groups:
            needed = {r: a for r, a in wanted.items() if r in (group.get("coveredResources") or [])}
            if not needed:
                continue
            reasons: list[str] = []
            for entry in group.get("flavors") or []:
                flavor = str(entry.get("name"))
                why = _flavor_mismatch(flavor, flavors.get(flavor), pod_set)
                why = why or _short(flavor, entry, needed, taken)
                if why:
                    reasons.append(why)
                    continue
                for resource, amount in needed.items():
                    chosen[resource] = flavor
                    taken[(flavor, resource)] = taken.get((flavor, resource), Fraction(0)) + amount
                break
            else:
                return f"couldn't assign flavors to pod set {name}: " + ", ".join(reasons)
        out.append(PodSetAssignment(name, int(pod_set.get("count") or 1), chosen, wanted))
    return out


def _quota(entry: Mapping[str, Any], resource: str) -> Fraction:
    for item in entry.get("resources") or []:
        if item.get("name") == resource:
            return parse_quantity(item.get("nominalQuota", 0))
    return Fraction(0)


def _short(flavor: str, entry: Mapping[str, Any], needed: Mapping[str, Fraction], taken: Usage) -> str:
    reasons = []
    for resource, amount in needed.items():
        nominal = _quota(entry, resource)
        used = taken.get((flavor, resource), Fraction(0))
        if amount > nominal:
            reasons.append(f"insufficient quota for {resource} in flavor {flavor}, request > maximum "
                           f"capacity ({format_quantity(amount)} > {format_quantity(nominal)})")
        elif used + amount > nominal:
            reasons.append(f"insufficient unused quota for {resource} in flavor {flavor}, "
                           f"{format_quantity(used + amount - nominal)} more needed")
    return ", ".join(reasons)


def _flavor_mismatch(name: str, flavor: Obj | None, pod_set: Mapping[str, Any]) -> str:
    if flavor is None:
        return f"flavor {name} not found"
    spec = (pod_set.get("template") or {}).get("spec") or {}
    labels = (flavor.get("spec") or {}).get("nodeLabels") or {}
    selector = spec.get("nodeSelector") or {}
    if any(key in selector and selector[key] != value for key, value in labels.items()):
        return f"flavor {name} doesn't match node affinity"
    for taint in (flavor.get("spec") or {}).get("nodeTaints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(
                _tolerates(t, taint) for t in spec.get("tolerations") or []):
            return f"untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}} in flavor {name}"
    return ""


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    if toleration.get("key") and toleration.get("key") != taint.get("key"):
        return False
    if (toleration.get("operator") or "Equal") == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector (matchLabels, matchExpressions); None matches nothing, {} everything, as a
    ClusterQueue's namespaceSelector."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        present = key in labels
        if (op == "In" and (not present or labels[key] not in values)) or (
                op == "NotIn" and present and labels[key] in values) or (
                op == "Exists" and not present) or (op == "DoesNotExist" and present):
            return False
    return True


def admitted_node_labels(workload: Mapping[str, Any], flavors: Mapping[str, Obj], pod_set: str
                         ) -> dict[str, str]:
    """The node labels of the flavors a pod set was admitted on (status.admission): what its pods' node
    selector gets before they are ungated (podset.Merge)."""
    out: dict[str, str] = {}
    for assignment in ((workload.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []:
        if assignment.get("name") != pod_set:
            continue
        for flavor in sorted(set((assignment.get("flavors") or {}).values())):
            out.update(((flavors.get(flavor) or {}).get("spec") or {}).get("nodeLabels") or {})
    return out
