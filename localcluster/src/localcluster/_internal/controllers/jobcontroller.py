"""The Job controller and the TTL-after-finished controller as one loop over the store: the decisions are
jobs.py's; this module finds a Job's pods (claiming orphans its selector matches, releasing those it no
longer matches), creates pods through the same defaulting, validation and admission as an API create, deletes
them gracefully, removes tracking finalizers, writes the status and records the controller's events.

What the real kube-controller-manager's informers and work queue do (kubernetes v1.37
pkg/controller/job/job_controller.go: addPod/updatePod/deletePod, handleOrphanPod, the per-Job rate-limited
queue; pkg/controller/ttlafterfinished) is a timed queue of Job keys fed by a store listener. The listener
runs inside a write, so it only queues.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import random
import time
from collections.abc import Callable
from typing import Any

from localcluster._internal.admission import defaults
from localcluster._internal.admission.jobs import TRACKING_FINALIZER
from localcluster._internal.admission.plugins import AdmissionPlugins
from localcluster._internal.admission.writes import validate
from localcluster._internal.apimachinery import labelselector
from localcluster._internal.apimachinery import status as st
from localcluster._internal.auth.identity import UserInfo
from localcluster._internal.controllers import jobs
from localcluster._internal.controllers.delayqueue import DelayQueue
from localcluster._internal.controllers.events import EventRecorder
from localcluster._internal.storage.registry import BY_KEY, Resource
from localcluster._internal.storage.store import DELETED, Event, NotFound, Store

log = logging.getLogger(__name__)
Obj = dict[str, Any]
JOBS = "jobs.batch"
COMPONENT = "job-controller"
USER = UserInfo("system:serviceaccount:kube-system:job-controller",
                ("system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"))
API_BACKOFF = (1.0, 60.0)       # DefaultJobApiBackOff, MaxJobApiBackOff: a sync that failed is retried
BATCH = 0.05                    # pod events for one Job settle this long before it syncs (upstream: 1 s)
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"   # utilrand.String's alphabet
Delete = Callable[[Resource, Obj, Obj], Any]       # Controllers.delete(resource, current, options)
AfterUpdate = Callable[[Resource, Obj], None]


def _controller_ref(obj: Obj) -> Obj | None:
    return next((r for r in (obj.get("metadata") or {}).get("ownerReferences") or [] if r.get("controller")),
                None)


def _job_ref(pod: Obj) -> Obj | None:
    ref = _controller_ref(pod)
    if ref is not None and ref.get("kind") == "Job" and str(ref.get("apiVersion", "")).startswith("batch/"):
        return ref
    return None


class JobController:
    def __init__(self, *, store: Store, admission: AdmissionPlugins, events: EventRecorder, delete: Delete,
                 after_update: AfterUpdate, pod_failure_backoff: float = 10.0,
                 max_pod_failure_backoff: float = 600.0) -> None:
        self.store = store
        self.admission = admission
        self.events = events
        self._delete = delete
        self._after_update = after_update
        self.base_backoff = pod_failure_backoff
        self.max_backoff = max_pod_failure_backoff
        self._queue: DelayQueue[tuple[str, str]] = DelayQueue()   # job keys
        self._orphans: set[tuple[str, str]] = set()               # pods whose tracking finalizer may go
        self._backoff: dict[str, jobs.Backoff] = {}               # job uid -> pod failure back-off record
        self._errors: dict[tuple[str, str], int] = {}             # job key -> failed syncs in a row
        store.add_listener(self._on_event)

    # ---- the queue ---------------------------------------------------------------------------------------
    def queue(self, namespace: str, name: str, *, after: float = 0.0) -> None:
        self._queue.add((namespace, name), after=after)

    def _on_event(self, event: Event) -> None:
        obj = event.new.obj
        meta = obj["metadata"]
        if event.resource == JOBS:
            if event.type == DELETED:
                self._backoff.pop(meta.get("uid", ""), None)
                return
            self.queue(meta.get("namespace", ""), meta["name"])
            return
        if event.resource != "pods":
            return
        namespace = meta.get("namespace", "")
        refs = [r for r in (_job_ref(obj), _job_ref(event.old.obj) if event.old is not None else None) if r]
        for ref in refs:
            self.queue(namespace, str(ref.get("name", "")), after=BATCH)
        if TRACKING_FINALIZER in (meta.get("finalizers") or []) and event.type != DELETED:
            self._orphans.add((namespace, meta["name"]))
            self._queue.wake()
        if not refs and _controller_ref(obj) is None and event.type != DELETED:
            # an orphan: any Job whose selector matches may adopt it
            for job in self.store.objects(JOBS, namespace):
                if labelselector.matches((job.get("spec") or {}).get("selector"), meta.get("labels")):
                    self.queue(namespace, job["metadata"]["name"], after=BATCH)

    async def run(self) -> None:
        while True:
            for key in self._queue.pop_due():
                self._sync_guarded(key)
            orphans, self._orphans = self._orphans, set()
            for key in sorted(orphans):
                try:
                    self._handle_orphan(*key)
                except Exception:
                    log.exception("orphan pod %s/%s not handled", *key)
            await self._queue.wait(poll=lambda: bool(self._orphans))
            await asyncio.sleep(0)

    def _sync_guarded(self, key: tuple[str, str]) -> None:
        try:
            self.sync(*key)
            self._errors.pop(key, None)
        except Exception as error:
            failures = self._errors.get(key, 0) + 1
            self._errors[key] = failures
            delay = min(API_BACKOFF[1], API_BACKOFF[0] * 2 ** (failures - 1))
            if not isinstance(error, st.ApiStatus):
                log.exception("syncing job %s/%s failed", *key)
            self.queue(*key, after=delay)

    # ---- one Job -----------------------------------------------------------------------------------------
    def sync(self, namespace: str, name: str) -> None:
        job = self.store.get(JOBS, namespace, name)
        if job is None:
            return
        ttl_at = jobs.ttl_expiry(job)
        if jobs.is_finished(job):
            self._backoff.pop(job["metadata"]["uid"], None)
            if ttl_at is not None:
                self._expire(job, ttl_at)
            return
        pods = self._claim(job)
        uid = job["metadata"]["uid"]
        plan = jobs.plan(job, pods, now=time.time(), backoff=self._backoff.get(uid, jobs.Backoff()),
                         base_backoff=self.base_backoff, max_backoff=self.max_backoff)
        self._backoff[uid] = plan.backoff
        errors: list[st.ApiStatus] = []
        by_name = {p["metadata"]["name"]: p for p in pods}
        for pod_name in plan.delete:
            self._delete_pod(job, by_name[pod_name])
        if plan.create:
            errors += self._create_pods(job, plan.create)
        for pod_name in plan.remove_finalizers:
            self._remove_finalizer(namespace, pod_name)
        status = plan.status
        if errors:
            # pods that could not be created are not active
            status = {**status, "active": max(0, int(status.get("active") or 0) - len(errors))}
            if not status["active"]:
                status.pop("active")
        current = self.store.get(JOBS, namespace, name)
        if current is not None and current["metadata"]["uid"] == uid and current.get("status") != status:

            def change(obj: Obj) -> None:
                obj["status"] = copy.deepcopy(status)

            updated = self.store.mutate(JOBS, namespace, name, change)
            for kind, reason, message in plan.events:
                self.events.record(updated, reason=reason, message=message, type=kind, component=COMPONENT)
            if ttl_at is None:
                ttl_at = jobs.ttl_expiry(updated)
            if ttl_at is not None:
                self.queue(namespace, name, after=max(0.0, ttl_at - time.time()))
        if plan.requeue_after is not None:
            self.queue(namespace, name, after=plan.requeue_after)
        if errors:
            raise errors[0]

    def _claim(self, job: Obj) -> list[Obj]:
        """getPodsForJob / ClaimPods: the pods this Job controls, after adopting orphans its selector
        matches and releasing controlled pods it no longer matches."""
        meta = job["metadata"]
        uid, namespace = meta["uid"], meta["namespace"]
        selector = (job.get("spec") or {}).get("selector")
        owned: list[Obj] = []
        for pod in self.store.objects("pods", namespace):
            ref = _controller_ref(pod)
            labels = pod["metadata"].get("labels")
            if ref is not None and ref.get("uid") == uid:
                if labelselector.matches(selector, labels) or meta.get("deletionTimestamp"):
                    owned.append(pod)
                elif not pod["metadata"].get("deletionTimestamp"):
                    self._release(pod, uid)
            elif ref is None and labelselector.matches(selector, labels) and not (
                    meta.get("deletionTimestamp") or pod["metadata"].get("deletionTimestamp")):
                adopted = self._adopt(job, pod)
                if adopted is not None:
                    owned.append(adopted)
        return owned

    def _adopt(self, job: Obj, pod: Obj) -> Obj | None:
        def change(obj: Obj) -> None:
            m = obj["metadata"]
            m["ownerReferences"] = [*(m.get("ownerReferences") or []), self._owner_reference(job)]
            if TRACKING_FINALIZER not in (m.get("finalizers") or []):
                m["finalizers"] = [*(m.get("finalizers") or []), TRACKING_FINALIZER]

        try:
            return self.store.mutate("pods", pod["metadata"]["namespace"], pod["metadata"]["name"], change)
        except NotFound:
            return None

    def _release(self, pod: Obj, uid: str) -> None:
        def change(obj: Obj) -> None:
            refs = [r for r in obj["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
            if refs:
                obj["metadata"]["ownerReferences"] = refs
            else:
                obj["metadata"].pop("ownerReferences", None)

        with contextlib.suppress(NotFound):
            self.store.mutate("pods", pod["metadata"]["namespace"], pod["metadata"]["name"], change)

    @staticmethod
    def _owner_reference(job: Obj) -> Obj:
        """metav1.NewControllerRef."""
        return {"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"],
                "uid": job["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}

    def _new_pod(self, job: Obj) -> Obj:
        template = copy.deepcopy((job.get("spec") or {}).get("template") or {})
        tmeta = template.get("metadata") or {}
        namespace = job["metadata"]["namespace"]
        prefix = f"{job['metadata']['name']}-"
        while True:
            name = prefix + "".join(random.choice(_NAME_CHARS) for _ in range(5))
            if self.store.get("pods", namespace, name) is None:
                break
        meta: Obj = {"name": name, "generateName": prefix, "namespace": namespace,
                     "ownerReferences": [self._owner_reference(job)],
                     "finalizers": [*(f for f in tmeta.get("finalizers") or [] if f != TRACKING_FINALIZER),
                                    TRACKING_FINALIZER]}
        for key in ("labels", "annotations"):
            if tmeta.get(key):
                meta[key] = dict(tmeta[key])
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template.get("spec") or {}}

    def _create_pods(self, job: Obj, count: int) -> list[st.ApiStatus]:
        """CreatePodsWithGenerateName, through the pod's defaulting, mutating admission, validation and
        admission (LimitRange defaults and Pod Security, ResourceQuota and the rest shape and refuse the
        controller as they do a user), in upstream's slow-start batches: 1, 2, 4, ... stopping at the first
        batch with a failure."""
        pods_r = BY_KEY["pods"]
        errors: list[st.ApiStatus] = []
        batch, left = 1, count
        while left > 0:
            size = min(batch, left)
            for _ in range(size):
                pod = self._new_pod(job)
                try:
                    ns = self.store.get("namespaces", None, pod["metadata"]["namespace"])
                    if ns is None or ns["metadata"].get("deletionTimestamp"):
                        return errors          # a namespace being torn down: nothing more to create
                    defaults.apply("pods", pod)
                    # the mutating phase (LimitRange defaults, an SCC's UID) before validation, as a
                    # user's create gets it: the controller's pods go through the same registry
                    self.admission.mutate_create(pods_r, pod, USER)
                    validate(pods_r, pod, None)
                    self.admission.create(pods_r, pod, USER)
                    created = self.store.create("pods", pod)
                except st.ApiStatus as error:
                    errors.append(error)
                    self.events.record(job, reason="FailedCreate", message=f"Error creating: {error.message}",
                                       type="Warning", component=COMPONENT)
                    continue
                self.events.record(job, reason="SuccessfulCreate",
                                   message=f"Created pod: {created['metadata']['name']}", component=COMPONENT)
            if errors:
                return errors
            left -= size
            batch *= 2
        return errors

    def _delete_pod(self, job: Obj, pod: Obj) -> None:
        current = self.store.get("pods", pod["metadata"]["namespace"], pod["metadata"]["name"])
        if current is None or current["metadata"].get("deletionTimestamp"):
            return
        with contextlib.suppress(st.ApiStatus):
            self._delete(BY_KEY["pods"], current, {})
            self.events.record(job, reason="SuccessfulDelete",
                               message=f"Deleted pod: {pod['metadata']['name']}", component=COMPONENT)

    def _remove_finalizer(self, namespace: str, name: str) -> None:
        def change(obj: Obj) -> None:
            remaining = [f for f in obj["metadata"].get("finalizers") or [] if f != TRACKING_FINALIZER]
            if remaining:
                obj["metadata"]["finalizers"] = remaining
            else:
                obj["metadata"].pop("finalizers", None)

        current = self.store.get("pods", namespace, name)
        if current is None or TRACKING_FINALIZER not in (current["metadata"].get("finalizers") or []):
            return
        with contextlib.suppress(NotFound):
            updated = self.store.mutate("pods", namespace, name, change)
            self._after_update(BY_KEY["pods"], updated)

    def _handle_orphan(self, namespace: str, name: str) -> None:
        """handleOrphanPod: a tracking finalizer goes once no unfinished Job controls the pod."""
        pod = self.store.get("pods", namespace, name)
        if pod is None or TRACKING_FINALIZER not in (pod["metadata"].get("finalizers") or []):
            return
        ref = _controller_ref(pod)
        if ref is not None:
            if ref.get("kind") != "Job":
                return
            job = self.store.get(JOBS, namespace, str(ref.get("name", "")))
            if job is not None and job["metadata"]["uid"] == ref.get("uid") and not jobs.is_finished(job):
                return
        self._remove_finalizer(namespace, name)

    def _expire(self, job: Obj, at: float) -> None:
        """The TTL-after-finished controller: delete the finished Job (and, in the background, its pods)
        once its TTL has passed."""
        meta = job["metadata"]
        wait = at - time.time()
        if wait > 0:
            self.queue(meta["namespace"], meta["name"], after=wait)
            return
        if meta.get("deletionTimestamp"):
            return
        with contextlib.suppress(st.ApiStatus):
            self._delete(BY_KEY[JOBS], job, {"propagationPolicy": "Background",
                                              "preconditions": {"uid": meta["uid"]}})
