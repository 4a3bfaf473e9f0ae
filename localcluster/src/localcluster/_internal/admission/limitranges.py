"""LimitRange, pure: the defaulting of a LimitRange itself, and the LimitRanger admission plugin's two halves
for pods (plugin/pkg/admission/limitranger), with its messages.

- A LimitRange's Container item, when created: a max with no default makes the default; a default with no
  defaultRequest makes the defaultRequest; a min with no defaultRequest makes the defaultRequest.
- On pod create, before any other check: every container (and init container) without a limit gets the
  item's `default`, without a request its `defaultRequest`; the pod is annotated `kubernetes.io/limit-ranger:
  LimitRanger plugin set: cpu, memory request for container app; cpu limit for container app`.
- Then min, max and maxLimitRequestRatio are checked per container (type Container) and on the pod's sums
  (type Pod): `maximum memory usage per Container is 1Gi, but limit is 2Gi`; several failures are listed
  in brackets, as Kubernetes aggregates errors.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from localcluster._internal.admission.quota import pod_limits
from localcluster._internal.apimachinery.quantity import canonical, is_binary, parse_quantity
from localcluster._internal.errors import InvalidQuantity
from localcluster._internal.podspec.requests import pod_requests

Obj = dict[str, Any]
ANNOTATION = "kubernetes.io/limit-ranger"


def default_limit_range(obj: Obj) -> None:
    """SetDefaults_LimitRangeItem, for every Container item of a LimitRange being created."""
    for item in (obj.get("spec") or {}).get("limits") or []:
        if not isinstance(item, dict) or item.get("type") != "Container":
            continue
        default = item.setdefault("default", {})
        default_request = item.setdefault("defaultRequest", {})
        for name, value in (item.get("max") or {}).items():
            default.setdefault(name, value)
        for name, value in default.items():
            default_request.setdefault(name, value)
        for name, value in (item.get("min") or {}).items():
            default_request.setdefault(name, value)
        if not default:
            item.pop("default")
        if not default_request:
            item.pop("defaultRequest")


def _container_items(ranges: Iterable[Mapping[str, Any]]) -> Iterable[Mapping[str, Any]]:
    for limit_range in ranges:
        for item in (limit_range.get("spec") or {}).get("limits") or []:
            if item.get("type") == "Container":
                yield item


def apply_defaults(pod: Obj, ranges: Sequence[Mapping[str, Any]]) -> None:
    """The mutating half: default limits and requests into containers that set none (later ranges win)."""
    limits: dict[str, Any] = {}
    requests: dict[str, Any] = {}
    for item in _container_items(ranges):
        requests.update(item.get("defaultRequest") or {})
        limits.update(item.get("default") or {})
    if not limits and not requests:
        return
    notes: list[str] = []
    spec = pod.get("spec") or {}
    for key, what in (("containers", "container"), ("initContainers", "init container")):
        for container in spec.get(key) or []:
            resources = container.setdefault("resources", {})
            set_limits = _merge(resources.setdefault("limits", {}), limits)
            set_requests = _merge(resources.setdefault("requests", {}), requests)
            name = container.get("name", "")
            if set_requests:
                notes.append(f"{', '.join(sorted(set_requests))} request for {what} {name}")
            if set_limits:
                notes.append(f"{', '.join(sorted(set_limits))} limit for {what} {name}")
            for kind in ("limits", "requests"):
                if not resources[kind]:
                    resources.pop(kind)
    if notes:
        annotations = pod["metadata"].setdefault("annotations", {})
        annotations[ANNOTATION] = "LimitRanger plugin set: " + "; ".join(notes)


def _merge(into: dict[str, Any], defaults: Mapping[str, Any]) -> list[str]:
    added = []
    for name, value in defaults.items():
        if name not in into:
            into[name] = copy.deepcopy(value)
            added.append(name)
    return added


def _text(value: Any) -> str:
    return canonical(parse_quantity(value), binary=is_binary(value))


Amounts = Mapping[str, Any]


def _min(kind: str, name: str, enforced: Any, requests: Amounts, limits: Amounts) -> str | None:
    floor = parse_quantity(enforced)
    if name not in requests:
        return f"minimum {name} usage per {kind} is {_text(enforced)}.  No request is specified"
    if parse_quantity(requests[name]) < floor:
        return f"minimum {name} usage per {kind} is {_text(enforced)}, but request is {_text(requests[name])}"
    if name in limits and parse_quantity(limits[name]) < floor:
        return f"minimum {name} usage per {kind} is {_text(enforced)}, but limit is {_text(limits[name])}"
    return None


def _max(kind: str, name: str, enforced: Any, requests: Amounts, limits: Amounts) -> str | None:
    ceiling = parse_quantity(enforced)
    if name not in limits:
        return f"maximum {name} usage per {kind} is {_text(enforced)}.  No limit is specified"
    if parse_quantity(limits[name]) > ceiling:
        return f"maximum {name} usage per {kind} is {_text(enforced)}, but limit is {_text(limits[name])}"
    if name in requests and parse_quantity(requests[name]) > ceiling:
        return f"maximum {name} usage per {kind} is {_text(enforced)}, but request is {_text(requests[name])}"
    return None


def _ratio(kind: str, name: str, enforced: Any, requests: Amounts, limits: Amounts) -> str | None:
    request = parse_quantity(requests[name]) if name in requests else Fraction(0)
    limit = parse_quantity(limits[name]) if name in limits else Fraction(0)
    rule = f"{name} max limit to request ratio per {kind} is {_text(enforced)}"
    if request == 0:
        return f"{rule}, but no request is specified or request is 0"
    if limit == 0:
        return f"{rule}, but no limit is specified or limit is 0"
    ratio = limit / request
    if ratio > parse_quantity(enforced):
        return f"{rule}, but provided ratio is {float(ratio):f}"
    return None


def _check(kind: str, item: Mapping[str, Any], requests: Amounts, limits: Amounts) -> list[str]:
    errors = []
    for field, rule in (("min", _min), ("max", _max), ("maxLimitRequestRatio", _ratio)):
        for name, enforced in sorted((item.get(field) or {}).items()):
            error = rule(kind, name, enforced, requests, limits)
            if error is not None:
                errors.append(error)
    return errors


def violations(pod: Mapping[str, Any], ranges: Iterable[Mapping[str, Any]]) -> list[str]:
    """The validating half: every min/max/ratio failure, in the plugin's order."""
    errors: list[str] = []
    spec = pod.get("spec") or {}
    for limit_range in ranges:
        for item in (limit_range.get("spec") or {}).get("limits") or []:
            try:
                if item.get("type") == "Container":
                    for key in ("containers", "initContainers"):
                        for container in spec.get(key) or []:
                            resources = container.get("resources") or {}
                            errors += _check("Container", item, resources.get("requests") or {},
                                             resources.get("limits") or {})
                elif item.get("type") == "Pod":
                    errors += _check("Pod", item, _strings(pod_requests(pod)), _strings(pod_limits(pod)))
            except InvalidQuantity:
                continue  # validation refuses malformed quantities before admission sees them
    return errors


def _strings(amounts: Mapping[str, Fraction]) -> dict[str, str]:
    binary = ("memory", "ephemeral-storage")
    return {name: canonical(amount, binary=name in binary) for name, amount in amounts.items()}


def message(errors: list[str]) -> str:
    """utilerrors.NewAggregate's text: one error alone, several in brackets."""
    return errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
