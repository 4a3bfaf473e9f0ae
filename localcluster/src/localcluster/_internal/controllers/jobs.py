"""The Job controller's decisions, pure: from a Job, its pods and the clock, what one sync does.

Followed: kubernetes v1.37 pkg/controller/job/job_controller.go (syncJob, manageJob,
trackJobStatusAndRemoveFinalizers, enactJobFinished, pastBackoffLimitOnFailure, pastActiveDeadline),
pod_failure_policy.go (matchPodFailurePolicy), backoff_utils.go (the pod-failure back-off: 10 s, doubling
with each failure since the last success, at most 10 min, counted from the last failure) and
pkg/controller/controller_utils.go (FilterActivePods, ActivePods ordering). With the v1.37 defaults: the
terminal condition waits for terminating pods (FailureTarget then Failed, SuccessCriteriaMet then Complete),
`status.terminating` is reported, and a Job's pods carry the `batch.kubernetes.io/job-tracking` finalizer
until the controller has counted them.

Modelled: NonIndexed jobs (parallelism, completions or none), backoffLimit (and restartCount against it
with restartPolicy OnFailure), podFailurePolicy (onExitCodes In/NotIn with containerName, onPodConditions;
FailJob, Ignore, Count), activeDeadlineSeconds, suspend, podReplacementPolicy. Not modelled: Indexed
completion, backoffLimitPerIndex, successPolicy, managedBy.

The caller counts in one pass what the real controller flushes in several steps (uncountedTerminatedPods
is always empty here, as it is between the real controller's syncs).
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from localcluster._internal.admission.jobs import TRACKING_FINALIZER

Obj = dict[str, Any]
MAX_CREATE_DELETE = 500              # MaxPodCreateDeletePerSync
TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Backoff:
    """backoffRecord: failures since the last success and when the last one ended (epoch seconds)."""

    failures: int = 0
    last_failure: float | None = None

    def remaining(self, now: float, base: float, cap: float) -> float:
        """getRemainingTimeForFailuresCount: base * 2^(failures-1), at most `cap`, from the last failure."""
        if self.failures == 0 or self.last_failure is None:
            return 0.0
        delay = base
        for _ in range(1, self.failures):
            delay *= 2
            if delay >= cap:
                delay = cap
                break
        return max(0.0, delay - (now - self.last_failure))


@dataclass(frozen=True)
class Match:
    """What matchPodFailurePolicy says of a failed pod: a FailJob message, whether the failure counts
    against backoffLimit, and the rule's action."""

    fail_job: str | None = None
    counts: bool = True
    action: str | None = None


@dataclass(frozen=True)
class Plan:
    """One sync: the Job's new status, the pods to create (how many) and delete (names), the tracking
    finalizers to remove, the events on the Job, when to sync again, and the new back-off record."""

    status: Obj
    create: int = 0
    delete: tuple[str, ...] = ()
    remove_finalizers: tuple[str, ...] = ()
    events: tuple[tuple[str, str, str], ...] = ()   # (type, reason, message)
    requeue_after: float | None = None
    backoff: Backoff = Backoff()


# ---- reading pods and jobs ---------------------------------------------------------------------------------
def parse_time(stamp: str | None) -> float | None:
    if not stamp:
        return None
    text = stamp.replace("Z", "+00:00")
    try:
        return datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def format_time(when: float) -> str:
    return datetime.datetime.fromtimestamp(when, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def _deleting(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def has_finalizer(pod: Mapping[str, Any]) -> bool:
    return TRACKING_FINALIZER in ((pod.get("metadata") or {}).get("finalizers") or [])


def is_active(pod: Mapping[str, Any]) -> bool:
    """FilterActivePods."""
    return _phase(pod) not in TERMINAL and not _deleting(pod)


def is_terminating(pod: Mapping[str, Any]) -> bool:
    return _phase(pod) not in TERMINAL and _deleting(pod)


def pod_condition(pod: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    return next((c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def is_ready(pod: Mapping[str, Any]) -> bool:
    cond = pod_condition(pod, "Ready")
    return cond is not None and cond.get("status") == "True"


def only_replace_failed(job: Mapping[str, Any]) -> bool:
    spec = job.get("spec") or {}
    return spec.get("podReplacementPolicy") == "Failed" or spec.get("podFailurePolicy") is not None


def is_failed(pod: Mapping[str, Any], job: Mapping[str, Any]) -> bool:
    """isPodFailed: Failed, or (unless only failed pods are replaced) deleted before succeeding."""
    if _phase(pod) == "Failed":
        return True
    if only_replace_failed(job):
        return False
    return _deleting(pod) and _phase(pod) != "Succeeded"


def job_condition(job: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    return next((c for c in (job.get("status") or {}).get("conditions") or []
                 if c.get("type") == kind and c.get("status") == "True"), None)


def is_finished(job: Mapping[str, Any]) -> bool:
    return job_condition(job, "Complete") is not None or job_condition(job, "Failed") is not None


def finished_time(pod: Mapping[str, Any]) -> float:
    """getFinishedTime: the last container's finish, else Ready=False's transition, else the deletion
    estimate, else the creation."""
    status = pod.get("status") or {}
    latest: float | None = None
    statuses = status.get("containerStatuses") or []
    for cs in statuses:
        when = parse_time(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        if when is None:
            latest = None
            break
        latest = when if latest is None else max(latest, when)
    if latest is not None:
        return latest
    ready = pod_condition(pod, "Ready")
    if ready is not None and ready.get("status") == "False":
        when = parse_time(ready.get("lastTransitionTime"))
        if when is not None:
            return when
    meta = pod.get("metadata") or {}
    deleted = parse_time(meta.get("deletionTimestamp"))
    if deleted is not None:
        return deleted - float(meta.get("deletionGracePeriodSeconds") or 0)
    return parse_time(meta.get("creationTimestamp")) or 0.0


# ---- the pod failure policy --------------------------------------------------------------------------------
def _exit_code_match(pod: Mapping[str, Any], req: Mapping[str, Any]) -> Mapping[str, Any] | None:
    status = pod.get("status") or {}
    values = list(req.get("values") or [])
    for statuses in (status.get("containerStatuses") or [], status.get("initContainerStatuses") or []):
        for cs in statuses:
            terminated = (cs.get("state") or {}).get("terminated")
            if terminated is None:
                continue
            if req.get("containerName") not in (None, cs.get("name")):
                continue
            code = int(terminated.get("exitCode") or 0)
            if code == 0:
                continue
            op = req.get("operator")
            if (op == "In" and code in values) or (op == "NotIn" and code not in values):
                found: Mapping[str, Any] = cs
                return found
    return None


def match_failure_policy(job: Mapping[str, Any], pod: Mapping[str, Any]) -> Match:
    """matchPodFailurePolicy: the first rule that matches the failed pod decides."""
    policy = (job.get("spec") or {}).get("podFailurePolicy")
    if policy is None:
        return Match()
    meta = pod.get("metadata") or {}
    who = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    for index, rule in enumerate(policy.get("rules") or []):
        action = rule.get("action")
        detail: str | None = None
        if rule.get("onExitCodes") is not None:
            cs = _exit_code_match(pod, rule["onExitCodes"])
            if cs is None:
                continue
            code = cs["state"]["terminated"].get("exitCode")
            detail = (f"Container {cs.get('name')} for pod {who} failed with exit code {code} matching "
                      f"{action} rule at index {index}")
        elif rule.get("onPodConditions"):
            cond = next((c for c in (pod.get("status") or {}).get("conditions") or []
                         for p in rule["onPodConditions"]
                         if c.get("type") == p.get("type") and c.get("status") == p.get("status")), None)
            if cond is None:
                continue
            detail = f"Pod {who} has condition {cond.get('type')} matching {action} rule at index {index}"
        else:
            continue
        if action == "Ignore":
            return Match(None, False, "Ignore")
        if action == "Count":
            return Match(None, True, "Count")
        if action == "FailJob":
            return Match(detail, True, "FailJob")
        # FailIndex without backoffLimitPerIndex (refused by validation) falls through, as upstream's switch
    return Match()


# ---- the back-off record -----------------------------------------------------------------------------------
def next_backoff(record: Backoff, succeeded: Sequence[Mapping[str, Any]],
                 failed: Sequence[Mapping[str, Any]]) -> Backoff:
    """newBackoffRecord."""
    failed_times = sorted(finished_time(p) for p in failed)
    if not succeeded:
        if not failed_times:
            return record
        return Backoff(record.failures + len(failed_times), failed_times[-1])
    last_success = max(finished_time(p) for p in succeeded)
    after = [t for t in failed_times if t > last_success]
    return Backoff(len(after), after[-1] if after else None)


# ---- ordering pods for removal -----------------------------------------------------------------------------
_PHASE_ORDER = {"Pending": 0, "Unknown": 1, "Running": 2}


def _removal_key(pod: Mapping[str, Any]) -> tuple[Any, ...]:
    """controller.ActivePods: unscheduled, pending, not ready, ready for less time, more restarts, newer
    first."""
    spec, status, meta = pod.get("spec") or {}, pod.get("status") or {}, pod.get("metadata") or {}
    ready = pod_condition(pod, "Ready")
    ready_since = None
    if ready is not None and ready.get("status") == "True":
        ready_since = parse_time(ready.get("lastTransitionTime"))
    restarts = sum(int(cs.get("restartCount") or 0) for cs in status.get("containerStatuses") or [])
    created = parse_time(meta.get("creationTimestamp")) or 0.0
    return (bool(spec.get("nodeName")), _PHASE_ORDER.get(_phase(pod), 3), is_ready(pod),
            -(ready_since or 0.0), -restarts, -created)


def for_removal(pods: Sequence[Mapping[str, Any]], count: int) -> list[Mapping[str, Any]]:
    return sorted(pods, key=_removal_key)[:max(count, 0)]


# ---- conditions --------------------------------------------------------------------------------------------
def condition(kind: str, reason: str, message: str, now: float) -> Obj:
    stamp = format_time(now)
    out: Obj = {"type": kind, "status": "True", "lastProbeTime": stamp, "lastTransitionTime": stamp}
    if reason:
        out["reason"] = reason
    if message:
        out["message"] = message
    return out


def _ensure(conditions: list[Obj], kind: str, status: str, reason: str, message: str, now: float) -> bool:
    """ensureJobConditionStatus: add or change the condition; never add one that is False."""
    for i, c in enumerate(conditions):
        if c.get("type") == kind:
            if (c.get("status"), c.get("reason", ""), c.get("message", "")) != (status, reason, message):
                conditions[i] = {**condition(kind, reason, message, now), "status": status}
                return True
            return False
    if status != "False":
        conditions.append(condition(kind, reason, message, now))
        return True
    return False


def _past_backoff_on_failure(job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> bool:
    spec = job.get("spec") or {}
    if ((spec.get("template") or {}).get("spec") or {}).get("restartPolicy") != "OnFailure":
        return False
    restarts = 0
    for pod in pods:
        if _phase(pod) in ("Running", "Pending"):
            status = pod.get("status") or {}
            for cs in [*(status.get("initContainerStatuses") or []),
                       *(status.get("containerStatuses") or [])]:
                restarts += int(cs.get("restartCount") or 0)
    limit = int(spec.get("backoffLimit") or 0)
    return restarts > 0 if limit == 0 else restarts >= limit


# ---- one sync ----------------------------------------------------------------------------------------------
def plan(job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], *, now: float, backoff: Backoff,
         base_backoff: float = 10.0, max_backoff: float = 600.0) -> Plan:
    """syncJob for one Job and the pods it owns (the caller has adopted and released by the selector)."""
    spec, meta = job.get("spec") or {}, job.get("metadata") or {}
    status: Obj = copy.deepcopy(job.get("status") or {})
    conditions: list[Obj] = list(status.get("conditions") or [])
    suspended = bool(spec.get("suspend"))
    deleting_job = bool(meta.get("deletionTimestamp"))
    tracked = [p for p in pods if has_finalizer(p)]
    active_pods = [p for p in pods if is_active(p)]
    new_succeeded = [p for p in tracked if _phase(p) == "Succeeded"]
    new_failed = [p for p in tracked if is_failed(p, job)]
    succeeded = int(status.get("succeeded") or 0) + len(new_succeeded)
    counted = sum(1 for p in new_failed if match_failure_policy(job, p).counts)
    failed = int(status.get("failed") or 0) + counted
    if not status.get("startTime") and not suspended:
        status["startTime"] = format_time(now)
    record = next_backoff(backoff, new_succeeded, new_failed)
    events: list[tuple[str, str, str]] = []
    requeue: float | None = None
    met = job_condition(job, "SuccessCriteriaMet")
    finished: Obj | None = dict(met) if met is not None else None
    if finished is None:
        target = job_condition(job, "FailureTarget")
        if target is not None:
            finished = condition("Failed", target.get("reason", ""), target.get("message", ""), now)
        else:
            message = next((m.fail_job for p in pods if is_failed(p, job)
                            for m in [match_failure_policy(job, p)] if m.fail_job), None)
            if message:
                finished = condition("FailureTarget", "PodFailurePolicy", message, now)
    deadline = spec.get("activeDeadlineSeconds")
    started = parse_time(status.get("startTime"))
    if finished is None:
        if failed > int(spec.get("backoffLimit") or 0) or _past_backoff_on_failure(job, pods):
            finished = condition("FailureTarget", "BackoffLimitExceeded",
                                 "Job has reached the specified backoff limit", now)
        elif deadline is not None and started is not None and not suspended and now - started >= deadline:
            finished = condition("FailureTarget", "DeadlineExceeded",
                                 "Job was active longer than specified deadline", now)
        elif deadline is not None and started is not None and not suspended:
            requeue = deadline - (now - started)
    active = len(active_pods)
    ready = sum(1 for p in active_pods if is_ready(p))
    terminating = sum(1 for p in pods if is_terminating(p))
    create = 0
    delete: list[Mapping[str, Any]] = []
    if finished is not None:
        delete = list(active_pods)
    else:
        managed = not deleting_job
        if managed:
            active, create, delete, wait = _manage(job, active_pods, succeeded, terminating, record, now,
                                                   base_backoff, max_backoff)
            if wait:
                requeue = wait if requeue is None else min(requeue, wait)
        completions = spec.get("completions")
        if completions is None:
            complete = succeeded > 0 and active == 0
        else:
            complete = succeeded >= int(completions) and active == 0
        if complete:
            finished = condition("SuccessCriteriaMet", "CompletionsReached",
                                 "Reached expected number of succeeded pods", now)
        elif managed:
            if suspended:
                if _ensure(conditions, "Suspended", "True", "JobSuspended", "Job suspended", now):
                    events.append(("Normal", "Suspended", "Job suspended"))
            elif _ensure(conditions, "Suspended", "False", "JobResumed", "Job resumed", now):
                events.append(("Normal", "Resumed", "Job resumed"))
                status["startTime"] = format_time(now)
    if finished is not None:
        active -= len(delete)
    ready -= sum(1 for p in delete if is_ready(p))
    terminating += len(delete)
    # trackJobStatusAndRemoveFinalizers
    failing = finished is not None and finished["type"] in ("FailureTarget", "Failed")
    remove: list[str] = []
    counted_succeeded = int(status.get("succeeded") or 0)
    counted_failed = int(status.get("failed") or 0)
    for pod in tracked:
        considered_failed = is_failed(pod, job)
        if not (deleting_job or finished is not None or _phase(pod) == "Succeeded" or considered_failed):
            continue
        remove.append(str(pod["metadata"]["name"]))
        if _phase(pod) == "Succeeded":
            counted_succeeded += 1
        elif (considered_failed or failing) and match_failure_policy(job, pod).counts:
            counted_failed += 1
    final: Obj | None = finished
    if finished is not None and finished["type"] == "FailureTarget":
        if job_condition(job, "FailureTarget") is None:
            conditions.append(finished)
        final = condition("Failed", finished.get("reason", ""), finished.get("message", ""), now)
    elif finished is not None and finished["type"] == "SuccessCriteriaMet":
        if job_condition(job, "SuccessCriteriaMet") is None:
            conditions.append(finished)
        final = condition("Complete", finished.get("reason", ""), finished.get("message", ""), now)
    if final is not None and terminating == 0:
        _ensure(conditions, final["type"], "True", final.get("reason", ""), final.get("message", ""), now)
        if final["type"] == "Complete":
            status["completionTime"] = format_time(now)
            completions = spec.get("completions")
            if completions is not None and counted_succeeded > int(completions):
                events.append(("Warning", "TooManySucceededPods",
                               "Too many succeeded pods running after completion count reached"))
            events.append(("Normal", "Completed", "Job completed"))
        else:
            events.append(("Warning", final.get("reason", ""), final.get("message", "")))
    for key, value in (("active", active), ("succeeded", counted_succeeded), ("failed", counted_failed)):
        if value:
            status[key] = value
        else:
            status.pop(key, None)
    status["terminating"] = terminating
    status["ready"] = ready
    status["uncountedTerminatedPods"] = {}
    if conditions:
        status["conditions"] = conditions
    return Plan(status=status, create=create, delete=tuple(str(p["metadata"]["name"]) for p in delete),
                remove_finalizers=tuple(remove), events=tuple(events), requeue_after=requeue, backoff=record)


def _manage(job: Mapping[str, Any], active_pods: Sequence[Mapping[str, Any]], succeeded: int,
            terminating: int, record: Backoff, now: float, base: float,
            cap: float) -> tuple[int, int, list[Mapping[str, Any]], float | None]:
    """manageJob: (active, pods to create, pods to delete, back-off wait)."""
    spec = job.get("spec") or {}
    active = len(active_pods)
    parallelism = int(spec.get("parallelism") or 0)
    if spec.get("suspend"):
        return 0, 0, list(active_pods), None
    completions = spec.get("completions")
    if completions is None:
        want = active if succeeded > 0 else parallelism
    else:
        want = max(0, min(int(completions) - succeeded, parallelism))
    surplus = active - want
    if surplus > 0:
        doomed = for_removal(active_pods, min(surplus, MAX_CREATE_DELETE))
        return active - len(doomed), 0, doomed, None
    waiting_for = terminating if only_replace_failed(job) else 0
    missing = want - waiting_for - active
    if missing <= 0:
        return active, 0, [], None
    wait = record.remaining(now, base, cap)
    if wait > 0:
        # upstream reports no active pods while it waits out the back-off
        return 0, 0, [], wait
    missing = min(missing, MAX_CREATE_DELETE)
    return active + missing, missing, [], None


def ttl_expiry(job: Mapping[str, Any]) -> float | None:
    """When the TTL-after-finished controller deletes this finished job (pkg/controller/ttlafterfinished:
    the finish time is the Complete or Failed condition's transition)."""
    ttl = (job.get("spec") or {}).get("ttlSecondsAfterFinished")
    if ttl is None:
        return None
    cond = job_condition(job, "Complete") or job_condition(job, "Failed")
    if cond is None:
        return None
    finished = parse_time(cond.get("lastTransitionTime"))
    return None if finished is None else finished + float(ttl)
