"""What the real API server rejects with 422 Invalid, with its own field paths and messages.

How the API server calls this:
    causes = validate("pods", obj)            # before or after generateName is resolved into metadata.name
    if causes:
        return 422, status_invalid("Pod", obj["metadata"].get("name", ""), causes)
    body_error = decode_error("secrets", obj)   # secret data that is not base64: a 400 BadRequest message
`resource` is the plural (pods, configmaps, ...); `kind` in `status_invalid` is the Kind ("Pod"), and
`group` the API group ("" for core, "rbac.authorization.k8s.io" for RBAC, which prefixes the message).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from localcluster._internal.admission.claims import claim_causes
from localcluster._internal.admission.podvalidation import (
    canonical_quantity,
    is_extended_resource,
    validate_pod_spec,
)
from localcluster._internal.admission.policies import binding_causes, policy_causes
from localcluster._internal.apimachinery.fielderrors import (
    DUPLICATE,
    FORBIDDEN,
    INVALID,
    NOT_FOUND,
    NOT_SUPPORTED,
    REQUIRED,
    TOO_LONG,
    Cause,
    duplicate,
    invalid,
    not_supported,
    port_causes,
    required,
    status_invalid,
)
from localcluster._internal.apimachinery.names import (
    config_key_errors,
    dns1035_label_errors,
    dns1123_label_errors,
    dns1123_subdomain_errors,
    label_key_errors,
    label_value_errors,
    path_segment_errors,
)

# re-exported: the API server builds its own causes with these
__all__ = ["DUPLICATE", "FORBIDDEN", "INVALID", "NOT_FOUND", "NOT_SUPPORTED", "REQUIRED", "TOO_LONG",
           "Cause", "canonical_quantity", "decode_error", "invalid", "is_extended_resource", "required",
           "status_invalid", "validate", "validate_metadata", "validate_owner_references"]
ANNOTATIONS_LIMIT = 256 * 1024


NameCheck = Callable[[str], list[str]]
# which name rule each served resource uses (pkg/apis/*/validation)
NAME_RULES: dict[str, NameCheck] = {
    "pods": dns1123_subdomain_errors, "configmaps": dns1123_subdomain_errors,
    "secrets": dns1123_subdomain_errors, "serviceaccounts": dns1123_subdomain_errors,
    "nodes": dns1123_subdomain_errors, "events": dns1123_subdomain_errors,
    "namespaces": dns1123_label_errors, "services": dns1035_label_errors,
    "roles": path_segment_errors, "rolebindings": path_segment_errors,
    "clusterroles": path_segment_errors, "clusterrolebindings": path_segment_errors,
}


def _mask_trailing_dash(prefix: str) -> str:
    # a generateName prefix may end in '-': the random suffix makes it valid
    return prefix[:-1] + "a" if len(prefix) > 1 and prefix.endswith("-") else prefix


def validate_metadata(resource: str, meta: Mapping[str, Any]) -> list[Cause]:
    check = NAME_RULES.get(resource, dns1123_subdomain_errors)
    causes: list[Cause] = []
    generate = meta.get("generateName") or ""
    if generate:
        causes += [invalid("metadata.generateName", generate, m)
                   for m in check(_mask_trailing_dash(generate))]
    name = meta.get("name") or ""
    if not name:
        if not generate:  # a name still to come from generateName is checked through its prefix
            causes.append(required("metadata.name", "name or generateName is required"))
    else:
        causes += [invalid("metadata.name", name, m) for m in check(name)]
    for key, value in (meta.get("labels") or {}).items():
        causes += [invalid("metadata.labels", key, m) for m in label_key_errors(key)]
        causes += [invalid("metadata.labels", value, m) for m in label_value_errors(str(value))]
    annotations = meta.get("annotations") or {}
    for key in annotations:
        causes += [invalid("metadata.annotations", key, m) for m in label_key_errors(key.lower())]
    if sum(len(k) + len(str(v)) for k, v in annotations.items()) > ANNOTATIONS_LIMIT:
        causes.append(Cause("metadata.annotations", TOO_LONG,
                            f"Too long: may not be more than {ANNOTATIONS_LIMIT} bytes"))
    causes += validate_owner_references(meta.get("ownerReferences") or [])
    return causes


def validate_owner_references(refs: list[Mapping[str, Any]]) -> list[Cause]:
    path = "metadata.ownerReferences"
    causes: list[Cause] = []
    controllers: list[str] = []
    for ref in refs:
        api_version = str(ref.get("apiVersion") or "")
        version = api_version.rsplit("/", 1)[-1]
        if not version:
            causes.append(invalid(f"{path}.apiVersion", api_version, "version must not be empty"))
        for key in ("kind", "name", "uid"):
            if not ref.get(key):
                causes.append(invalid(f"{path}.{key}", str(ref.get(key) or ""), "must not be empty"))
        if ref.get("controller") is True:
            controllers.append(str(ref.get("name") or ""))
    if len(controllers) > 1:
        causes.append(Cause(path, INVALID, "Invalid value: []v1.OwnerReference{...}: Only one reference can "
                            f"have Controller set to true. Found \"true\" in references for "
                            f"{' and '.join(controllers[:2])}"))
    return causes


def _data_key_causes(obj: Mapping[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    binary = obj.get("binaryData") or {}
    for field in ("data", "binaryData", "stringData"):
        for key in obj.get(field) or {}:
            causes += [invalid(f"{field}[{key}]", key, m) for m in config_key_errors(key)]
            if field == "data" and key in binary and obj.get("kind") != "Secret":
                causes.append(invalid(f"data[{key}]", key, "duplicate of key present in binaryData"))
    return causes


# keys a typed Secret must carry (pkg/apis/core/validation ValidateSecret)
_SECRET_KEYS = {"kubernetes.io/ssh-auth": ("ssh-privatekey",), "kubernetes.io/tls": ("tls.crt", "tls.key"),
                "kubernetes.io/dockerconfigjson": (".dockerconfigjson",),
                "kubernetes.io/dockercfg": (".dockercfg",)}


def _secret_causes(obj: Mapping[str, Any]) -> list[Cause]:
    # stringData is merged into data before the real server validates
    keys = set(obj.get("data") or {}) | set(obj.get("stringData") or {})
    kind = obj.get("type") or "Opaque"
    causes = [required(f"data[{key}]") for key in _SECRET_KEYS.get(kind, ()) if key not in keys]
    if kind == "kubernetes.io/basic-auth" and not keys & {"username", "password"}:
        causes += [required("data[username]"), required("data[password]")]
    if kind == "kubernetes.io/service-account-token" and not (
            ((obj.get("metadata") or {}).get("annotations") or {}).get("kubernetes.io/service-account.name")):
        causes.append(required("metadata.annotations[kubernetes.io/service-account.name]"))
    return causes


def _rule_causes(path: str, rule: Mapping[str, Any], namespaced: bool) -> list[Cause]:
    """ValidatePolicyRule."""
    causes: list[Cause] = []
    if not rule.get("verbs"):
        causes.append(required(f"{path}.verbs", "verbs must contain at least one value"))
    urls = rule.get("nonResourceURLs") or []
    if urls:
        if namespaced:
            causes.append(invalid(f"{path}.nonResourceURLs", urls,
                                  "namespaced rules cannot apply to non-resource URLs"))
        if rule.get("apiGroups") or rule.get("resources") or rule.get("resourceNames"):
            causes.append(invalid(f"{path}.nonResourceURLs", urls,
                                  "rules cannot apply to both regular resources and non-resource URLs"))
        return causes
    if not rule.get("apiGroups"):
        causes.append(required(f"{path}.apiGroups", "resource rules must supply at least one api group"))
    if not rule.get("resources"):
        causes.append(required(f"{path}.resources", "resource rules must supply at least one resource"))
    return causes


def _subject_causes(path: str, subject: Mapping[str, Any], namespaced: bool) -> list[Cause]:
    """ValidateRoleBindingSubject; an empty apiGroup is taken as defaulted (the server defaults it first)."""
    causes: list[Cause] = []
    kind, name, group = subject.get("kind"), subject.get("name") or "", subject.get("apiGroup") or ""
    if not name:
        causes.append(required(f"{path}.name"))
    if kind == "ServiceAccount":
        if name:
            causes += [invalid(f"{path}.name", name, m) for m in dns1123_subdomain_errors(name)]
        if group:
            causes.append(not_supported(f"{path}.apiGroup", group, [""]))
        if not namespaced and not subject.get("namespace"):
            causes.append(required(f"{path}.namespace"))
    elif kind in ("User", "Group"):
        if group and group != _RBAC:
            causes.append(not_supported(f"{path}.apiGroup", group, [_RBAC]))
    else:
        causes.append(not_supported(f"{path}.kind", kind or "", ["ServiceAccount", "User", "Group"]))
    return causes


_RBAC = "rbac.authorization.k8s.io"


def _rbac_causes(resource: str, obj: Mapping[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    namespaced = resource in ("roles", "rolebindings")
    if resource in ("roles", "clusterroles"):
        for i, rule in enumerate(obj.get("rules") or []):
            causes += _rule_causes(f"rules[{i}]", rule, namespaced)
        return causes
    ref = obj.get("roleRef") or {}
    if ref.get("apiGroup") and ref.get("apiGroup") != _RBAC:
        causes.append(not_supported("roleRef.apiGroup", ref["apiGroup"], [_RBAC]))
    kinds = ["Role", "ClusterRole"] if namespaced else ["ClusterRole"]
    if ref.get("kind") not in kinds:
        causes.append(not_supported("roleRef.kind", ref.get("kind") or "", kinds))
    if not ref.get("name"):
        causes.append(required("roleRef.name"))
    else:
        causes += [invalid("roleRef.name", ref["name"], m) for m in path_segment_errors(ref["name"])]
    for i, subject in enumerate(obj.get("subjects") or []):
        causes += _subject_causes(f"subjects[{i}]", subject, namespaced)
    return causes


def _service_causes(obj: Mapping[str, Any]) -> list[Cause]:
    spec = obj.get("spec") or {}
    ports = spec.get("ports") or []
    headless = spec.get("clusterIP") == "None"
    causes: list[Cause] = []
    if not ports and not headless and spec.get("type") != "ExternalName":
        causes.append(required("spec.ports"))
    names: set[str] = set()
    for i, port in enumerate(ports):
        name = port.get("name") or ""
        if len(ports) > 1 and not name:
            causes.append(required(f"spec.ports[{i}].name"))
        elif name:
            causes += [invalid(f"spec.ports[{i}].name", name, m) for m in dns1123_label_errors(name)]
            if name in names:
                causes.append(duplicate(f"spec.ports[{i}].name", name))
            names.add(name)
        causes += port_causes(f"spec.ports[{i}].port", port.get("port"))
    for key, value in (spec.get("selector") or {}).items():
        causes += [invalid("spec.selector", key, m) for m in label_key_errors(key)]
        causes += [invalid("spec.selector", value, m) for m in label_value_errors(str(value))]
    return causes


def validate(resource: str, obj: Mapping[str, Any]) -> list[Cause]:
    """Every cause the real server would list for creating or updating `obj` (a plural `resource`)."""
    causes = validate_metadata(resource, obj.get("metadata") or {})
    if resource == "pods":
        causes += validate_pod_spec(obj.get("spec") or {})
    elif resource == "configmaps":
        causes += _data_key_causes(obj)
    elif resource == "secrets":
        causes += _data_key_causes(obj) + _secret_causes(obj)
    elif resource in ("roles", "clusterroles", "rolebindings", "clusterrolebindings"):
        causes += _rbac_causes(resource, obj)
    elif resource == "services":
        causes += _service_causes(obj)
    elif resource == "persistentvolumeclaims":
        causes += claim_causes(obj)
    elif resource == "validatingadmissionpolicies":
        causes += policy_causes(obj)
    elif resource == "validatingadmissionpolicybindings":
        causes += binding_causes(obj)
    return causes


_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def base64_error_offset(text: str) -> int | None:
    """Where Go's base64.StdEncoding rejects `text` (the offset in `illegal base64 data at input byte N`)."""
    si, n = 0, len(text)
    while si < n:
        j = 0
        while j < 4:
            while si < n and text[si] in "\r\n":
                si += 1
            if si == n:
                if j == 0:
                    return None
                return si - j
            char = text[si]
            si += 1
            if char == "=":
                if j < 2:
                    return si - 1
                if j == 2:  # "xx==" needs a second '='
                    while si < n and text[si] in "\r\n":
                        si += 1
                    if si == n:
                        return n
                    if text[si] != "=":
                        return si - 1
                    si += 1
                while si < n and text[si] in "\r\n":
                    si += 1
                return si if si < n else None
            if char not in _B64:
                return si - 1
            j += 1
    return None


def decode_error(resource: str, obj: Mapping[str, Any]) -> str | None:
    """The 400 message the real server gives when a Secret's data is not base64, else None."""
    if resource != "secrets":
        return None
    for value in (obj.get("data") or {}).values():
        if not isinstance(value, str):
            return 'Secret in version "v1" cannot be handled as a Secret: json: cannot unmarshal into []byte'
        offset = base64_error_offset(value)
        if offset is not None:
            return ('Secret in version "v1" cannot be handled as a Secret: '
                    f"illegal base64 data at input byte {offset}")
    return None
