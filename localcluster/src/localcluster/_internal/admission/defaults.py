"""Defaulting the real API server applies on create, for the fields our users and kubectl read back."""

from __future__ import annotations

import base64
import itertools
import uuid
from typing import Any

from localcluster._internal.admission import jobs

Obj = dict[str, Any]

_service_ips = itertools.count(1)


def _container(container: Obj) -> None:
    image = str(container.get("image", ""))
    tag = image.rsplit("/", 1)[-1]
    if "imagePullPolicy" not in container:
        latest = ":" not in tag or tag.endswith(":latest")
        container["imagePullPolicy"] = "Always" if latest else "IfNotPresent"
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    resources = container.setdefault("resources", {})
    limits = resources.get("limits") or {}
    if limits:
        requests = resources.setdefault("requests", {})
        for name, value in limits.items():
            requests.setdefault(name, value)
    for port in container.get("ports") or []:
        port.setdefault("protocol", "TCP")
    for var in container.get("env") or []:
        ref = (var.get("valueFrom") or {}).get("fieldRef") if isinstance(var, dict) else None
        if isinstance(ref, dict):
            ref.setdefault("apiVersion", "v1")


def pod(obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    spec.setdefault("enableServiceLinks", True)
    # spec.priority and spec.preemptionPolicy are the Priority admission plugin's (admission/priority.py)
    tolerations = spec.setdefault("tolerations", [])
    present = {(t.get("key"), t.get("effect")) for t in tolerations if isinstance(t, dict)}
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if (key, "NoExecute") not in present and (None, None) not in present:
            tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                                "tolerationSeconds": 300})
    for c in list(spec.get("containers") or []) + list(spec.get("initContainers") or []):
        if isinstance(c, dict):
            _container(c)
    # status.qosClass is set after admission (admission/plugins.py): LimitRange defaults may change it
    obj.setdefault("status", {}).setdefault("phase", "Pending")


def namespace(obj: Obj) -> None:
    meta = obj["metadata"]
    meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta.get("name", "")
    obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    obj["status"] = {"phase": "Active"}


def secret(obj: Obj) -> None:
    obj.setdefault("type", "Opaque")
    string_data = obj.pop("stringData", None) or {}
    if string_data:
        data = obj.setdefault("data", {}) or {}
        obj["data"] = data
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()


def service(obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    if "clusterIP" not in spec:
        n = next(_service_ips)
        spec["clusterIP"] = f"10.96.{n // 250}.{n % 250 + 1}"
    if spec["clusterIP"] != "None":
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
    spec.setdefault("sessionAffinity", "None")
    spec.setdefault("ipFamilies", ["IPv4"])
    spec.setdefault("ipFamilyPolicy", "SingleStack")
    spec.setdefault("internalTrafficPolicy", "Cluster")
    for port in spec.get("ports") or []:
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port.get("port"))
    obj.setdefault("status", {"loadBalancer": {}})


def pvc(obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("volumeMode", "Filesystem")
    obj["status"] = {"phase": "Bound", "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                     "capacity": ((spec.get("resources") or {}).get("requests") or {"storage": "1Gi"})}


def pod_template_spec(spec: Obj) -> None:
    """SetDefaults_PodSpec and SetDefaults_Container, which apply to a template too (the pod-only defaults,
    service account, tolerations and priority, come with the pod's own admission)."""
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    for c in list(spec.get("containers") or []) + list(spec.get("initContainers") or []):
        if isinstance(c, dict):
            _container(c)


def job(obj: Obj) -> None:
    """The registry gives a job its uid before PrepareForCreate, which writes it into the generated selector
    and labels (the store keeps a uid it is handed)."""
    obj["metadata"].setdefault("uid", str(uuid.uuid4()))
    template = obj.setdefault("spec", {}).setdefault("template", {})
    pod_template_spec(template.setdefault("spec", {}))
    jobs.default(obj)


def priority_class(obj: Obj) -> None:
    obj.setdefault("preemptionPolicy", "PreemptLowerPriority")


def disruption_budget(obj: Obj) -> None:
    # PrepareForCreate resets the status; its integers are not omitempty
    obj["status"] = {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}


APPLY = {"pods": pod, "namespaces": namespace, "secrets": secret, "services": service,
         "persistentvolumeclaims": pvc, "jobs.batch": job,
         "priorityclasses.scheduling.k8s.io": priority_class,
         "poddisruptionbudgets.policy": disruption_budget}


def apply(resource_key: str, obj: Obj) -> None:
    fn = APPLY.get(resource_key)
    if fn is not None:
        fn(obj)
