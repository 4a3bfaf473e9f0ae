"""Pod spec rules of the real server: containers, names, volumes, and resources (extended resources are
whole numbers with requests equal to limits). Returned as field causes; `validation.validate` calls this.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from localcluster._internal.apimachinery.fielderrors import (
    NOT_FOUND,
    Cause,
    duplicate,
    fmt_value,
    invalid,
    not_supported,
    port_causes,
    required,
)
from localcluster._internal.apimachinery.names import dns1123_label_errors, label_key_errors
from localcluster._internal.apimachinery.quantity import format_quantity, parse_quantity
from localcluster._internal.errors import InvalidQuantity

_STANDARD_CONTAINER_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})


def _is_native(name: str) -> bool:
    return "/" not in name or "kubernetes.io/" in name


def is_extended_resource(name: str) -> bool:
    return not _is_native(name) and not name.startswith("requests.")


def canonical_quantity(value: Any) -> str:
    """The string the real server prints for a quantity (`Quantity.String()`), for the common forms."""
    text = str(value).strip()
    if re.fullmatch(r"-?[1-9]\d*(Ki|Mi|Gi|Ti|Pi|Ei|[mkMGTPE])?|0", text):
        return text
    return format_quantity(parse_quantity(text))


def _resource_causes(path: str, resources: Mapping[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    parsed: dict[tuple[str, str], Fraction] = {}
    for kind, entries in (("limits", limits), ("requests", requests)):
        for name, raw in entries.items():
            field = f"{path}.{kind}[{name}]"
            if _is_native(name) and name not in _STANDARD_CONTAINER_RESOURCES and "/" not in name \
                    and not name.startswith("hugepages-"):
                causes.append(invalid(field, name, "must be a standard resource for containers"))
                continue
            try:
                amount = parse_quantity(raw)
            except InvalidQuantity:
                causes.append(invalid(field, str(raw), "must be a valid quantity"))
                continue
            parsed[(kind, name)] = amount
            text = canonical_quantity(raw)
            if amount < 0:
                causes.append(invalid(field, text, "must be greater than or equal to 0"))
            if is_extended_resource(name) and amount.denominator != 1:
                causes.append(invalid(field, text, "must be an integer"))
    for name in requests:
        request, limit = parsed.get(("requests", name)), parsed.get(("limits", name))
        if request is None:
            continue
        overcommit = _is_native(name) and not name.startswith("hugepages-")
        if limit is not None:
            if request != limit and not overcommit:
                causes.append(invalid(f"{path}.requests", canonical_quantity(requests[name]),
                                      f"must be equal to {name} limit of {canonical_quantity(limits[name])}"))
            elif request > limit:
                causes.append(invalid(f"{path}.requests", canonical_quantity(requests[name]),
                                      f"must be less than or equal to {name} limit of "
                                      f"{canonical_quantity(limits[name])}"))
        elif name not in limits and not overcommit:
            causes.append(required(f"{path}.limits", "Limit must be set for non overcommitable resources"))
    return causes


def _container_causes(path: str, containers: list[Mapping[str, Any]], seen: set[str]) -> list[Cause]:
    causes: list[Cause] = []
    for i, container in enumerate(containers):
        here = f"{path}[{i}]"
        name = container.get("name") or ""
        if not name:
            causes.append(required(f"{here}.name"))
        else:
            causes += [invalid(f"{here}.name", name, m) for m in dns1123_label_errors(name)]
            if name in seen:
                causes.append(duplicate(f"{here}.name", name))
            seen.add(name)
        if not container.get("image"):
            causes.append(required(f"{here}.image"))
        causes += _resource_causes(f"{here}.resources", container.get("resources") or {})
        for j, env in enumerate(container.get("env") or []):
            if not env.get("name"):
                causes.append(required(f"{here}.env[{j}].name"))
            ref = (env.get("valueFrom") or {}).get("fieldRef")
            if isinstance(ref, dict):
                causes += _field_ref_causes(f"{here}.env[{j}].valueFrom.fieldRef", ref)
        for j, port in enumerate(container.get("ports") or []):
            causes += port_causes(f"{here}.ports[{j}].containerPort", port.get("containerPort"))
    return causes


# validEnvDownwardAPIFieldPathExpressions (pkg/apis/core/validation, v1.37), and the two subscripted maps
ENV_FIELD_PATHS = ("metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName",
                   "spec.serviceAccountName", "status.hostIP", "status.hostIPs", "status.podIP",
                   "status.podIPs")
_SUBSCRIPTED = re.compile(r"^metadata\.(labels|annotations)\['(.*)'\]$")


def _field_ref_causes(path: str, ref: Mapping[str, Any]) -> list[Cause]:
    """validateObjectFieldSelector for an env var: a known path, or a label/annotation by a valid key."""
    field_path = str(ref.get("fieldPath") or "")
    if not field_path:
        return [required(f"{path}.fieldPath")]
    if ref.get("apiVersion") not in (None, "", "v1"):
        return [invalid(f"{path}.fieldPath", field_path,
                        f"error converting fieldPath: unsupported pod version: {ref.get('apiVersion')}")]
    match = _SUBSCRIPTED.match(field_path)
    if match is not None:
        key = match.group(2).lower() if match.group(1) == "annotations" else match.group(2)
        return [invalid(path, key, m) for m in label_key_errors(key)]
    if field_path in ENV_FIELD_PATHS:
        return []
    return [not_supported(f"{path}.fieldPath", field_path, sorted(ENV_FIELD_PATHS))]


def validate_pod_spec(spec: Mapping[str, Any], path: str = "spec") -> list[Cause]:
    causes: list[Cause] = []
    seen: set[str] = set()
    volumes = spec.get("volumes") or []
    volume_names: set[str] = set()
    for i, volume in enumerate(volumes):
        name = volume.get("name") or ""
        if not name:
            causes.append(required(f"{path}.volumes[{i}].name"))
        else:
            causes += [invalid(f"{path}.volumes[{i}].name", name, m) for m in dns1123_label_errors(name)]
            if name in volume_names:
                causes.append(duplicate(f"{path}.volumes[{i}].name", name))
        volume_names.add(name)
        if not any(key != "name" and value is not None for key, value in volume.items()):
            causes.append(required(f"{path}.volumes[{i}]", "must specify a volume type"))
    containers = spec.get("containers") or []
    if not containers:
        causes.append(required(f"{path}.containers"))
    causes += _container_causes(f"{path}.containers", containers, seen)
    causes += _container_causes(f"{path}.initContainers", spec.get("initContainers") or [], seen)
    for kind in ("containers", "initContainers"):
        for i, container in enumerate(spec.get(kind) or []):
            for j, mount in enumerate(container.get("volumeMounts") or []):
                mount_name = mount.get("name") or ""
                field = f"{path}.{kind}[{i}].volumeMounts[{j}]"
                if not mount_name:
                    causes.append(required(f"{field}.name"))
                elif mount_name not in volume_names:
                    causes.append(Cause(f"{field}.name", NOT_FOUND, f"Not found: {fmt_value(mount_name)}"))
                if not mount.get("mountPath"):
                    causes.append(required(f"{field}.mountPath"))
    policy = spec.get("restartPolicy")
    if policy is not None and policy not in ("Always", "OnFailure", "Never"):
        causes.append(not_supported(f"{path}.restartPolicy", policy, ["Always", "OnFailure", "Never"]))
    return causes
