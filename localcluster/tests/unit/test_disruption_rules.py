"""PodDisruptionBudgets and PriorityClasses, pure: the disruption controller's status, the eviction verdict,
their validation, and the Priority admission plugin (kubernetes v1.37's behaviour and words)."""

from __future__ import annotations

from typing import Any

import pytest

from localcluster._internal.admission import disruptionbudgets, priority
from localcluster._internal.controllers import disruption
from localcluster._internal.controllers.disruptioncontroller import served_kind
from localcluster._internal.controllers.jobs import format_time

NOW = 1_800_000_000.0
Obj = dict[str, Any]


def budget(*, generation: int = 1, status: Obj | None = None, **spec: Any) -> Obj:
    spec.setdefault("selector", {"matchLabels": {"app": "train"}})
    return {"metadata": {"name": "train", "namespace": "default", "generation": generation},
            "spec": spec, "status": status or {}}


def pod(name: str, *, ready: bool = True, phase: str = "Running", owner: str | None = "Job",
        labels: Obj | None = None, deleting: bool = False) -> Obj:
    meta: Obj = {"name": name, "namespace": "default", "labels": labels or {"app": "train"}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": owner, "name": "j", "uid": "u",
                                    "controller": True}]
    if deleting:
        meta["deletionTimestamp"] = format_time(NOW)
    ready_condition = {"type": "Ready", "status": "True" if ready else "False"}
    return {"metadata": meta, "status": {"phase": phase, "conditions": [ready_condition]}}


def status_of(pdb: Obj, pods: list[Obj]) -> Obj:
    return disruption.sync(pdb, pods, now=NOW, resolve=served_kind).status


# ---- the status -----------------------------------------------------------------------------------------
def test_an_integer_min_available_counts_the_pods_themselves() -> None:
    status = status_of(budget(minAvailable=1), [pod("a"), pod("b"), pod("c", ready=False)])
    assert status == {"disruptionsAllowed": 1, "currentHealthy": 2, "desiredHealthy": 1, "expectedPods": 3,
                      "observedGeneration": 1, "conditions": [
                          {"type": "DisruptionAllowed", "status": "True", "observedGeneration": 1,
                           "lastTransitionTime": format_time(NOW), "reason": "SufficientPods",
                           "message": ""}]}


def test_no_disruption_is_allowed_below_the_budget() -> None:
    status = status_of(budget(minAvailable=2), [pod("a"), pod("b", deleting=True)])
    assert (status["disruptionsAllowed"], status["currentHealthy"]) == (0, 1)
    assert status["conditions"][0]["reason"] == "InsufficientPods"


def test_a_percentage_over_job_pods_fails_the_sync_as_upstream_without_a_scale_subresource() -> None:
    result = disruption.sync(budget(minAvailable="50%"), [pod("a")], now=NOW, resolve=served_kind)
    condition = result.status["conditions"][0]
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "False", "SyncFailed", "jobs.batch does not implement the scale subresource")
    assert "observedGeneration" not in result.status
    assert ("Warning", "CalculateExpectedPodCountFailed", "Failed to calculate the number of expected pods: "
            "jobs.batch does not implement the scale subresource") in result.events


def test_a_percentage_over_pods_without_controllers_expects_none_and_warns() -> None:
    result = disruption.sync(budget(maxUnavailable="50%"), [pod("a", owner=None)], now=NOW,
                             resolve=served_kind)
    assert (result.status["expectedPods"], result.status["disruptionsAllowed"]) == (0, 0)
    assert [e[1] for e in result.events] == ["UnmanagedPods"]


def test_null_and_empty_selectors_differ() -> None:
    everyone = budget(minAvailable=0)
    everyone["spec"]["selector"] = {}
    nobody = budget(minAvailable=0)
    del nobody["spec"]["selector"]
    other = pod("x", labels={"app": "other"})
    assert status_of(everyone, [other])["expectedPods"] == 1
    assert status_of(nobody, [other])["expectedPods"] == 0


def test_disrupted_pods_stop_counting_as_healthy_until_the_deletion_timeout() -> None:
    pdb = budget(minAvailable=1, status={"disruptedPods": {"a": format_time(NOW - 10)}})
    result = disruption.sync(pdb, [pod("a"), pod("b")], now=NOW, resolve=served_kind)
    assert result.status["currentHealthy"] == 1 and result.recheck_after == pytest.approx(110.0)
    stale = budget(minAvailable=1, status={"disruptedPods": {"a": format_time(NOW - 200)}})
    assert status_of(stale, [pod("a"), pod("b")])["currentHealthy"] == 2


# ---- the eviction verdict ---------------------------------------------------------------------------------
def synced(**spec: Any) -> Obj:
    pdb = budget(**spec)
    pdb["status"] = status_of(pdb, [pod("a"), pod("b")])
    return pdb


def test_an_eviction_without_room_is_429_with_the_budgets_cause() -> None:
    verdict = disruption.evict(pod("a"), [synced(minAvailable=2)], now=NOW, dry_run=False)
    assert (verdict.code, verdict.reason, verdict.message) == (
        429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.")
    cause = {"reason": "DisruptionBudget",
             "message": "The disruption budget train needs 2 healthy pods and has 2 currently"}
    assert verdict.causes == (cause,)


def test_an_allowed_eviction_takes_one_disruption_and_records_the_pod() -> None:
    verdict = disruption.evict(pod("a"), [synced(minAvailable=1)], now=NOW, dry_run=False)
    assert verdict.allowed and verdict.pdb_status is not None
    assert verdict.pdb_status["disruptionsAllowed"] == 0
    assert verdict.pdb_status["disruptedPods"] == {"a": format_time(NOW)}
    assert verdict.pdb_status["conditions"][0]["reason"] == "InsufficientPods"


def test_a_budget_not_yet_observed_is_still_being_processed() -> None:
    pdb = synced(minAvailable=1)
    pdb["metadata"]["generation"] = 2
    verdict = disruption.evict(pod("a"), [pdb], now=NOW, dry_run=False)
    assert (verdict.code, verdict.retry_after) == (429, 10)
    assert verdict.causes[0]["message"] == ("The disruption budget train is still being processed by the "
                                            "server.")


def test_terminal_pending_and_deleting_pods_ignore_budgets() -> None:
    full = synced(minAvailable=5)
    for p in (pod("a", phase="Succeeded"), pod("a", phase="Pending"), pod("a", deleting=True)):
        assert disruption.evict(p, [full], now=NOW, dry_run=False).allowed


def test_unready_pods_go_when_the_budget_is_healthy_or_always_allowed() -> None:
    healthy = synced(minAvailable=1)
    assert disruption.evict(pod("c", ready=False), [healthy], now=NOW, dry_run=False).pdb_status is None
    tight = synced(minAvailable=2, unhealthyPodEvictionPolicy="IfHealthyBudget")
    tight["status"]["currentHealthy"] = 1
    assert disruption.evict(pod("c", ready=False), [tight], now=NOW, dry_run=False).code == 429
    tight["spec"]["unhealthyPodEvictionPolicy"] = "AlwaysAllow"
    assert disruption.evict(pod("c", ready=False), [tight], now=NOW, dry_run=False).allowed


def test_two_budgets_over_one_pod_are_refused() -> None:
    verdict = disruption.evict(pod("a"), [synced(minAvailable=0), synced(minAvailable=0)], now=NOW,
                               dry_run=False)
    assert verdict.code == 500
    assert verdict.message == ("This pod has more than one PodDisruptionBudget, which the eviction "
                               "subresource does not support.")


def test_the_disruption_target_condition_keeps_its_transition_time() -> None:
    first = disruption.disruption_target([], NOW)
    assert first == [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                      "message": "Eviction API: evicting", "lastProbeTime": None,
                      "lastTransitionTime": format_time(NOW)}]
    assert disruption.disruption_target(first, NOW + 5) == first


# ---- validation ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("spec", "expected"), [
    ({"minAvailable": "150%"}, 'spec.minAvailable: Invalid value: "150%": must not be greater than 100%'),
    ({"maxUnavailable": -1}, "spec.maxUnavailable: Invalid value: -1: must be greater than or equal to 0"),
    ({"minAvailable": "x"}, "spec.minAvailable: Invalid value: \"x\": a valid percent string must be a "
                            "numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for "
                            "validation is '[0-9]+%')"),
    ({"unhealthyPodEvictionPolicy": "Never"}, 'spec.unhealthyPodEvictionPolicy: Unsupported value: "Never": '
                                              'supported values: "AlwaysAllow", "IfHealthyBudget"'),
])
def test_budgets_are_validated(spec: Obj, expected: str) -> None:
    assert [str(c) for c in disruptionbudgets.validate({"spec": spec})] == [expected]


def test_min_and_max_cannot_both_be_set() -> None:
    causes = disruptionbudgets.validate({"spec": {"minAvailable": 1, "maxUnavailable": 1}})
    assert causes[0].field == "spec"
    assert causes[0].message.endswith("minAvailable and maxUnavailable cannot be both set")


# ---- PriorityClass and the Priority plugin ---------------------------------------------------------------
CLASSES = {"high": {"metadata": {"name": "high"}, "value": 1000, "preemptionPolicy": "Never"}}


def test_a_pod_gets_its_class_value_and_preemption_policy() -> None:
    pod_obj: Obj = {"spec": {"priorityClassName": "high"}}
    assert priority.admit_pod(pod_obj, CLASSES) is None
    assert (pod_obj["spec"]["priority"], pod_obj["spec"]["preemptionPolicy"]) == (1000, "Never")


def test_an_unknown_class_is_refused_with_the_real_words() -> None:
    assert priority.admit_pod({"spec": {"priorityClassName": "foo"}}, CLASSES) == \
        "no PriorityClass with name foo was found"


def test_a_pod_without_class_gets_the_global_default_or_zero() -> None:
    plain: Obj = {"spec": {}}
    assert priority.admit_pod(plain, CLASSES) is None
    assert plain["spec"] == {"priority": 0, "preemptionPolicy": "PreemptLowerPriority"}
    default = {"low": {"metadata": {"name": "low"}, "value": 5, "globalDefault": True,
                       "preemptionPolicy": "PreemptLowerPriority"}}
    pod_obj: Obj = {"spec": {}}
    priority.admit_pod(pod_obj, default)
    assert pod_obj["spec"] == {"priorityClassName": "low", "priority": 5,
                               "preemptionPolicy": "PreemptLowerPriority"}


def test_a_priority_set_by_hand_must_match_the_class() -> None:
    assert priority.admit_pod({"spec": {"priorityClassName": "high", "priority": 7}}, CLASSES) == (
        "the integer value of priority (7) must not be provided in pod spec; priority admission controller "
        "computed 1000 from the given PriorityClass name")


def test_only_one_global_default_and_system_names_are_reserved() -> None:
    existing = [{"metadata": {"name": "low"}, "value": 5, "globalDefault": True}]
    second = {"metadata": {"name": "other"}, "value": 1, "globalDefault": True}
    assert priority.admit_class(second, existing, creating=True) == (
        "PriorityClass low is already marked as default. Only one default can exist")
    reserved = priority.validate_class({"metadata": {"name": "system-mine"}, "value": 1})
    assert str(reserved[0]) == ("metadata.name: Forbidden: priority class names with 'system-' prefix are "
                                "reserved for system use only. error: system-mine is not a known system "
                                "priority class")
    too_high = priority.validate_class({"metadata": {"name": "x"}, "value": 2_000_000_000})
    assert str(too_high[0]) == ("value: Forbidden: maximum allowed value of a user defined priority is "
                                "1000000000")
