"""Workloads of plain pods, pure (kueue v0.10, pkg/controller/jobs/pod/pod_controller.go:
ConstructComposableWorkload, constructGroupPodSets, Finished):

- a single managed pod is its own Workload, `pod-NAME-HASH`;
- a pod group becomes one Workload, named after the group, once as many runnable members exist as
  `pod-group-total-count` says (until then nothing is queued; Kueue's event: "'G' group has fewer runnable
  pods than expected"); its pod sets are the members' roles (role hash) with their counts, sorted by name; it
  is owned by every member (so it goes when they all do);
- a group is finished when all its members succeeded, or when none is active any more and one of them is
  annotated `kueue.x-k8s.io/retriable-in-group: "false"` (the way a group that will not replace its pods
  ends); a single pod when it ends. A finished workload keeps its admission but holds no quota.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from localcluster._internal.doubles.kueue import webhook

Obj = dict[str, Any]
RESOURCE = "workloads.kueue.x-k8s.io"
API_VERSION = "kueue.x-k8s.io/v1beta1"
IS_GROUP = "kueue.x-k8s.io/is-group-workload"


def managed(pod: Mapping[str, Any]) -> bool:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(webhook.MANAGED_LABEL) == "true"


def group_of(pod: Mapping[str, Any]) -> str:
    return str(((pod.get("metadata") or {}).get("labels") or {}).get(webhook.GROUP_LABEL) or "")


def total_count(pod: Mapping[str, Any]) -> int:
    text = str(((pod.get("metadata") or {}).get("annotations") or {}).get(webhook.TOTAL_COUNT) or "0")
    return int(text) if text.isdigit() else 0


def runnable(pod: Mapping[str, Any]) -> bool:
    """isPodRunnableOrSucceeded: not Failed, and not deleted before it was ever bound."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    if meta.get("deletionTimestamp") and not spec.get("nodeName"):
        return False
    return (pod.get("status") or {}).get("phase") != "Failed"


def single_name(pod: Mapping[str, Any]) -> str:
    """GetWorkloadNameForOwnerWithGVK: the owner's kind and name, and a hash of them and the uid."""
    meta = pod.get("metadata") or {}
    digest = hashlib.sha1(f"{meta.get('name')}{meta.get('uid')}Pod".encode()).hexdigest()[:5]
    return f"pod-{str(meta.get('name'))[:250]}-{digest}"


def build(name: str, namespace: str, pods: Sequence[Mapping[str, Any]], *, group: bool) -> Obj:
    """The Workload of `pods` (a group's runnable members, or the one pod)."""
    roles: dict[str, Obj] = {}
    for pod in pods:
        role = str(((pod.get("metadata") or {}).get("annotations") or {}).get(webhook.ROLE_HASH) or "") \
            if group else "main"
        role = role or webhook.role_hash(pod)
        if role in roles:
            roles[role]["count"] += 1
            continue
        spec = {k: v for k, v in (pod.get("spec") or {}).items() if k not in ("nodeName", "schedulingGates")}
        roles[role] = {"name": role, "count": 1, "template": {"spec": spec}}
    queue = str(((pods[0].get("metadata") or {}).get("labels") or {}).get(webhook.QUEUE_LABEL) or "")
    owners = [{"apiVersion": "v1", "kind": "Pod", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]}
              for p in pods]
    if not group:
        owners[0].update(controller=True, blockOwnerDeletion=True)
    meta: Obj = {"name": name, "namespace": namespace, "ownerReferences": owners}
    if group:
        meta["annotations"] = {IS_GROUP: "true"}
    return {"apiVersion": API_VERSION, "kind": "Workload", "metadata": meta,
            "spec": {"queueName": queue, "podSets": [roles[k] for k in sorted(roles)]}}


def finished(pods: Iterable[Mapping[str, Any]], *, total: int, group: bool) -> tuple[bool, str] | None:
    """(succeeded, message) once the workload is finished, else None."""
    members = list(pods)
    if not group:
        phase = ((members[0].get("status") or {}).get("phase") if members else "Failed")
        if phase not in ("Succeeded", "Failed"):
            return None
        return phase == "Succeeded", str((members[0].get("status") or {}).get("message") or "") if members \
            else "the pod is gone"
    succeeded = sum(1 for p in members if (p.get("status") or {}).get("phase") == "Succeeded")
    active = any((p.get("status") or {}).get("phase") not in ("Succeeded", "Failed") for p in members)
    unretriable = any(((p.get("metadata") or {}).get("annotations") or {}).get(webhook.RETRIABLE_IN_GROUP)
                      == "false" for p in members)
    if succeeded == total or (not active and unretriable):
        return True, f"Pods succeeded: {succeeded}/{total}."
    return None


def condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), {})


def is_true(obj: Mapping[str, Any], kind: str) -> bool:
    return condition(obj, kind).get("status") == "True"


def holds_quota(workload: Mapping[str, Any]) -> bool:
    return is_true(workload, "QuotaReserved") and not is_true(workload, "Finished")
