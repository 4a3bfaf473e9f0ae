"""batch/v1 Job rules, pure: kube-apiserver's defaulting, generated selector and validation
(admission/jobs.py), and what one Job controller sync decides (controllers/jobs.py), each against
kubernetes v1.37's behaviour."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from localcluster._internal.admission import jobs as job_api
from localcluster._internal.apimachinery.fielderrors import status_invalid
from localcluster._internal.controllers import jobs
from localcluster._internal.controllers.jobs import Backoff, format_time

UID = "6312e366-ba4a-45b8-b65c-8beccfb604e3"
NOW = 1_800_000_000.0
Obj = dict[str, Any]


def manifest(**spec: Any) -> Obj:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": "default",
                                                                  "uid": UID},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                                           "containers": [{"name": "main", "image": "busybox"}]}}, **spec}}


def defaulted(**spec: Any) -> Obj:
    job = manifest(**spec)
    job_api.default(job)
    return job


def message(job: Obj) -> str:
    return str(status_invalid("Job", "train", job_api.validate(job), group="batch")["message"])


# ---- defaulting and the generated selector ---------------------------------------------------------------
def test_defaults_are_those_of_a_v1_37_server() -> None:
    spec = defaulted()["spec"]
    assert {k: v for k, v in spec.items() if k not in ("template", "selector")} == {
        "completions": 1, "parallelism": 1, "backoffLimit": 6, "completionMode": "NonIndexed",
        "suspend": False, "podReplacementPolicy": "TerminatingOrFailed", "manualSelector": False}


def test_the_selector_and_the_four_labels_are_generated_from_the_uid_and_name() -> None:
    job = defaulted()
    assert job["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": UID}}
    assert job["spec"]["template"]["metadata"]["labels"] == {
        "batch.kubernetes.io/controller-uid": UID, "batch.kubernetes.io/job-name": "train",
        "controller-uid": UID, "job-name": "train"}
    assert job_api.validate(job) == []


def test_a_job_without_labels_takes_the_templates_generated_ones_only_if_the_template_had_labels() -> None:
    assert "labels" not in defaulted()["metadata"]
    with_labels = manifest()
    with_labels["spec"]["template"]["metadata"] = {"labels": {"app": "x"}}
    job_api.default(with_labels)
    assert with_labels["metadata"]["labels"]["app"] == "x"
    assert with_labels["metadata"]["labels"]["job-name"] == "train"


def test_a_pod_failure_policy_defaults_condition_status_and_replacement_policy() -> None:
    job = defaulted(podFailurePolicy={"rules": [{"action": "Ignore",
                                                 "onPodConditions": [{"type": "DisruptionTarget"}]}]})
    assert job["spec"]["podFailurePolicy"]["rules"][0]["onPodConditions"] == [
        {"type": "DisruptionTarget", "status": "True"}]
    assert job["spec"]["podReplacementPolicy"] == "Failed"


# ---- validation --------------------------------------------------------------------------------------------
def test_restart_policy_always_is_refused_with_the_real_message() -> None:
    job = manifest()
    del job["spec"]["template"]["spec"]["restartPolicy"]
    job["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    job_api.default(job)
    assert message(job) == ('Job.batch "train" is invalid: spec.template.spec.restartPolicy: Unsupported '
                            'value: "Always": supported values: "OnFailure", "Never"')


def test_a_pod_failure_policy_needs_restart_policy_never() -> None:
    job = manifest(podFailurePolicy={"rules": [{"action": "FailJob",
                                                "onExitCodes": {"operator": "In", "values": [1]}}]})
    job["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    job_api.default(job)
    assert 'only "Never" is supported when podFailurePolicy is specified' in message(job)


@pytest.mark.parametrize(("rule", "expected"), [
    ({"action": "Drop", "onExitCodes": {"operator": "In", "values": [1]}},
     'spec.podFailurePolicy.rules[0].action: Unsupported value: "Drop": supported values: "Count", '
     '"FailIndex", "FailJob", "Ignore"'),
    ({"action": "FailJob", "onExitCodes": {"operator": "In", "values": [0, 3]}},
     "spec.podFailurePolicy.rules[0].onExitCodes.values[0]: Invalid value: 0: must not be 0 for the In "
     "operator"),
    ({"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [5, 3]}},
     "spec.podFailurePolicy.rules[0].onExitCodes.values: Invalid value: []int32{5, 3}: must be ordered"),
    ({"action": "Count", "onExitCodes": {"operator": "In", "values": [1], "containerName": "side"}},
     'spec.podFailurePolicy.rules[0].onExitCodes.containerName: Invalid value: "side": must be one of the '
     "container or initContainer names in the pod template"),
    ({"action": "Ignore"},
     "spec.podFailurePolicy.rules[0]: Invalid value: specifying one of OnExitCodes and OnPodConditions is "
     "required"),
])
def test_pod_failure_policy_rules_are_validated_field_by_field(rule: Obj, expected: str) -> None:
    job = defaulted(podFailurePolicy={"rules": [rule]})
    assert message(job) == f'Job.batch "train" is invalid: {expected}'


def test_a_selector_that_is_not_the_generated_one_is_refused_without_manual_selector() -> None:
    job = defaulted()
    job["spec"]["selector"] = {"matchLabels": {"app": "other"}}
    assert "`selector` not auto-generated" in message(job)
    assert "`selector` does not match template `labels`" in message(job)


def test_the_template_and_completions_are_immutable() -> None:
    job = defaulted()
    changed = copy.deepcopy(job)
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "other"
    changed["spec"]["completions"] = 3
    fields = [c.field for c in job_api.update_causes(changed, job)]
    assert fields == ["spec.template", "spec.completions"]


# ---- the controller's decisions ----------------------------------------------------------------------------
def pod(name: str, phase: str = "Running", *, ready: bool = True, exit_code: int | None = None,
        conditions: tuple[Obj, ...] = (), deleting: bool = False, restarts: int = 0) -> Obj:
    meta: Obj = {"name": name, "namespace": "default", "uid": f"uid-{name}",
                 "creationTimestamp": format_time(NOW - 60), "finalizers": [job_api.TRACKING_FINALIZER]}
    if deleting:
        meta["deletionTimestamp"] = format_time(NOW)
        meta["deletionGracePeriodSeconds"] = 30
    state: Obj = {"running": {"startedAt": format_time(NOW - 50)}}
    if exit_code is not None:
        state = {"terminated": {"exitCode": exit_code, "finishedAt": format_time(NOW - 5)}}
    return {"metadata": meta, "spec": {"nodeName": "node-1"},
            "status": {"phase": phase, "conditions": [
                {"type": "Ready", "status": "True" if ready else "False",
                 "lastTransitionTime": format_time(NOW - 5)}, *conditions],
                "containerStatuses": [{"name": "main", "state": state, "restartCount": restarts}]}}


def sync(job: Obj, pods: list[Obj], backoff: Backoff | None = None) -> jobs.Plan:
    return jobs.plan(job, pods, now=NOW, backoff=backoff or Backoff())


def test_a_new_job_starts_its_parallelism_and_reports_nothing_active_yet_as_ready() -> None:
    plan = sync(defaulted(parallelism=3, completions=5), [])
    assert plan.create == 3
    assert plan.status == {"startTime": format_time(NOW), "active": 3, "terminating": 0, "ready": 0,
                           "uncountedTerminatedPods": {}}


def test_a_succeeded_pod_completes_the_job_with_both_conditions_and_the_real_reason() -> None:
    plan = sync(defaulted(), [pod("a", "Succeeded", ready=False, exit_code=0)])
    assert plan.remove_finalizers == ("a",)
    assert [(c["type"], c.get("reason")) for c in plan.status["conditions"]] == [
        ("SuccessCriteriaMet", "CompletionsReached"), ("Complete", "CompletionsReached")]
    assert plan.status["succeeded"] == 1 and plan.status["completionTime"] == format_time(NOW)
    assert ("Normal", "Completed", "Job completed") in plan.events


def test_failures_past_the_backoff_limit_mark_failure_target_and_wait_for_terminating_pods() -> None:
    job = defaulted(backoffLimit=1, parallelism=2, completions=2)
    failed = [pod(name, "Failed", ready=False, exit_code=1) for name in ("a", "b")]
    plan = sync(job, [*failed, pod("c")])
    assert plan.delete == ("c",)
    assert [c["type"] for c in plan.status["conditions"]] == ["FailureTarget"]
    assert plan.status["conditions"][0]["reason"] == "BackoffLimitExceeded"
    assert plan.status["failed"] == 3 and plan.status["terminating"] == 1
    job["status"] = plan.status
    done = sync(job, [])
    assert [c["type"] for c in done.status["conditions"]] == ["FailureTarget", "Failed"]
    assert ("Warning", "BackoffLimitExceeded", "Job has reached the specified backoff limit") in done.events


POLICY = {"rules": [
    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
    {"action": "Count", "onExitCodes": {"operator": "In", "values": [77, 137, 143]}},
    {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}},
]}
EVICTED = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}


def test_an_evicted_pod_is_ignored_yet_replaced_only_after_the_back_off_as_upstream() -> None:
    job = defaulted(podFailurePolicy=POLICY)
    plan = sync(job, [pod("a", "Failed", ready=False, exit_code=143, conditions=(EVICTED,))])
    assert plan.create == 0 and plan.requeue_after == pytest.approx(5.0)
    assert "failed" not in plan.status and "conditions" not in plan.status
    assert plan.remove_finalizers == ("a",)
    assert jobs.plan(job, [], now=NOW + 6, backoff=plan.backoff).create == 1


def test_a_counted_exit_code_counts_and_another_one_fails_the_job_naming_the_rule() -> None:
    job = defaulted(podFailurePolicy=POLICY)
    counted = sync(job, [pod("a", "Failed", ready=False, exit_code=137)])
    assert counted.status["failed"] == 1 and "conditions" not in counted.status
    failing = sync(job, [pod("b", "Failed", ready=False, exit_code=2)])
    target = failing.status["conditions"][0]
    assert (target["type"], target["reason"], target["message"]) == (
        "FailureTarget", "PodFailurePolicy",
        "Container main for pod default/b failed with exit code 2 matching FailJob rule at index 2")


def test_with_a_pod_failure_policy_a_terminating_pod_is_not_replaced_until_it_failed() -> None:
    job = defaulted(podFailurePolicy=POLICY)
    plan = sync(job, [pod("a", deleting=True)])
    assert plan.create == 0 and plan.status["terminating"] == 1


def test_replacements_wait_out_the_controllers_back_off() -> None:
    job = defaulted(backoffLimit=6)
    plan = sync(job, [pod("a", "Failed", ready=False, exit_code=1)])
    assert plan.create == 0
    assert plan.backoff == Backoff(1, NOW - 5)
    assert plan.requeue_after == pytest.approx(5.0)
    later = jobs.plan(job, [], now=NOW + 6, backoff=plan.backoff)
    assert later.create == 1
    assert Backoff(3, NOW).remaining(NOW, 10.0, 600.0) == 40.0
    assert Backoff(12, NOW).remaining(NOW, 10.0, 600.0) == 600.0


def test_restarts_count_against_the_backoff_limit_with_restart_policy_on_failure() -> None:
    job = manifest(backoffLimit=2)
    job["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    job_api.default(job)
    plan = sync(job, [pod("a", restarts=2)])
    assert plan.status["conditions"][0]["reason"] == "BackoffLimitExceeded"


def test_an_active_deadline_fails_the_job_once_passed_and_is_waited_for_before() -> None:
    job = defaulted(activeDeadlineSeconds=30)
    job["status"] = {"startTime": format_time(NOW - 10)}
    assert sync(job, [pod("a")]).requeue_after == pytest.approx(20.0)
    job["status"] = {"startTime": format_time(NOW - 31)}
    plan = sync(job, [pod("a")])
    assert plan.status["conditions"][0]["reason"] == "DeadlineExceeded"
    assert plan.delete == ("a",)


def test_suspending_deletes_active_pods_and_sets_the_suspended_condition() -> None:
    plan = sync(defaulted(suspend=True), [pod("a")])
    assert plan.delete == ("a",)
    assert plan.status["conditions"][0]["reason"] == "JobSuspended"
    assert ("Normal", "Suspended", "Job suspended") in plan.events


def test_a_finished_job_expires_after_its_ttl() -> None:
    job = defaulted(ttlSecondsAfterFinished=100)
    job["status"] = sync(job, [pod("a", "Succeeded", ready=False, exit_code=0)]).status
    assert jobs.ttl_expiry(job) == NOW + 100
