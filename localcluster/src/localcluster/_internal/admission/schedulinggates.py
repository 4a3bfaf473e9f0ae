"""Pod scheduling gates, core Kubernetes since 1.30 (KEP-3521 "Pod scheduling readiness", GA; KEP-3838
"mutable scheduling directives for gated pods"), as kube-apiserver v1.31 applies them:

- on create, a pod with `spec.schedulingGates` gets the condition PodScheduled=False, reason SchedulingGated,
  "Scheduling is blocked due to non-empty scheduling gates" (pkg/registry/core/pod/strategy.go,
  applySchedulingGatedCondition); a gate name is a qualified name, listed once, and `spec.nodeName` cannot
  be set with gates (pkg/apis/core/validation/validation.go, validateSchedulingGates, ValidatePodCreate);
- on update, gates can only be removed (validateOnlyDeletedSchedulingGates: "only deletion is allowed, but
  found new scheduling gate 'x'"); while the pod is gated its placement may only narrow: entries added to
  `spec.nodeSelector` (none changed or removed), expressions added to the terms of its required node
  affinity; that is how a queue (Kueue) steers a pod to the flavor it admitted it on before ungating it;
- the scheduler leaves a gated pod alone (controllers/loops.py), and `kubectl get pods` shows it
  SchedulingGated (apiserver/tables.py).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import orjson

from localcluster._internal.apimachinery.fielderrors import FORBIDDEN, INVALID, Cause, duplicate, invalid
from localcluster._internal.apimachinery.names import label_key_errors

Obj = dict[str, Any]
GATED_REASON = "SchedulingGated"
GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"
_NODE_AFFINITY = ("affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")


def gate_names(spec: Mapping[str, Any]) -> list[str]:
    return [str((gate or {}).get("name") or "") for gate in spec.get("schedulingGates") or []]


def is_gated(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("schedulingGates"))


def gated_condition(*, now: str) -> Obj:
    return {"type": "PodScheduled", "status": "False", "lastProbeTime": None, "lastTransitionTime": now,
            "reason": GATED_REASON, "message": GATED_MESSAGE}


def apply_on_create(pod: Obj, *, now: str) -> None:
    """The pod strategy's PrepareForCreate: a gated pod says why it is not scheduled."""
    if not is_gated(pod):
        return
    conditions = pod.setdefault("status", {}).setdefault("conditions", [])
    if not any(c.get("type") == "PodScheduled" for c in conditions):
        conditions.append(gated_condition(now=now))


def create_causes(spec: Mapping[str, Any]) -> list[Cause]:
    """What ValidatePodCreate refuses about gates: a bad or repeated name, a node name set with gates."""
    causes: list[Cause] = []
    seen: set[str] = set()
    for index, name in enumerate(gate_names(spec)):
        field = f"spec.schedulingGates[{index}].name"
        causes += [invalid(field, name, why) for why in label_key_errors(name)]
        if name in seen:
            causes.append(duplicate(f"spec.schedulingGates[{index}]", name))
        seen.add(name)
    if spec.get("schedulingGates") and spec.get("nodeName"):
        causes.append(Cause("spec.nodeName", FORBIDDEN,
                            "Forbidden: cannot be set until all schedulingGates have been cleared"))
    return causes


def update_causes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Cause]:
    """What ValidatePodUpdate refuses about gates and, for a gated pod, about its node selector and required
    node affinity (`old` and `new` are pod specs)."""
    causes: list[Cause] = []
    before = set(gate_names(old))
    for index, name in enumerate(gate_names(new)):
        if name not in before:
            why = f"Forbidden: only deletion is allowed, but found new scheduling gate '{name}'"
            causes.append(Cause(f"spec.schedulingGates[{index}].name", FORBIDDEN, why))
    if not old.get("schedulingGates"):
        return causes
    old_selector, new_selector = old.get("nodeSelector") or {}, new.get("nodeSelector") or {}
    if any(new_selector.get(key) != value for key, value in old_selector.items()):
        causes.append(_invalid("spec.nodeSelector", new_selector, "only additions to spec.nodeSelector are "
                                                                  "allowed (no mutations or deletions)"))
    old_terms, new_terms = _required_terms(old), _required_terms(new)
    if old_terms and (len(new_terms) != len(old_terms) or any(
            not _narrows(before_term, after_term)
            for before_term, after_term in zip(old_terms, new_terms, strict=True))):
        path = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
        causes.append(_invalid(path, new_terms, "only additions of matchExpressions to existing terms are "
                                                "allowed"))
    return causes


def without_scheduling_directives(old: Mapping[str, Any], spec: Obj) -> Obj:
    """`spec` without what a gated pod's update may change (gates, node selector, required node affinity),
    for the update rule that nothing else of a pod's spec may change; update_causes judges those fields."""
    view = copy.deepcopy(spec)
    view.pop("schedulingGates", None)
    if old.get("schedulingGates"):
        view.pop("nodeSelector", None)
        node_affinity = (view.get("affinity") or {}).get("nodeAffinity")
        if isinstance(node_affinity, dict):
            node_affinity.pop(_NODE_AFFINITY[2], None)
    return view


def _invalid(field: str, value: Any, detail: str) -> Cause:
    """field.Invalid with a map or list value, which the server prints as JSON (apimachinery 1.30+)."""
    text = orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    return Cause(field, INVALID, f"Invalid value: {text}: {detail}")


def _required_terms(spec: Mapping[str, Any]) -> list[Any]:
    found: Any = spec
    for key in _NODE_AFFINITY:
        found = (found or {}).get(key) if isinstance(found, Mapping) else None
    return list((found or {}).get("nodeSelectorTerms") or []) if isinstance(found, Mapping) else []


def _narrows(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    """Every expression of the old term is still in the new one (expressions may only be added)."""
    added_to = after.get("matchExpressions") or []
    return all(expr in added_to for expr in before.get("matchExpressions") or []) and (
        (after.get("matchFields") or []) == (before.get("matchFields") or []))
