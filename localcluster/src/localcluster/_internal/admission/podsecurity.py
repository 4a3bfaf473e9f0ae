"""Pod Security admission (k8s.io/pod-security-admission/admission) as the API server runs it, pure.

A namespace's labels choose a level per mode, falling back to the cluster's defaults (the admission
configuration's; privileged unless `ClusterSpec.pod_security_defaults` says otherwise):

    pod-security.kubernetes.io/enforce: privileged | baseline | restricted   (enforce-version: v1.N | latest)
    pod-security.kubernetes.io/warn:    ...                                    (warn-version)
    pod-security.kubernetes.io/audit:   ...                                    (audit-version)

- enforce: a pod that violates the level is refused, 403 `pods "x" is forbidden: violates PodSecurity
  "restricted:latest": allowPrivilegeEscalation != false (container "x" must set ...), ...`;
- warn: the create succeeds and the answer carries `Warning: 299 - "would violate PodSecurity ..."`, which
  kubectl prints as `Warning: would violate PodSecurity ...` (not added when the request is refused anyway);
- audit: there is no audit log; the violation is written to the server's log instead.
An unparsable enforce label enforces restricted:latest (fail closed); a bad warn or audit level is privileged.
Namespace creates and label updates with a bad value are refused 422; raising a namespace's enforce level
answers warnings naming the existing pods that would now be refused (upstream's dry run).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from localcluster._internal.admission import podsecuritychecks as b
from localcluster._internal.admission import podsecurityrestricted as r
from localcluster._internal.admission.podsecuritychecks import CheckFn, Obj, Result
from localcluster._internal.apimachinery.fielderrors import Cause, invalid

Version = tuple[int, int]           # (1, minor); LATEST is newer than any
LATEST: Version = (1, 1_000_000)
PRIVILEGED, BASELINE, RESTRICTED = "privileged", "baseline", "restricted"
LEVELS = (PRIVILEGED, BASELINE, RESTRICTED)
MODES = ("enforce", "audit", "warn")
LABEL_PREFIX = "pod-security.kubernetes.io/"
_VERSION = re.compile(r"v1\.(0|[1-9][0-9]*)")


# ---- the checks, versioned and ordered as upstream's registry (policy/registry.go) -------------------------
@dataclass(frozen=True)
class Check:
    id: str
    level: str
    versions: tuple[tuple[Version, CheckFn], ...]   # (minimum version, check), increasing
    overrides: tuple[str, ...] = ()                  # baseline checks this restricted check replaces

    def at(self, version: Version) -> CheckFn | None:
        found = None
        for minimum, fn in self.versions:
            if minimum <= version:
                found = fn
        return found


CHECKS: tuple[Check, ...] = (
    Check("appArmorProfile", BASELINE, (((1, 0), b.app_armor),)),
    Check("capabilities_baseline", BASELINE, (((1, 0), b.capabilities_baseline),)),
    Check("hostNamespaces", BASELINE, (((1, 0), b.host_namespaces),)),
    Check("hostPathVolumes", BASELINE, (((1, 0), b.host_path_volumes),)),
    Check("hostPorts", BASELINE, (((1, 0), b.host_ports),)),
    Check("hostProbesAndHostLifecycle", BASELINE, (((1, 34), b.host_probes),)),
    Check("privileged", BASELINE, (((1, 0), b.privileged),)),
    Check("procMount_baseline", BASELINE, (((1, 0), b.proc_mount),)),
    Check("seLinuxOptions", BASELINE, (((1, 0), b.se_linux),)),
    Check("seccompProfile_baseline", BASELINE,
          (((1, 0), b.seccomp_annotations), ((1, 19), b.seccomp_baseline))),
    Check("sysctls", BASELINE, (((1, 0), b.sysctls),)),
    Check("allowPrivilegeEscalation", RESTRICTED,
          (((1, 8), r.allow_privilege_escalation),
           ((1, 25), r.not_on_windows(r.allow_privilege_escalation)))),
    Check("capabilities_restricted", RESTRICTED, (((1, 22), r.capabilities_restricted),
                                                  ((1, 25), r.not_on_windows(r.capabilities_restricted))),
          overrides=("capabilities_baseline",)),
    Check("restrictedVolumes", RESTRICTED, (((1, 0), r.restricted_volumes),), overrides=("hostPathVolumes",)),
    Check("runAsNonRoot", RESTRICTED, (((1, 0), r.run_as_non_root),)),
    Check("runAsUser", RESTRICTED, (((1, 23), r.run_as_user),)),
    Check("seccompProfile_restricted", RESTRICTED, (((1, 19), r.seccomp_restricted),
                                                    ((1, 25), r.not_on_windows(r.seccomp_restricted)))),
)


def checks_for(level: str, version: Version) -> list[CheckFn]:
    """The checks a level runs at a policy version: the newest version of each check whose minimum is at most
    that version; baseline checks sorted by ID, then restricted ones (Go's byte order), less those a
    restricted check overrides. This is the order of the reasons in the 403 message."""
    if level not in (BASELINE, RESTRICTED):
        return []
    ordered = sorted((c for c in CHECKS if c.level == BASELINE), key=lambda c: c.id.encode())
    overridden: set[str] = set()
    if level == RESTRICTED:
        mine = sorted((c for c in CHECKS if c.level == RESTRICTED), key=lambda c: c.id.encode())
        overridden = {o for c in mine if c.at(version) is not None for o in c.overrides}
        ordered += mine
    return [fn for c in ordered if c.id not in overridden and (fn := c.at(version)) is not None]


def evaluate(level: str, version: Version, meta: Obj, spec: Obj) -> list[Result]:
    """Every forbidden (reason, detail) of the pod at that level and version; empty when it passes."""
    return [found for fn in checks_for(level, version) if (found := fn(meta, spec)) is not None]


def forbidden_detail(results: Sequence[Result]) -> str:
    """`reason (detail), reason (detail)`, as AggregateCheckResult.ForbiddenDetail writes it."""
    return ", ".join(f"{reason} ({detail})" if detail else reason for reason, detail in results)


@dataclass(frozen=True)
class LevelVersion:
    level: str = PRIVILEGED
    version: Version = LATEST

    def __str__(self) -> str:
        version = "latest" if self.version == LATEST else f"v{self.version[0]}.{self.version[1]}"
        return f"{self.level}:{version}"


@dataclass(frozen=True)
class Policy:
    enforce: LevelVersion = LevelVersion()
    audit: LevelVersion = LevelVersion()
    warn: LevelVersion = LevelVersion()

    def of(self, mode: str) -> LevelVersion:
        value: LevelVersion = getattr(self, mode)
        return value

    @property
    def privileged(self) -> bool:
        return all(self.of(mode).level == PRIVILEGED for mode in MODES)


PRIVILEGED_POLICY = Policy()


def _parse_version(text: str) -> Version | None:
    if text == "latest":
        return LATEST
    match = _VERSION.fullmatch(text)
    return (1, int(match.group(1))) if match else None


def policy_of(labels: Mapping[str, str], defaults: Policy = PRIVILEGED_POLICY) -> tuple[Policy, list[Cause]]:
    """The namespace's policy and, for each label with a bad value, the 422 cause upstream names."""
    levels = {mode: defaults.of(mode) for mode in MODES}
    causes: list[Cause] = []
    for mode in ("enforce", "audit", "warn"):  # upstream's order, which is also its causes' order
        key = LABEL_PREFIX + mode
        if key in labels:
            value = labels[key]
            if value in LEVELS:
                levels[mode] = LevelVersion(value, levels[mode].version)
            else:
                causes.append(invalid(f"metadata.labels[{key}]", value,
                                      "must be one of privileged, baseline, restricted"))
                # fail closed for enforce, open for audit and warn
                levels[mode] = LevelVersion(RESTRICTED if mode == "enforce" else PRIVILEGED,
                                            levels[mode].version)
        version_key = f"{key}-version"
        if version_key in labels:
            version = _parse_version(labels[version_key])
            if version is None:
                causes.append(invalid(f"metadata.labels[{version_key}]", labels[version_key],
                                      'must be "latest" or "v1.x"'))
                version = LATEST
            levels[mode] = LevelVersion(levels[mode].level, version)
    return Policy(**levels), causes


def parse_defaults(text: str) -> dict[str, str]:
    """`enforce=baseline,warn=restricted` (what `localcluster up --pod-security` takes) as a mapping; raises
    ValueError naming the bad part. Checked again, key by key, by defaults_from."""
    settings: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ValueError(f"pod security default {part!r}: expected MODE=LEVEL, e.g. enforce=baseline")
        settings[key.strip()] = value.strip()
    defaults_from(settings)
    return settings


def defaults_from(settings: Mapping[str, str]) -> Policy:
    """The cluster's defaults from `{"enforce": "baseline", "warn": "restricted", "warn-version": "v1.30"}`;
    raises ValueError naming a bad key or value (the admission configuration is checked when the server
    starts)."""
    for key, value in settings.items():
        mode = key.removesuffix("-version")
        if mode not in MODES:
            raise ValueError(f"pod security default {key!r}: the keys are enforce, audit, warn and their "
                             "-version forms")
        if policy_of({LABEL_PREFIX + key: value})[1]:
            expected = ('"latest" or "v1.x"' if key.endswith("-version")
                        else "privileged, baseline or restricted")
            raise ValueError(f"pod security default {key}={value}: expected {expected}")
    return policy_of({LABEL_PREFIX + key: value for key, value in settings.items()})[0]


def _violations(level: LevelVersion, pod: Mapping[str, Any]) -> list[tuple[str, str]]:
    if level.level == PRIVILEGED:
        return []
    return evaluate(level.level, level.version, pod.get("metadata") or {}, pod.get("spec") or {})


@dataclass(frozen=True)
class Verdict:
    """What admission says of one pod: `forbidden` is the 403 message (None: allowed); `warnings` go back as
    Warning headers; `audit` is the audit annotation upstream would record."""

    forbidden: str | None = None
    warnings: tuple[str, ...] = ()
    audit: str | None = None


def admit_pod(pod: Mapping[str, Any], name: str, policy: Policy) -> Verdict:
    if policy.privileged:
        return Verdict()
    forbidden = None
    found = _violations(policy.enforce, pod)
    if found:
        forbidden = (f'pods "{name}" is forbidden: violates PodSecurity "{policy.enforce}": '
                     f"{forbidden_detail(found)}")
    audit = None
    found = _violations(policy.audit, pod)
    if found:
        audit = f'would violate PodSecurity "{policy.audit}": {forbidden_detail(found)}'
    warnings: tuple[str, ...] = ()
    if forbidden is None:
        found = _violations(policy.warn, pod)
        if found:
            warnings = (f'would violate PodSecurity "{policy.warn}": {forbidden_detail(found)}',)
    return Verdict(forbidden, warnings, audit)


def significant_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """Whether a pod update is evaluated again: upstream looks at images and seccomp annotations only."""
    key = "seccomp.security.alpha.kubernetes.io/pod"
    new_notes = (new.get("metadata") or {}).get("annotations") or {}
    old_notes = (old.get("metadata") or {}).get("annotations") or {}
    if new_notes.get(key) != old_notes.get(key):
        return True
    for field in ("containers", "initContainers", "ephemeralContainers"):
        ours = (new.get("spec") or {}).get(field) or []
        theirs = (old.get("spec") or {}).get(field) or []
        if [c.get("image") for c in ours] != [c.get("image") for c in theirs]:
            return True
        for c in ours:
            container_key = "container.seccomp.security.alpha.kubernetes.io/" + str(c.get("name", ""))
            if new_notes.get(container_key) != old_notes.get(container_key):
                return True
    return False


def _stricter(a: str, b: str) -> bool:
    return LEVELS.index(a) > LEVELS.index(b)


def namespace_update_warnings(namespace: str, new: Policy, old: Policy,
                              pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """Upstream's dry run when a namespace's enforce level rises: which existing pods it would refuse."""
    if new.enforce == old.enforce or new.enforce.level == PRIVILEGED:
        return []
    if new.enforce.version == old.enforce.version and not _stricter(new.enforce.level, old.enforce.level):
        return []
    first: dict[str, tuple[str, int]] = {}  # reasons -> (lexically first pod name, how many pods)
    order: list[str] = []
    for pod in pods:
        found = _violations(new.enforce, pod)
        if not found:
            continue
        reasons = ", ".join(reason for reason, _ in found)
        name = str((pod.get("metadata") or {}).get("name", ""))
        if reasons not in first:
            order.append(reasons)
            first[reasons] = (name, 1)
        else:
            seen, count = first[reasons]
            first[reasons] = (min(seen, name), count + 1)
    if not order:
        return []
    decorated = []
    for reasons in order:
        name, count = first[reasons]
        others = {1: "", 2: " (and 1 other pod)"}.get(count, f" (and {count - 1} other pods)")
        decorated.append(f"{name}{others}: {reasons}")
    return [f'existing pods in namespace "{namespace}" violate the new PodSecurity enforce level '
            f'"{new.enforce}"', *sorted(decorated)]

