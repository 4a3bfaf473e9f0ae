"""The admission plugins that run after a write has been decoded, defaulted and validated, in the real
server's order (kube-apiserver's AllOrderedPlugins):

    LimitRanger (defaults, then min/max)  ->  ServiceAccount  ->  PodSecurity  ->  ResourceQuota

then, for a pod, what the pod strategy sets on create (status.qosClass, from the requests and limits the
plugins have left; a gated pod's SchedulingGated condition, schedulinggates.py). The hooks, models of other
systems' admission webhooks (doubles/: Kueue's pod webhook), change a pod first, before the plugins judge it.
Refusals raise the real 403 (or 422 for bad Pod Security labels); `create` and `update` return the warnings
for the answer's `Warning` headers. The rules are the pure modules' (limitranges, podsecurity, quota, qos);
this module only reads the store around them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from localcluster._internal.admission import limitranges, podsecurity, quota, schedulinggates
from localcluster._internal.apimachinery import status as st
from localcluster._internal.apimachinery.fielderrors import status_invalid
from localcluster._internal.auth.identity import UserInfo
from localcluster._internal.podspec.qos import qos_class
from localcluster._internal.storage.registry import Resource
from localcluster._internal.storage.store import Store, now_iso

log = logging.getLogger(__name__)
audit_log = logging.getLogger("localcluster.audit")  # Pod Security's audit mode: there is no audit log here
Obj = dict[str, Any]


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

    # ---- create --------------------------------------------------------------------------------------------
    def create(self, r: Resource, obj: Obj, user: UserInfo) -> list[str]:
        if r.key == "namespaces":
            self._check_labels(obj)
            return []
        if r.key == "limitranges":
            limitranges.default_limit_range(obj)
        warnings: list[str] = []
        if r.key == "pods":
            self._hooks(obj, user)
            warnings = self._admit_pod(obj)
        if r.namespaced and r.stored:
            self._admit_quota(r, obj)
        if r.key == "pods":
            obj.setdefault("status", {})["qosClass"] = qos_class(obj)
            schedulinggates.apply_on_create(obj, now=now_iso())
        return warnings

    def _hooks(self, pod: Obj, user: UserInfo) -> None:
        if not self.hooks:
            return
        namespace = self.store.get("namespaces", None, pod["metadata"].get("namespace") or "") or {}
        for hook in self.hooks:
            hook.mutate_pod(pod, namespace, user)
        for hook in self.hooks:
            hook.validate_pod(pod, namespace, user)

    def _admit_pod(self, pod: Obj) -> list[str]:
        namespace, name = pod["metadata"]["namespace"], _name(pod)
        ranges = sorted(self.store.objects("limitranges", namespace), key=lambda o: o["metadata"]["name"])
        limitranges.apply_defaults(pod, ranges)
        errors = limitranges.violations(pod, ranges)
        if errors:
            raise st.forbidden(f'pods "{name}" is forbidden: {limitranges.message(errors)}', resource="pods",
                               name=name)
        sa = pod["spec"].get("serviceAccountName") or "default"
        if self.store.get("serviceaccounts", namespace, sa) is None:
            raise st.forbidden(f'pods "{name}" is forbidden: error looking up service account '
                               f'{namespace}/{sa}: serviceaccount "{sa}" not found', resource="pods",
                               name=name)
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

    # ---- update --------------------------------------------------------------------------------------------
    def update(self, r: Resource, obj: Obj, current: Obj, user: UserInfo) -> list[str]:
        if r.key == "namespaces":
            return self._namespace_update(obj, current)
        if r.key == "pods" and podsecurity.significant_update(obj, current):
            return self._pod_security(obj, _name(obj), obj["metadata"]["namespace"])
        return []

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
