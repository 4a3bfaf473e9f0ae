"""ValidatingAdmissionPolicy, pure: which policies and bindings match a write, what their CEL validations
decide, and the answer the API server gives (k8s.io/apiserver/pkg/admission/plugin/policy/validating,
dispatcher.go and validator.go, and policy/matching, v1.31).

- A policy matches by `spec.matchConstraints` (resourceRules, excludeResourceRules, namespaceSelector,
  objectSelector); each of its bindings (`spec.policyName`) narrows that by its own `matchResources`, then the
  policy's `matchConditions` must all be true (one false: skipped; an error: the failure policy).
- Params: with `paramKind`, the binding's `paramRef` names one object (or a selector, several); none found
  and `parameterNotFoundAction: Deny` is a configuration error ("failed to configure binding: no params
  found for policy binding with `Deny` parameterNotFoundAction"), `Allow` skips the binding. The
  validations run once per param.
- CEL variables: object, oldObject, request, params, namespaceObject and variables (spec.variables, each
  evaluated in order; a variable whose expression fails is left out, so using it fails as a missing key).
- A validation that is not true denies, with `messageExpression`'s string (trimmed, one line), else
  `message`, else "failed expression: EXPR", and the status of its `reason` (Invalid, 422, by default). A
  validation that fails to evaluate: under failurePolicy Fail (the default) a denial "expression 'EXPR'
  resulted in error: WHY"; under Ignore, nothing.
- Each binding's `validationActions`: Deny refuses the write with the first denial, as
  `ValidatingAdmissionPolicy 'P' with binding 'B' denied request: MESSAGE`; Warn adds the warning
  `Validation failed for ValidatingAdmissionPolicy 'P' with binding 'B': MESSAGE`; Audit records it.

Not modelled: auditAnnotations (compiled and checked, never published), matchPolicy Equivalent (the local
server serves one version of each resource), the authorizer variable, cost budgets, status.typeChecking.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from localcluster._internal.admission import cel
from localcluster._internal.apimachinery.fielderrors import Cause, invalid
from localcluster._internal.apimachinery.labelselector import as_selector

Obj = dict[str, Any]
GROUP = "admissionregistration.k8s.io"
POLICIES_KEY = f"validatingadmissionpolicies.{GROUP}"        # their keys in the store
BINDINGS_KEY = f"validatingadmissionpolicybindings.{GROUP}"
VARIABLES = ("object", "oldObject", "request", "params", "namespaceObject", "variables")
CODES = {"Invalid": 422, "Forbidden": 403, "Unauthorized": 401, "RequestEntityTooLarge": 413}


@dataclass(frozen=True)
class Attributes:
    """One write, as admission sees it (admission.Attributes)."""

    operation: str                 # CREATE, UPDATE, DELETE
    group: str
    version: str
    resource: str                  # the plural
    kind: str
    name: str
    namespace: str                 # "" for a cluster-scoped object
    user: Mapping[str, Any]        # userInfo: username, uid, groups
    obj: Mapping[str, Any] | None = None
    old: Mapping[str, Any] | None = None
    subresource: str = ""
    dry_run: bool = False


@dataclass(frozen=True)
class Denial:
    code: int
    reason: str
    message: str   # the part after `<resource> "<name>" is forbidden: `


@dataclass(frozen=True)
class Outcome:
    denial: Denial | None = None
    warnings: tuple[str, ...] = ()
    audit: tuple[str, ...] = ()


@dataclass
class _Decisions:
    denials: list[tuple[Denial, str, str | None]] = field(default_factory=list)  # (denial, policy, binding)
    warnings: list[str] = field(default_factory=list)
    audit: list[str] = field(default_factory=list)


Params = Callable[[Mapping[str, Any], Mapping[str, Any], str], list[Obj] | None]
"""(paramKind, paramRef, the request's namespace) -> the param objects; None: paramKind is not served."""


# ---- matching ---------------------------------------------------------------------------------------------
def _listed(values: Sequence[str] | None, value: str) -> bool:
    return bool(values) and ("*" in (values or ()) or value in (values or ()))


def rule_matches(rule: Mapping[str, Any], a: Attributes) -> bool:
    """One NamedRuleWithOperations (rules.go): operations, groups, versions, resources with their
    subresources (`*`, `pods/*`, `*/status`), scope and resourceNames."""
    if not (_listed(rule.get("operations"), a.operation) and _listed(rule.get("apiGroups"), a.group)
            and _listed(rule.get("apiVersions"), a.version)):
        return False
    resource_ok = False
    for entry in rule.get("resources") or []:
        res, _, sub = str(entry).partition("/")
        if (res == "*" or res == a.resource) and (sub == "*" or sub == a.subresource):
            resource_ok = True
            break
    if not resource_ok:
        return False
    scope = rule.get("scope") or "*"
    if (scope == "Cluster" and a.namespace) or (scope == "Namespaced" and not a.namespace):
        return False
    names = rule.get("resourceNames") or []
    return not names or a.name in names


def resources_match(match: Mapping[str, Any] | None, a: Attributes,
                    namespace_labels: Mapping[str, str] | None, *, rules_required: bool) -> bool:
    """MatchResources (matching.go): the namespace and object selectors, then the resource rules (a
    binding without rules takes every resource its policy matches), minus the excluded ones."""
    match = match or {}
    if a.namespace:
        if not as_selector(match.get("namespaceSelector") or {}).matches(namespace_labels or {}):
            return False
    elif a.resource == "namespaces" and not a.group:  # a Namespace is matched by its own labels
        own = ((a.obj or a.old or {}).get("metadata") or {}).get("labels") or {}
        if not as_selector(match.get("namespaceSelector") or {}).matches(own):
            return False
    selector = as_selector(match.get("objectSelector") or {})
    labels = [((o.get("metadata") or {}).get("labels") or {}) for o in (a.obj, a.old) if o is not None]
    if not any(selector.matches(found) for found in labels or [{}]):
        return False
    rules = match.get("resourceRules") or []
    if rules and not any(rule_matches(rule, a) for rule in rules):
        return False
    if not rules and rules_required:
        return False
    return not any(rule_matches(rule, a) for rule in match.get("excludeResourceRules") or [])


# ---- the CEL variables -------------------------------------------------------------------------------------
def request_object(a: Attributes) -> Obj:
    """The `request` variable: the AdmissionRequest (cel.CreateAdmissionRequest)."""
    kind = {"group": a.group, "version": a.version, "kind": a.kind}
    resource = {"group": a.group, "version": a.version, "resource": a.resource}
    out: Obj = {"kind": kind, "resource": resource, "requestKind": kind, "requestResource": resource,
                "name": a.name, "namespace": a.namespace, "operation": a.operation,
                "userInfo": dict(a.user), "dryRun": a.dry_run}
    if a.subresource:
        out["subResource"] = out["requestSubResource"] = a.subresource
    return out


def namespace_object(namespace: Mapping[str, Any] | None) -> Obj | None:
    """The `namespaceObject` variable: the namespace's metadata, spec and status
    (cel.CreateNamespaceObject)."""
    if namespace is None:
        return None
    meta = namespace.get("metadata") or {}
    kept = {k: meta[k] for k in ("name", "generateName", "namespace", "labels", "annotations", "uid",
                                  "creationTimestamp", "deletionTimestamp") if k in meta}
    return {"metadata": kept, "spec": dict(namespace.get("spec") or {}),
            "status": dict(namespace.get("status") or {})}


def _value(expression: str, bindings: Mapping[str, Any]) -> Any:
    return cel.evaluate(cel.compile_expression(expression, VARIABLES), bindings)


# ---- one policy ------------------------------------------------------------------------------------------
def _failure_policy(policy: Mapping[str, Any]) -> str:
    return str((policy.get("spec") or {}).get("failurePolicy") or "Fail")


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _validate(policy: Mapping[str, Any], bindings: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    """[(result, message)] per validation: result "admit", "deny" (message, reason) or "error"."""
    spec = policy.get("spec") or {}
    results: list[tuple[str, str | None]] = []
    for validation in spec.get("validations") or []:
        expression = str(validation.get("expression") or "")
        try:
            verdict = _value(expression, bindings)
        except (cel.EvalError, cel.CompileError) as error:
            results.append(("error", f"expression '{expression}' resulted in error: {error}"))
            continue
        if verdict is True:
            results.append(("admit", None))
            continue
        message = ""
        if validation.get("messageExpression"):
            try:
                text = _value(str(validation["messageExpression"]), bindings)
            except (cel.EvalError, cel.CompileError):
                text = None
            if isinstance(text, str) and "\n" not in text.strip():
                message = text.strip()
        if not message and validation.get("message"):
            message = str(validation["message"]).strip()
        results.append(("deny:" + str(validation.get("reason") or "Invalid"),
                        message or f"failed expression: {expression.strip()}"))
    return results


def _variables(policy: Mapping[str, Any], bindings: Obj) -> None:
    values: Obj = {}
    bindings["variables"] = values
    for variable in (policy.get("spec") or {}).get("variables") or []:
        try:
            values[str(variable.get("name"))] = _value(str(variable.get("expression") or ""), bindings)
        except (cel.EvalError, cel.CompileError):
            continue


def _conditions(policy: Mapping[str, Any], bindings: Mapping[str, Any]) -> bool | str:
    """True when every matchCondition holds, False when one does not, the error's text when one fails."""
    for condition in (policy.get("spec") or {}).get("matchConditions") or []:
        expression = str(condition.get("expression") or "")
        try:
            if _value(expression, bindings) is not True:
                return False
        except (cel.EvalError, cel.CompileError) as error:
            return f"expression '{expression}' resulted in error: {error}"
    return True


def _record(decisions: _Decisions, binding: Mapping[str, Any], policy: str, message: str,
            reason: str) -> None:
    name = _name(binding)
    for action in (binding.get("spec") or {}).get("validationActions") or []:
        if action == "Deny":
            decisions.denials.append((Denial(CODES.get(reason, 422), reason, message), policy, name))
        elif action == "Warn":
            decisions.warnings.append(f"Validation failed for ValidatingAdmissionPolicy '{policy}' with "
                                      f"binding '{name}': {message}")
        elif action == "Audit":
            decisions.audit.append(f"{policy}/{name}: {message}")


def admit(policies: Iterable[Mapping[str, Any]], bindings: Iterable[Mapping[str, Any]], a: Attributes, *,
          namespace: Mapping[str, Any] | None, params: Params) -> Outcome:
    """Every policy and binding that match `a`, evaluated; the refusal is the first denial."""
    by_policy: dict[str, list[Mapping[str, Any]]] = {}
    for binding in sorted(bindings, key=_name):
        by_policy.setdefault(str((binding.get("spec") or {}).get("policyName") or ""), []).append(binding)
    namespace_labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
    decisions = _Decisions()
    for policy in sorted(policies, key=_name):
        name, spec = _name(policy), policy.get("spec") or {}
        if not resources_match(spec.get("matchConstraints"), a, namespace_labels, rules_required=True):
            continue
        fail = _failure_policy(policy) == "Fail"
        for binding in by_policy.get(name, []):
            bspec = binding.get("spec") or {}
            if not resources_match(bspec.get("matchResources"), a, namespace_labels, rules_required=False):
                continue
            found: list[Obj | None] = [None]
            if spec.get("paramKind"):
                ref = bspec.get("paramRef") or {}
                objects = params(spec["paramKind"], ref, a.namespace) if ref else None
                if not objects:
                    if ref and ref.get("parameterNotFoundAction") == "Allow":
                        continue
                    if fail:
                        why = ("no params found for policy binding with `Deny` parameterNotFoundAction" if ref
                               else "paramRef is required when paramKind is set")
                        config = Denial(422, "Invalid", f"failed to configure binding: {why}")
                        decisions.denials.append((config, name, _name(binding)))
                    continue
                found = list(objects)
            for param in found:
                bound: Obj = {"object": a.obj, "oldObject": a.old, "request": request_object(a),
                              "params": param, "namespaceObject": namespace_object(namespace)}
                _variables(policy, bound)
                matched = _conditions(policy, bound)
                if matched is False:
                    continue
                if isinstance(matched, str):
                    if fail:
                        _record(decisions, binding, name, matched, "Invalid")
                    continue
                for result, message in _validate(policy, bound):
                    if result == "error" and fail:
                        _record(decisions, binding, name, str(message), "Invalid")
                    elif result.startswith("deny:"):
                        _record(decisions, binding, name, str(message), result.partition(":")[2])
    denial = None
    if decisions.denials:
        first, policy_name, binding_name = decisions.denials[0]
        denial = Denial(first.code, first.reason, f"ValidatingAdmissionPolicy '{policy_name}' with binding "
                                                  f"'{binding_name}' denied request: {first.message}")
    return Outcome(denial=denial, warnings=tuple(decisions.warnings), audit=tuple(decisions.audit))


# ---- validating the policy objects themselves --------------------------------------------------------------
def policy_causes(obj: Mapping[str, Any]) -> list[Cause]:
    """What ValidateValidatingAdmissionPolicy refuses that a local cluster checks: expressions that do not
    compile (`spec.validations[0].expression: Invalid value: "...": compilation failed: ERROR: ...`), a
    policy without validations or audit annotations, a validation without an expression, a bad
    failurePolicy."""
    spec = obj.get("spec") or {}
    causes: list[Cause] = []
    places = [("validations", "expression"), ("validations", "messageExpression"),
              ("matchConditions", "expression"), ("variables", "expression"),
              ("auditAnnotations", "valueExpression")]
    for section, key in places:
        for i, item in enumerate(spec.get(section) or []):
            expression = item.get(key)
            if key == "expression" and not expression:
                causes.append(Cause(f"spec.{section}[{i}].{key}", "FieldValueRequired", "Required value"))
                continue
            if expression:
                try:
                    cel.compile_expression(str(expression), VARIABLES)
                except cel.CompileError as error:
                    causes.append(invalid(f"spec.{section}[{i}].{key}", str(expression), str(error)))
    if not spec.get("validations") and not spec.get("auditAnnotations"):
        causes.append(Cause("spec.validations", "FieldValueRequired",
                            "Required value: validations or auditAnnotations must contain at least one item"))
    policy = spec.get("failurePolicy")
    if policy is not None and policy not in ("Fail", "Ignore"):
        causes.append(Cause("spec.failurePolicy", "FieldValueNotSupported",
                            f'Unsupported value: "{policy}": supported values: "Fail", "Ignore"'))
    return causes


def binding_causes(obj: Mapping[str, Any]) -> list[Cause]:
    """A binding needs a policy name and at least one known validation action."""
    spec = obj.get("spec") or {}
    causes: list[Cause] = []
    if not spec.get("policyName"):
        causes.append(Cause("spec.policyName", "FieldValueRequired", "Required value"))
    actions = spec.get("validationActions") or []
    if not actions:
        causes.append(Cause("spec.validationActions", "FieldValueRequired", "Required value"))
    for i, action in enumerate(actions):
        if action not in ("Deny", "Warn", "Audit"):
            causes.append(Cause(f"spec.validationActions[{i}]", "FieldValueNotSupported",
                                f'Unsupported value: "{action}": supported values: "Audit", "Deny", "Warn"'))
    return causes
