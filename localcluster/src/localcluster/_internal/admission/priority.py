"""PriorityClass (scheduling.k8s.io/v1) and the Priority admission plugin, as kube-apiserver v1.37 has them.

Followed: pkg/apis/scheduling/validation/validation.go (ValidatePriorityClass, ...Update),
pkg/apis/scheduling/types.go (the system classes, HighestUserDefinablePriority), and
plugin/pkg/admission/priority/admission.go (admitPod: a pod's priorityClassName resolved into spec.priority
and spec.preemptionPolicy, or the global default class, or 0; validatePriorityClass: one global default).
Pure: the classes come in as a list.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from localcluster._internal.apimachinery.fielderrors import FORBIDDEN, Cause, not_supported

Obj = dict[str, Any]

HIGHEST_USER_DEFINABLE = 1_000_000_000
SYSTEM_PREFIX = "system-"
PREEMPTION_POLICIES = ("Never", "PreemptLowerPriority")
SYSTEM_CLASSES: tuple[tuple[str, int, str], ...] = (
    ("system-node-critical", 2_000_001_000,
     "Used for system critical pods that must not be moved from their current node."),
    ("system-cluster-critical", 2_000_000_000,
     "Used for system critical pods that must run in the cluster, but can be moved to another node if "
     "necessary."),
)


def system_class_objects() -> list[Obj]:
    """The classes the API server creates at start (its bootstrap post-start hook)."""
    return [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
             "value": value, "description": description, "preemptionPolicy": "PreemptLowerPriority"}
            for name, value, description in SYSTEM_CLASSES]


def validate_class(pc: Mapping[str, Any]) -> list[Cause]:
    name = str((pc.get("metadata") or {}).get("name") or "")
    value = pc.get("value")
    causes: list[Cause] = []
    if not isinstance(value, int) or isinstance(value, bool):
        causes.append(Cause("value", "FieldValueRequired", "Required value"))
        value = 0
    if name.startswith(SYSTEM_PREFIX):
        known = {n: v for n, v, _ in SYSTEM_CLASSES}
        if name not in known:
            why = f"{name} is not a known system priority class"
        elif value != known[name]:
            why = f"value of {name} PriorityClass must be {known[name]}"
        else:
            why = ""
        if why:
            causes.append(Cause("metadata.name", FORBIDDEN,
                                "Forbidden: priority class names with 'system-' prefix are reserved for "
                                f"system use only. error: {why}"))
    elif value > HIGHEST_USER_DEFINABLE:
        causes.append(Cause("value", FORBIDDEN,
                            f"Forbidden: maximum allowed value of a user defined priority is "
                            f"{HIGHEST_USER_DEFINABLE}"))
    policy = pc.get("preemptionPolicy")
    if policy is not None and policy not in PREEMPTION_POLICIES:
        causes.append(not_supported("preemptionPolicy", policy, list(PREEMPTION_POLICIES)))
    return causes


def update_causes(pc: Mapping[str, Any], current: Mapping[str, Any]) -> list[Cause]:
    causes = validate_class(pc)
    if pc.get("value") != current.get("value"):
        causes.append(Cause("value", FORBIDDEN, "Forbidden: may not be changed in an update."))
    if pc.get("preemptionPolicy") != current.get("preemptionPolicy"):
        causes.append(Cause("preemptionPolicy", "FieldValueInvalid",
                            f'Invalid value: "{pc.get("preemptionPolicy")}": field is immutable'))
    return causes


def default_class(classes: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The global default; of several (a race), the one with the lowest value."""
    found: Mapping[str, Any] | None = None
    for pc in classes:
        lower = found is None or int(found.get("value", 0)) > int(pc.get("value", 0))
        if pc.get("globalDefault") and lower:
            found = pc
    return found


def admit_class(pc: Mapping[str, Any], classes: Iterable[Mapping[str, Any]], *, creating: bool) -> str | None:
    """validatePriorityClass: the reason a second global default is refused (403), or None."""
    if not pc.get("globalDefault"):
        return None
    existing = default_class(classes)
    if existing is None:
        return None
    name = (existing.get("metadata") or {}).get("name")
    if creating or name != (pc.get("metadata") or {}).get("name"):
        return f"PriorityClass {name} is already marked as default. Only one default can exist"
    return None


def admit_pod(pod: Obj, classes: Mapping[str, Mapping[str, Any]]) -> str | None:
    """admitPod on create: set spec.priority (and spec.preemptionPolicy, spec.priorityClassName for the
    default class) from the pod's class; the reason for a 403 when it cannot, else None."""
    spec = pod.setdefault("spec", {})
    name = spec.get("priorityClassName") or ""
    policy: str | None
    if not name:
        default = default_class(classes.values())
        if default is not None:
            spec["priorityClassName"] = (default.get("metadata") or {}).get("name", "")
            priority, policy = int(default.get("value", 0)), default.get("preemptionPolicy")
        else:
            priority, policy = 0, "PreemptLowerPriority"
    else:
        pc = classes.get(name)
        if pc is None:
            return f"no PriorityClass with name {name} was found"
        priority, policy = int(pc.get("value", 0)), pc.get("preemptionPolicy")
    if spec.get("priority") is not None and spec["priority"] != priority:
        return (f"the integer value of priority ({spec['priority']}) must not be provided in pod spec; "
                f"priority admission controller computed {priority} from the given PriorityClass name")
    spec["priority"] = priority
    if policy is not None:
        if spec.get("preemptionPolicy") is not None and spec["preemptionPolicy"] != policy:
            return (f"the string value of PreemptionPolicy ({spec['preemptionPolicy']}) must not be provided "
                    f"in pod spec; priority admission controller computed {policy} from the given "
                    "PriorityClass name")
        spec["preemptionPolicy"] = policy
    return None

