"""ProvisioningRequest (autoscaling.x-k8s.io/v1), as cluster-autoscaler 1.31 answers it with
--enable-provisioning-requests (apis/provisioningrequest/autoscaling.x-k8s.io/v1/types.go,
provisioningrequest/conditions/conditions.go, provisioningrequest/besteffortatomic and checkcapacity):

- the request names PodTemplates (same namespace) and counts; CA accepts it (Accepted=True), then
- `best-effort-atomic-scale-up.autoscaling.x-k8s.io`: every pod is placed on the cluster as it is plus new
  nodes, or none is; when all fit, the nodes are asked for at once and Provisioned=True
  (CapacityIsProvisioned), else Provisioned=False (CapacityIsNotFound, "Capacity is not found, CA will try
  to find it later.") and CA tries again on its next pass;
- `check-capacity.autoscaling.x-k8s.io`: every pod fits the nodes as they are (Provisioned=True,
  CapacityIsFound) or not (Provisioned=False, CapacityIsNotFound); nothing is added;
- pods consuming a request carry `autoscaling.x-k8s.io/consume-provisioning-request: NAME` (and the class),
  and no longer trigger scale-ups of their own.
Left out: booking (the capacity kept for the request's pods for 10 minutes, BookingExpired), the
ValidUntilSeconds and noRetry parameters, Failed=True, and cloud-specific classes (left unanswered, as CA
leaves a class it does not know).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]
BEST_EFFORT_ATOMIC = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
CHECK_CAPACITY = "check-capacity.autoscaling.x-k8s.io"
CLASSES = (BEST_EFFORT_ATOMIC, CHECK_CAPACITY)
CONSUME_ANNOTATION = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS_ANNOTATION = "autoscaling.x-k8s.io/provisioning-class-name"
RESOURCE = "provisioningrequests.autoscaling.x-k8s.io"
ACCEPTED_MESSAGE = "ProvisioningRequest is accepted by ClusterAutoscaler"
NOT_FOUND_MESSAGE = "Capacity is not found, CA will try to find it later."
FOUND_MESSAGE = "Capacity is found in the cluster"


@dataclass(frozen=True)
class Verdict:
    """A condition to set: Provisioned True or False, its reason and message."""

    provisioned: bool
    reason: str
    message: str


def requested_pods(request: Mapping[str, Any], templates: Mapping[str, Obj]) -> list[Obj] | str:
    """The pods a request stands for, from its PodTemplates (by name); or why it cannot be read."""
    pods: list[Obj] = []
    meta = request.get("metadata") or {}
    for index, pod_set in enumerate((request.get("spec") or {}).get("podSets") or []):
        name = str(((pod_set or {}).get("podTemplateRef") or {}).get("name") or "")
        template = templates.get(name)
        if template is None:
            return f"podSets[{index}]: PodTemplate {meta.get('namespace')}/{name} not found"
        body = (template.get("template") or {})
        for n in range(int(pod_set.get("count") or 0)):
            pods.append({"metadata": {**copy.deepcopy(body.get("metadata") or {}),
                                      "name": f"{meta.get('name')}-{name}-{n}",
                                      "namespace": meta.get("namespace")},
                         "spec": copy.deepcopy(body.get("spec") or {})})
    return pods


def is_settled(request: Mapping[str, Any]) -> bool:
    """Provisioned=True already: nothing more to do for it."""
    return condition(request, "Provisioned").get("status") == "True"


def condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), {})


def with_condition(status: Obj, kind: str, value: bool, reason: str, message: str, *, now: str,
                   generation: int) -> bool:
    """Set a metav1.Condition on `status`; whether anything changed."""
    conditions: list[Obj] = status.setdefault("conditions", [])
    text = "True" if value else "False"
    for cond in conditions:
        if cond.get("type") != kind:
            continue
        if (cond.get("status"), cond.get("reason"), cond.get("message")) == (text, reason, message):
            return False
        if cond.get("status") != text:
            cond["lastTransitionTime"] = now
        cond.update(status=text, reason=reason, message=message, observedGeneration=generation)
        return True
    conditions.append({"type": kind, "status": text, "reason": reason, "message": message,
                       "lastTransitionTime": now, "observedGeneration": generation})
    return True


def verdict(cls: str, increases: Mapping[str, int] | None) -> Verdict:
    """What the class says of the simulation's outcome (None: the pods do not all fit)."""
    if increases is None:
        return Verdict(False, "CapacityIsNotFound", NOT_FOUND_MESSAGE)
    if cls == CHECK_CAPACITY:
        return Verdict(True, "CapacityIsFound", FOUND_MESSAGE)
    return Verdict(True, "CapacityIsProvisioned", FOUND_MESSAGE)
