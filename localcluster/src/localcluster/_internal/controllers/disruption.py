"""PodDisruptionBudgets, pure: the disruption controller's status and the eviction subresource's verdict.

Followed (kubernetes v1.37):
- pkg/controller/disruption/disruption.go: trySync (getPodsForPdb, getExpectedPodCount with
  getExpectedScale, buildDisruptedPodMap, countHealthyPods, updatePdbStatus), failSafe (SyncFailed), the
  events NoPods, UnmanagedPods, CalculateExpectedPodCountFailed; DeletionTimeout 2 min.
- k8s.io/component-helpers/apps/poddisruptionbudget: the DisruptionAllowed condition (SufficientPods,
  InsufficientPods).
- pkg/registry/core/pod/storage/eviction.go: canIgnorePDB, more than one PDB (500), unready pods and
  unhealthyPodEvictionPolicy, checkAndDecrement (429 `Cannot evict pod as it would violate the pod's
  disruption budget.` with a DisruptionBudget cause), the DisruptionTarget condition
  (EvictionByEvictionAPI) set before the pod is deleted.

A budget's percentage, or maxUnavailable, needs the pods' controllers' scale: no kind this cluster serves has
a scale subresource (a Job has none, as upstream), so such a budget over controlled pods fails its sync with
upstream's message; an integer minAvailable counts the pods themselves.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from localcluster._internal.apimachinery import labelselector
from localcluster._internal.controllers.jobs import format_time, is_ready, parse_time

Obj = dict[str, Any]
PDBS = "poddisruptionbudgets.policy"
DELETION_TIMEOUT = 120.0
MAX_DISRUPTED_PODS = 2000
CONDITION = "DisruptionAllowed"
EVICTION_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."
DISRUPTION_TARGET = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                     "message": "Eviction API: evicting"}
# (apiVersion, kind) of an owner -> "resource.group" when served, None when no such kind is served
ResolveKind = Callable[[str, str], str | None]


class ScaleError(Exception):
    """getExpectedScale's error: the budget cannot be computed."""


def selects(pdb: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """A null selector selects nothing, {} every pod of the namespace (policy/v1)."""
    meta, pod_meta = pdb.get("metadata") or {}, pod.get("metadata") or {}
    if meta.get("namespace") != pod_meta.get("namespace"):
        return False
    return labelselector.matches((pdb.get("spec") or {}).get("selector"), pod_meta.get("labels"))


def _controller(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    return next((r for r in (pod.get("metadata") or {}).get("ownerReferences") or [] if r.get("controller")),
                None)


def _expected_scale(pods: Sequence[Mapping[str, Any]], resolve: ResolveKind) -> tuple[int, list[str]]:
    unmanaged: list[str] = []
    seen: set[str] = set()
    for pod in pods:
        ref = _controller(pod)
        if ref is None:
            unmanaged.append(str(pod["metadata"]["name"]))
            continue
        if ref.get("uid") in seen:
            continue
        api_version, kind = str(ref.get("apiVersion") or ""), str(ref.get("kind") or "")
        served = resolve(api_version, kind)
        if served is None:
            group, _, version = api_version.rpartition("/")
            raise ScaleError(f'no matches for kind "{kind}" in version "{group}/{version}"'
                             if group else f'no matches for kind "{kind}" in version "{version}"')
        raise ScaleError(f"{served} does not implement the scale subresource")
    return 0, unmanaged


def _scaled(value: int | str, total: int, round_up: bool) -> int:
    if isinstance(value, int):
        return value
    fraction = int(value.rstrip("%")) * total / 100
    return math.ceil(fraction) if round_up else math.floor(fraction)


def expected_counts(pdb: Mapping[str, Any], pods: Sequence[Mapping[str, Any]],
                    resolve: ResolveKind) -> tuple[int, int, list[str]]:
    """getExpectedPodCount: (expectedCount, desiredHealthy, unmanaged pods); raises ScaleError."""
    spec = pdb.get("spec") or {}
    high, low = spec.get("maxUnavailable"), spec.get("minAvailable")
    if high is not None:
        expected, unmanaged = _expected_scale(pods, resolve)
        return expected, max(0, expected - _scaled(high, expected, True)), unmanaged
    if isinstance(low, int):
        return len(pods), low, []
    if isinstance(low, str):
        expected, unmanaged = _expected_scale(pods, resolve)
        return expected, _scaled(low, expected, True), unmanaged
    return 0, 0, []


def set_condition(conditions: list[Obj], status: str, reason: str, message: str, generation: int,
                  now: float) -> list[Obj]:
    """apimeta.SetStatusCondition for DisruptionAllowed: the transition time moves only with the status."""
    out = [dict(c) for c in conditions]
    for c in out:
        if c.get("type") == CONDITION:
            if c.get("status") != status:
                c["lastTransitionTime"] = format_time(now)
            c.update(status=status, reason=reason, message=message, observedGeneration=generation)
            return out
    out.append({"type": CONDITION, "status": status, "observedGeneration": generation,
                "lastTransitionTime": format_time(now), "reason": reason, "message": message})
    return out


def allowed_condition(status: Obj, now: float) -> None:
    """UpdateDisruptionAllowedCondition."""
    generation = int(status.get("observedGeneration") or 0)
    if int(status.get("disruptionsAllowed") or 0) > 0:
        status["conditions"] = set_condition(status.get("conditions") or [], "True", "SufficientPods", "",
                                             generation, now)
    else:
        status["conditions"] = set_condition(status.get("conditions") or [], "False", "InsufficientPods", "",
                                             generation, now)


@dataclass(frozen=True)
class Sync:
    status: Obj
    events: tuple[tuple[str, str, str], ...] = ()   # (type, reason, message) on the budget
    recheck_after: float | None = None


def sync(pdb: Mapping[str, Any], namespace_pods: Sequence[Mapping[str, Any]], *, now: float,
         resolve: ResolveKind) -> Sync:
    """trySync, or failSafe when the expected count cannot be computed."""
    pods = [p for p in namespace_pods if selects(pdb, p)]
    events: list[tuple[str, str, str]] = []
    if not pods:
        events.append(("Normal", "NoPods", "No matching pods found"))
    generation = int((pdb.get("metadata") or {}).get("generation") or 1)
    old: Obj = copy.deepcopy(pdb.get("status") or {})
    try:
        expected, desired, unmanaged = expected_counts(pdb, pods, resolve)
    except ScaleError as error:
        events.append(("Warning", "CalculateExpectedPodCountFailed",
                       f"Failed to calculate the number of expected pods: {error}"))
        old["disruptionsAllowed"] = 0
        old["conditions"] = set_condition(old.get("conditions") or [], "False", "SyncFailed", str(error),
                                          int(old.get("observedGeneration") or 0), now)
        return Sync(old, tuple(events))
    if unmanaged:
        selector = (pdb.get("spec") or {}).get("selector")
        events.append(("Warning", "UnmanagedPods",
                       f"Pods selected by this PodDisruptionBudget (selector: {selector}) were found to "
                       "be unmanaged. As a result, the status of the PDB cannot be calculated correctly, "
                       "which may result in undefined behavior. To account for these pods please set "
                       '".spec.minAvailable" field of the PDB to an integer value.'))
    disrupted: dict[str, str] = {}
    recheck: float | None = None
    for pod in pods:
        name = str(pod["metadata"]["name"])
        when = parse_time((old.get("disruptedPods") or {}).get(name))
        if pod["metadata"].get("deletionTimestamp") or when is None:
            continue
        if when + DELETION_TIMEOUT >= now:
            disrupted[name] = format_time(when)
            recheck = when + DELETION_TIMEOUT if recheck is None else min(recheck, when + DELETION_TIMEOUT)
    healthy = sum(1 for p in pods if not p["metadata"].get("deletionTimestamp")
                  and p["metadata"]["name"] not in disrupted and is_ready(p))
    allowed = healthy - desired
    if expected <= 0 or allowed <= 0:
        allowed = 0
    status: Obj = {}
    if disrupted:
        status["disruptedPods"] = disrupted
    status.update(disruptionsAllowed=allowed, currentHealthy=healthy, desiredHealthy=desired,
                  expectedPods=expected, observedGeneration=generation,
                  conditions=copy.deepcopy(old.get("conditions") or []))
    allowed_condition(status, now)
    return Sync(status, tuple(events), None if recheck is None else max(0.0, recheck - now))


# ---- the eviction subresource ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Verdict:
    """What an eviction does: refuse (`code`, `reason`, `message`, `causes`, `retry_after`), or delete the
    pod, after writing `pdb_status` to budget `pdb_name` when it took one of its disruptions."""

    code: int = 0
    reason: str = ""
    message: str = ""
    causes: tuple[Obj, ...] = ()
    retry_after: int = 0
    pdb_name: str = ""
    pdb_status: Obj | None = None

    @property
    def allowed(self) -> bool:
        return self.code == 0


def can_ignore_budget(pod: Mapping[str, Any]) -> bool:
    """canIgnorePDB: a pod that is terminal, pending or already being deleted disrupts nothing more."""
    phase = (pod.get("status") or {}).get("phase")
    deleting = bool((pod.get("metadata") or {}).get("deletionTimestamp"))
    return phase in ("Succeeded", "Failed", "Pending") or deleting


def too_many(name: str, message: str, retry_after: int) -> Verdict:
    cause = {"reason": "DisruptionBudget", "message": message}
    return Verdict(429, "TooManyRequests", EVICTION_MESSAGE, (cause,), retry_after, name)


def evict(pod: Mapping[str, Any], pdbs: Sequence[Mapping[str, Any]], *, now: float, dry_run: bool) -> Verdict:
    if can_ignore_budget(pod):
        return Verdict()
    matching = [b for b in pdbs if selects(b, pod)]
    if len(matching) > 1:
        return Verdict(500, "", "This pod has more than one PodDisruptionBudget, which the eviction "
                                "subresource does not support.")
    if not matching:
        return Verdict()
    pdb = matching[0]
    name = str(pdb["metadata"]["name"])
    status: Obj = copy.deepcopy(pdb.get("status") or {})
    if not is_ready(pod):
        if (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
            return Verdict(pdb_name=name)
        desired = int(status.get("desiredHealthy") or 0)
        if int(status.get("currentHealthy") or 0) >= desired and desired > 0:
            return Verdict(pdb_name=name)
    if int(status.get("observedGeneration") or 0) < int(pdb["metadata"].get("generation") or 1):
        return too_many(name, f"The disruption budget {name} is still being processed by the server.", 10)
    allowed = int(status.get("disruptionsAllowed") or 0)
    if allowed < 0:
        return Verdict(403, "Forbidden", f'poddisruptionbudgets.policy "{name}" is forbidden: pdb '
                                         "disruptions allowed is negative", pdb_name=name)
    if len(status.get("disruptedPods") or {}) > MAX_DISRUPTED_PODS:
        return Verdict(403, "Forbidden", f'poddisruptionbudgets.policy "{name}" is forbidden: DisruptedPods '
                                         "map too big - too many evictions not confirmed by PDB controller",
                       pdb_name=name)
    if allowed == 0:
        return too_many(name, f"The disruption budget {name} needs {int(status.get('desiredHealthy') or 0)} "
                              f"healthy pods and has {int(status.get('currentHealthy') or 0)} currently", 0)
    status["disruptionsAllowed"] = allowed - 1
    if allowed - 1 == 0:
        allowed_condition(status, now)
    if dry_run:
        return Verdict(pdb_name=name)
    status.setdefault("disruptedPods", {})[str(pod["metadata"]["name"])] = format_time(now)
    return Verdict(pdb_name=name, pdb_status=status)


def disruption_target(conditions: Sequence[Mapping[str, Any]], now: float) -> list[Obj]:
    """podutil.UpdatePodCondition with DisruptionTarget: the transition time moves only with the status."""
    out = [dict(c) for c in conditions]
    for c in out:
        if c.get("type") == "DisruptionTarget":
            moved = c.get("status") != "True"
            c.update(DISRUPTION_TARGET)
            if moved or not c.get("lastTransitionTime"):
                c["lastTransitionTime"] = format_time(now)
            return out
    out.append({**DISRUPTION_TARGET, "lastProbeTime": None, "lastTransitionTime": format_time(now)})
    return out
