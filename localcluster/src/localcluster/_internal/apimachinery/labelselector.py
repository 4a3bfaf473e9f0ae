"""metav1.LabelSelector (matchLabels, matchExpressions) as the object form workloads carry: validation with
the real field errors (k8s.io/apimachinery/pkg/apis/meta/v1/validation ValidateLabelSelector, v1.37) and
matching (metav1.LabelSelectorAsSelector).

An absent selector (None) and an empty one ({}) differ, and which means what is the caller's: a Job
always has one, a PodDisruptionBudget's null selector selects no pod while `{}` selects every pod of its
namespace (policy/v1 PodDisruptionBudgetSpec.selector).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from localcluster._internal.apimachinery.fielderrors import Cause, invalid, required
from localcluster._internal.apimachinery.names import label_key_errors, label_value_errors
from localcluster._internal.apimachinery.selectors import LabelSelector, Requirement

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
_AS_REQUIREMENT = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}


def validate(selector: Mapping[str, Any] | None, path: str) -> list[Cause]:
    """ValidateLabelSelector: every key a label key, every matchLabels value a label value, operators known,
    values present for In/NotIn and absent for Exists/DoesNotExist."""
    if selector is None:
        return []
    causes: list[Cause] = []
    for i, expr in enumerate(selector.get("matchExpressions") or []):
        where = f"{path}.matchExpressions[{i}]"
        op, values = expr.get("operator") or "", list(expr.get("values") or [])
        if op in ("In", "NotIn"):
            if not values:
                causes.append(required(f"{where}.values", "must be specified when `operator` is 'In' or "
                                                           "'NotIn'"))
        elif op in ("Exists", "DoesNotExist"):
            if values:
                causes.append(Cause(f"{where}.values", "FieldValueForbidden",
                                    "Forbidden: may not be specified when `operator` is 'Exists' or "
                                    "'DoesNotExist'"))
        else:
            causes.append(invalid(f"{where}.operator", op, "not a valid selector operator"))
        key = str(expr.get("key") or "")
        causes += [invalid(f"{where}.key", key, m) for m in label_key_errors(key)]
    for key, value in (selector.get("matchLabels") or {}).items():
        causes += [invalid(f"{path}.matchLabels", key, m) for m in label_key_errors(str(key))]
        causes += [invalid(f"{path}.matchLabels", value, m) for m in label_value_errors(str(value))]
    return causes


def as_selector(selector: Mapping[str, Any]) -> LabelSelector:
    """The selector's requirements (LabelSelectorAsSelector); {} has none and so matches everything."""
    requirements = [Requirement(str(key), "=", (str(value),))
                    for key, value in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        op = _AS_REQUIREMENT.get(str(expr.get("operator") or ""))
        if op is None:
            # an unknown operator matches nothing, as LabelSelectorAsSelector's error leaves the caller
            return LabelSelector((Requirement("", "in", ()),))
        requirements.append(Requirement(str(expr.get("key") or ""), op,
                                        tuple(str(v) for v in expr.get("values") or [])))
    return LabelSelector(tuple(requirements))


def matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str] | None) -> bool:
    """Whether a present selector selects these labels; None selects nothing."""
    if selector is None:
        return False
    return as_selector(selector).matches(labels or {})

