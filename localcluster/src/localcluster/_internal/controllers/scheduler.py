"""The default scheduler's filters and its Unschedulable message; the kubelet's admission check.

How the API server calls this:
    usage = usage_by_node(all_pods)              # once per scheduling pass (about 20 us per pod)
    for pod in pending pods (spec.schedulerName default-scheduler, no spec.nodeName), oldest first:
        result = schedule(pod, nodes, usage=usage)          # or schedule(pod, nodes, all_pods)
        if result.node_name:
            bind it; usage = with_pod(usage, bound_pod); event scheduled_event_message(pod, node)
        else:
            status.conditions PodScheduled=False: unschedulable_condition(result.message, now=...),
            plus a Warning FailedScheduling event with result.message; retry when pods end or nodes change
    verdict = admit(pod, node, pods_on_that_node)   # pod created with spec.nodeName (the kubelet's check)
    if not verdict.admitted:
        status = {"phase": "Failed", "reason": verdict.reason, "message": verdict.pod_message}
`pods` may include the pod itself and terminated pods: only pods holding resources on a node count.
Past 100 nodes the search stops at feasible_nodes_to_find(n) feasible nodes, as the real scheduler does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from localcluster._internal.controllers.nodefit import (
    NOT_READY_TAINT,
    NodeUsage,
    allocatable,
    host_ports,
    is_ready,
    matches_affinity,
    name_of,
    natural_key,
    node_taints,
    ports_conflict,
    requests_milli,
    tolerates,
    untolerated_taint,
    usage_by_node,
    with_pod,
    without,
)

# re-exported: callers keep usage with these
__all__ = ["NOT_READY_TAINT", "AdmitResult", "NodeUsage", "ScheduleResult", "admit", "feasible_nodes_to_find",
           "fit_error_message", "is_ready", "schedule", "scheduled_condition", "scheduled_event_message",
           "tolerates", "unschedulable_condition", "usage_by_node", "with_pod"]

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
UNSCHEDULABLE = "node(s) were unschedulable"
AFFINITY = "node(s) didn't match Pod's node affinity/selector"
PORTS = "node(s) didn't have free ports for the requested pod ports"
TOO_MANY_PODS = "Too many pods"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"
# failures that evicting other pods could cure (status Unschedulable, not UnschedulableAndUnresolvable)
_RESOLVABLE_PREFIXES = ("Insufficient ", TOO_MANY_PODS, PORTS)
_BASE_RESOURCES = ("cpu", "memory", "ephemeral-storage")


@dataclass(frozen=True)
class ScheduleResult:
    """`node_name` is where to bind, or None with `message` the real-style FailedScheduling text and
    `reasons` each refused node's reasons."""

    node_name: str | None
    message: str = ""
    reasons: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class AdmitResult:
    admitted: bool
    reason: str = ""
    message: str = ""

    @property
    def pod_message(self) -> str:
        """What the kubelet writes into status.message of the rejected pod."""
        return f"Pod was rejected: {self.message}" if self.message else ""


def _ordered_resources(request: Mapping[str, int]) -> list[str]:
    rest = sorted(name for name in request if name not in _BASE_RESOURCES)
    return [name for name in _BASE_RESOURCES if name in request] + rest


def _insufficient(request: Mapping[str, int], alloc: Mapping[str, int],
                  use: NodeUsage) -> list[str]:
    """The resources that do not fit, pods first, as the NodeResourcesFit plugin orders them."""
    short = []
    if (use.pods + 1) * 1000 > alloc.get("pods", 0):
        short.append("pods")
    for name in _ordered_resources(request):
        amount = request[name]
        if amount > 0 and amount > alloc.get(name, 0) - use.requested.get(name, 0):
            short.append(name)
    return short


def _filter(pod: Mapping[str, Any], node: Mapping[str, Any], request: Mapping[str, int],
            use: NodeUsage) -> list[str]:
    """Reasons of the first failing filter plugin, in the default profile's order."""
    spec = node.get("spec") or {}
    if spec.get("unschedulable") and untolerated_taint(
            pod, [{"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}]) is not None:
        return [UNSCHEDULABLE]
    taint = untolerated_taint(pod, node_taints(node))
    if taint is not None:
        return [f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value') or ''}}}"]
    if not matches_affinity(pod, node):
        return [AFFINITY]
    if ports_conflict(host_ports(pod), use.ports):
        return [PORTS]
    short = _insufficient(request, allocatable(node), use)
    return [TOO_MANY_PODS if name == "pods" else f"Insufficient {name}" for name in short]


def _histogram(reasons: Iterable[str]) -> str:
    counts = Counter(reasons)
    # the real scheduler sorts "N reason" strings as text
    return ", ".join(sorted(f"{n} {reason}" for reason, n in counts.items()))


def fit_error_message(pod: Mapping[str, Any], total: int, reasons: Mapping[str, Sequence[str]]) -> str:
    message = f"0/{total} nodes are available: {_histogram(r for rs in reasons.values() for r in rs)}."
    if (pod.get("spec") or {}).get("preemptionPolicy") == "Never":
        return message + " preemption: not eligible due to preemptionPolicy=Never."
    preemption = [NO_VICTIMS if all(r.startswith(_RESOLVABLE_PREFIXES) for r in rs) else NOT_HELPFUL
                  for rs in reasons.values()]
    return message + f" preemption: 0/{total} nodes are available: {_histogram(preemption)}."


def _score(request: Mapping[str, int], alloc: Mapping[str, int], use: NodeUsage) -> float:
    """LeastAllocated: the mean free share after placing the pod, over cpu, memory and what the pod asks."""
    names = {"cpu", "memory"} | {n for n, a in request.items() if a > 0}
    total = 0.0
    for name in names:
        capacity = alloc.get(name, 0)
        if capacity <= 0:
            continue
        used = use.requested.get(name, 0) + request.get(name, 0)
        total += max(capacity - used, 0) / capacity
    return total / len(names)


def feasible_nodes_to_find(total: int) -> int:
    """numFeasibleNodesToFind: past 100 nodes the real scheduler stops filtering once it has this many."""
    if total < 100:
        return total
    share = max(50 - total // 125, 5)
    return max(total * share // 100, 100)


def schedule(pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]],
             pods: Iterable[Mapping[str, Any]] = (), *,
             usage: Mapping[str, NodeUsage] | None = None) -> ScheduleResult:
    """Pick a node for an unbound pod, or explain in the real scheduler's words why none fits.

    Pass `usage` (from usage_by_node, advanced with with_pod after each bind) instead of `pods` when
    scheduling many pods in one pass: it saves re-summing every pod's requests per call."""
    if not nodes:
        return ScheduleResult(None, "no nodes available to schedule pods", {})
    if usage is None:
        usage = usage_by_node(pods)
    request = requests_milli(pod)
    refused: dict[str, tuple[str, ...]] = {}
    feasible: list[tuple[int, float, tuple[Any, ...], str]] = []
    enough = feasible_nodes_to_find(len(nodes))
    for node in nodes:
        if len(feasible) >= enough:
            break
        name = name_of(node)
        use = without(usage.get(name, NodeUsage()), pod)
        reasons = _filter(pod, node, request, use)
        if reasons:
            refused[name] = tuple(reasons)
            continue
        soft = sum(1 for t in node_taints(node) if t.get("effect") == "PreferNoSchedule"
                   and untolerated_taint(pod, [t], ("PreferNoSchedule",)) is not None)
        feasible.append((soft, -_score(request, allocatable(node), use), natural_key(name), name))
    if feasible:
        return ScheduleResult(min(feasible)[3], "", refused)
    return ScheduleResult(None, fit_error_message(pod, len(nodes), refused), refused)


def _units(resource: str, milli: int) -> int:
    # the kubelet reports cpu in millicores and everything else in whole units (rounded up)
    return milli if resource == "cpu" else -(-milli // 1000)


def admit(pod: Mapping[str, Any], node: Mapping[str, Any] | None, pods: Iterable[Mapping[str, Any]] = (),
          *, usage: Mapping[str, NodeUsage] | None = None) -> AdmitResult:
    """The kubelet's admission of a pod bound to `node` (first failure wins, resources first).

    `pods` may be just the pods bound to that node; or pass a precomputed `usage`."""
    if node is None:
        return AdmitResult(False, "NodeName", "Predicate NodeName failed: node(s) didn't match the requested "
                                              "node name")
    if usage is None:
        usage = usage_by_node(pods)
    use = without(usage.get(name_of(node), NodeUsage()), pod)
    request = requests_milli(pod)
    alloc = allocatable(node)
    for name in _insufficient(request, alloc, use):
        wanted = 1000 if name == "pods" else request[name]
        used = use.pods * 1000 if name == "pods" else use.requested.get(name, 0)
        return AdmitResult(False, f"OutOf{name}",
                           f"Node didn't have enough resource: {name}, requested: {_units(name, wanted)}, "
                           f"used: {_units(name, used)}, "
                           f"capacity: {_units(name, alloc.get(name, 0))}")
    if not matches_affinity(pod, node):
        return AdmitResult(False, "NodeAffinity", f"Predicate NodeAffinity failed: {AFFINITY}")
    if ports_conflict(host_ports(pod), use.ports):
        return AdmitResult(False, "NodePorts", f"Predicate NodePorts failed: {PORTS}")
    if untolerated_taint(pod, (node.get("spec") or {}).get("taints") or [], ("NoExecute",)) is not None:
        return AdmitResult(False, "TaintToleration",
                           "Predicate TaintToleration failed: node(s) had taints that the pod didn't "
                           "tolerate")
    return AdmitResult(True)


def unschedulable_condition(message: str, *, now: str) -> dict[str, Any]:
    return {"type": "PodScheduled", "status": "False", "lastProbeTime": None, "lastTransitionTime": now,
            "reason": "Unschedulable", "message": message}


def scheduled_condition(*, now: str) -> dict[str, Any]:
    return {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": now}


def scheduled_event_message(pod: Mapping[str, Any], node_name: str) -> str:
    meta = pod.get("metadata") or {}
    return f"Successfully assigned {meta.get('namespace', 'default')}/{meta.get('name', '')} to {node_name}"
