"""PersistentVolumeClaims as the API server and the scheduler check them. Pure.

How the API server calls this:
    causes += claim_causes(obj)                         # on create: 422 Invalid with the real field errors
    reason = missing_claim(pod, store.get)              # before scheduling a pod
    if reason:
        unschedulable: scheduler_message(reason, len(nodes)), retried when a claim is created
A claim carries its access modes (at least one of ReadWriteOnce, ReadOnlyMany, ReadWriteMany,
ReadWriteOncePod, the last one alone) and a storage request. What a mode means on the nodes (one node at a
time for ReadWriteOnce) is the process runtime's part: runtime/attach.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from localcluster._internal.apimachinery.fielderrors import FORBIDDEN, Cause, invalid, not_supported, required
from localcluster._internal.apimachinery.quantity import parse_quantity
from localcluster._internal.errors import InvalidQuantity

ACCESS_MODES = ("ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod")
RESOURCE = "persistentvolumeclaims"


def claim_causes(obj: Mapping[str, Any]) -> list[Cause]:
    """ValidatePersistentVolumeClaimSpec's access-mode and storage-request rules."""
    spec = obj.get("spec") or {}
    modes = spec.get("accessModes") or []
    causes: list[Cause] = []
    if not modes:
        causes.append(required("spec.accessModes", "at least 1 access mode is required"))
    for mode in modes:
        if mode not in ACCESS_MODES:
            causes.append(not_supported("spec.accessModes", mode, list(ACCESS_MODES)))
    known = [mode for mode in modes if mode in ACCESS_MODES]
    if "ReadWriteOncePod" in known and len(set(known)) > 1:
        causes.append(Cause("spec.accessModes", FORBIDDEN,
                            "Forbidden: may not use ReadWriteOncePod with other access modes"))
    storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    if storage is None:
        causes.append(required("spec.resources[storage]"))
    else:
        try:
            positive = parse_quantity(storage) > 0
        except (InvalidQuantity, ValueError):
            positive = False
        if not positive:
            causes.append(invalid("spec.resources[storage]", storage, "must be greater than zero"))
    return causes


def missing_claim(pod: Mapping[str, Any], get: Callable[[str, str, str], Any]) -> str | None:
    """The VolumeBinding plugin's PreFilter: the first claim the pod names that does not exist."""
    namespace = pod["metadata"].get("namespace", "default")
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        name = (volume.get("persistentVolumeClaim") or {}).get("claimName")
        if name and get(RESOURCE, namespace, name) is None:
            return f'persistentvolumeclaim "{name}" not found'
    return None


def scheduler_message(reason: str, total_nodes: int) -> str:
    """A PreFilter failure as the scheduler words it (no node can help, so no preemption either)."""
    return (f"0/{total_nodes} nodes are available: {reason}. preemption: 0/{total_nodes} nodes are "
            f"available: {total_nodes} Preemption is not helpful for scheduling.")
