"""The Pod Security Standards' "restricted" profile (as of Kubernetes 1.30-1.37), written out from
https://kubernetes.io/docs/concepts/security/pod-security-standards/, for tests to hold job pods to it
alongside what the API server's admission enforces on a namespace labelled
`pod-security.kubernetes.io/enforce: restricted`. Returns what a pod breaks, in the admission's words."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes"}


def _containers(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or []),
            *(spec.get("ephemeralContainers") or [])]


def violations(pod: Mapping[str, Any]) -> list[str]:
    """Every rule of "restricted" (baseline included) the pod breaks; empty when it passes."""
    spec = pod.get("spec") or {}
    pod_ctx = spec.get("securityContext") or {}
    out = [f"host namespaces ({key}=true)" for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if "hostPath" in kinds:
            out.append(f"hostPath volumes ({volume['name']})")
        if not kinds <= RESTRICTED_VOLUMES:
            out.append(f"restricted volume types ({volume['name']}: {', '.join(sorted(kinds))})")
    for sysctl in pod_ctx.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            out.append(f"forbidden sysctls ({sysctl.get('name')})")
    if (pod_ctx.get("seccompProfile") or {}).get("type") == "Unconfined":
        out.append("seccompProfile (pod must not set it to Unconfined)")
    if pod_ctx.get("runAsUser") == 0:
        out.append("runAsUser=0 (pod must not set runAsUser=0)")
    pod_non_root = pod_ctx.get("runAsNonRoot")
    pod_seccomp = (pod_ctx.get("seccompProfile") or {}).get("type")
    for container in _containers(spec):
        name = container.get("name")
        ctx = container.get("securityContext") or {}
        if ctx.get("privileged"):
            out.append(f"privileged (container {name} must not set privileged=true)")
        if ctx.get("allowPrivilegeEscalation") is not False:
            out.append(f"allowPrivilegeEscalation != false (container {name})")
        caps = ctx.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"unrestricted capabilities (container {name} must drop ALL)")
        added = set(caps.get("add") or [])
        if added - {"NET_BIND_SERVICE"}:
            out.append(f"unrestricted capabilities (container {name} adds {', '.join(sorted(added))})")
        non_root = ctx.get("runAsNonRoot", pod_non_root)
        if non_root is not True:
            out.append(f"runAsNonRoot != true (container {name})")
        if ctx.get("runAsUser") == 0:
            out.append(f"runAsUser=0 (container {name})")
        seccomp = (ctx.get("seccompProfile") or {}).get("type") or pod_seccomp
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"seccompProfile (container {name} must be RuntimeDefault or Localhost)")
        if ctx.get("procMount") not in (None, "Default"):
            out.append(f"procMount (container {name})")
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                out.append(f"hostPort (container {name} uses {port['hostPort']})")
    return out


def restricted(pod: dict[str, Any]) -> dict[str, Any]:
    """A pod a test creates beside the job (a blocker, a stand-in manager), made to pass "restricted" as any
    pod in the demo's namespace must: non-root, no privilege escalation, no capabilities, RuntimeDefault."""
    spec = pod.setdefault("spec", {})
    spec.setdefault("securityContext", {}).update(
        {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}})
    for container in _containers(spec):
        context = dict(container.get("securityContext") or {})
        context.update({"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}})
        container["securityContext"] = context  # type: ignore[index]
    return pod
