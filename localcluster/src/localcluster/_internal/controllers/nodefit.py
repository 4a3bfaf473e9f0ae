"""What a node offers a pod: taints and tolerations, node affinity, host ports, readiness, and the
resources the pods already bound there hold (in thousandths, so sums stay exact integers).
Pure helpers for the scheduler and the kubelet's admission check.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import lru_cache
from typing import Any

from localcluster._internal.apimachinery.quantity import parse_quantity
from localcluster._internal.podspec.requests import holds_resources, pod_requests

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
HostPort = tuple[str, str, int]  # (hostIP, protocol, hostPort)


def name_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def natural_key(name: str) -> tuple[Any, ...]:
    """node-2 before node-10."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def ready_status(node: Mapping[str, Any]) -> str:
    """The Ready condition's status: "True", "False", "Unknown", or "" when the node reports none yet."""
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return str(cond.get("status") or "")
    return ""


def is_ready(node: Mapping[str, Any]) -> bool:
    return ready_status(node) == "True"


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    if toleration.get("key") and toleration.get("key") != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def node_taints(node: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The node's taints, plus the one the node lifecycle controller puts on a node that is not Ready:
    not-ready when it says so (or says nothing yet), unreachable when its status is Unknown."""
    taints = list((node.get("spec") or {}).get("taints") or [])
    status = ready_status(node)
    if status != "True":
        key = UNREACHABLE_TAINT if status == "Unknown" else NOT_READY_TAINT
        if not any(t.get("key") == key for t in taints):
            taints.append({"key": key, "effect": "NoSchedule"})
    return taints


def untolerated_taint(pod: Mapping[str, Any], taints: Iterable[Mapping[str, Any]],
                      effects: Sequence[str] = ("NoSchedule", "NoExecute")) -> Mapping[str, Any] | None:
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    for taint in taints:
        if taint.get("effect") in effects and not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


def _expression_matches(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op, values = expr.get("key", ""), expr.get("operator"), list(expr.get("values") or [])
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(values) == 1:
        try:
            have, bound = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def _term_matches(term: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False  # an empty term selects no node
    labels = (node.get("metadata") or {}).get("labels") or {}
    node_fields = {"metadata.name": name_of(node)}
    return (all(_expression_matches(e, labels) for e in expressions)
            and all(_expression_matches(f, node_fields) for f in fields))


def matches_affinity(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """nodeSelector and requiredDuringSchedulingIgnoredDuringExecution node affinity."""
    spec = pod.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required is None:
        return True
    return any(_term_matches(term, node) for term in required.get("nodeSelectorTerms") or [])


def host_ports(pod: Mapping[str, Any]) -> set[HostPort]:
    ports: set[HostPort] = set()
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                ports.add((port.get("hostIP") or "0.0.0.0", port.get("protocol") or "TCP",
                           int(port["hostPort"])))
    return ports


def ports_conflict(wanted: AbstractSet[HostPort], used: AbstractSet[tuple[str, HostPort]]) -> bool:
    """Whether a wanted host port is taken; `used` pairs each taken port with the uid of its pod."""
    # the wildcard address 0.0.0.0 collides with every address on the same protocol and port
    return any(proto == used_proto and number == used_number and (ip == used_ip or "0.0.0.0" in (ip, used_ip))
               for ip, proto, number in wanted for _, (used_ip, used_proto, used_number) in used)


def _uid(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def _milli(amounts: Mapping[str, Fraction]) -> dict[str, int]:
    """Amounts in thousandths, rounded up as the scheduler's MilliValue does: integer sums stay fast."""
    return {name: math.ceil(amount * 1000) for name, amount in amounts.items()}


def requests_milli(pod: Mapping[str, Any]) -> Mapping[str, int]:
    """The pod's effective requests in thousandths."""
    meta = pod.get("metadata") or {}
    uid, version = meta.get("uid"), meta.get("resourceVersion")
    if uid and version:
        # a stored pod's requests change only with its resourceVersion: parse each version once
        return _requests_of_version(str(uid), str(version), pod)
    return _milli(pod_requests(pod))


_VERSIONS: dict[tuple[str, str], Mapping[str, int]] = {}
_VERSIONS_MAX = 100_000


def _requests_of_version(uid: str, version: str, pod: Mapping[str, Any]) -> Mapping[str, int]:
    key = (uid, version)
    found = _VERSIONS.get(key)
    if found is None:
        if len(_VERSIONS) >= _VERSIONS_MAX:
            _VERSIONS.clear()
        found = _VERSIONS[key] = _milli(pod_requests(pod))
    return found


@lru_cache(maxsize=256)
def _amounts(items: tuple[tuple[str, str], ...]) -> Mapping[str, int]:
    # nodes of a cluster mostly share one allocatable: parse each distinct one once
    return _milli({name: parse_quantity(value, what=f"allocatable {name}") for name, value in items})


def allocatable(node: Mapping[str, Any]) -> Mapping[str, int]:
    """The node's allocatable amounts, in thousandths."""
    status = node.get("status") or {}
    amounts = status.get("allocatable") or status.get("capacity") or {}
    return _amounts(tuple((str(k), str(v)) for k, v in amounts.items()))


@dataclass(frozen=True)
class NodeUsage:
    """What the pods holding resources on one node take: summed requests, pod count, host ports."""

    requested: Mapping[str, int] = field(default_factory=dict)  # thousandths
    pods: int = 0
    ports: frozenset[tuple[str, HostPort]] = frozenset()  # (uid of the pod, its host port)
    uids: frozenset[str] = frozenset()

    def plus(self, pod: Mapping[str, Any]) -> NodeUsage:
        requested = dict(self.requested)
        for name, amount in requests_milli(pod).items():
            requested[name] = requested.get(name, 0) + amount
        uid = _uid(pod)
        return NodeUsage(requested, self.pods + 1, self.ports | {(uid, p) for p in host_ports(pod)},
                         self.uids | {uid})


def usage_by_node(pods: Iterable[Mapping[str, Any]]) -> dict[str, NodeUsage]:
    """Per-node usage of every pod that holds resources; compute once per scheduling pass."""
    requested: dict[str, dict[str, int]] = {}
    counts: Counter[str] = Counter()
    ports: dict[str, set[tuple[str, HostPort]]] = {}
    uids: dict[str, set[str]] = {}
    for other in pods:
        if not holds_resources(other):
            continue
        name = other["spec"]["nodeName"]
        counts[name] += 1
        into = requested.setdefault(name, {})
        for resource, amount in requests_milli(other).items():
            into[resource] = into.get(resource, 0) + amount
        uid = _uid(other)
        ports.setdefault(name, set()).update((uid, p) for p in host_ports(other))
        uids.setdefault(name, set()).add(uid)
    return {name: NodeUsage(requested[name], counts[name], frozenset(ports[name]), frozenset(uids[name]))
            for name in counts}


def with_pod(usage: Mapping[str, NodeUsage], pod: Mapping[str, Any]) -> dict[str, NodeUsage]:
    """`usage` after binding `pod` to its spec.nodeName (a new mapping; `usage` is left as it was)."""
    out = dict(usage)
    name = (pod.get("spec") or {}).get("nodeName")
    if name and holds_resources(pod):
        out[name] = out.get(name, NodeUsage()).plus(pod)
    return out


def without(use: NodeUsage, pod: Mapping[str, Any]) -> NodeUsage:
    """A pod already counted on the node (e.g. re-checking a bound pod) must not be counted twice."""
    uid = _uid(pod)
    if not uid or uid not in use.uids:
        return use
    requested = dict(use.requested)
    for name, amount in requests_milli(pod).items():
        requested[name] = requested.get(name, 0) - amount
    return replace(use, requested=requested, pods=use.pods - 1, uids=use.uids - {uid},
                   ports=frozenset(p for p in use.ports if p[0] != uid))
