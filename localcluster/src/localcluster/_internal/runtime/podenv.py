"""What a kubelet computes for a container before starting it: hostname, /etc/hosts, environment, argv.

Pure: objects come in through `get(resource, namespace, name)`, like RuntimeHost.get.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from localcluster._internal.apimachinery.quantity import parse_quantity
from localcluster._internal.runtime.images import DEFAULT_PATH

__all__ = ["DEFAULT_PATH", "NotReadyYet", "container_args", "container_env", "hosts_file", "pod_hostname"]

Getter = Callable[[str, str | None, str], dict[str, Any] | None]

CLUSTER_DOMAIN = "cluster.local"
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


class NotReadyYet(Exception):
    """A referenced Secret/ConfigMap (or key) does not exist yet: the kubelet keeps the container waiting
    (CreateContainerConfigError) and tries again."""


def pod_hostname(pod: Mapping[str, Any]) -> tuple[str, str | None]:
    """(hostname, fully qualified name or None): spec.hostname or the pod name, truncated to 63 like the
    kubelet; with spec.subdomain the FQDN is hostname.subdomain.namespace.svc.cluster.local."""
    spec, meta = pod.get("spec", {}), pod.get("metadata", {})
    hostname = (spec.get("hostname") or meta.get("name", "pod"))[:63].rstrip("-.")
    subdomain = spec.get("subdomain")
    if subdomain:
        return hostname, f"{hostname}.{subdomain}.{meta.get('namespace', 'default')}.svc.{CLUSTER_DOMAIN}"
    return hostname, None


def hosts_file(pod: Mapping[str, Any], ip: str) -> str:
    """The kubelet's managed /etc/hosts: the pod's own name maps to its IP (never 127.0.0.1, or Gloo and
    friends would advertise loopback), then spec.hostAliases."""
    hostname, fqdn = pod_hostname(pod)
    lines = ["# Kubernetes-managed hosts file.", "127.0.0.1\tlocalhost",
             "::1\tlocalhost ip6-localhost ip6-loopback", "fe00::0\tip6-localnet", "fe00::0\tip6-mcastprefix",
             "fe00::1\tip6-allnodes", "fe00::2\tip6-allrouters",
             f"{ip}\t{fqdn}\t{hostname}" if fqdn else f"{ip}\t{hostname}"]
    aliases = pod.get("spec", {}).get("hostAliases") or []
    if aliases:
        lines.append("")
        lines.append("# Entries added by HostAliases.")
        lines.extend(f"{a.get('ip')}\t" + "\t".join(a.get("hostnames") or []) for a in aliases)
    return "\n".join(lines) + "\n"


def field_value(pod: Mapping[str, Any], path: str, *, pod_ip: str, host_ip: str) -> str:
    meta, spec = pod.get("metadata", {}), pod.get("spec", {})
    simple = {
        "metadata.name": meta.get("name", ""), "metadata.namespace": meta.get("namespace", "default"),
        "metadata.uid": meta.get("uid", ""), "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName") or "default",
        "status.podIP": pod_ip, "status.podIPs": pod_ip, "status.hostIP": host_ip, "status.hostIPs": host_ip,
    }
    if path in simple:
        return str(simple[path])
    m = re.fullmatch(r"metadata\.(labels|annotations)(?:\['(.+)'\])?", path)
    if m:
        mapping = meta.get(m.group(1)) or {}
        if m.group(2) is not None:
            return str(mapping.get(m.group(2), ""))
        return "".join(f'{k}="{v}"\n' for k, v in sorted(mapping.items()))
    raise ValueError(f"fieldRef {path!r} is not supported")


def resource_value(container: Mapping[str, Any], ref: Mapping[str, Any],
                   allocatable: Mapping[str, Any]) -> str:
    """resourceFieldRef: the limit (or request), the node's allocatable when there is no limit, divided by
    `divisor` and rounded up, as the kubelet does."""
    kind, _, resource = str(ref.get("resource", "")).partition(".")
    res = container.get("resources") or {}
    value = (res.get(kind) or {}).get(resource)
    if value is None:
        value = allocatable.get(resource, "0") if kind == "limits" else "0"
    divisor = parse_quantity(ref.get("divisor") or "1")
    amount = parse_quantity(value) / (divisor or Fraction(1))
    return str(math.ceil(amount))


def expand(text: str, env: Mapping[str, str]) -> str:
    """$(VAR) references to variables defined before, $$ escapes; unknown references stay as written."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("$(", i) and ")" in text[i:]:
            end = text.index(")", i)
            name = text[i + 2:end]
            out.append(env[name] if name in env else text[i:end + 1])
            i = end + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _object_data(obj: Mapping[str, Any], secret: bool) -> dict[str, str]:
    if secret:
        data = {k: base64.b64decode(v).decode(errors="replace") for k, v in (obj.get("data") or {}).items()}
        data.update(obj.get("stringData") or {})
        return data
    data = dict(obj.get("data") or {})
    binary = obj.get("binaryData") or {}
    data.update({k: base64.b64decode(v).decode(errors="replace") for k, v in binary.items()})
    return data


def _key_ref(get: Getter, namespace: str, ref: Mapping[str, Any], secret: bool) -> str | None:
    kind = "secrets" if secret else "configmaps"
    obj = get(kind, namespace, ref.get("name", ""))
    if obj is None or ref.get("key") not in _object_data(obj, secret):
        if ref.get("optional"):
            return None
        what = "secret" if secret else "configmap"
        if obj is None:
            raise NotReadyYet(f'{what} "{ref.get("name")}" not found')
        raise NotReadyYet(f"couldn't find key {ref.get('key')} in {what.capitalize()} "
                          f"{namespace}/{ref.get('name')}")
    return _object_data(obj, secret)[ref["key"]]


def container_env(*, pod: Mapping[str, Any], container: Mapping[str, Any], get: Getter,
                  image_env: Sequence[tuple[str, str]], base: Mapping[str, str], pod_ip: str, host_ip: str,
                  allocatable: Mapping[str, Any]) -> dict[str, str]:
    """The environment in the kubelet's order: image ENV, then `base` (HOSTNAME, KUBERNETES_*, GPUs), then
    envFrom, then env (later wins), with $(VAR) expansion in env values."""
    namespace = pod.get("metadata", {}).get("namespace", "default")
    env: dict[str, str] = dict(image_env)
    env.update(base)
    for source in container.get("envFrom") or []:
        secret = "secretRef" in source
        ref = source.get("secretRef") or source.get("configMapRef") or {}
        obj = get("secrets" if secret else "configmaps", namespace, ref.get("name", ""))
        if obj is None:
            if ref.get("optional"):
                continue
            raise NotReadyYet(f'{"secret" if secret else "configmap"} "{ref.get("name")}" not found')
        for key, value in _object_data(obj, secret).items():
            name = source.get("prefix", "") + key
            if _ENV_NAME.match(name):
                env[name] = value
    for var in container.get("env") or []:
        name, source = var["name"], var.get("valueFrom")
        if source is None:
            env[name] = expand(str(var.get("value", "")), env)
        elif "fieldRef" in source:
            env[name] = field_value(pod, source["fieldRef"]["fieldPath"], pod_ip=pod_ip, host_ip=host_ip)
        elif "resourceFieldRef" in source:
            env[name] = resource_value(container, source["resourceFieldRef"], allocatable)
        else:
            secret = "secretKeyRef" in source
            ref = source.get("secretKeyRef") or source.get("configMapKeyRef") or {}
            found = _key_ref(get, namespace, ref, secret)
            if found is not None:
                env[name] = found
    return env


def container_args(argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
    return [expand(a, env) for a in argv]
