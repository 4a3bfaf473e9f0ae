"""Graceful node shutdown: what the kubelet's node shutdown manager does when its machine announces a shutdown
(a spot VM's preemption notice, `systemctl poweroff`, a cloud's maintenance). Followed:
pkg/kubelet/nodeshutdown (nodeshutdown_manager_linux.go `processShutdownEvent`, nodeshutdown_manager.go
`killPods`, `groupByPriority`, `migrateConfig`), pkg/kubelet/status/status_manager.go `mergePodStatus` and
pkg/kubelet/nodestatus `ReadyCondition`, Kubernetes v1.37 (GracefulNodeShutdown beta since v1.21).

1. The kubelet records a Normal `NodeShutdown` event on its Node, `Shutdown manager detected shutdown event`,
   and posts the node NotReady: Ready False, reason `KubeletNotReady`, message `node is shutting down` (and
   the `NodeNotReady` event); the node lifecycle controller taints it `node.kubernetes.io/not-ready`
   (NoSchedule, NoExecute). From then on the kubelet refuses new pods: phase Failed, reason `NodeShutdown`,
   `Pod was rejected as the node is shutting down.`
2. Its active pods are killed in groups by priority (`shutdownGracePeriod` minus
   `shutdownGracePeriodCriticalPods` for ordinary pods, then `shutdownGracePeriodCriticalPods` for pods of
   priority 2000000000 and up, system-cluster-critical), all pods of a group at once, the next group once
   they have all ended or the group's time is up. Each pod gets SIGTERM and its grace period: its own
   `terminationGracePeriodSeconds` when shorter than the group's, else the group's; then SIGKILL.
3. A pod ends as the kubelet reports it: phase Failed (Succeeded if every container exited 0), reason
   `Terminated`, message `Pod was terminated in response to imminent node shutdown.`, and the condition
   `DisruptionTarget` (True, reason `TerminationByKubelet`, the same message). As `mergePodStatus` holds
   them back until no container can still run, none of this reaches the API before the pod's containers have
   ended: during its grace period the pod still reads Running (no deletionTimestamp); the node's NotReady
   condition is the early sign. The pods are not deleted; their owner (or the pod GC) deletes them.

Left out: the priority-based configuration (shutdownGracePeriodByPodPriority; the two-group migration of the
classic settings is what is modelled), the inhibitor lock and logind, and the node coming back: the node stays
NotReady (the machine is off) until the cluster stops.
"""

from __future__ import annotations

import asyncio
import bisect
import copy
import datetime
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from localcluster._internal.errors import InvalidInput
from localcluster._internal.storage.store import NotFound, Store

Obj = dict[str, Any]
TERMINATED = "Terminated"
TERMINATED_MESSAGE = "Pod was terminated in response to imminent node shutdown."
REFUSED = "NodeShutdown"
REFUSED_MESSAGE = "Pod was rejected as the node is shutting down."
NODE_NOT_READY_MESSAGE = "node is shutting down"
DETECTED = "Shutdown manager detected shutdown event"
DEFAULT_PRIORITY = 0                    # scheduling.DefaultPriorityWhenNoDefaultClassExists
SYSTEM_CRITICAL_PRIORITY = 2_000_000_000
NOT_READY_TAINT = "node.kubernetes.io/not-ready"


@dataclass(frozen=True)
class ShutdownPeriods:
    """The kubelet's `shutdownGracePeriod` (the whole shutdown) and `shutdownGracePeriodCriticalPods` (the
    part of it kept for critical pods), in seconds."""

    grace_period: float = 30.0
    critical_pods: float = 10.0

    def __post_init__(self) -> None:
        if not self.grace_period > 0:
            raise InvalidInput(f"shutdownGracePeriod {self.grace_period:g} s: expected more than 0 (with 0 "
                               "the kubelet does no graceful shutdown)")
        if not 0 <= self.critical_pods <= self.grace_period:
            raise InvalidInput(f"shutdownGracePeriodCriticalPods {self.critical_pods:g} s: expected 0 to "
                               f"shutdownGracePeriod ({self.grace_period:g} s)")

    def groups(self) -> list[tuple[int, float]]:
        """`migrateConfig`: (lowest priority, seconds) per group, lowest priority first."""
        return [(DEFAULT_PRIORITY, self.grace_period - self.critical_pods),
                (SYSTEM_CRITICAL_PRIORITY, self.critical_pods)]


@dataclass(frozen=True)
class PodKill:
    namespace: str
    name: str
    grace_seconds: float


@dataclass(frozen=True)
class ShutdownGroup:
    priority: int
    seconds: float
    pods: tuple[PodKill, ...]


@dataclass(frozen=True)
class NodeShutdown:
    """What a shutdown did: the node, and each group's pods with the grace period each was given."""

    node: str
    groups: tuple[ShutdownGroup, ...]

    @property
    def pods(self) -> tuple[PodKill, ...]:
        return tuple(p for group in self.groups for p in group.pods)


def _priority(pod: Obj) -> int:
    return int((pod.get("spec") or {}).get("priority") or 0)


def plan(periods: ShutdownPeriods, pods: Sequence[Obj]) -> list[ShutdownGroup]:
    """`groupByPriority` and each pod's grace period: a pod joins the group of the highest lowest-priority at
    or below its own (below every group: the first; above: the last)."""
    bounds = periods.groups()
    members: list[list[PodKill]] = [[] for _ in bounds]
    floors = [priority for priority, _ in bounds]
    for pod in pods:
        index = max(0, bisect.bisect_right(floors, _priority(pod)) - 1)
        seconds = bounds[index][1]
        own = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
        grace = float(own) if own is not None and float(own) <= seconds else seconds
        members[index].append(PodKill(pod["metadata"].get("namespace", "default"), pod["metadata"]["name"],
                                      grace))
    return [ShutdownGroup(priority, seconds, tuple(group))
            for (priority, seconds), group in zip(bounds, members, strict=True)]


def disruption_condition() -> Obj:
    """The condition the kubelet adds (its lastTransitionTime is when the runtime reports the pod ended)."""
    return {"type": "DisruptionTarget", "status": "True", "lastProbeTime": None,
            "reason": "TerminationByKubelet", "message": TERMINATED_MESSAGE}


def mark_shutting_down(node: Obj, now: str) -> None:
    """The node as its kubelet posts it (Ready False) and the node lifecycle controller taints it."""
    status = node.setdefault("status", {})
    for cond in status.setdefault("conditions", []):
        if cond.get("type") == "Ready":
            if cond.get("status") != "False":
                cond["lastTransitionTime"] = now
            cond.update({"status": "False", "reason": "KubeletNotReady", "message": NODE_NOT_READY_MESSAGE,
                         "lastHeartbeatTime": now})
    spec = node.setdefault("spec", {})
    taints = [t for t in spec.get("taints") or [] if t.get("key") != NOT_READY_TAINT]
    taints += [{"key": NOT_READY_TAINT, "effect": effect, "timeAdded": now} for effect in ("NoSchedule",
                                                                                         "NoExecute")]
    spec["taints"] = taints


def refusal(pod: Obj, node: Obj) -> tuple[str, str] | None:
    """The shutdown manager's pod admit handler (`Admit`): while its node shuts down, every pod is refused
    with (reason, message); None admits it."""
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") == "False" and \
                cond.get("message") == NODE_NOT_READY_MESSAGE:
            return REFUSED, REFUSED_MESSAGE
    return None


class Killer(Protocol):
    """The runtime's side (runtime/base.py PodRuntime.kill_pod)."""

    async def kill_pod(self, pod: Obj, grace_seconds: float, *, reason: str, message: str,
                       conditions: list[Obj]) -> None: ...


NodeEvent = Callable[[Obj, str, str, str], None]   # (node reference, type, reason, message)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _active(pod: Obj, node: str) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return ((pod.get("spec") or {}).get("nodeName") == node and phase not in ("Succeeded", "Failed")
            and not pod["metadata"].get("deletionTimestamp"))


async def shutdown_node(*, store: Store, runtime: Killer, record: NodeEvent, node: str,
                        periods: ShutdownPeriods | None = None) -> NodeShutdown:
    """Shut `node` down gracefully (the module's steps 1-3); returns once every group has ended or used its
    time. InvalidInput for a node the cluster does not have."""
    periods = periods or ShutdownPeriods()
    if store.get("nodes", None, node) is None:
        names = ", ".join(sorted(n["metadata"]["name"] for n in store.objects("nodes")))
        raise InvalidInput(f"node {node!r} not found; the cluster's nodes: {names}")
    # the kubelet names its node by name for its events (nodeRef's UID is the node's name)
    reference: Obj = {"kind": "Node", "apiVersion": "v1", "metadata": {"name": node, "uid": node}}
    record(reference, "Normal", "NodeShutdown", DETECTED)
    now = _now()
    try:
        store.mutate("nodes", None, node, lambda obj: mark_shutting_down(obj, now))
    except NotFound:
        raise InvalidInput(f"node {node!r} was deleted while shutting down") from None
    record(reference, "Normal", "NodeNotReady", f"Node {node} status is now: NodeNotReady")
    pods = [copy.deepcopy(p) for p in store.objects("pods") if _active(p, node)]
    by_name = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}
    groups = plan(periods, pods)
    for group in groups:
        if not group.pods:
            continue  # no pods in a range: its time is not waited for
        kills = [asyncio.ensure_future(runtime.kill_pod(
            by_name[(kill.namespace, kill.name)], kill.grace_seconds, reason=TERMINATED,
            message=TERMINATED_MESSAGE, conditions=[disruption_condition()])) for kill in group.pods]
        _, late = await asyncio.wait(kills, timeout=group.seconds)
        # the next group starts when this one's time is up; its stragglers go on being killed meanwhile
        for task in late:
            task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)
    return NodeShutdown(node, tuple(groups))
