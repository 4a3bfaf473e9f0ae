"""Validation on create and update: the pure rules of `validation`, plus what may not change on an update."""

from __future__ import annotations

from typing import Any

from localcluster._internal.admission import disruptionbudgets, jobs, priority, schedulinggates, validation
from localcluster._internal.apimachinery import status as st
from localcluster._internal.auth import escalation, rbac
from localcluster._internal.auth.identity import UserInfo
from localcluster._internal.storage.registry import Resource

Obj = dict[str, Any]

_POD_SPEC_FORBIDDEN = ("pod updates may not change fields other than `spec.containers[*].image`,"
                       "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
                       "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
                       "(allow it to be set to 1 if it was previously negative)")


def _raise(r: Resource, name: str, causes: list[validation.Cause]) -> None:
    body = validation.status_invalid(r.kind, name, causes, group=r.group)
    raise st.ApiStatus(422, "Invalid", body["message"], details=body["details"])


def _mutable_pod_view(spec: Obj, old: Obj) -> Obj:
    # gates may be removed, and a gated pod's placement narrowed: schedulinggates.update_causes judges those
    view = schedulinggates.without_scheduling_directives(old, spec)
    for key in ("containers", "initContainers"):
        for container in view.get(key) or []:
            if isinstance(container, dict):
                container.pop("image", None)
    view.pop("activeDeadlineSeconds", None)
    view.pop("tolerations", None)
    return view


def _workload_causes(r: Resource, obj: Obj, current: Obj | None) -> list[validation.Cause]:
    """The workload kinds' own rules (admission/jobs.py, disruptionbudgets.py, priority.py)."""
    if r.key == "jobs.batch":
        return jobs.validate(obj) if current is None else jobs.update_causes(obj, current)
    if r.key == "poddisruptionbudgets.policy":
        return disruptionbudgets.validate(obj)
    if r.key == "priorityclasses.scheduling.k8s.io":
        return priority.validate_class(obj) if current is None else priority.update_causes(obj, current)
    return []


def validate(r: Resource, obj: Obj, current: Obj | None) -> None:
    """Raise the 400 or 422 Status the real server would answer for this object, if any."""
    message = validation.decode_error(r.plural, obj)
    if message:
        raise st.bad_request(message)
    name = str(obj.get("metadata", {}).get("name") or obj.get("metadata", {}).get("generateName") or "")
    causes = validation.validate(r.plural, obj) + _workload_causes(r, obj, current)
    if r.key == "pods" and current is None:
        causes += schedulinggates.create_causes(obj.get("spec") or {})
    if causes:
        _raise(r, name, causes)
    if current is None:
        return
    if r.key == "pods":
        old, new = current.get("spec") or {}, obj.get("spec") or {}
        if old.get("nodeName") and new.get("nodeName") != old.get("nodeName"):
            _raise(r, name, [validation.Cause("spec.nodeName", validation.FORBIDDEN,
                                              "Forbidden: " + _POD_SPEC_FORBIDDEN)])
        gate_causes = schedulinggates.update_causes(old, new)
        if gate_causes:
            _raise(r, name, gate_causes)
        old_view, new_view = _mutable_pod_view(old, old), _mutable_pod_view(new, old)
        old_view.pop("nodeName", None)
        new_view.pop("nodeName", None)
        if old_view != new_view:
            _raise(r, name, [validation.Cause("spec", validation.FORBIDDEN,
                                              "Forbidden: " + _POD_SPEC_FORBIDDEN)])
    if r.key in ("secrets", "configmaps") and current.get("immutable"):
        for field in ("data", "binaryData", "stringData"):
            if obj.get(field) != current.get(field):
                _raise(r, name, [validation.Cause(field, validation.FORBIDDEN,
                                                  "Forbidden: field is immutable when `immutable` is set")])


_RBAC_RESOURCES = frozenset({"roles", "clusterroles", "rolebindings", "clusterrolebindings"})
# what IsOnlyMutatingGCFields lets an update change without the escalation check
_GC_FIELDS = ("ownerReferences", "finalizers", "managedFields", "selfLink", "resourceVersion")


def _without_gc_fields(obj: Obj) -> Obj:
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _GC_FIELDS}
    return {**obj, "metadata": meta}


def check_escalation(r: Resource, obj: Obj, current: Obj | None, user: UserInfo, policy: rbac.Policy,
                     namespace: str) -> None:
    """Refuse an RBAC write that grants more than the writer holds (the rbac registry's policybased storage):
    on create, and on an update unless it changes only what the garbage collector changes."""
    if r.group != rbac.RBAC_GROUP or r.plural not in _RBAC_RESOURCES:
        return
    if current is not None and _without_gc_fields(obj) == _without_gc_fields(current):
        return
    body = escalation.escalation_forbidden(policy, user.name, user.groups, resource=r.plural, obj=obj,
                                           namespace=namespace)
    if body is not None:
        raise st.ApiStatus(403, "Forbidden", body["message"], details=body.get("details"))
