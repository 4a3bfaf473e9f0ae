"""Kueue's pod webhook (kueue v0.10, pkg/controller/jobs/pod/pod_webhook.go, Default and ValidateCreate), the
step that holds a queued pod back at creation:

- a pod is managed when it carries `kueue.x-k8s.io/queue-name`, or always with manageJobsWithoutQueueName,
  unless its namespace is kube-system or kueue-system (the default managedJobsNamespaceSelector) or its
  controller is a kind Kueue integrates itself (a Pod, a batch/v1 Job: their own workload is queued instead);
- without a queue name, the namespace's LocalQueue named `default` is used when one exists
  (LocalQueueDefaulting);
- a managed pod gets the label `kueue.x-k8s.io/managed=true` and the scheduling gate
  `kueue.x-k8s.io/admission`, and a member of a pod group its role hash annotation;
- a pod group's members carry both `kueue.x-k8s.io/pod-group-name` and `kueue.x-k8s.io/pod-group-total-count`
  (a positive integer), or the pod is refused as the webhook refuses it.
Left out: the finalizer `kueue.x-k8s.io/managed` (pods here go when deleted), Topology Aware Scheduling's
own gate, the fast-admission and serving annotations.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from localcluster._internal.apimachinery import status as st
from localcluster._internal.auth.identity import UserInfo

Obj = dict[str, Any]
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
MANAGED_LABEL = "kueue.x-k8s.io/managed"
GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
TOTAL_COUNT = "kueue.x-k8s.io/pod-group-total-count"
ROLE_HASH = "kueue.x-k8s.io/role-hash"
RETRIABLE_IN_GROUP = "kueue.x-k8s.io/retriable-in-group"
GATE = "kueue.x-k8s.io/admission"
DEFAULT_QUEUE = "default"
UNMANAGED_NAMESPACES = frozenset({"kube-system", "kueue-system"})
# controllers whose pods Kueue leaves to that owner's integration (jobframework.IsOwnerManagedByKueue)
INTEGRATED_OWNERS = frozenset({("v1", "Pod"), ("batch/v1", "Job")})


class PodWebhook:
    """The mutating and validating webhook, as an admission hook of the local cluster (admission/plugins.py).
    `local_queue(namespace, name)` says whether a LocalQueue exists."""

    def __init__(self, *, local_queue: Callable[[str, str], bool], manage_without_queue_name: bool = False
                 ) -> None:
        self.local_queue = local_queue
        self.manage_without_queue_name = manage_without_queue_name

    def mutate_pod(self, pod: Obj, namespace: Mapping[str, Any], user: UserInfo) -> None:
        meta = pod["metadata"]
        labels = meta.setdefault("labels", {})
        where = str((namespace.get("metadata") or {}).get("name") or meta.get("namespace"))
        if where in UNMANAGED_NAMESPACES:
            return
        controller: Obj = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), {})
        if (controller.get("apiVersion"), controller.get("kind")) in INTEGRATED_OWNERS:
            return
        if not labels.get(QUEUE_LABEL) and self.local_queue(str(meta.get("namespace")), DEFAULT_QUEUE):
            labels[QUEUE_LABEL] = DEFAULT_QUEUE
        if not labels.get(QUEUE_LABEL) and not self.manage_without_queue_name:
            return
        labels[MANAGED_LABEL] = "true"
        gates = pod["spec"].setdefault("schedulingGates", [])
        if not any(g.get("name") == GATE for g in gates):
            gates.append({"name": GATE})
        if labels.get(GROUP_LABEL):
            meta.setdefault("annotations", {})[ROLE_HASH] = role_hash(pod)

    def validate_pod(self, pod: Obj, namespace: Mapping[str, Any], user: UserInfo) -> None:
        meta = pod["metadata"]
        group = (meta.get("labels") or {}).get(GROUP_LABEL)
        count = (meta.get("annotations") or {}).get(TOTAL_COUNT)
        both = f"both the '{TOTAL_COUNT}' annotation and the '{GROUP_LABEL}' label should be set"
        problem = None
        if group and count is None:
            problem = f"metadata.annotations[{TOTAL_COUNT}]: Required value: {both}"
        elif count is not None and not group:
            problem = f"metadata.labels[{GROUP_LABEL}]: Required value: {both}"
        elif count is not None and (not count.isdigit() or int(count) < 1):
            problem = (f"metadata.annotations[{TOTAL_COUNT}]: Invalid value: \"{count}\": incorrect "
                       f"annotation value '{TOTAL_COUNT}={count}': group total count should be greater than "
                       "zero")
        if problem is not None:
            raise st.ApiStatus(403, "Forbidden", 'admission webhook "vpod.kb.io" denied the request: '
                               f"{problem}", details={"name": meta.get("name", ""), "kind": "pods"})


def role_hash(pod: Mapping[str, Any]) -> str:
    """What makes pods of a group one role (getRoleHash): what admission looks at - the containers' resources
    and ports, node selector, affinity, tolerations, runtime class, priority, spread, overhead - hashed to 8
    characters. The JSON is this model's own, so the hashes differ from a real Kueue's; only equality
    matters."""
    spec = pod.get("spec") or {}

    def shape(containers: Any) -> list[Obj]:
        return [{"resources": c.get("resources") or {}, "ports": c.get("ports") or []}
                for c in containers or []]

    body = {"initContainers": shape(spec.get("initContainers")), "containers": shape(spec.get("containers")),
            **{key: spec.get(key) for key in ("nodeSelector", "affinity", "tolerations", "runtimeClassName",
                                              "priority", "topologySpreadConstraints", "overhead")}}
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()[:8]
