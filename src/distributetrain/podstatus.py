"""Reading a pod's status the way a person would: is it ready, did it end, and why, in the scheduler's or the
kubelet's own words. Pure functions over pod dicts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from distributetrain import naming

# A pod in one of these phases has finished: its containers will not run again and it holds no resources.
TERMINAL_PHASES = ("Succeeded", "Failed")
Pod = Mapping[str, Any]


def name(pod: Pod) -> str:
    return str((pod.get("metadata") or {}).get("name") or "?")


def phase(pod: Pod) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def node(pod: Pod) -> str | None:
    return (pod.get("spec") or {}).get("nodeName") or None


def planned_node(pod: Pod) -> str | None:
    """The node the pod is pinned to by its required node affinity (where it was planned to go)."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms") or []
    for term in terms:
        for expression in term.get("matchFields") or []:
            if expression.get("key") == naming.NODE_NAME_FIELD and expression.get("values"):
                return str(expression["values"][0])
        for expression in term.get("matchExpressions") or []:  # pods of earlier versions
            if expression.get("key") == naming.HOSTNAME_LABEL and expression.get("values"):
                return str(expression["values"][0])
    return None


def gpus(pod: Pod) -> int:
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(naming.GPUS_ANNOTATION, "0")
    return int(value) if str(value).isdigit() else 0


def annotation(pod: Pod, key: str) -> str | None:
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(key)
    return str(value) if value is not None else None


def role(pod: Pod) -> str:
    return str(((pod.get("metadata") or {}).get("labels") or {}).get(naming.ROLE_LABEL) or "")


def pod_ip(pod: Pod) -> str | None:
    return (pod.get("status") or {}).get("podIP") or None


def pod_ipv4(pod: Pod) -> str | None:
    """The pod's IPv4 address (Horovod's is IPv4-only): on a dual-stack cluster whose first family is IPv6,
    status.podIP is the IPv6 one and the IPv4 one is among status.podIPs. None when it has none."""
    status = pod.get("status") or {}
    candidates = [str(entry.get("ip") or "") for entry in status.get("podIPs") or []]
    candidates.append(str(status.get("podIP") or ""))
    return next((ip for ip in candidates if ip and ":" not in ip), None)


def _condition(pod: Pod, kind: str) -> Mapping[str, Any] | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return condition  # type: ignore[no-any-return]
    return None


def is_terminated(pod: Pod) -> bool:
    return phase(pod) in TERMINAL_PHASES


def is_ready(pod: Pod) -> bool:
    ready = _condition(pod, "Ready")
    return phase(pod) == "Running" and ready is not None and ready.get("status") == "True"


def is_deleting(pod: Pod) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def _container_states(pod: Pod) -> list[tuple[str, Mapping[str, Any]]]:
    status = pod.get("status") or {}
    out = []
    for item in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        out.append((str(item.get("name")), item.get("state") or {}))
    return out


def exit_code(pod: Pod, container: str | None = None) -> int | None:
    """The exit code of app container `container` (default: the first), None while it has not terminated."""
    for item in (pod.get("status") or {}).get("containerStatuses") or []:
        if container is None or item.get("name") == container:
            terminated = (item.get("state") or {}).get("terminated") or {}
            code = terminated.get("exitCode")
            return int(code) if code is not None else None
    return None


# what a DisruptionTarget condition's reason means (k8s.io/api core/v1 types.go, PodReason*; Kubernetes 1.26+)
DISRUPTIONS = {"EvictionByEvictionAPI": "evicted (a drain, or the eviction API)",
               "PreemptionByScheduler": "preempted by a higher-priority pod",
               "TerminationByKubelet": "terminated by its node (node shutdown, or out of a resource)",
               "DeletionByTaintManager": "deleted by the taint manager (its node is unreachable or tainted)",
               "DeletionByPodGC": "deleted by the pod garbage collector (its node is gone)"}


def disruption(pod: Pod) -> str | None:
    """Why the pod is being disrupted, from its DisruptionTarget condition, in plain words and the
    condition's own ("evicted (a drain, or the eviction API): EvictionByEvictionAPI: ..."); None without
    one."""
    condition = _condition(pod, "DisruptionTarget")
    if condition is None or condition.get("status") != "True":
        return None
    reason = str(condition.get("reason") or "")
    parts = [DISRUPTIONS.get(reason, "disrupted"), reason, str(condition.get("message") or "")]
    return ": ".join(p for p in parts if p)


def why(pod: Pod) -> str:
    """Why the pod is not (or no longer) Running and Ready, in its own status's words."""
    status = pod.get("status") or {}
    disrupted = disruption(pod)
    if disrupted:
        return disrupted
    if status.get("reason") or status.get("message"):
        # pod-level: Evicted, NodeLost, DeadlineExceeded, UnexpectedAdmissionError...
        return ": ".join(str(p) for p in (status.get("reason"), status.get("message")) if p)
    scheduled = _condition(pod, "PodScheduled")
    if scheduled is not None and scheduled.get("status") == "False":
        return f"not scheduled: {scheduled.get('reason', '')}: {scheduled.get('message', '')}".rstrip(": ")
    for cname, state in _container_states(pod):
        terminated = state.get("terminated")
        if terminated:
            parts = [f"container {cname} exited with code {terminated.get('exitCode')}"]
            parts += [str(terminated[k]) for k in ("reason", "message") if terminated.get(k)]
            return ": ".join(parts)
        waiting = state.get("waiting")
        if waiting and waiting.get("reason") not in (None, "ContainerCreating", "PodInitializing"):
            return ": ".join(str(p) for p in (f"container {cname} waiting", waiting.get("reason"),
                                               waiting.get("message")) if p)
    if phase(pod) == "Running":
        ready = _condition(pod, "Ready") or {}
        detail = ": ".join(str(ready[k]) for k in ("reason", "message") if ready.get(k))
        return f"running but not Ready (its readiness probe has not passed{': ' + detail if detail else ''})"
    if not node(pod):
        return "not scheduled yet (Pending, no scheduling decision reported)"
    return f"{phase(pod)}: containers starting"


def describe(pod: Pod) -> str:
    """`pod NAME on node NODE: WHY` - which pod, where, why."""
    where = node(pod) or planned_node(pod)
    if not where:  # a pod the manager did not place (groupstart.py), not bound yet
        return f"pod {name(pod)} on no node yet: {why(pod)}"
    label = "on node" if node(pod) else "planned for node"
    return f"pod {name(pod)} {label} {where}: {why(pod)}"


def env(pod: Pod, name: str) -> str | None:
    """The value of the environment variable `name` a container of the pod is given, None when none is."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        for item in container.get("env") or []:
            if item.get("name") == name:
                return str(item.get("value", ""))
    return None


def expected_processes(chief: Pod) -> int | None:
    """The chief's horovodrun -np (its DT_NUM_PROCESSES), None when it does not say."""
    for container in (chief.get("spec") or {}).get("containers") or []:
        for env in container.get("env") or []:
            if env.get("name") == naming.ENV_NUM_PROCESSES and str(env.get("value", "")).isdigit():
                return int(env["value"])
    return None


def active_deadline(pod: Pod) -> float | None:
    """The pod's spec.activeDeadlineSeconds (the job's --active-deadline, whole seconds), None without one."""
    value = (pod.get("spec") or {}).get("activeDeadlineSeconds")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
