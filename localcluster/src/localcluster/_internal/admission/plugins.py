"""The admission plugins, in the real server's order (kube-apiserver's AllOrderedPlugins, v1.31): every
mutating plugin runs before the object is validated, every validating one after (the generic registry's
create: admission.Admit, then the strategy's Validate, then admission.Validate):

    mutate:   LimitRanger (defaults)  ->  the hooks (doubles: OpenShift's SCC, Kueue's pod webhook)
    validate: LimitRanger (min/max)  ->  ServiceAccount  ->  Priority  ->  the hooks  ->  PodSecurity
              ->  ValidatingAdmissionPolicy  ->  ResourceQuota

then, for a pod, what the pod strategy sets on create (status.qosClass, from the requests and limits the
plugins have left; a gated pod's SchedulingGated condition, schedulinggates.py). So a LimitRange's default
cpu limit of 1 lands on a pod that requests 10 cpu before validation refuses it ("must be less than or equal
to cpu limit of 1"), as on a real server. The hooks are models of other systems' admission webhooks and
plugins (doubles/: OpenShift's SCC, Kueue's pod webhook); they change a pod in the mutating phase, after the
built-in defaults as a webhook does, and judge it in the validating one. Refusals raise the real 403 (or 422
for bad Pod Security labels and by a policy's reason); `create`, `update` and `delete` return the warnings for
the answer's `Warning` headers. The rules are the pure modules' (limitranges, podsecurity, policies, quota,
qos, schedulinggates); this module only reads the store around them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from localcluster._internal.admission import (
    limitranges,
    podsecurity,
    policies,
    priority,
    quota,
    schedulinggates,
)
from localcluster._internal.apimachinery import labelselector
from localcluster._internal.apimachinery import status as st
from localcluster._internal.apimachinery.fielderrors import status_invalid
from localcluster._internal.auth.identity import UserInfo
from localcluster._internal.podspec.qos import qos_class
from localcluster._internal.storage.registry import BY_KIND, Resource
from localcluster._internal.storage.store import Store, now_iso

log = logging.getLogger(__name__)
audit_log = logging.getLogger("localcluster.audit")  # Pod Security's audit mode: there is no audit log here
Obj = dict[str, Any]
PRIORITY_CLASSES = "priorityclasses.scheduling.k8s.io"


def _name(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return str(meta.get("name") or meta.get("generateName") or "")


class QuotaUsage(Protocol):
    """What quota admission reads: each quota of a namespace with what it counts right now. The quota
    status controller (controllers/quotastatus.py) keeps it, so admission never waits for its pass."""

    def with_usage(self, namespace: str) -> list[tuple[Obj, quota.Usage]]: ...


class AdmissionHook(Protocol):
    """A model of another system's admission plugin (doubles/): it may change a pod before validation and
    refuse it after, raising an ApiStatus."""

    def mutate_pod(self, pod: Obj, namespace: Mapping[str, Any], user: UserInfo) -> None: ...

    def validate_pod(self, pod: Obj, namespace: Mapping[str, Any], user: UserInfo) -> None: ...


class AdmissionPlugins:
    def __init__(self, *, store: Store, quotas: QuotaUsage,
                 pod_security: podsecurity.Policy = podsecurity.PRIVILEGED_POLICY,
                 hooks: Sequence[AdmissionHook] = ()) -> None:
        self.store = store
        self.quotas = quotas
        self.pod_security = pod_security   # the cluster's defaults, for namespaces without labels
        self.hooks = tuple(hooks)

    def namespace_policy(self, namespace: str) -> podsecurity.Policy:
        ns = self.store.get("namespaces", None, namespace) or {}
        labels = (ns.get("metadata") or {}).get("labels") or {}
        return podsecurity.policy_of(labels, self.pod_security)[0]

    # ---- mutating admission: before validation -------------------------------------------------------------
    def mutate_create(self, r: Resource, obj: Obj, user: UserInfo) -> None:
        """The mutating plugins on a create: a pod gets its LimitRange defaults, then the hooks' changes."""
        if r.key != "pods":
            return
        namespace = obj["metadata"].get("namespace") or ""
        limitranges.apply_defaults(obj, self._limit_ranges(namespace))
        ns = self.store.get("namespaces", None, namespace) or {}
        for hook in self.hooks:
            hook.mutate_pod(obj, ns, user)

    def _limit_ranges(self, namespace: str) -> list[Obj]:
        return sorted(self.store.objects("limitranges", namespace), key=lambda o: o["metadata"]["name"])

    # ---- create --------------------------------------------------------------------------------------------
    def create(self, r: Resource, obj: Obj, user: UserInfo, *, dry_run: bool = False) -> list[str]:
        if r.key == "namespaces":
            self._check_labels(obj)
            return self._policies(r, "CREATE", obj, None, user, dry_run)
        if r.key == "limitranges":
            limitranges.default_limit_range(obj)
        if r.key == PRIORITY_CLASSES:
            self._admit_priority_class(obj, creating=True)
        warnings: list[str] = []
        if r.key == "pods":
            warnings = self._admit_pod(obj, user)
        warnings += self._policies(r, "CREATE", obj, None, user, dry_run)
        if r.namespaced and r.stored:
            self._admit_quota(r, obj)
        if r.key == "pods":
            obj.setdefault("status", {})["qosClass"] = qos_class(obj)
            schedulinggates.apply_on_create(obj, now=now_iso())
        return warnings

    def _admit_pod(self, pod: Obj, user: UserInfo) -> list[str]:
        namespace, name = pod["metadata"]["namespace"], _name(pod)
        errors = limitranges.violations(pod, self._limit_ranges(namespace))
        if errors:
            raise st.forbidden(f'pods "{name}" is forbidden: {limitranges.message(errors)}', resource="pods",
                               name=name)
        sa = pod["spec"].get("serviceAccountName") or "default"
        if self.store.get("serviceaccounts", namespace, sa) is None:
            raise st.forbidden(f'pods "{name}" is forbidden: error looking up service account '
                               f'{namespace}/{sa}: serviceaccount "{sa}" not found', resource="pods",
                               name=name)
        # Priority (mutating) before PodSecurity (validating), as kube-apiserver runs its phases
        classes = {pc["metadata"]["name"]: pc for pc in self.store.objects(PRIORITY_CLASSES)}
        why = priority.admit_pod(pod, classes)
        if why:
            raise st.forbidden(f'pods "{name}" is forbidden: {why}', resource="pods", name=name)
        ns = self.store.get("namespaces", None, namespace) or {}
        for hook in self.hooks:
            hook.validate_pod(pod, ns, user)
        return self._pod_security(pod, name, namespace)

    def _pod_security(self, pod: Obj, name: str, namespace: str) -> list[str]:
        verdict = podsecurity.admit_pod(pod, name, self.namespace_policy(namespace))
        if verdict.audit:
            audit_log.info('audit: pods "%s" in namespace %s: %s', name, namespace, verdict.audit)
        if verdict.forbidden:
            raise st.forbidden(verdict.forbidden, resource="pods", name=name)
        return list(verdict.warnings)

    def _admit_quota(self, r: Resource, obj: Obj) -> None:
        namespace = obj["metadata"].get("namespace") or ""
        if not self.store.keys("resourcequotas", namespace):
            return
        why = quota.admit(r.plural, r.group, obj, self.quotas.with_usage(namespace))
        if why is not None:
            name = _name(obj)
            qualified = r.plural if not r.group else f"{r.plural}.{r.group}"
            raise st.forbidden(f'{qualified} "{name}" is forbidden: {why}', resource=r.plural, name=name,
                               group=r.group)

    # ---- ValidatingAdmissionPolicy -------------------------------------------------------------------------
    def _policies(self, r: Resource, operation: str, obj: Obj | None, old: Obj | None, user: UserInfo,
                  dry_run: bool, subresource: str = "") -> list[str]:
        """The cluster's ValidatingAdmissionPolicies and their bindings (policies.py) on one write."""
        found = self.store.objects(policies.POLICIES_KEY, None)
        if not found:
            return []
        some = obj if obj is not None else old or {}
        meta = some.get("metadata") or {}
        namespace = str(meta.get("namespace") or "") if r.namespaced else ""
        attributes = policies.Attributes(
            operation=operation, group=r.group, version=r.version, resource=r.plural, kind=r.kind,
            name=_name(some), namespace=namespace, user=user.to_dict(), obj=obj, old=old,
            subresource=subresource, dry_run=dry_run)
        ns = self.store.get("namespaces", None, namespace) if namespace else None
        outcome = policies.admit(found, self.store.objects(policies.BINDINGS_KEY, None), attributes,
                                 namespace=ns, params=self._params)
        for line in outcome.audit:
            audit_log.info("validation.policy.admission.k8s.io/validation_failure: %s", line)
        if outcome.denial is not None:
            qualified = r.plural if not r.group else f"{r.plural}.{r.group}"
            message = f'{qualified} "{attributes.name}" is forbidden: {outcome.denial.message}'
            # admission.NewForbidden's Status, its reason and code the validation's, its cause the policy's
            cause = {"message": outcome.denial.message}
            details = {"name": attributes.name, "kind": r.plural, "causes": [cause]}
            if r.group:
                details["group"] = r.group
            raise st.ApiStatus(outcome.denial.code, outcome.denial.reason, message, details=details)
        return list(outcome.warnings)

    def _params(self, kind: Mapping[str, Any], ref: Mapping[str, Any], namespace: str) -> list[Obj] | None:
        """The param objects a binding's paramRef names, of the policy's paramKind (BY_KIND)."""
        resource = BY_KIND.get((str(kind.get("apiVersion") or ""), str(kind.get("kind") or "")))
        if resource is None:
            return None
        where = (str(ref.get("namespace") or "") or namespace) if resource.namespaced else None
        if ref.get("name"):
            one = self.store.get(resource.key, where, str(ref["name"]))
            return [one] if one is not None else []
        selector = labelselector.as_selector(ref.get("selector") or {})
        return [o for o in self.store.objects(resource.key, where)
                if selector.matches((o.get("metadata") or {}).get("labels"))]

    def delete(self, r: Resource, current: Obj, user: UserInfo, *, dry_run: bool = False) -> list[str]:
        """A delete meets the validating policies too (operation DELETE, oldObject the object)."""
        return self._policies(r, "DELETE", None, current, user, dry_run)

    # ---- update --------------------------------------------------------------------------------------------
    def update(self, r: Resource, obj: Obj, current: Obj, user: UserInfo, *, dry_run: bool = False,
               subresource: str = "") -> list[str]:
        if r.key == PRIORITY_CLASSES:
            self._admit_priority_class(obj, creating=False)
        if r.key == "namespaces":
            warnings = self._namespace_update(obj, current)
        elif r.key == "pods" and podsecurity.significant_update(obj, current):
            warnings = self._pod_security(obj, _name(obj), obj["metadata"]["namespace"])
        else:
            warnings = []
        return warnings + self._policies(r, "UPDATE", obj, current, user, dry_run, subresource)

    def _admit_priority_class(self, pc: Obj, *, creating: bool) -> None:
        why = priority.admit_class(pc, self.store.objects(PRIORITY_CLASSES), creating=creating)
        if why:
            name = _name(pc)
            raise st.forbidden(f'priorityclasses.scheduling.k8s.io "{name}" is forbidden: {why}',
                               resource="priorityclasses", name=name, group="scheduling.k8s.io")

    def _check_labels(self, obj: Obj, old: Obj | None = None) -> podsecurity.Policy:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        policy, causes = podsecurity.policy_of(labels, self.pod_security)
        old_causes = podsecurity.policy_of(((old or {}).get("metadata") or {}).get("labels") or {},
                                           self.pod_security)[1] if old is not None else []
        # upstream refuses bad labels on create, and on update only when they changed
        if causes and (old is None or [str(c) for c in causes] != [str(c) for c in old_causes]):
            body = status_invalid("Namespace", _name(obj), causes)
            raise st.ApiStatus(422, "Invalid", body["message"], details=body["details"])
        return policy

    def _namespace_update(self, obj: Obj, current: Obj) -> list[str]:
        new = self._check_labels(obj, current)
        old = podsecurity.policy_of((current.get("metadata") or {}).get("labels") or {}, self.pod_security)[0]
        name = _name(obj)
        return podsecurity.namespace_update_warnings(name, new, old, self.store.objects("pods", name))
