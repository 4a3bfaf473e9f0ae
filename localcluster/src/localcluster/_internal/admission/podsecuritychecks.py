"""The baseline checks of the Pod Security Standards (k8s.io/pod-security-admission/policy/check_*.go), with
upstream's reasons and details word for word, and the helpers the restricted checks share
(podsecurityrestricted.py). Each check returns None (allowed) or (reason, detail); the detail names the
containers, volumes or values at fault. The registry that orders and versions them is podsecurity.py's.

Not carried over: windowsHostProcess (no Windows nodes here) and the user-namespace relaxations upstream keeps
behind an option that is off by default.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

Obj = Mapping[str, Any]
Result = tuple[str, str]            # (forbidden reason, forbidden detail)
CheckFn = Callable[[Obj, Obj], Result | None]

_BASELINE_CAPABILITIES = frozenset({"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL",
                                    "MKNOD", "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID",
                                    "SYS_CHROOT"})
_SAFE_SYSCTLS = frozenset({"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                           "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range",
                           "net.ipv4.ip_unprivileged_port_start"})
_SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t"})
_SECCOMP_OK = frozenset({"RuntimeDefault", "Localhost"})
_APPARMOR_OK = frozenset({"RuntimeDefault", "Localhost"})
_APPARMOR_KEY = "container.apparmor.security.beta.kubernetes.io/"
_SECCOMP_POD_KEY = "seccomp.security.alpha.kubernetes.io/pod"
_SECCOMP_CONTAINER_KEY = "container.seccomp.security.alpha.kubernetes.io/"


def join_quote(items: Sequence[str]) -> str:
    return '"' + '", "'.join(items) + '"' if items else ""


def pluralize(singular: str, plural: str, count: int) -> str:
    return singular if count == 1 else plural


def containers(spec: Obj) -> Iterator[Obj]:
    """Init containers, containers, ephemeral containers: upstream's visitContainers order."""
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(key) or []:
            if isinstance(container, Mapping):
                yield container


def security_context(obj: Obj) -> Obj:
    return obj.get("securityContext") or {}


def name_of(container: Obj) -> str:
    return str(container.get("name", ""))


def on_windows(spec: Obj) -> bool:
    return (spec.get("os") or {}).get("name") == "windows"


def named(noun: str, names: Sequence[str]) -> str:
    return f"{pluralize(noun, noun + 's', len(names))} {join_quote(names)}"


# ---- baseline ----------------------------------------------------------------------------------------------
def app_armor(meta: Obj, spec: Obj) -> Result | None:
    setters: list[str] = []
    values: set[str] = set()
    pod_type = (security_context(spec).get("appArmorProfile") or {}).get("type")
    if security_context(spec).get("appArmorProfile") is not None and pod_type not in _APPARMOR_OK:
        setters.append("pod")
        values.add(str(pod_type or ""))
    bad = []
    for c in containers(spec):
        profile = security_context(c).get("appArmorProfile")
        if profile is not None and (profile or {}).get("type") not in _APPARMOR_OK:
            bad.append(name_of(c))
            values.add(str((profile or {}).get("type") or ""))
    if bad:
        setters.append(named("container", bad))
    listed = sorted(values)
    annotations = sorted(f'{k}="{v}"' for k, v in (meta.get("annotations") or {}).items()
                         if k.startswith(_APPARMOR_KEY) and v and v != "runtime/default"
                         and not str(v).startswith("localhost/"))
    if annotations:
        listed += annotations
        setters.append(pluralize("annotation", "annotations", len(annotations)))
    if not setters:
        return None
    return (pluralize("forbidden AppArmor profile", "forbidden AppArmor profiles", len(listed)),
            f"{' and '.join(setters)} must not set AppArmor profile type to {join_quote(listed)}")


def capabilities_baseline(meta: Obj, spec: Obj) -> Result | None:
    bad, extra = [], set()
    for c in containers(spec):
        added = [str(a) for a in (security_context(c).get("capabilities") or {}).get("add") or []]
        wrong = [a for a in added if a not in _BASELINE_CAPABILITIES]
        if wrong:
            bad.append(name_of(c))
            extra.update(wrong)
    if not bad:
        return None
    return ("non-default capabilities",
            f"{named('container', bad)} must not include {join_quote(sorted(extra))} in "
            "securityContext.capabilities.add")


def host_namespaces(meta: Obj, spec: Obj) -> Result | None:
    shared = [f"{key}=true" for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
    return ("host namespaces", ", ".join(shared)) if shared else None


def host_path_volumes(meta: Obj, spec: Obj) -> Result | None:
    names = [str(v.get("name", "")) for v in spec.get("volumes") or [] if v.get("hostPath") is not None]
    return ("hostPath volumes", named("volume", names)) if names else None


def host_ports(meta: Obj, spec: Obj) -> Result | None:
    bad: list[str] = []
    ports: set[str] = set()
    for c in containers(spec):
        used = [int(p["hostPort"]) for p in c.get("ports") or [] if p.get("hostPort")]
        if used:
            bad.append(name_of(c))
            ports.update(str(p) for p in used)
    if not bad:
        return None
    return ("hostPort", f"{named('container', bad)} {pluralize('uses', 'use', len(bad))} "
                        f"{pluralize('hostPort', 'hostPorts', len(ports))} {', '.join(sorted(ports))}")


def host_probes(meta: Obj, spec: Obj) -> Result | None:
    bad, hosts = set(), set()
    for c in containers(spec):
        handlers = [c.get(k) for k in ("livenessProbe", "readinessProbe", "startupProbe")]
        handlers += [(c.get("lifecycle") or {}).get(k) for k in ("postStart", "preStop")]
        for handler in handlers:
            for kind in ("httpGet", "tcpSocket"):
                host = ((handler or {}).get(kind) or {}).get("host")
                if host:
                    bad.add(name_of(c))
                    hosts.add(str(host))
    if not bad:
        return None
    return ("probe or lifecycle host",
            f"{named('container', sorted(bad))} {pluralize('uses', 'use', len(bad))} "
            f"{pluralize('probe or lifecycle host', 'probe or lifecycle hosts', len(hosts))} "
            f"{join_quote(sorted(hosts))}")


def privileged(meta: Obj, spec: Obj) -> Result | None:
    bad = [name_of(c) for c in containers(spec) if security_context(c).get("privileged") is True]
    return ("privileged", f"{named('container', bad)} must not set securityContext.privileged=true") \
        if bad else None


def proc_mount(meta: Obj, spec: Obj) -> Result | None:
    bad, kinds = [], set()
    for c in containers(spec):
        mount = security_context(c).get("procMount")
        if mount is not None and mount != "Default":
            bad.append(name_of(c))
            kinds.add(str(mount))
    if not bad:
        return None
    return ("procMount", f"{named('container', bad)} must not set securityContext.procMount to "
                         f"{join_quote(sorted(kinds))}")


def se_linux(meta: Obj, spec: Obj) -> Result | None:
    types: set[str] = set()
    flags = {"user": False, "role": False}

    def valid(options: Obj) -> bool:
        ok = True
        if str(options.get("type") or "") not in _SELINUX_TYPES:
            ok = False
            types.add(str(options.get("type")))
        for key in ("user", "role"):
            if options.get(key):
                ok, flags[key] = False, True
        return ok

    setters = []
    pod_options = security_context(spec).get("seLinuxOptions")
    if pod_options is not None and not valid(pod_options or {}):
        setters.append("pod")
    bad = [name_of(c) for c in containers(spec) if security_context(c).get("seLinuxOptions") is not None
           and not valid(security_context(c).get("seLinuxOptions") or {})]
    if bad:
        setters.append(named("container", bad))
    if not setters:
        return None
    data = []
    if types:
        data.append(f"{pluralize('type', 'types', len(types))} {join_quote(sorted(types))}")
    data += [f"{key} may not be set" for key in ("user", "role") if flags[key]]
    return ("seLinuxOptions",
            f"{' and '.join(setters)} set forbidden securityContext.seLinuxOptions: {'; '.join(data)}")


def seccomp_annotations(meta: Obj, spec: Obj) -> Result | None:
    annotations = meta.get("annotations") or {}

    def ok(value: str) -> bool:
        return value in ("runtime/default", "docker/default") or value.startswith("localhost/")

    bad = set()
    if _SECCOMP_POD_KEY in annotations and not ok(str(annotations[_SECCOMP_POD_KEY])):
        bad.add(f'{_SECCOMP_POD_KEY}="{annotations[_SECCOMP_POD_KEY]}"')
    for c in containers(spec):
        key = _SECCOMP_CONTAINER_KEY + name_of(c)
        if key in annotations and not ok(str(annotations[key])):
            bad.add(f'{key}="{annotations[key]}"')
    if not bad:
        return None
    return ("seccompProfile",
            f"forbidden {pluralize('annotation', 'annotations', len(bad))} {', '.join(sorted(bad))}")


def seccomp_check(spec: Obj, *, required: bool) -> Result | None:
    setters, values = [], set()
    pod_profile = security_context(spec).get("seccompProfile")
    pod_set = False
    if pod_profile is not None:
        if (pod_profile or {}).get("type") in _SECCOMP_OK:
            pod_set = True
        else:
            setters.append("pod")
            values.add(str((pod_profile or {}).get("type") or ""))
    explicit, implicit = [], []
    for c in containers(spec):
        profile = security_context(c).get("seccompProfile")
        if profile is not None:
            if (profile or {}).get("type") not in _SECCOMP_OK:
                explicit.append(name_of(c))
                values.add(str((profile or {}).get("type") or ""))
        elif not pod_set:
            implicit.append(name_of(c))
    if explicit:
        setters.append(named("container", explicit))
    if setters:
        return ("seccompProfile", f"{' and '.join(setters)} must not set securityContext.seccompProfile.type "
                                  f"to {join_quote(sorted(values))}")
    if required and implicit:
        return ("seccompProfile", f'pod or {named("container", implicit)} must set '
                                  'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost"')
    return None


def seccomp_baseline(meta: Obj, spec: Obj) -> Result | None:
    return seccomp_check(spec, required=False)


def sysctls(meta: Obj, spec: Obj) -> Result | None:
    bad = [str(s.get("name", "")) for s in security_context(spec).get("sysctls") or []
           if s.get("name") not in _SAFE_SYSCTLS]
    return ("forbidden sysctls", ", ".join(bad)) if bad else None
