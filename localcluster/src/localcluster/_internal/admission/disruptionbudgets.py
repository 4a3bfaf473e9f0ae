"""PodDisruptionBudget (policy/v1) validation as kube-apiserver v1.37 does it
(pkg/apis/policy/validation/validation.go ValidatePodDisruptionBudgetSpec; pkg/apis/apps/validation
ValidatePositiveIntOrPercent, IsNotMoreThan100Percent). Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from localcluster._internal.apimachinery import labelselector
from localcluster._internal.apimachinery.fielderrors import Cause, fmt_value, invalid, not_supported

POLICIES = ("AlwaysAllow", "IfHealthyBudget")
_PERCENT = re.compile(r"^[0-9]+%$")


def _int_or_percent(value: Any, path: str) -> list[Cause]:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return [invalid(path, value, "must be an integer or percentage (e.g '5%')")]
    if isinstance(value, int):
        return [invalid(path, value, "must be greater than or equal to 0")] if value < 0 else []
    if not _PERCENT.match(value):
        return [invalid(path, value, "a valid percent string must be a numeric string followed by an ending "
                                     "'%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')")]
    if int(value[:-1]) > 100:
        return [invalid(path, value, "must not be greater than 100%")]
    return []


def validate(pdb: Mapping[str, Any]) -> list[Cause]:
    spec = pdb.get("spec") or {}
    causes: list[Cause] = []
    low, high = spec.get("minAvailable"), spec.get("maxUnavailable")
    if low is not None and high is not None:
        causes.append(Cause("spec", "FieldValueInvalid",
                            f"Invalid value: policy.PodDisruptionBudgetSpec{{MinAvailable:{fmt_value(low)}, "
                            f"MaxUnavailable:{fmt_value(high)}}}: minAvailable and maxUnavailable cannot be "
                            "both set"))
    if low is not None:
        causes += _int_or_percent(low, "spec.minAvailable")
    if high is not None:
        causes += _int_or_percent(high, "spec.maxUnavailable")
    causes += labelselector.validate(spec.get("selector"), "spec.selector")
    policy = spec.get("unhealthyPodEvictionPolicy")
    if policy is not None and policy not in POLICIES:
        causes.append(not_supported("spec.unhealthyPodEvictionPolicy", policy, list(POLICIES)))
    return causes
