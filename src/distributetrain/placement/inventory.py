"""GPU accounting per node and whether a job pod may go there, from Node and Pod objects as the API gives
them.

Input is plain JSON dicts (camelCase, as `kubectl get -o json` or a raw API list gives them), so the same code
serves a live cluster, a file, and the local cluster. Eligibility follows the scheduler's own filters that a
job pod meets: Ready, not cordoned, taints (NoSchedule/NoExecute only) against the pod's tolerations, its
node selector and required node affinity, room for one more pod, and room for its other requests: a node's
free cpu, memory (and whatever else the pod asks for) is its allocatable minus the requests of the
non-terminated pods bound to it, by Kubernetes' rules (podrequests.py). A node with free GPUs but no room for
the memory of a 1-GPU pod is not eligible (the scheduler would leave the pod Pending); one with room for
fewer pods' worth than its free GPUs offers only what fits (`usable`). Each kind of job pod (worker, chief) is
a `PodDemand`; a node must suit every one, since the plan may put either there.

GPUs shared by time-slicing or MPS (nodes labelled `nvidia.com/gpu.replicas` > 1 by GPU feature discovery,
GKE's `cloud.google.com/gke-gpu-sharing-strategy` or `gke-max-shared-clients-per-gpu` > 1, or a `*.shared`
resource) give one job pod at most 1: two ranks on replicas of one physical GPU would make NCCL
refuse the communicator ("Duplicate GPU detected"). MIG devices behind `nvidia.com/gpu` (the single
strategy: `nvidia.com/gpu.product` names a MIG profile; on GKE `cloud.google.com/gke-gpu-partition-size`)
are not eligible for a multi-GPU job: NCCL does not support MIG (NVIDIA/nccl#1716).

With a fabric (fabric.py: EFA or InfiniBand/RoCE devices requested beside the GPUs), each row also counts
the node's fabric devices the way it counts GPUs (allocatable minus the requests of pods bound there) and
says how many GPUs a job pod can take with its share of them (`NodeGpus.fabric`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Any

from distributetrain.errors import InvalidInput, InvalidQuantity
from distributetrain.naming import DEFAULT_RESOURCE
from distributetrain.placement import fabric as fabrics
from distributetrain.placement import nodeaffinity
from distributetrain.placement.podrequests import holds_resources, pod_requests
from distributetrain.placement.tolerations import Toleration, default_tolerations, tolerates
from distributetrain.quantity import parse_count, parse_quantity

_EXCLUDING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})  # PreferNoSchedule is only a preference
REPLICAS_LABEL = "nvidia.com/gpu.replicas"   # GPU feature discovery: time-slicing or MPS replicas per GPU
PRODUCT_LABEL = "nvidia.com/gpu.product"     # ...-MIG-1g.5gb under the MIG single strategy
# GKE's own node-pool labels for shared GPUs (cloud.google.com/kubernetes-engine/docs/how-to/timesharing-gpus,
# nvidia-mps-gpus, gpus-multi): time-sharing or MPS with N clients per GPU, and MIG partitions
GKE_SHARING_LABEL = "cloud.google.com/gke-gpu-sharing-strategy"       # time-sharing | mps
GKE_CLIENTS_LABEL = "cloud.google.com/gke-max-shared-clients-per-gpu"  # "2".."48"
GKE_PARTITION_LABEL = "cloud.google.com/gke-gpu-partition-size"       # "1g.5gb": a MIG instance per "GPU"
PODS = "pods"

Requests = Callable[[int], Mapping[str, Fraction]]


@dataclass(frozen=True)
class PodDemand:
    """What one kind of job pod asks of a node besides its GPUs (manifests.pod_demand builds it): where it
    may go, and `requests(g)`, its effective requests (cpu, memory, ...) when it holds g GPUs."""

    role: str
    tolerations: tuple[Toleration, ...]
    node_selector: Mapping[str, str] = field(default_factory=dict)
    node_affinity: tuple[nodeaffinity.Term, ...] = ()
    requests: Requests | None = None


@dataclass(frozen=True)
class NodeGpus:
    """One node's GPU accounting; `reason` says why a job pod may not go there (None when eligible).
    `usable` is how many of the free GPUs one job pod can take there (its other requests must fit too);
    `note` says why it is fewer than `free`."""

    node: str
    allocatable: int
    requested: int
    free: int
    eligible: bool
    reason: str | None
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), compare=False, hash=False)
    usable: int | None = None  # None: all the free GPUs
    note: str | None = None
    fabric: fabrics.Room | None = None  # with a fabric: its devices here, the GPUs a pod can take with them

    @property
    def offered(self) -> int:
        """The GPUs the planner may give a job pod here."""
        return self.free if self.usable is None else self.usable

    def to_json(self) -> dict[str, Any]:
        """The row; `usable` and `note` only on a node where a job pod can take fewer than the free GPUs."""
        out = {"node": self.node, "allocatable": self.allocatable, "requested": self.requested,
               "free": self.free, "eligible": self.eligible, "reason": self.reason}
        if self.usable is not None:
            out |= {"usable": self.usable, "note": self.note}
        if self.fabric is not None:
            out["fabric"] = self.fabric.to_json()
        return out


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
                    node_selector: Mapping[str, str],
                    node_affinity: Sequence[nodeaffinity.Term] = ()) -> list[str]:
    """Every reason a job pod may not be scheduled on `node` (empty when it may)."""
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
    if not nodeaffinity.matches(node_affinity, node):
        reasons.append(f"node affinity does not match ({nodeaffinity.describe(node_affinity)})")
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
              node_selector: Mapping[str, str] | None = None, demands: Sequence[PodDemand] | None = None,
              job_gpus: int = 0, fabric: fabrics.Fabric | None = None) -> tuple[NodeGpus, ...]:
    """Per node, sorted by name: allocatable, requested by pods holding resources there, free, eligibility,
    and how many GPUs a job pod can use there; with `fabric`, its devices there too (`NodeGpus.fabric`).

    Without `demands`, a job pod is one that carries exactly `tolerations` (default:
    `default_tolerations(resource)`; to add some, pass them together with the defaults) and `node_selector`,
    and asks for nothing but GPUs. `job_gpus`: the job's total, when known (MIG devices suit 1-GPU jobs only).
    """
    if demands is None:
        tolerations = default_tolerations(resource) if tolerations is None else tuple(tolerations)
        demands = (PodDemand(role="job pod", tolerations=tuple(tolerations),
                             node_selector=dict(node_selector or {})),)
    counted = sorted({name for d in demands if d.requests is not None for name in d.requests(1)} - {resource})
    requested: dict[str, int] = {}
    fabric_requested: dict[str, int] = {}
    others: dict[str, dict[str, int]] = {}  # node -> resource -> thousandths requested
    pod_counts: dict[str, int] = {}
    for pod in pods:
        bound = (pod.get("spec") or {}).get("nodeName")
        if not bound or not holds_resources(pod):
            continue
        pod_counts[bound] = pod_counts.get(bound, 0) + 1
        count = _pod_count(pod, resource, bound)
        if count:
            requested[bound] = requested.get(bound, 0) + count
        if fabric is not None and (devices := _pod_count(pod, fabric.resource, bound)):
            fabric_requested[bound] = fabric_requested.get(bound, 0) + devices
        if counted:
            _add_others(others.setdefault(bound, {}), pod, counted, bound)
    rows: list[NodeGpus] = []
    for node in nodes:
        name = _name(node)
        if not name:
            raise InvalidInput("a Node object has no metadata.name")
        status = node.get("status") or {}
        allocatable_all = status.get("allocatable") or {}
        raw = allocatable_all.get(resource, 0)
        allocatable = parse_count(raw, what=f"node {name} status.allocatable.{resource}")
        used = requested.get(name, 0)
        free = max(0, allocatable - used)
        reasons: list[str] = []
        for d in demands:
            for reason in node_exclusions(node, tolerations=d.tolerations, node_selector=d.node_selector,
                                          node_affinity=d.node_affinity):
                if reason not in reasons:
                    reasons.append(reason)
        if allocatable == 0:
            reasons.insert(0, f"no {resource} allocatable")
        labels = (node.get("metadata") or {}).get("labels") or {}
        usable, notes = free, []
        shared = _time_sliced(labels, resource)
        if shared and usable > 1:
            usable, notes = 1, [f"1 of {free}: {shared}"]
        mig = labels.get(PRODUCT_LABEL, "")
        if job_gpus > 1 and "-MIG-" in mig and resource == DEFAULT_RESOURCE:
            reasons.append(f"MIG devices ({PRODUCT_LABEL}={mig}): NCCL cannot use MIG (NVIDIA/nccl#1716), so "
                           "a multi-GPU job needs whole GPUs")
        partition = labels.get(GKE_PARTITION_LABEL, "")
        if job_gpus > 1 and partition and resource == DEFAULT_RESOURCE:
            reasons.append(f"MIG partitions ({GKE_PARTITION_LABEL}={partition}): NCCL cannot use MIG "
                           "(NVIDIA/nccl#1716), so a multi-GPU job needs whole GPUs")
        if pod_counts.get(name, 0) >= _allocatable_amount(allocatable_all, PODS, name):
            reasons.append(f"no room for another pod ({pod_counts.get(name, 0)} pods, the most it takes)")
        if not reasons and usable > 0 and counted:
            fits, why = _room(demands, allocatable_all, others.get(name, {}), usable, name)
            if fits == 0:
                reasons.append(why)
            elif fits < usable:
                usable, notes = fits, [f"{fits} of {free}: {why}"]
        room = None
        if fabric is not None:
            devices = parse_count(allocatable_all.get(fabric.resource, 0),
                                  what=f"node {name} status.allocatable.{fabric.resource}")
            room = fabrics.room(fabric, node_gpus=allocatable, allocatable=devices,
                                requested=fabric_requested.get(name, 0), gpus_offered=usable)
        rows.append(NodeGpus(node=name, allocatable=allocatable, requested=used, free=free,
                             eligible=not reasons, reason="; ".join(reasons) or None,
                             labels=MappingProxyType(dict(labels)),
                             usable=None if usable == free else usable, note="; ".join(notes) or None,
                             fabric=room))
    return tuple(sorted(rows, key=lambda row: row.node))


def _time_sliced(labels: Mapping[str, str], resource: str) -> str | None:
    """Why a node's GPUs are shared replicas, or None."""
    if resource.endswith(".shared"):
        return f"{resource} is a time-sliced GPU (NCCL refuses two ranks on one GPU)"
    replicas = labels.get(REPLICAS_LABEL, "")
    if replicas.isdigit() and int(replicas) > 1:
        return f"time-sliced GPUs ({REPLICAS_LABEL}={replicas}; NCCL refuses two ranks on one GPU)"
    strategy, clients = labels.get(GKE_SHARING_LABEL, ""), labels.get(GKE_CLIENTS_LABEL, "")
    if strategy or (clients.isdigit() and int(clients) > 1):
        shown = ", ".join(f"{k}={v}" for k, v in ((GKE_SHARING_LABEL, strategy), (GKE_CLIENTS_LABEL, clients))
                          if v)
        return f"shared GPUs ({shown}; NCCL refuses two ranks on one GPU)"
    return None


def _allocatable_amount(allocatable: Mapping[str, Any], name: str, node: str) -> Fraction:
    if name not in allocatable:
        return Fraction(10**9) if name == PODS else Fraction(0)
    try:
        return parse_quantity(allocatable[name])  # cached: nodes of a cluster mostly share one allocatable
    except InvalidQuantity as err:
        raise InvalidQuantity(f"node {node} status.allocatable.{name}: {err}") from None


def _add_others(into: dict[str, int], pod: Mapping[str, Any], names: Sequence[str], node: str) -> None:
    """Add the pod's effective requests of `names` to `into`, in thousandths (rounded up, as the scheduler's
    MilliValue: integer sums keep a 150,000-pod inventory fast)."""
    spec = pod.get("spec") or {}
    try:
        if spec.get("initContainers") or spec.get("overhead"):
            amounts = pod_requests(pod)  # init containers' peak, sidecars, overhead: the full rules
            for name in names:
                if amounts.get(name):
                    into[name] = into.get(name, 0) + math.ceil(amounts[name] * 1000)
            return
        for container in spec.get("containers") or ():
            resources = container.get("resources") or {}
            requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
            for name in names:
                value = requests.get(name, limits.get(name))  # a limit stands in for a missing request
                if value is not None:
                    into[name] = into.get(name, 0) + _milli(value)
    except InvalidQuantity as err:
        raise InvalidQuantity(f"pod {_pod_label(pod)} on node {node}: {err}") from None


@functools.lru_cache(maxsize=4096)
def _milli(value: Any) -> int:
    # a cluster's pods repeat a few quantities ("100m", "64Mi"): parse each once
    return math.ceil(parse_quantity(value, what="quantity") * 1000)


def _room(demands: Sequence[PodDemand], allocatable: Mapping[str, Any], used: Mapping[str, int],
          most: int, node: str) -> tuple[int, str]:
    """The most GPUs (up to `most`) a job pod of every kind can hold on the node with its other requests
    fitting; and, when fewer than `most`, what stops the next one (`needs 4 cpu for 1 GPU, 2.5 free`)."""
    why = ""
    for gpus in range(most, 0, -1):
        short = None
        for demand in demands:
            if demand.requests is None:
                continue
            for name, amount in sorted(demand.requests(gpus).items()):
                free = _allocatable_amount(allocatable, name, node) - Fraction(used.get(name, 0), 1000)
                if amount > free:
                    plural = "s" if gpus > 1 else ""
                    short = (f"{demand.role} needs {human(name, amount)} {name} for {gpus} GPU{plural}, "
                             f"{human(name, max(free, Fraction(0)))} free")
                    break
            if short:
                break
        if short is None:
            return gpus, why
        why = short
    return 0, why


def human(name: str, amount: Fraction) -> str:
    """A quantity as a person reads it: cpu as cores (`2.5`), memory and storage in binary units (`33Gi`)."""
    if name in ("memory", "ephemeral-storage") or name.startswith("hugepages-"):
        for unit, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if amount >= size:
                return f"{float(amount / size):.4g}{unit}"
    return f"{float(amount):.4g}"


def free_gpus(rows: Iterable[NodeGpus], *, with_fabric: bool = False) -> dict[str, int]:
    """What the planner takes: eligible node -> the GPUs a job pod can use there; `with_fabric`, with its
    share of the node's fabric devices too (nodes without any are left out)."""
    if with_fabric:
        return {row.node: row.fabric.offered for row in rows
                if row.eligible and row.fabric is not None and row.fabric.offered > 0}
    return {row.node: row.offered for row in rows if row.eligible}


def topology(rows: Iterable[NodeGpus], label: str) -> dict[str, str]:
    """Eligible node -> the value of its `label` (nodes without the label are left out: the planner treats
    each as a domain of its own)."""
    return {row.node: row.labels[label] for row in rows if row.eligible and label in row.labels}
