"""What happens after a write: the scheduler, the kubelets' admission, graceful pod deletion, namespace
cleanup and finalizers; garbage collection is collector.py's. The decisions are the pure modules' (scheduler,
gc); this module only watches the store and applies them.

Store listeners run synchronously inside a write, so they never write back; they queue work that the event
loop runs right after.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from localcluster._internal.admission import claims, podsecurity, schedulinggates
from localcluster._internal.admission.plugins import AdmissionHook, AdmissionPlugins
from localcluster._internal.apimachinery import status as st
from localcluster._internal.controllers import gc, nodefit, scheduler
from localcluster._internal.controllers.collector import GarbageCollector
from localcluster._internal.controllers.disruptioncontroller import DisruptionController
from localcluster._internal.controllers.events import EventRecorder
from localcluster._internal.controllers.jobcontroller import JobController
from localcluster._internal.controllers.quotastatus import QuotaController
from localcluster._internal.podspec.requests import TERMINAL_PHASES, holds_resources
from localcluster._internal.storage.registry import BY_KEY, RESOURCES, Resource
from localcluster._internal.storage.store import ADDED, DELETED, MODIFIED, Event, NotFound, Store, now_iso

if TYPE_CHECKING:
    from localcluster._internal.auth.identity import UserInfo
    from localcluster._internal.runtime.base import PodRuntime

log = logging.getLogger(__name__)
Obj = dict[str, Any]
# the kubelet's pod admit handlers beyond resources (lifecycle.PodAdmitHandler): (pod, node) -> (reason,
# message) to refuse the pod, None to admit it; e.g. the node shutdown manager's (doubles/nodeshutdown.py)
AdmitHandler = Callable[[Obj, Obj], "tuple[str, str] | None"]


def _later(seconds: float) -> str:
    when = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


class Controllers:
    def __init__(self, *, store: Store, runtime: PodRuntime,
                 pod_security: podsecurity.Policy = podsecurity.PRIVILEGED_POLICY,
                 event_ttl: float = 3600.0, admit_handlers: Sequence[AdmitHandler] = (),
                 job_backoff: float = 10.0, admission_hooks: Sequence[AdmissionHook] = ()) -> None:
        self.store = store
        self.runtime = runtime
        self.admit_handlers = tuple(admit_handlers)
        self.events = EventRecorder(store=store, ttl=event_ttl)
        self.quotas = QuotaController(store=store)
        self.admission = AdmissionPlugins(store=store, quotas=self.quotas, pod_security=pod_security,
                                          hooks=admission_hooks)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._started: set[str] = set()          # uids of pods handed to the runtime
        self._stopping: set[str] = set()         # uids of pods whose containers are being stopped
        self._pending: dict[str, tuple[str, str]] = {}  # uid -> (namespace, name) of unbound pods
        self._last_message: dict[str, str] = {}  # uid -> last FailedScheduling message
        self._schedule_wake = asyncio.Event()
        self.collector = GarbageCollector(store=store, delete=self.delete, after_update=self.after_update)
        self.jobs = JobController(store=store, admission=self.admission, events=self.events,
                                  delete=self.delete, after_update=self.after_update,
                                  pod_failure_backoff=job_backoff)
        self.disruption = DisruptionController(store=store, events=self.events)
        self._loops: list[asyncio.Task[Any]] = []
        self._usage: dict[str, nodefit.NodeUsage] = {}  # node -> what its resource-holding pods take
        store.add_listener(self._on_event)

    def start(self) -> None:
        self._loops = [asyncio.ensure_future(self._scheduler_loop()),
                       asyncio.ensure_future(self.collector.run()),
                       asyncio.ensure_future(self.quotas.run()), asyncio.ensure_future(self.events.run()),
                       asyncio.ensure_future(self.jobs.run()), asyncio.ensure_future(self.disruption.run())]

    async def stop(self) -> None:
        for task in [*self._loops, *self._tasks]:
            task.cancel()
        await asyncio.gather(*self._loops, *self._tasks, return_exceptions=True)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("controller task failed", exc_info=task.exception())

    # ---- reacting to writes --------------------------------------------------------------------------------
    def _on_event(self, event: Event) -> None:
        obj = event.new.obj
        meta = obj["metadata"]
        self.collector.on_event(event)
        if event.resource == "pods":
            self._on_pod(event, obj, meta.get("uid", ""))
        elif event.resource in ("nodes", claims.RESOURCE):
            self._schedule_wake.set()
        elif event.resource == "namespaces" and event.type == ADDED:
            self.spawn(self._default_service_account(meta["name"]))

    def _on_pod(self, event: Event, pod: Obj, uid: str) -> None:
        spec = pod.get("spec") or {}
        phase = (pod.get("status") or {}).get("phase")
        self._track_usage(event, pod)
        if event.type == DELETED:
            self._pending.pop(uid, None)
            self._last_message.pop(uid, None)
            self._started.discard(uid)
            self._schedule_wake.set()
            return
        if not spec.get("nodeName"):
            # a gated pod waits outside the scheduling queue until its last gate is removed
            schedulable = phase not in TERMINAL_PHASES and not pod["metadata"].get("deletionTimestamp") and (
                spec.get("schedulerName", "default-scheduler") == "default-scheduler") and (
                not schedulinggates.is_gated(pod))
            if schedulable and uid not in self._pending:
                self._pending[uid] = (pod["metadata"]["namespace"], pod["metadata"]["name"])
                self._schedule_wake.set()
            return
        self._pending.pop(uid, None)
        if uid not in self._started and phase not in TERMINAL_PHASES and not pod["metadata"].get(
                "deletionTimestamp"):
            self._started.add(uid)
            admitted_before = event.type == MODIFIED and event.old is not None and (
                (event.old.obj.get("spec") or {}).get("nodeName") == spec.get("nodeName"))
            self.spawn(self._kubelet_start(pod["metadata"]["namespace"], pod["metadata"]["name"],
                                           admit=not admitted_before and event.type == ADDED))
        old_phase = ((event.old.obj.get("status") or {}).get("phase") if event.old is not None else None)
        if phase in TERMINAL_PHASES and old_phase not in TERMINAL_PHASES:
            self._schedule_wake.set()

    def _track_usage(self, event: Event, pod: Obj) -> None:
        """Keep per-node usage current with every pod write, so scheduling never re-sums all pods."""
        old = event.old.obj if event.old is not None else None
        if old is not None and holds_resources(old):
            node = old["spec"]["nodeName"]
            self._usage[node] = nodefit.without(self._usage.get(node, nodefit.NodeUsage()), old)
        if event.type != DELETED and holds_resources(pod):
            node = pod["spec"]["nodeName"]
            self._usage[node] = self._usage.get(node, nodefit.NodeUsage()).plus(pod)

    # ---- the kubelet side: admission and start -------------------------------------------------------------
    async def _kubelet_start(self, namespace: str, name: str, *, admit: bool) -> None:
        pod = self.store.get("pods", namespace, name)
        if pod is None:
            return
        node_name = pod["spec"]["nodeName"]
        node = self.store.get("nodes", None, node_name)
        if node is None:
            return  # no kubelet owns that node: the pod stays Pending, as on a real cluster
        refused = next((r for handler in self.admit_handlers if (r := handler(pod, node)) is not None), None)
        if refused is not None:
            await self.update_pod_status(namespace, name, {"phase": "Failed", "reason": refused[0],
                                                           "message": refused[1], "startTime": now_iso()})
            self.record_event(pod, "Warning", refused[0], refused[1], component="kubelet", host=node_name)
            return
        if admit:
            verdict = scheduler.admit(pod, node, usage=self._usage)
            if not verdict.admitted:
                await self.update_pod_status(namespace, name, {
                    "phase": "Failed", "reason": verdict.reason, "message": verdict.pod_message,
                    "startTime": now_iso()})
                self.record_event(pod, "Warning", verdict.reason, verdict.pod_message, component="kubelet",
                                  host=node_name)
                return
        await self.runtime.run_pod(copy.deepcopy(pod))

    async def update_pod_status(self, namespace: str, name: str, status: Obj) -> None:
        def change(obj: Obj) -> None:
            obj.setdefault("status", {}).update(copy.deepcopy(status))

        with contextlib.suppress(NotFound):
            self.store.mutate("pods", namespace, name, change)

    # ---- scheduling ----------------------------------------------------------------------------------------
    async def _scheduler_loop(self) -> None:
        while True:
            await self._schedule_wake.wait()
            self._schedule_wake.clear()
            try:
                await self.schedule_pending()
            except Exception:
                log.exception("scheduling pass failed")
            await asyncio.sleep(0)

    async def schedule_pending(self, *, batch: int = 20) -> None:
        """One pass over the unbound pods, oldest first (the real scheduler's FIFO with equal priorities),
        yielding to the API every `batch` pods so a long pass never stalls requests."""
        if not self._pending:
            return
        nodes: list[Obj] = []
        order = sorted(self._pending.items(), key=lambda item: self._created(item[1]))
        for index, (uid, (namespace, name)) in enumerate(order):
            if index % batch == 0:
                if index:
                    await asyncio.sleep(0)
                # re-read after yielding: pods and nodes may have changed meanwhile
                nodes = [n for n in self.store.objects("nodes") if not n["metadata"].get("deletionTimestamp")]
            pod = self.store.get("pods", namespace, name)
            if pod is None or pod["spec"].get("nodeName") or pod["metadata"].get("deletionTimestamp") or (
                    schedulinggates.is_gated(pod)):
                self._pending.pop(uid, None)
                continue
            missing = claims.missing_claim(pod, self.store.get)
            if missing:
                self._unschedulable(pod, claims.scheduler_message(missing, len(nodes)))
                continue
            # self._usage follows every bind at once (the store listener), so no re-summing here
            result = scheduler.schedule(pod, nodes, usage=self._usage)
            if result.node_name:
                self._pending.pop(uid, None)
                self.bind(pod, result.node_name)
            else:
                self._unschedulable(pod, result.message)

    def _created(self, key: tuple[str, str]) -> str:
        pod = self.store.get("pods", key[0], key[1])
        return pod["metadata"]["creationTimestamp"] if pod is not None else ""

    def bind(self, pod: Obj, node_name: str) -> Obj:
        """Set spec.nodeName and PodScheduled=True, as the Binding subresource does."""
        now = now_iso()

        def change(obj: Obj) -> None:
            obj["spec"]["nodeName"] = node_name
            status = obj.setdefault("status", {})
            status["conditions"] = _without_scheduled(status)
            status["conditions"].append(scheduler.scheduled_condition(now=now))

        meta = pod["metadata"]
        bound = self.store.mutate("pods", meta["namespace"], meta["name"], change)
        self._last_message.pop(meta.get("uid", ""), None)
        self.record_event(bound, "Normal", "Scheduled", scheduler.scheduled_event_message(bound, node_name),
                          component="default-scheduler")
        return bound

    def _unschedulable(self, pod: Obj, message: str) -> None:
        uid = pod["metadata"]["uid"]
        if self._last_message.get(uid) == message:
            return
        self._last_message[uid] = message
        now = now_iso()

        def change(obj: Obj) -> None:
            status = obj.setdefault("status", {})
            status["conditions"] = _without_scheduled(status)
            status["conditions"].append(scheduler.unschedulable_condition(message, now=now))

        meta = pod["metadata"]
        self.store.mutate("pods", meta["namespace"], meta["name"], change)
        self.record_event(pod, "Warning", "FailedScheduling", message, component="default-scheduler")

    def record_event(self, obj: Obj, kind: str, reason: str, message: str, *, component: str,
                     host: str = "", field_path: str = "") -> None:
        self.events.record(obj, reason=reason, message=message, type=kind, component=component, host=host,
                           field_path=field_path)

    # ---- admission hooks called by the API -----------------------------------------------------------------
    def namespace_terminating(self, namespace: str) -> bool:
        ns = self.store.get("namespaces", None, namespace)
        return ns is not None and bool(ns["metadata"].get("deletionTimestamp"))

    def mutate_create(self, r: Resource, obj: Obj, user: UserInfo) -> None:
        """The mutating admission plugins, before the object is validated (admission/plugins.py)."""
        self.admission.mutate_create(r, obj, user)

    def admit_create(self, r: Resource, obj: Obj, user: UserInfo, *, dry_run: bool = False) -> list[str]:
        """The validating admission plugins (admission/plugins.py); returns the answer's warnings."""
        return self.admission.create(r, obj, user, dry_run=dry_run)

    def admit_update(self, r: Resource, obj: Obj, current: Obj, user: UserInfo, *, dry_run: bool = False,
                     subresource: str = "") -> list[str]:
        return self.admission.update(r, obj, current, user, dry_run=dry_run, subresource=subresource)

    def admit_delete(self, r: Resource, current: Obj, user: UserInfo, *, dry_run: bool = False) -> list[str]:
        return self.admission.delete(r, current, user, dry_run=dry_run)

    def after_update(self, r: Resource, obj: Obj) -> None:
        meta = obj["metadata"]
        stopping = meta.get("uid") in self._stopping
        if meta.get("deletionTimestamp") and not meta.get("finalizers") and not stopping:
            self._remove(r, meta.get("namespace"), meta["name"])

    # ---- deletion ------------------------------------------------------------------------------------------
    def delete(self, r: Resource, current: Obj, options: Obj) -> tuple[Obj, bool]:
        """Start deleting; returns (the object as the DELETE answer shows it, whether it is gone already)."""
        meta = current["metadata"]
        namespace, name = meta.get("namespace"), meta["name"]
        grace = options.get("gracePeriodSeconds")
        policy = options.get("propagationPolicy")
        if policy is None and options.get("orphanDependents") in (True, "true"):
            policy = gc.ORPHAN
        if meta.get("deletionTimestamp") and r.key == "pods" and grace == 0:
            return self._remove(r, namespace, name), True
        if meta.get("deletionTimestamp") and policy is None:
            return current, False
        plan = gc.begin_delete(current, policy, now=now_iso())
        finalizers = [] if plan.remove_now else list(plan.obj["metadata"].get("finalizers") or [])
        if r.key == "pods":
            return self._delete_pod(current, grace, finalizers)
        if r.key == "namespaces":
            marked = self._mark_deleting(r, current, finalizers, extra=lambda o: o.__setitem__(
                "status", {**o.get("status", {}), "phase": "Terminating"}))
            self.spawn(self._finish_namespace(name))
            return marked, False
        if finalizers:
            marked = self._mark_deleting(r, current, finalizers)
            self.collector.queue(meta.get("uid", ""))
            return marked, False
        return self._remove(r, namespace, name), True

    def _mark_deleting(self, r: Resource, current: Obj, finalizers: list[str], *, grace: int = 0,
                       extra: Any = None) -> Obj:
        def change(obj: Obj) -> None:
            if not obj["metadata"].get("deletionTimestamp"):
                obj["metadata"]["deletionTimestamp"] = _later(grace)
                obj["metadata"]["deletionGracePeriodSeconds"] = grace
            if finalizers:
                obj["metadata"]["finalizers"] = finalizers
            if extra is not None:
                extra(obj)

        meta = current["metadata"]
        return self.store.mutate(r.key, meta.get("namespace"), meta["name"], change)

    def _delete_pod(self, pod: Obj, grace: int | None, finalizers: list[str]) -> tuple[Obj, bool]:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        if grace is None:
            grace = int(spec.get("terminationGracePeriodSeconds", 30))
        r = BY_KEY["pods"]
        if not spec.get("nodeName") or meta.get("uid") not in self._started:
            if finalizers:
                return self._mark_deleting(r, pod, finalizers), False
            return self._remove(r, meta["namespace"], meta["name"]), True
        if grace <= 0 and not finalizers:
            self.spawn(self._stop(copy.deepcopy(pod), 0))
            return self._remove(r, meta["namespace"], meta["name"]), True
        marked = self._mark_deleting(r, pod, finalizers, grace=max(grace, 0))
        self._stopping.add(meta["uid"])
        self.spawn(self._stop_then_remove(copy.deepcopy(marked), float(max(grace, 0))))
        return marked, False

    async def _stop(self, pod: Obj, grace: float) -> None:
        await self.runtime.stop_pod(pod, grace)

    async def _stop_then_remove(self, pod: Obj, grace: float) -> None:
        meta = pod["metadata"]
        try:
            await self.runtime.stop_pod(pod, grace)
        finally:
            self._stopping.discard(meta["uid"])
        current = self.store.get("pods", meta["namespace"], meta["name"])
        if current is not None and current["metadata"]["uid"] == meta["uid"] and not current["metadata"].get(
                "finalizers"):
            self._remove(BY_KEY["pods"], meta["namespace"], meta["name"])

    def _remove(self, r: Resource, namespace: str | None, name: str, *, force: bool = False) -> Obj:
        try:
            return self.store.delete(r.key, namespace, name)
        except NotFound:
            raise st.not_found(r.plural, name, r.group) from None

    async def _finish_namespace(self, namespace: str) -> None:
        """Delete everything in the namespace, wait until it is gone, then the namespace itself."""
        for r in RESOURCES:
            if not r.namespaced or not r.stored:
                continue
            for obj in list(self.store.objects(r.key, namespace)):
                current = self.store.get(r.key, namespace, obj["metadata"]["name"])
                if current is not None and not current["metadata"].get("deletionTimestamp"):
                    with contextlib.suppress(st.ApiStatus):
                        self.delete(r, current, {})
        for _ in range(6000):
            if not any(self.store.entries(r.key, namespace) for r in RESOURCES if r.namespaced and r.stored):
                break
            await asyncio.sleep(0.05)
        if self.store.get("namespaces", None, namespace) is not None:
            self.store.delete("namespaces", None, namespace)

    async def _default_service_account(self, namespace: str) -> None:
        if self.store.get("serviceaccounts", namespace, "default") is None and self.store.get(
                "namespaces", None, namespace) is not None:
            self.store.create("serviceaccounts", {"apiVersion": "v1", "kind": "ServiceAccount",
                                                  "metadata": {"name": "default", "namespace": namespace}})


def _without_scheduled(status: Obj) -> list[Obj]:
    return [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]

