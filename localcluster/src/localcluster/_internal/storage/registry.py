"""The resources the local API server serves, and the discovery documents describing them.

A resource with `served_by` belongs to a model of another system (doubles/: Kueue's kinds, the autoscaler's
ProvisioningRequest), served only by a cluster that runs it, as a real cluster serves a CRD only once it is
installed: every lookup and discovery document takes the set of such systems a cluster runs (`served`).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

RW = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
CREATE_ONLY = ("create",)


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    short: tuple[str, ...] = ()
    verbs: tuple[str, ...] = RW
    subresources: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    stored: bool = True   # False: a review-style resource that answers a create and keeps nothing
    served_by: str = ""   # the double that serves it (its CRD, installed with it); "": always served

    @property
    def key(self) -> str:
        """The store key: the plural, qualified by the group outside the core group."""
        return self.plural if not self.group else f"{self.plural}.{self.group}"

    @property
    def api_version(self) -> str:
        return self.version if not self.group else f"{self.group}/{self.version}"

    @property
    def singular(self) -> str:
        return self.kind.lower()


_RBAC = "rbac.authorization.k8s.io"
_AUTHZ = "authorization.k8s.io"
_AUTHN = "authentication.k8s.io"
_ADMISSION = "admissionregistration.k8s.io"
_KUEUE = "kueue.x-k8s.io"
KUEUE = "kueue"                                  # doubles/kueue
PROVISIONING_REQUESTS = "provisioning-requests"  # doubles/autoscaler, with --enable-provisioning-requests

RESOURCES: tuple[Resource, ...] = (
    Resource("", "v1", "namespaces", "Namespace", False, ("ns",), subresources=("status", "finalize")),
    Resource("", "v1", "nodes", "Node", False, ("no",), subresources=("status",)),
    Resource("", "v1", "pods", "Pod", True, ("po",), categories=("all",),
             subresources=("status", "log", "binding", "eviction", "ephemeralcontainers", "exec", "attach",
                           "portforward")),
    Resource("", "v1", "bindings", "Binding", True, verbs=CREATE_ONLY, stored=False),
    Resource("", "v1", "secrets", "Secret", True),
    Resource("", "v1", "configmaps", "ConfigMap", True, ("cm",)),
    Resource("", "v1", "services", "Service", True, ("svc",), categories=("all",), subresources=("status",)),
    Resource("", "v1", "serviceaccounts", "ServiceAccount", True, ("sa",), subresources=("token",)),
    Resource("", "v1", "events", "Event", True, ("ev",)),
    Resource("", "v1", "endpoints", "Endpoints", True, ("ep",)),
    Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, ("pvc",),
             subresources=("status",)),
    Resource("", "v1", "resourcequotas", "ResourceQuota", True, ("quota",), subresources=("status",)),
    Resource("", "v1", "limitranges", "LimitRange", True, ("limits",)),
    Resource("", "v1", "podtemplates", "PodTemplate", True),
    Resource(_RBAC, "v1", "roles", "Role", True),
    Resource(_RBAC, "v1", "rolebindings", "RoleBinding", True),
    Resource(_RBAC, "v1", "clusterroles", "ClusterRole", False),
    Resource(_RBAC, "v1", "clusterrolebindings", "ClusterRoleBinding", False),
    Resource(_AUTHZ, "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", False, verbs=CREATE_ONLY,
             stored=False),
    Resource(_AUTHZ, "v1", "subjectaccessreviews", "SubjectAccessReview", False, verbs=CREATE_ONLY,
             stored=False),
    Resource(_AUTHZ, "v1", "localsubjectaccessreviews", "LocalSubjectAccessReview", True, verbs=CREATE_ONLY,
             stored=False),
    Resource(_AUTHZ, "v1", "selfsubjectrulesreviews", "SelfSubjectRulesReview", False, verbs=CREATE_ONLY,
             stored=False),
    Resource(_AUTHN, "v1", "selfsubjectreviews", "SelfSubjectReview", False, verbs=CREATE_ONLY, stored=False),
    Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True, ("netpol",)),
    Resource("coordination.k8s.io", "v1", "leases", "Lease", True),
    # the workload APIs (controllers/jobcontroller.py, disruption.py; admission/priority.py)
    Resource("batch", "v1", "jobs", "Job", True, categories=("all",), subresources=("status",)),
    Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False, ("pc",)),
    Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, ("pdb",),
             subresources=("status",)),
    Resource(_ADMISSION, "v1", "validatingadmissionpolicies", "ValidatingAdmissionPolicy", False,
             subresources=("status",), categories=("api-extensions",)),
    Resource(_ADMISSION, "v1", "validatingadmissionpolicybindings", "ValidatingAdmissionPolicyBinding", False,
             categories=("api-extensions",)),
    # models of other systems (doubles/), served when a cluster runs them
    Resource(_KUEUE, "v1beta1", "resourceflavors", "ResourceFlavor", False, ("rf", "flavor", "flavors"),
             served_by=KUEUE, categories=("kueue",)),
    Resource(_KUEUE, "v1beta1", "clusterqueues", "ClusterQueue", False, ("cq",), subresources=("status",),
             served_by=KUEUE, categories=("kueue",)),
    Resource(_KUEUE, "v1beta1", "localqueues", "LocalQueue", True, ("queue", "queues", "lq"),
             subresources=("status",), served_by=KUEUE, categories=("kueue",)),
    Resource(_KUEUE, "v1beta1", "workloads", "Workload", True, ("wl",), subresources=("status",),
             served_by=KUEUE, categories=("kueue",)),
    Resource("autoscaling.x-k8s.io", "v1", "provisioningrequests", "ProvisioningRequest", True,
             ("provreq", "provreqs"), subresources=("status",), served_by=PROVISIONING_REQUESTS),
)

GROUP_VERSIONS: dict[str, str] = {}
for _r in RESOURCES:
    GROUP_VERSIONS.setdefault(_r.group, _r.version)

_BY_PATH: dict[tuple[str, str, str], Resource] = {(r.group, r.version, r.plural): r for r in RESOURCES}
BY_KEY: dict[str, Resource] = {r.key: r for r in RESOURCES}
BY_KIND: dict[tuple[str, str], Resource] = {(r.api_version, r.kind): r for r in RESOURCES}


def visible(r: Resource, served: Collection[str] = ()) -> bool:
    """Whether a cluster running the doubles named in `served` serves `r`."""
    return not r.served_by or r.served_by in served


def group_versions(served: Collection[str] = ()) -> dict[str, str]:
    """The groups served, with their version."""
    return {g: v for g, v in GROUP_VERSIONS.items()
            if any(r.group == g and visible(r, served) for r in RESOURCES)}


def lookup(group: str, version: str, plural: str, served: Collection[str] = ()) -> Resource | None:
    found = _BY_PATH.get((group, version, plural))
    return found if found is not None and visible(found, served) else None


def group_known(group: str, version: str, served: Collection[str] = ()) -> bool:
    return group_versions(served).get(group) == version


# What discovery says of subresources that are not get/patch/update of the object itself.
SUBRESOURCE_VERBS = {"log": ["get"], "binding": ["create"], "eviction": ["create"], "token": ["create"],
                     "finalize": ["update"], "exec": ["create", "get"], "attach": ["create", "get"],
                     "portforward": ["create", "get"]}
SUBRESOURCE_KINDS = {"log": "Pod", "binding": "Binding", "eviction": "Eviction", "token": "TokenRequest",
                     "exec": "PodExecOptions", "attach": "PodAttachOptions",
                     "portforward": "PodPortForwardOptions"}


# ---- discovery documents -----------------------------------------------------------------------------------
def api_versions(server_address: str) -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]}


def _group_entry(group: str) -> dict[str, Any]:
    version = GROUP_VERSIONS[group]
    gv = {"groupVersion": f"{group}/{version}", "version": version}
    return {"name": group, "versions": [gv], "preferredVersion": gv}


def api_group_list(served: Collection[str] = ()) -> dict[str, Any]:
    return {"kind": "APIGroupList", "apiVersion": "v1",
            "groups": [_group_entry(g) for g in group_versions(served) if g]}


def api_group(group: str) -> dict[str, Any]:
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_entry(group)}


def resource_list(group: str, version: str, served: Collection[str] = ()) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for r in RESOURCES:
        if r.group != group or r.version != version or not visible(r, served):
            continue
        entry: dict[str, Any] = {"name": r.plural, "singularName": r.singular, "namespaced": r.namespaced,
                                 "kind": r.kind, "verbs": list(r.verbs)}
        if r.short:
            entry["shortNames"] = list(r.short)
        if r.categories:
            entry["categories"] = list(r.categories)
        items.append(entry)
        for sub in r.subresources:
            verbs = SUBRESOURCE_VERBS.get(sub, ["get", "patch", "update"])
            kind = SUBRESOURCE_KINDS.get(sub, r.kind)
            sub_entry: dict[str, Any] = {"name": f"{r.plural}/{sub}", "singularName": "",
                                         "namespaced": r.namespaced, "kind": kind, "verbs": verbs}
            if sub in ("eviction", "token"):
                sub_entry["group"] = {"eviction": "policy", "token": "authentication.k8s.io"}[sub]
                sub_entry["version"] = "v1"
            items.append(sub_entry)
    gv = version if not group else f"{group}/{version}"
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": items}


def aggregated_discovery(*, legacy: bool, served: Collection[str] = ()) -> dict[str, Any]:
    """apidiscovery.k8s.io/v2 APIGroupDiscoveryList: everything kubectl needs in one answer per root."""
    groups = [""] if legacy else [g for g in group_versions(served) if g]
    items = []
    for group in groups:
        version = GROUP_VERSIONS[group]
        resources = []
        for r in RESOURCES:
            if r.group != group or not visible(r, served):
                continue
            entry: dict[str, Any] = {
                "resource": r.plural, "singularResource": r.singular,
                "scope": "Namespaced" if r.namespaced else "Cluster",
                "responseKind": {"group": "", "version": "", "kind": r.kind}, "verbs": list(r.verbs)}
            if r.short:
                entry["shortNames"] = list(r.short)
            if r.categories:
                entry["categories"] = list(r.categories)
            subs = []
            for sub in r.subresources:
                verbs = SUBRESOURCE_VERBS.get(sub, ["get", "patch", "update"])
                kind = SUBRESOURCE_KINDS.get(sub, r.kind)
                subs.append({"subresource": sub, "responseKind": {"group": "", "version": "", "kind": kind},
                             "verbs": verbs})
            if subs:
                entry["subresources"] = subs
            resources.append(entry)
        items.append({"metadata": {"name": group, "creationTimestamp": None},
                      "versions": [{"version": version, "resources": resources, "freshness": "Current"}]})
    return {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2",
            "metadata": {}, "items": items}
