"""Whether a job's pods fit the namespace a platform team hands out: its LimitRanges, ResourceQuotas, Pod
Security level and (OpenShift) UID range. Pure: placing.namespace_policies reads the objects.

The API server applies these in order (kube-apiserver v1.31: mutating admission, validation, validating
admission): a LimitRange's `default` limits and `defaultRequest`s land on every container that sets none;
then requests above limits are invalid (`must be less than or equal to cpu limit of 1`); then LimitRange
min/max/maxLimitRequestRatio, Pod Security, and the quota (which refuses a pod without a limit the quota
counts: "must specify limits.cpu"). So a job pod that requests 10 cpu and leaves cpu unlimited dies in a
namespace whose LimitRange defaults the cpu limit to 1.

The rule (`shape`): **a container that requests cpu or memory and sets no limit for it gets limit =
request when a LimitRange default or a `limits.*` quota would otherwise decide that limit for it.**
A limit the pod template sets is kept. (Without either, cpu stays unlimited, as docs/real-cluster.md says:
a CPU limit throttles the input pipeline.) In a namespace with OpenShift's UID range
(`openshift.io/sa.scc.uid-range`), the manager's fixed runAsUser, runAsGroup and fsGroup are dropped: the
SCC assigns them, and refuses others.

Then `problems` says what the server would refuse of a pod (exit 2, naming the LimitRange or the label,
the field and both numbers), and `quota_shortfalls` what the gang needs of each quota against its hard
limit (never fits: exit 2) and against what is left of it now (exit 3, or wait).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from distributetrain.errors import InvalidQuantity
from distributetrain.placement.podrequests import pod_requests
from distributetrain.quantity import format_quantity, parse_quantity

UID_RANGE = "openshift.io/sa.scc.uid-range"
ENFORCE = "pod-security.kubernetes.io/enforce"
SHAPED = ("cpu", "memory")
BINARY = frozenset({"memory", "ephemeral-storage"})
# the objects a job creates besides its pods, as a quota counts them
JOB_OBJECTS = {"secrets": 1, "configmaps": 1}


@dataclass(frozen=True)
class NamespacePolicies:
    """What a namespace asks of pods: its LimitRanges and ResourceQuotas (with status.used), its Pod Security
    enforce level, and OpenShift's UID range when it has one."""

    namespace: str
    limit_ranges: tuple[Mapping[str, Any], ...] = ()
    quotas: tuple[Mapping[str, Any], ...] = ()
    enforce: str = "privileged"
    uid_range: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)

    @staticmethod
    def of(namespace: str, namespace_object: Mapping[str, Any] | None,
           limit_ranges: Iterable[Mapping[str, Any]],
           quotas: Iterable[Mapping[str, Any]]) -> NamespacePolicies:
        meta = (namespace_object or {}).get("metadata") or {}
        labels = dict(meta.get("labels") or {})
        by_name = sorted(limit_ranges, key=_name)
        return NamespacePolicies(namespace=namespace, limit_ranges=tuple(by_name),
                                 quotas=tuple(sorted(quotas, key=_name)),
                                 enforce=labels.get(ENFORCE, "privileged"),
                                 uid_range=(meta.get("annotations") or {}).get(UID_RANGE), labels=labels)

    def limits_counted(self) -> set[str]:
        """The resources whose limit some quota counts (`limits.cpu`)."""
        return {key[len("limits."):] for q in self.quotas for key in _hard(q) if key.startswith("limits.")}

    def default_limits(self) -> dict[str, tuple[str, str]]:
        """resource -> (LimitRange name, default limit) from the Container items."""
        out: dict[str, tuple[str, str]] = {}
        for limit_range, item in _items(self.limit_ranges, "Container"):
            for name, value in (item.get("default") or {}).items():
                out[name] = (_name(limit_range), str(value))
            for name, value in (item.get("max") or {}).items():  # a max with no default is the default
                out.setdefault(name, (_name(limit_range), str(value)))
        return out

    def describe(self) -> list[str]:
        """One line per policy, for the manager's log."""
        lines = []
        for limit_range in self.limit_ranges:
            parts = []
            for item in (limit_range.get("spec") or {}).get("limits") or []:
                for key in ("default", "defaultRequest", "min", "max", "maxLimitRequestRatio"):
                    if item.get(key):
                        values = ", ".join(f"{k}={v}" for k, v in sorted(item[key].items()))
                        parts.append(f"{item.get('type')} {key} {values}")
            lines.append(f"LimitRange {self.namespace}/{_name(limit_range)}: {'; '.join(parts) or 'empty'}")
        for quota in self.quotas:
            used = (quota.get("status") or {}).get("used") or {}
            listed = ", ".join(f"{k} {used.get(k, '0')}/{v}" for k, v in sorted(_hard(quota).items()))
            lines.append(f"ResourceQuota {self.namespace}/{_name(quota)} (used/hard): {listed or 'empty'}")
        lines.append(f"Pod Security: enforce={self.enforce}"
                     + (f"; OpenShift UID range {self.uid_range} (the SCC assigns the pods' UID)"
                        if self.uid_range else ""))
        return lines


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _hard(quota: Mapping[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in ((quota.get("spec") or {}).get("hard") or {}).items()}


Item = tuple[Mapping[str, Any], Mapping[str, Any]]


def _items(ranges: Iterable[Mapping[str, Any]], kind: str) -> Iterable[Item]:
    for limit_range in ranges:
        for item in (limit_range.get("spec") or {}).get("limits") or []:
            if item.get("type") == kind:
                yield limit_range, item


def _text(name: str, amount: Fraction) -> str:
    if name in BINARY and amount.denominator == 1:
        value = int(amount)
        for unit, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if value and value % size == 0:
                return f"{value // size}{unit}"
        return str(value)
    return format_quantity(amount)


def _containers(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    spec = pod.get("spec") or {}
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


# ---- shaping -----------------------------------------------------------------------------------------------
def shape(pod: Mapping[str, Any], policies: NamespacePolicies | None, *, image_uid: int | None = None
          ) -> dict[str, Any]:
    """`pod` made to fit the namespace (see the module's rule); a copy, `pod` unchanged."""
    out = copy.deepcopy(dict(pod))
    if policies is None:
        return out
    needed = (set(policies.default_limits()) | policies.limits_counted()) & set(SHAPED)
    for container in _containers(out):
        resources = container.setdefault("resources", {})
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        for name in sorted(needed):
            if name in requests and name not in limits:
                resources.setdefault("limits", {})[name] = requests[name]
    if policies.uid_range:
        context = (out.get("spec") or {}).get("securityContext") or {}
        for key in ("runAsUser", "runAsGroup", "fsGroup"):
            if image_uid is None or context.get(key) == image_uid:
                context.pop(key, None)
    return out


def with_defaults(pod: Mapping[str, Any], policies: NamespacePolicies) -> dict[str, Any]:
    """The pod as the LimitRanger plugin leaves it: each container's missing limits and requests from the
    Container items (later LimitRanges win), a missing request from the limit (validation's defaulting)."""
    out = copy.deepcopy(dict(pod))
    defaults: dict[str, Any] = {}
    default_requests: dict[str, Any] = {}
    for _, item in _items(policies.limit_ranges, "Container"):
        defaults.update(item.get("default") or {})
        defaults.update({k: v for k, v in (item.get("max") or {}).items() if k not in defaults})
        default_requests.update(item.get("defaultRequest") or {})
    for container in _containers(out):
        resources = container.setdefault("resources", {})
        for name, value in defaults.items():
            resources.setdefault("limits", {}).setdefault(name, value)
        for name, value in default_requests.items():
            resources.setdefault("requests", {}).setdefault(name, value)
        for name, value in (resources.get("limits") or {}).items():
            resources.setdefault("requests", {}).setdefault(name, value)
    return out


# ---- what the server would refuse of one pod ---------------------------------------------------------------
def problems(pod: Mapping[str, Any], policies: NamespacePolicies, *, what: str) -> list[str]:
    """Every refusal the namespace's policies would give `pod` (already shaped): requests above limits after
    the LimitRange defaults, min/max/ratio, a quota-counted limit that is missing, the Pod Security level.
    `what` names the pod in the messages ("the worker of 4 GPUs")."""
    ns = policies.namespace
    admitted = with_defaults(pod, policies)
    found: list[str] = []
    for container in _containers(admitted):
        resources = container.get("resources") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        where = f"container {container.get('name')} of {what}"
        for name in sorted(set(requests) & set(limits)):
            request, limit = _amount(requests[name]), _amount(limits[name])
            if request > limit:
                found.append(f"{where}: requests {name} {_text(name, request)}, above the limit of "
                             f"{_text(name, limit)} the namespace's LimitRange defaults it to; give the "
                             f"container a {name} limit in the pod template")
        for limit_range, item in _items(policies.limit_ranges, "Container"):
            found += [f"LimitRange {ns}/{_name(limit_range)}: {m} ({where})"
                      for m in _bounds("Container", item, requests, limits)]
    pod_requests_now = {k: v for k, v in pod_requests(admitted).items()}
    pod_limits = _pod_limits(admitted)
    for limit_range, item in _items(policies.limit_ranges, "Pod"):
        found += [f"LimitRange {ns}/{_name(limit_range)}: {m} ({what})"
                  for m in _bounds("Pod", item, _texts(pod_requests_now), _texts(pod_limits))]
    for quota in policies.quotas:
        for key in sorted(_hard(quota)):
            if key.startswith("limits."):
                name = key[len("limits."):]
                bare = [c.get("name") for c in _containers(admitted)
                        if name not in ((c.get("resources") or {}).get("limits") or {})]
                if bare:
                    names = ", ".join(str(b) for b in bare)
                    found.append(f"ResourceQuota {ns}/{_name(quota)}: must specify {key}, and container(s) "
                                 f"{names} of {what} set no {name} limit; give them one in the pod template")
    found += _pod_security(admitted, policies, what)
    return found


def _amount(value: Any) -> Fraction:
    try:
        return parse_quantity(value)
    except InvalidQuantity:
        return Fraction(0)


def _texts(amounts: Mapping[str, Fraction]) -> dict[str, str]:
    return {k: _text(k, v) for k, v in amounts.items()}


def _pod_limits(pod: Mapping[str, Any]) -> dict[str, Fraction]:
    """The pod's limits as LimitRange's Pod items sum them: the containers' sum, or an init container's
    largest, whichever is larger (a container without a limit counts nothing)."""
    spec = pod.get("spec") or {}
    total: dict[str, Fraction] = {}
    for container in spec.get("containers") or []:
        for name, value in ((container.get("resources") or {}).get("limits") or {}).items():
            total[name] = total.get(name, Fraction(0)) + _amount(value)
    for container in spec.get("initContainers") or []:
        for name, value in ((container.get("resources") or {}).get("limits") or {}).items():
            total[name] = max(total.get(name, Fraction(0)), _amount(value))
    return total


def _bounds(kind: str, item: Mapping[str, Any], requests: Mapping[str, Any], limits: Mapping[str, Any]
            ) -> list[str]:
    """LimitRanger's min, max and maxLimitRequestRatio checks, in its words and with both numbers."""
    out = []
    for name, floor_text in sorted((item.get("min") or {}).items()):
        floor = _amount(floor_text)
        if name not in requests:
            out.append(f"minimum {name} usage per {kind} is {_text(name, floor)}, but no request is "
                       "specified")
        elif _amount(requests[name]) < floor:
            out.append(f"minimum {name} usage per {kind} is {_text(name, floor)}, but request is "
                       f"{_text(name, _amount(requests[name]))}")
    for name, ceiling_text in sorted((item.get("max") or {}).items()):
        ceiling = _amount(ceiling_text)
        if name not in limits:
            out.append(f"maximum {name} usage per {kind} is {_text(name, ceiling)}, but no limit is "
                       "specified")
        elif _amount(limits[name]) > ceiling:
            out.append(f"maximum {name} usage per {kind} is {_text(name, ceiling)}, but limit is "
                       f"{_text(name, _amount(limits[name]))}")
    for name, ratio_text in sorted((item.get("maxLimitRequestRatio") or {}).items()):
        request, limit = _amount(requests.get(name, 0)), _amount(limits.get(name, 0))
        if request and limit and limit / request > _amount(ratio_text):
            out.append(f"{name} max limit to request ratio per {kind} is {ratio_text}, but provided ratio is "
                       f"{float(limit / request):f}")
    return out


def _pod_security(pod: Mapping[str, Any], policies: NamespacePolicies, what: str) -> list[str]:
    """The few Pod Security checks a pod template can break (the manager's own parts pass `restricted`)."""
    level = policies.enforce
    if level not in ("baseline", "restricted"):
        return []
    label = f"namespace {policies.namespace} ({ENFORCE}={level}) refuses {what}"
    spec = pod.get("spec") or {}
    context = spec.get("securityContext") or {}
    found = [f"{label}: host namespaces ({key}=true)" for key in ("hostNetwork", "hostPID", "hostIPC")
             if spec.get(key)]
    found += [f"{label}: hostPath volume {v.get('name')}" for v in spec.get("volumes") or []
              if "hostPath" in v]
    for container in _containers(pod):
        own = container.get("securityContext") or {}
        if own.get("privileged"):
            found.append(f"{label}: container {container.get('name')} is privileged")
        added = (own.get("capabilities") or {}).get("add") or []
        if level == "restricted":
            beyond = [c for c in added if c != "NET_BIND_SERVICE"]
            non_root = own.get("runAsNonRoot", context.get("runAsNonRoot"))
            user = own.get("runAsUser", context.get("runAsUser"))
            if non_root is not True or user == 0:
                found.append(f"{label}: container {container.get('name')} may run as root (runAsNonRoot "
                             f"{non_root}, runAsUser {user})")
        else:
            beyond = [c for c in added if c not in _BASELINE_CAPABILITIES]
        if beyond:
            found.append(f"{label}: container {container.get('name')} adds capabilities {', '.join(beyond)}")
    return found


_BASELINE_CAPABILITIES = frozenset({"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL",
                                    "MKNOD", "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID",
                                    "SYS_CHROOT"})


# ---- quotas ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Shortfall:
    """One quota resource the gang does not fit: `hard` it never fits under; else only `free` is left now."""

    quota: str
    resource: str
    needed: Fraction
    hard: Fraction
    used: Fraction

    @property
    def never(self) -> bool:
        return self.needed > self.hard

    def message(self, namespace: str) -> str:
        name = self.resource.partition(".")[2] if "." in self.resource else self.resource
        needed, hard, used = (_text(name, v) for v in (self.needed, self.hard, self.used))
        if self.never:
            return (f"ResourceQuota {namespace}/{self.quota}: {self.resource}: the job needs {needed}, the "
                    f"quota allows {hard} in all; ask for less or have the quota raised")
        free = _text(name, max(Fraction(0), self.hard - self.used))
        return (f"ResourceQuota {namespace}/{self.quota}: {self.resource}: the job needs {needed}, {used} of "
                f"{hard} is used, {free} left")


def _applies(quota: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> bool:
    scopes = set((quota.get("spec") or {}).get("scopes") or [])
    if (quota.get("spec") or {}).get("scopeSelector"):
        return False  # a PriorityClass- or attribute-scoped quota: not judged here (docs/real-cluster.md)
    terminating = any((p.get("spec") or {}).get("activeDeadlineSeconds") is not None for p in pods)
    if ("Terminating" in scopes and not terminating) or ("NotTerminating" in scopes and terminating):
        return False
    return "BestEffort" not in scopes  # job pods are never BestEffort


def gang_usage(pods: Sequence[Mapping[str, Any]], *, network_policy: bool) -> dict[str, Fraction]:
    """What creating `pods` (with the job's Secret, hostfile ConfigMap, NetworkPolicy) adds to each quota
    resource name a ResourceQuota may count."""
    usage: dict[str, Fraction] = {}

    def add(key: str, amount: Fraction) -> None:
        usage[key] = usage.get(key, Fraction(0)) + amount

    for pod in pods:
        add("pods", Fraction(1))
        add("count/pods", Fraction(1))
        for name, amount in pod_requests(pod).items():
            add(f"requests.{name}", amount)
            if name in ("cpu", "memory", "ephemeral-storage"):
                add(name, amount)
        for name, amount in _pod_limits(pod).items():
            add(f"limits.{name}", amount)
    for kind, count in JOB_OBJECTS.items():
        add(kind, Fraction(count))
        add(f"count/{kind}", Fraction(count))
    if network_policy:
        add("count/networkpolicies.networking.k8s.io", Fraction(1))
    return usage


def quota_shortfalls(pods: Sequence[Mapping[str, Any]], policies: NamespacePolicies, *,
                     network_policy: bool) -> list[Shortfall]:
    """Each quota resource whose hard limit the gang exceeds (never fits), or whose remainder it exceeds."""
    usage = gang_usage(pods, network_policy=network_policy)
    out = []
    for quota in policies.quotas:
        if not _applies(quota, pods):
            continue
        used_now = (quota.get("status") or {}).get("used") or {}
        for key, hard_text in sorted(_hard(quota).items()):
            needed = usage.get(key)
            if not needed:
                continue
            hard, used = _amount(hard_text), _amount(used_now.get(key, "0"))
            if needed > hard - used:
                out.append(Shortfall(quota=_name(quota), resource=key, needed=needed, hard=hard, used=used))
    return out
