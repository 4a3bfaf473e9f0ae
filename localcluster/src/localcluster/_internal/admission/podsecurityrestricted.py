"""The restricted checks of the Pod Security Standards (k8s.io/pod-security-admission/policy/check_*.go),
with upstream's reasons and details word for word; restricted also runs every baseline check it does not
override (podsecuritychecks.py). From v1.25 upstream exempts pods with spec.os.name=windows from the
privilege-escalation, capabilities and seccomp checks."""

from __future__ import annotations

from localcluster._internal.admission.podsecuritychecks import (
    CheckFn,
    Obj,
    Result,
    containers,
    join_quote,
    name_of,
    named,
    on_windows,
    pluralize,
    seccomp_check,
    security_context,
)

_ALLOWED_VOLUMES = ("configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                    "projected", "secret")
_RESTRICTED_VOLUMES = ("hostPath", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "nfs", "iscsi",
                       "glusterfs", "rbd", "flexVolume", "cinder", "cephfs", "flocker", "fc", "azureFile",
                       "vsphereVolume", "quobyte", "azureDisk", "photonPersistentDisk", "portworxVolume",
                       "scaleIO", "storageos")


def allow_privilege_escalation(meta: Obj, spec: Obj) -> Result | None:
    bad = [name_of(c) for c in containers(spec)
           if security_context(c).get("allowPrivilegeEscalation") is not False]
    if not bad:
        return None
    return ("allowPrivilegeEscalation != false",
            f"{named('container', bad)} must set securityContext.allowPrivilegeEscalation=false")


def capabilities_restricted(meta: Obj, spec: Obj) -> Result | None:
    missing_drop, adding, forbidden = [], [], set()
    for c in containers(spec):
        capabilities = security_context(c).get("capabilities")
        if capabilities is None:
            missing_drop.append(name_of(c))
            continue
        if "ALL" not in (capabilities.get("drop") or []):
            missing_drop.append(name_of(c))
        wrong = [str(a) for a in capabilities.get("add") or [] if a != "NET_BIND_SERVICE"]
        if wrong:
            adding.append(name_of(c))
            forbidden.update(wrong)
    details = []
    if missing_drop:
        details.append(f'{named("container", missing_drop)} must set '
                       'securityContext.capabilities.drop=["ALL"]')
    if adding:
        details.append(f"{named('container', adding)} must not include {join_quote(sorted(forbidden))} in "
                       "securityContext.capabilities.add")
    return ("unrestricted capabilities", "; ".join(details)) if details else None


def restricted_volumes(meta: Obj, spec: Obj) -> Result | None:
    bad, kinds = [], set()
    for volume in spec.get("volumes") or []:
        if any(volume.get(k) is not None for k in _ALLOWED_VOLUMES):
            continue
        bad.append(str(volume.get("name", "")))
        kinds.add(next((k for k in _RESTRICTED_VOLUMES if volume.get(k) is not None), "unknown"))
    if not bad:
        return None
    return ("restricted volume types",
            f"{named('volume', bad)} {pluralize('uses', 'use', len(bad))} "
            f"{pluralize('restricted volume type', 'restricted volume types', len(kinds))} "
            f"{join_quote(sorted(kinds))}")


def run_as_non_root(meta: Obj, spec: Obj) -> Result | None:
    setters = []
    pod_value = security_context(spec).get("runAsNonRoot")
    if pod_value is False:
        setters.append("pod")
    explicit, implicit = [], []
    for c in containers(spec):
        value = security_context(c).get("runAsNonRoot")
        if value is not None:
            if value is False:
                explicit.append(name_of(c))
        elif pod_value is not True:
            implicit.append(name_of(c))
    if explicit:
        setters.append(named("container", explicit))
    if setters:
        return ("runAsNonRoot != true",
                f"{' and '.join(setters)} must not set securityContext.runAsNonRoot=false")
    if implicit:
        return ("runAsNonRoot != true",
                f"pod or {named('container', implicit)} must set securityContext.runAsNonRoot=true")
    return None


def run_as_user(meta: Obj, spec: Obj) -> Result | None:
    setters = ["pod"] if security_context(spec).get("runAsUser") == 0 else []
    bad = [name_of(c) for c in containers(spec) if security_context(c).get("runAsUser") == 0]
    if bad:
        setters.append(named("container", bad))
    return ("runAsUser=0", f"{' and '.join(setters)} must not set runAsUser=0") if setters else None


def seccomp_restricted(meta: Obj, spec: Obj) -> Result | None:
    return seccomp_check(spec, required=True)


def not_on_windows(check: CheckFn) -> CheckFn:
    """From v1.25 upstream exempts pods with spec.os.name=windows from some restricted checks."""
    return lambda meta, spec: None if on_windows(spec) else check(meta, spec)
