"""OpenShift's SecurityContextConstraints admission for pods, as the `restricted-v2` SCC applies it to a
namespace that carries OpenShift's UID range (openshift/apiserver-library-go,
pkg/securitycontextconstraints: sccadmission/admission.go, sccmatching/provider.go, user/mustrunasrange.go,
group/mustrunas.go; OpenShift 4.11+, where restricted-v2 is the default SCC of every authenticated user).

A namespace is OpenShift-like when it has the annotation `openshift.io/sa.scc.uid-range` ("1000680000/10000":
the first UID and how many), which OpenShift's cluster-policy-controller sets on every namespace;
`openshift.io/sa.scc.supplemental-groups` gives the groups (the UID range when absent). In such a namespace
a pod is first mutated, then validated, the way restricted-v2 does it:

- mutate: a container without runAsUser (its own or the pod's) gets the range's first UID, the pod without
  fsGroup the groups' first; containers get `capabilities.drop: [ALL]`, `allowPrivilegeEscalation: false`
  and `runAsNonRoot: true` when unset, the pod `seccompProfile: RuntimeDefault`; the pod is annotated
  `openshift.io/scc: restricted-v2`.
- validate: a runAsUser outside the range, an fsGroup outside the groups, a privileged container, an added
  capability (other than NET_BIND_SERVICE), privilege escalation, host network/PID/IPC and hostPath volumes
  are refused with the SCC admission's own words: `pods "p" is forbidden: unable to validate against any
  security context constraint: [provider "anyuid": Forbidden: not usable by user or serviceaccount,
  provider restricted-v2: .containers[0].runAsUser: Invalid value: 10001: must be in the ranges: [1000680000,
  1000689999], ...]`.

The runtime then runs the container under that UID, which has no entry in the image's /etc/passwd (the
process runtime's kubelet sets HOME=/ for it, as CRI-O does). Left out: choosing among SCCs by RBAC `use`
grants (only restricted-v2 is usable here, whoever asks: a pod that needs nonroot-v2 or anyuid is refused
as it would be without the grant), SELinux MCS labels, sysctls, and the other namespaces' defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from localcluster._internal.apimachinery import status as st

Obj = dict[str, Any]
UID_RANGE = "openshift.io/sa.scc.uid-range"
GROUP_RANGE = "openshift.io/sa.scc.supplemental-groups"
SCC_ANNOTATION = "openshift.io/scc"
SCC = "restricted-v2"
# the default SCCs in the order the admission tries them for an ordinary user (by priority, then
# restrictiveness); only restricted-v2 is usable here
DEFAULT_SCCS = ("anyuid", SCC, "restricted", "nonroot-v2", "nonroot", "hostmount-anyuid", "hostnetwork-v2",
                "hostnetwork", "hostaccess", "privileged")
ALLOWED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
HOST_FIELDS = (("hostNetwork", "Host network"), ("hostPID", "Host PID"), ("hostIPC", "Host IPC"))


@dataclass(frozen=True)
class Range:
    first: int
    size: int

    @property
    def last(self) -> int:
        return self.first + self.size - 1

    def __contains__(self, value: object) -> bool:
        return isinstance(value, int) and self.first <= value <= self.last

    def text(self) -> str:
        return f"[{self.first}, {self.last}]"


def parse_range(text: str) -> Range | None:
    """`1000680000/10000` (first/size), or `1000680000-1000689999`; None when it is neither."""
    first, sep, rest = text.strip().partition("/")
    try:
        if sep:
            return Range(int(first), int(rest))
        low, dash, high = text.strip().partition("-")
        return Range(int(low), int(high) - int(low) + 1) if dash else None
    except ValueError:
        return None


def _ranges(namespace: Mapping[str, Any]) -> tuple[Range, Range] | None:
    annotations = (namespace.get("metadata") or {}).get("annotations") or {}
    uids = parse_range(str(annotations.get(UID_RANGE) or ""))
    if uids is None:
        return None
    groups = parse_range(str(annotations.get(GROUP_RANGE) or "")) or uids
    return uids, groups


def _containers(pod: Mapping[str, Any]) -> list[tuple[str, Obj]]:
    spec = pod.get("spec") or {}
    return ([(f".initContainers[{i}]", c) for i, c in enumerate(spec.get("initContainers") or [])]
            + [(f".containers[{i}]", c) for i, c in enumerate(spec.get("containers") or [])])


def _go(value: Any) -> str:
    """A value as field.Invalid prints it: strings quoted, []int64 in Go syntax."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[]int64{" + ", ".join(str(v) for v in value) + "}"
    return str(value)


class RestrictedV2:
    """The admission hook (admission/plugins.py's AdmissionHook) for OpenShift-like namespaces."""

    def mutate_pod(self, pod: Obj, namespace: Mapping[str, Any], user: Any) -> None:
        ranges = _ranges(namespace)
        if ranges is None:
            return
        uids, groups = ranges
        spec = pod.setdefault("spec", {})
        pod_ctx = spec.setdefault("securityContext", {})
        pod_ctx.setdefault("fsGroup", groups.first)
        pod_ctx.setdefault("seccompProfile", {"type": "RuntimeDefault"})
        for _, container in _containers(pod):
            ctx = container.setdefault("securityContext", {})
            if ctx.get("runAsUser") is None and pod_ctx.get("runAsUser") is None:
                ctx["runAsUser"] = uids.first
            if not ctx.get("privileged"):
                ctx.setdefault("allowPrivilegeEscalation", False)
            caps = ctx.setdefault("capabilities", {})
            if "ALL" not in (caps.get("drop") or []):
                caps["drop"] = [*(caps.get("drop") or []), "ALL"]
            effective = ctx.get("runAsUser", pod_ctx.get("runAsUser"))
            if ctx.get("runAsNonRoot") is None and pod_ctx.get("runAsNonRoot") is None \
                    and isinstance(effective, int) and effective > 0:
                ctx["runAsNonRoot"] = True
        pod.setdefault("metadata", {}).setdefault("annotations", {})[SCC_ANNOTATION] = SCC

    def validate_pod(self, pod: Obj, namespace: Mapping[str, Any], user: Any) -> None:
        ranges = _ranges(namespace)
        if ranges is None:
            return
        errors = self.violations(pod, *ranges)
        if not errors:
            return
        listed: list[str] = []
        for name in DEFAULT_SCCS:
            if name == SCC:
                listed += errors
            else:
                listed.append(f'provider "{name}": Forbidden: not usable by user or serviceaccount')
        meta = pod.get("metadata") or {}
        pod_name = str(meta.get("name") or meta.get("generateName") or "")
        raise st.forbidden(f'pods "{pod_name}" is forbidden: unable to validate against any security context '
                           f"constraint: [{', '.join(listed)}]", resource="pods", name=pod_name)

    @staticmethod
    def violations(pod: Mapping[str, Any], uids: Range, groups: Range) -> list[str]:
        """restricted-v2's field errors for `pod`, each prefixed with its provider as the admission says."""
        prefix = f"provider {SCC}: "
        spec = pod.get("spec") or {}
        pod_ctx = spec.get("securityContext") or {}
        errors: list[str] = []
        fs_group = pod_ctx.get("fsGroup")
        if fs_group is not None and fs_group not in groups:
            errors.append(f"{prefix}.spec.securityContext.fsGroup: Invalid value: {_go([fs_group])}: "
                          f"{fs_group} is not an allowed group")
        for key, what in HOST_FIELDS:
            if spec.get(key):
                errors.append(f"{prefix}.spec.securityContext.{key}: Invalid value: true: {what} is not "
                              "allowed to be used")
        for i, volume in enumerate(spec.get("volumes") or []):
            if "hostPath" in volume:
                errors.append(f'spec.volumes[{i}]: Invalid value: "hostPath": hostPath volumes are not '
                              "allowed to be used")
        for path, container in _containers(pod):
            ctx = container.get("securityContext") or {}
            uid = ctx.get("runAsUser", pod_ctx.get("runAsUser"))
            if uid is None:
                errors.append(f"{prefix}{path}.runAsUser: Required value")
            elif uid not in uids:
                errors.append(f"{prefix}{path}.runAsUser: Invalid value: {uid}: must be in the ranges: "
                              f"{uids.text()}")
            if ctx.get("privileged"):
                errors.append(f"{prefix}{path}.privileged: Invalid value: true: Privileged containers are "
                              "not allowed")
            for cap in (ctx.get("capabilities") or {}).get("add") or []:
                if cap not in ALLOWED_CAPABILITIES:
                    errors.append(f"{prefix}{path}.capabilities.add: Invalid value: {_go(cap)}: capability "
                                  "may not be added")
            if ctx.get("allowPrivilegeEscalation"):
                errors.append(f"{prefix}{path}.allowPrivilegeEscalation: Invalid value: true: Allowing "
                              "privilege escalation for containers is not allowed")
        return errors
