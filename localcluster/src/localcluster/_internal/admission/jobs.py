"""batch/v1 Job as kube-apiserver takes it: defaulting, the generated selector and labels, validation and
what an update may change. Pure.

Followed (kubernetes v1.37): pkg/apis/batch/v1/defaults.go (SetDefaults_Job), pkg/registry/batch/job/
strategy.go (PrepareForCreate: generateSelector; the status reset), pkg/apis/batch/validation/validation.go
(ValidateJob, validateJobSpec, validatePodFailurePolicy, ValidateGeneratedSelector, ValidateJobUpdate).

How the API server calls this, on create:
    default(job)                 # after the server gave the job its uid (the generated labels carry it)
    causes = validate(job)       # 422 Invalid with these causes
and on update `update_causes(job, current)`.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping
from typing import Any

from localcluster._internal.admission.podvalidation import validate_pod_spec
from localcluster._internal.apimachinery import labelselector
from localcluster._internal.apimachinery.fielderrors import (
    Cause,
    duplicate,
    fmt_value,
    invalid,
    not_supported,
    required,
)
from localcluster._internal.apimachinery.names import label_key_errors, label_value_errors

Obj = dict[str, Any]

CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
LEGACY_CONTROLLER_UID_LABEL = "controller-uid"
LEGACY_JOB_NAME_LABEL = "job-name"
TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"

ACTIONS = ("Count", "FailIndex", "FailJob", "Ignore")         # sets.List: sorted
OPERATORS = ("In", "NotIn")
CONDITION_STATUSES = ("False", "True", "Unknown")
MAX_RULES = 20
MAX_PATTERNS = 20
MAX_EXIT_CODES = 255


def default(job: Obj) -> None:
    """SetDefaults_Job, then the strategy's PrepareForCreate (status reset, generated selector). The job
    must already carry its uid."""
    spec = job.setdefault("spec", {})
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    spec.setdefault("parallelism", 1)
    if spec.get("backoffLimit") is None:
        spec["backoffLimit"] = 2147483647 if spec.get("backoffLimitPerIndex") is not None else 6
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    policy = spec.get("podFailurePolicy")
    if isinstance(policy, dict):
        for rule in policy.get("rules") or []:
            for pattern in rule.get("onPodConditions") or []:
                if isinstance(pattern, dict) and not pattern.get("status"):
                    pattern["status"] = "True"
    spec.setdefault("podReplacementPolicy", "Failed" if policy is not None else "TerminatingOrFailed")
    spec.setdefault("manualSelector", False)
    template = spec.setdefault("template", {})
    template_meta = template.setdefault("metadata", {})
    meta = job.setdefault("metadata", {})
    # Go's defaulting shares the template's label map with a job that has none, so the labels generated
    # below end up on the job too (when the template had a label map at all)
    share_labels = template_meta.get("labels") is not None and not meta.get("labels")
    template.setdefault("spec", {}).setdefault("restartPolicy", "Always")
    job["status"] = {}
    if not spec["manualSelector"]:
        _generate_selector(job)
    if share_labels:
        meta["labels"] = copy.deepcopy(template_meta["labels"])


def _generate_selector(job: Obj) -> None:
    meta = job["metadata"]
    spec = job["spec"]
    labels = spec["template"]["metadata"].setdefault("labels", {})
    for key in (LEGACY_JOB_NAME_LABEL, JOB_NAME_LABEL):
        labels.setdefault(key, meta.get("name", ""))
    for key in (LEGACY_CONTROLLER_UID_LABEL, CONTROLLER_UID_LABEL):
        labels.setdefault(key, meta.get("uid", ""))
    selector = spec.get("selector")
    if not isinstance(selector, dict):
        selector = spec["selector"] = {}
    selector.setdefault("matchLabels", {}).setdefault(CONTROLLER_UID_LABEL, meta.get("uid", ""))


# ---- validation --------------------------------------------------------------------------------------------
def _nonnegative(spec: Mapping[str, Any], name: str) -> list[Cause]:
    value = spec.get(name)
    if isinstance(value, int) and value < 0:
        return [invalid(f"spec.{name}", value, "must be greater than or equal to 0")]
    return []


def _has_label(labels: Mapping[str, str], key: str, expected: str) -> list[Cause]:
    """ValidateHasLabel."""
    path = f"spec.template.metadata.labels[{key}]"
    if key not in labels:
        return [required(path, f"must be '{expected}'")]
    if labels[key] != expected:
        return [Cause(path, "FieldValueInvalid", f"Invalid value: {fmt_value(labels[key])}: "
                                                 f"must be '{expected}'")]
    return []


def _generated_selector_causes(job: Mapping[str, Any]) -> list[Cause]:
    """ValidateGeneratedSelector: the template carries the generated labels and the selector is the one
    generated."""
    spec, meta = job.get("spec") or {}, job.get("metadata") or {}
    if spec.get("manualSelector") or spec.get("selector") is None:
        return []
    uid, name = str(meta.get("uid") or ""), str(meta.get("name") or "")
    causes: list[Cause] = [] if uid else [required("metadata.uid")]
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    for key, expected in ((LEGACY_CONTROLLER_UID_LABEL, uid), (LEGACY_JOB_NAME_LABEL, name),
                          (CONTROLLER_UID_LABEL, uid), (JOB_NAME_LABEL, name)):
        causes += _has_label(labels, key, expected)
    if spec["selector"] != {"matchLabels": {CONTROLLER_UID_LABEL: uid}}:
        causes.append(Cause("spec.selector", "FieldValueInvalid",
                            "Invalid value: {...}: `selector` not auto-generated"))
    return causes


def _exit_codes_causes(req: Mapping[str, Any], path: str, containers: set[str]) -> list[Cause]:
    causes: list[Cause] = []
    op = req.get("operator") or ""
    if not op:
        causes.append(required(f"{path}.operator", "valid values: " + _quoted(OPERATORS)))
    elif op not in OPERATORS:
        causes.append(not_supported(f"{path}.operator", op, list(OPERATORS)))
    name = req.get("containerName")
    if name is not None and name not in containers:
        causes.append(invalid(f"{path}.containerName", name,
                              "must be one of the container or initContainer names in the pod template"))
    values = list(req.get("values") or [])
    if not values:
        causes.append(Cause(f"{path}.values", "FieldValueInvalid",
                            "Invalid value: []int32(nil): at least one value is required"))
    elif len(values) > MAX_EXIT_CODES:
        causes.append(Cause(f"{path}.values", "FieldValueTooMany",
                            f"Too many: {len(values)}: must have at most {MAX_EXIT_CODES} items"))
    seen: set[int] = set()
    for j, value in enumerate(values):
        if op == "In" and value == 0:
            causes.append(invalid(f"{path}.values[{j}]", value, "must not be 0 for the In operator"))
        if value in seen:
            causes.append(duplicate(f"{path}.values[{j}]", value))
        seen.add(value)
    if any(a > b for a, b in itertools.pairwise(values)):
        listed = ", ".join(str(v) for v in values)
        causes.append(Cause(f"{path}.values", "FieldValueInvalid",
                            f"Invalid value: []int32{{{listed}}}: must be ordered"))
    return causes


def _quoted(values: tuple[str, ...]) -> str:
    return "[" + " ".join(f'"{v}"' for v in values) + "]"


def _pod_failure_policy_causes(spec: Mapping[str, Any]) -> list[Cause]:
    policy = spec.get("podFailurePolicy") or {}
    rules = policy.get("rules") or []
    path = "spec.podFailurePolicy.rules"
    causes: list[Cause] = []
    if len(rules) > MAX_RULES:
        causes.append(Cause(path, "FieldValueTooMany",
                            f"Too many: {len(rules)}: must have at most {MAX_RULES} items"))
    pod_spec = (spec.get("template") or {}).get("spec") or {}
    containers = {str(c.get("name") or "") for c in [*(pod_spec.get("containers") or []),
                                                      *(pod_spec.get("initContainers") or [])]}
    for i, rule in enumerate(rules):
        where = f"{path}[{i}]"
        action = rule.get("action") or ""
        if not action:
            causes.append(required(f"{where}.action", "valid values: " + _quoted(ACTIONS)))
        elif action == "FailIndex":
            if spec.get("backoffLimitPerIndex") is None:
                causes.append(invalid(f"{where}.action", action,
                                      "requires the backoffLimitPerIndex to be set"))
        elif action not in ACTIONS:
            causes.append(not_supported(f"{where}.action", action, list(ACTIONS)))
        on_codes, on_conditions = rule.get("onExitCodes"), rule.get("onPodConditions") or []
        if on_codes is not None:
            causes += _exit_codes_causes(on_codes, f"{where}.onExitCodes", containers)
        if len(on_conditions) > MAX_PATTERNS:
            causes.append(Cause(f"{where}.onPodConditions", "FieldValueTooMany",
                                f"Too many: {len(on_conditions)}: must have at most {MAX_PATTERNS} items"))
        for j, pattern in enumerate(on_conditions):
            ppath = f"{where}.onPodConditions[{j}]"
            kind = str(pattern.get("type") or "")
            if not kind:
                causes.append(required(f"{ppath}.type", "name part must be non-empty"))
            else:
                causes += [invalid(f"{ppath}.type", kind, m) for m in label_key_errors(kind)]
            status = pattern.get("status") or ""
            if not status:
                causes.append(required(f"{ppath}.status", "valid values: " + _quoted(CONDITION_STATUSES)))
            elif status not in CONDITION_STATUSES:
                causes.append(not_supported(f"{ppath}.status", status, list(CONDITION_STATUSES)))
        if on_codes is not None and on_conditions:
            causes.append(Cause(where, "FieldValueInvalid", "Invalid value: specifying both OnExitCodes and "
                                                            "OnPodConditions is not supported"))
        if on_codes is None and not on_conditions:
            causes.append(Cause(where, "FieldValueInvalid", "Invalid value: specifying one of OnExitCodes "
                                                            "and OnPodConditions is required"))
    return causes


def _template_causes(spec: Mapping[str, Any]) -> list[Cause]:
    template = spec.get("template") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    causes: list[Cause] = []
    for key, value in labels.items():
        causes += [invalid("spec.template.labels", key, m) for m in label_key_errors(str(key))]
        causes += [invalid("spec.template.labels", value, m) for m in label_value_errors(str(value))]
    pod_spec = template.get("spec") or {}
    causes += validate_pod_spec(pod_spec, "spec.template.spec")
    restart = pod_spec.get("restartPolicy")
    if restart not in ("OnFailure", "Never"):
        causes.append(not_supported("spec.template.spec.restartPolicy", restart or "",
                                    ["OnFailure", "Never"]))
    elif restart == "OnFailure" and spec.get("podFailurePolicy") is not None:
        causes.append(invalid("spec.template.spec.restartPolicy", restart,
                              'only "Never" is supported when podFailurePolicy is specified'))
    if pod_spec.get("activeDeadlineSeconds") is not None:
        causes.append(invalid("spec.template.spec.activeDeadlineSeconds", pod_spec["activeDeadlineSeconds"],
                              "activeDeadlineSeconds in ActiveDeadlineSeconds is not Supported"))
    return causes


def validate(job: Mapping[str, Any]) -> list[Cause]:
    """ValidateJob's spec part (the metadata is the caller's, as for every kind)."""
    spec = job.get("spec") or {}
    causes = _generated_selector_causes(job)
    for name in ("parallelism", "completions", "activeDeadlineSeconds", "backoffLimit",
                 "ttlSecondsAfterFinished"):
        causes += _nonnegative(spec, name)
    mode = spec.get("completionMode")
    if mode not in (None, "NonIndexed", "Indexed"):
        causes.append(not_supported("spec.completionMode", mode, ["NonIndexed", "Indexed"]))
    if mode == "Indexed" and spec.get("completions") is None:
        causes.append(required("spec.completions", "when completion mode is Indexed"))
    replacement = spec.get("podReplacementPolicy")
    if replacement not in (None, "TerminatingOrFailed", "Failed"):
        causes.append(not_supported("spec.podReplacementPolicy", replacement,
                                    ["Failed", "TerminatingOrFailed"]))
    elif replacement == "TerminatingOrFailed" and spec.get("podFailurePolicy") is not None:
        causes.append(not_supported("spec.podReplacementPolicy", replacement, ["Failed"]))
    if spec.get("podFailurePolicy") is not None:
        causes += _pod_failure_policy_causes(spec)
    selector = spec.get("selector")
    if selector is None:
        causes.append(required("spec.selector"))
    else:
        causes += labelselector.validate(selector, "spec.selector")
        labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
        if not labelselector.matches(selector, labels):
            causes.append(Cause("spec.template.metadata.labels", "FieldValueInvalid",
                                "Invalid value: map[string]string{...}: `selector` does not match template "
                                "`labels`"))
    causes += _template_causes(spec)
    return causes


_IMMUTABLE = ("selector", "template", "completions", "completionMode", "podFailurePolicy",
              "backoffLimitPerIndex", "successPolicy", "podReplacementPolicy")


def update_causes(job: Mapping[str, Any], current: Mapping[str, Any]) -> list[Cause]:
    """ValidateJobUpdate's immutable fields (a suspended job's scheduling directives and an indexed job's
    elastic completions are not modelled: they stay immutable here)."""
    causes = validate(job)
    new, old = job.get("spec") or {}, current.get("spec") or {}
    for name in _IMMUTABLE:
        if new.get(name) != old.get(name):
            causes.append(Cause(f"spec.{name}", "FieldValueInvalid",
                                "Invalid value: ...: field is immutable"))
    return causes
