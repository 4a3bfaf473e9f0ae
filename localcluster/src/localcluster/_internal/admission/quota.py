"""ResourceQuota, pure: what an object counts against a quota, and the quota admission's verdict with the
real messages (plugin/pkg/admission/resourcequota and pkg/quota/v1/evaluator/core).

A pod counts `count/pods` while it is stored and, until it terminates, `pods` and its compute resources:
`requests.cpu` (also plain `cpu`), `limits.cpu`, the same for `memory` and `ephemeral-storage`, and
`requests.<extended>` (e.g. `requests.nvidia.com/gpu`) — its effective requests and limits (init containers'
peak, sidecars, overhead), as the scheduler counts them. Any other stored object counts `count/<resource>`
(`count/<resource>.<group>` outside the core group) and, for the legacy names, `secrets`, `configmaps`,
`services`, `persistentvolumeclaims` (+ `requests.storage`), `resourcequotas`.

Admission (on create): for each quota of the namespace (by name), a quota that tracks cpu or memory requires
every container to set it (`failed quota: NAME: must specify limits.cpu for: app; ...`); then the new usage
plus the quota's used amount must stay within hard (`exceeded quota: NAME, requested: requests.cpu=2, used:
requests.cpu=1, limited: requests.cpu=2`). Scopes Terminating, NotTerminating, BestEffort and NotBestEffort
are honoured; `scopeSelector` is not (such a quota is ignored, and its status says nothing is used).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from localcluster._internal.apimachinery.quantity import canonical, is_binary, parse_quantity
from localcluster._internal.errors import InvalidQuantity
from localcluster._internal.podspec.qos import BEST_EFFORT, qos_class
from localcluster._internal.podspec.requests import TERMINAL_PHASES, container_requests, pod_requests

Obj = Mapping[str, Any]
_COMPUTE = ("cpu", "memory", "ephemeral-storage")
_MUST_SPECIFY = frozenset({"cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"})
_LEGACY_COUNTS = {"secrets": "secrets", "configmaps": "configmaps", "services": "services",
                  "persistentvolumeclaims": "persistentvolumeclaims", "resourcequotas": "resourcequotas"}
_POD_SCOPES = {"Terminating", "NotTerminating", "BestEffort", "NotBestEffort"}


@dataclass(frozen=True)
class Amount:
    """A quantity and the format Quantity.String() prints it in (binary: 1536Mi; decimal: 1500m, 2k)."""

    value: Fraction
    binary: bool = False

    def __add__(self, other: Amount) -> Amount:
        # a sum keeps the first operand's format, unless that one was zero
        return Amount(self.value + other.value, self.binary if self.value else other.binary)

    def __str__(self) -> str:
        return canonical(self.value, binary=self.binary)

    @staticmethod
    def of(text: Any) -> Amount:
        return Amount(parse_quantity(text), is_binary(text))


Usage = dict[str, Amount]
ONE = Amount(Fraction(1))


def _add(total: Usage, more: Mapping[str, Amount]) -> None:
    for name, amount in more.items():
        total[name] = total[name] + amount if name in total else amount


def _formats(spec: Obj, kind: str) -> dict[str, bool]:
    """Per resource, whether the first container naming it wrote it in binary form."""
    out: dict[str, bool] = {}
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        for name, value in ((container.get("resources") or {}).get(kind) or {}).items():
            out.setdefault(name, is_binary(value))
    return out


def pod_limits(pod: Obj) -> dict[str, Fraction]:
    """PodLimits: containers and sidecars add up, a regular init container counts at its own peak, and the
    pod's overhead is added to the resources it limits."""
    spec = pod.get("spec") or {}

    def limits_of(container: Obj) -> dict[str, Fraction]:
        return container_requests({"resources": {"limits": (container.get("resources") or {}).get("limits")}})

    total: dict[str, Fraction] = {}
    for container in spec.get("containers") or []:
        for name, amount in limits_of(container).items():
            total[name] = total.get(name, Fraction(0)) + amount
    sidecars: dict[str, Fraction] = {}
    for init in spec.get("initContainers") or []:
        own = limits_of(init)
        if init.get("restartPolicy") == "Always":
            for name, amount in own.items():
                total[name] = total.get(name, Fraction(0)) + amount
                sidecars[name] = sidecars.get(name, Fraction(0)) + amount
        else:
            for name, amount in own.items():
                peak = amount + sidecars.get(name, Fraction(0))
                if peak > total.get(name, Fraction(0)):
                    total[name] = peak
    for name, value in (spec.get("overhead") or {}).items():
        if name in total:
            total[name] += parse_quantity(value)
    return total


def _compute_usage(requests: Mapping[str, Fraction], limits: Mapping[str, Fraction],
                   binary: Mapping[str, bool]) -> Usage:
    """podComputeUsageHelper: the quota names a pod's requests and limits count under."""
    out: Usage = {"pods": ONE}
    for name in _COMPUTE:
        if name in requests:
            amount = Amount(requests[name], binary.get(name, False))
            out[name] = amount
            out[f"requests.{name}"] = amount
        if name in limits:
            out[f"limits.{name}"] = Amount(limits[name], binary.get(name, False))
    for name, value in requests.items():
        if name.startswith("hugepages-"):
            out[name] = out[f"requests.{name}"] = Amount(value, binary.get(name, False))
        elif "/" in name and "kubernetes.io/" not in name and not name.startswith("requests."):
            out[f"requests.{name}"] = Amount(value)
    return out


def terminated(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def pod_usage(pod: Obj) -> Usage:
    """What a stored pod counts (PodUsageFunc): always count/pods, compute resources until it terminates."""
    usage: Usage = {"count/pods": ONE}
    if terminated(pod):
        return usage
    spec = pod.get("spec") or {}
    binary = {**_formats(spec, "limits"), **_formats(spec, "requests")}
    _add(usage, _compute_usage(pod_requests(pod), pod_limits(pod), binary))
    return usage


def count_name(plural: str, group: str) -> str:
    return f"count/{plural}" if not group else f"count/{plural}.{group}"


def object_usage(plural: str, group: str, obj: Obj) -> Usage:
    """What any other object counts: count/<resource>, its legacy name, a claim's requested storage."""
    usage: Usage = {count_name(plural, group): ONE}
    if not group and plural in _LEGACY_COUNTS:
        usage[_LEGACY_COUNTS[plural]] = ONE
    if not group and plural == "persistentvolumeclaims":
        storage = ((obj.get("spec") or {}).get("resources") or {}).get("requests", {}).get("storage")
        if storage is not None:
            usage["requests.storage"] = Amount.of(storage)
    return usage


def matches(quota: Obj, plural: str, obj: Obj) -> bool:
    """Whether the quota counts this object: scopes narrow a quota to some pods; scopeSelector is not read."""
    spec = quota.get("spec") or {}
    if spec.get("scopeSelector"):
        return False
    scopes = list(spec.get("scopes") or [])
    if not scopes:
        return True
    if plural != "pods" or not set(scopes) <= _POD_SCOPES:
        return False
    pod_spec = obj.get("spec") or {}
    best_effort = qos_class(obj) == BEST_EFFORT
    checks = {"Terminating": pod_spec.get("activeDeadlineSeconds") is not None,
              "NotTerminating": pod_spec.get("activeDeadlineSeconds") is None,
              "BestEffort": best_effort, "NotBestEffort": not best_effort}
    return all(checks[s] for s in scopes)


def hard_of(quota: Obj) -> dict[str, Amount]:
    out = {}
    for name, value in ((quota.get("spec") or {}).get("hard") or {}).items():
        try:
            out[str(name)] = Amount.of(value)
        except InvalidQuantity:
            continue
    if "BestEffort" in ((quota.get("spec") or {}).get("scopes") or []):
        # a BestEffort quota tracks only the pod count
        out = {k: v for k, v in out.items() if k in ("pods", "count/pods")}
    return out


def used(quota: Obj, plural_objects: Iterable[tuple[str, str, Obj]]) -> Usage:
    """The quota's used amounts over (plural, group, object) triples of its namespace: one entry per hard
    resource, zero when nothing counts there."""
    hard = hard_of(quota)
    total: Usage = {name: Amount(Fraction(0), amount.binary) for name, amount in hard.items()}
    for plural, group, obj in plural_objects:
        if not matches(quota, plural, obj):
            continue
        usage = pod_usage(obj) if plural == "pods" and not group else object_usage(plural, group, obj)
        for name, amount in usage.items():
            if name in total:
                total[name] = total[name] + amount
    return total


def _pretty(usage: Mapping[str, Amount]) -> str:
    return ",".join(f"{name}={usage[name]}" for name in sorted(usage))


def _missing(pod: Obj, tracked: set[str]) -> str | None:
    """The pod evaluator's Constraints: a quota on cpu or memory needs every container to name it."""
    required = tracked & _MUST_SPECIFY
    if not required:
        return None
    missing: dict[str, set[str]] = {}
    spec = pod.get("spec") or {}
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = container.get("resources") or {}
        requests = {k: parse_quantity(v) for k, v in (resources.get("requests") or {}).items()}
        limits = {k: parse_quantity(v) for k, v in (resources.get("limits") or {}).items()}
        have = set(_compute_usage(requests, limits, {}))
        for name in required - have:
            missing.setdefault(name, set()).add(str(container.get("name", "")))
    if not missing:
        return None
    return "; ".join(f"must specify {name} for: {','.join(sorted(missing[name]))}"
                     for name in sorted(missing))


def admit(plural: str, group: str, obj: Obj, quotas: Iterable[tuple[Obj, Usage]]) -> str | None:
    """None, or why the create is refused (the text after `pods "x" is forbidden: `). `quotas` are the
    namespace's quotas with their current used amounts, in name order."""
    pod = plural == "pods" and not group
    delta = pod_usage(obj) if pod else object_usage(plural, group, obj)
    delta = {k: v for k, v in delta.items() if v.value != 0}
    for quota, current in quotas:
        if not matches(quota, plural, obj):
            continue
        name = quota["metadata"]["name"]
        hard = hard_of(quota)
        if pod:
            why = _missing(obj, set(hard))
            if why is not None:
                return f"failed quota: {name}: {why}"
        requested = {k: v for k, v in delta.items() if k in hard}
        exceeded = sorted(k for k, v in requested.items()
                          if (current[k].value if k in current else 0) + v.value > hard[k].value)
        if exceeded:
            return (f"exceeded quota: {name}, requested: {_pretty({k: requested[k] for k in exceeded})}, "
                    f"used: {_pretty({k: current[k] for k in exceeded if k in current})}, "
                    f"limited: {_pretty({k: hard[k] for k in exceeded})}")
    return None


def status_of(quota: Obj, usage: Mapping[str, Amount]) -> dict[str, Any]:
    """The quota's status as the controller writes it: hard and used, in canonical form."""
    hard = {name: str(amount) for name, amount in sorted(hard_of(quota).items())}
    return {"hard": hard, "used": {name: str(amount) for name, amount in sorted(usage.items())}}
