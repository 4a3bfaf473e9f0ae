"""Kueue's controllers for plain pods, the I/O around workloads.py and quota.py (kueue v0.10: the pod
reconciler, the scheduler's admission cycle, the queue status controllers). On every change to pods,
workloads or queues (and every second), in order:

1. each managed pod, or complete pod group, without a Workload gets one;
2. each ClusterQueue admits its pending workloads oldest first (BestEffortFIFO: one that does not fit lets the
   next try; StrictFIFO: it blocks those behind it), holding them to its nominal quota per flavor. Admitted:
   status.admission and QuotaReserved=True, Admitted=True, with the events QuotaReserved and Admitted;
   waiting: QuotaReserved=False, reason Pending (Inadmissible when its LocalQueue or ClusterQueue is
   missing) with the scheduler's message, and a Pending event when the message changes;
3. the pods of an admitted workload get their flavors' node labels in their node selector and lose the
   `kueue.x-k8s.io/admission` gate (event Started), so the scheduler places them;
4. a workload whose pods are done is Finished and releases its quota;
5. LocalQueues and ClusterQueues count their pending and admitted workloads (and flavor usage).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Mapping
from fractions import Fraction
from typing import Any, Protocol

from localcluster._internal.apimachinery.quantity import format_quantity
from localcluster._internal.doubles.kueue import quota, webhook, workloads
from localcluster._internal.doubles.kueue.webhook import PodWebhook
from localcluster._internal.storage.store import AlreadyExists, Event, NotFound, Store, now_iso

log = logging.getLogger(__name__)
Obj = dict[str, Any]
COMPONENT = "kueue-admission"
FLAVORS = "resourceflavors.kueue.x-k8s.io"
CLUSTER_QUEUES = "clusterqueues.kueue.x-k8s.io"
LOCAL_QUEUES = "localqueues.kueue.x-k8s.io"
WATCHED = frozenset({"pods", workloads.RESOURCE, FLAVORS, CLUSTER_QUEUES, LOCAL_QUEUES})


class Recorder(Protocol):
    def __call__(self, obj: Mapping[str, Any], *, reason: str, message: str, type: str = "Normal",
                 component: str = "kubelet", host: str = "", field_path: str = "") -> None: ...


class Kueue:
    """The webhook (an admission hook) and the controllers of one cluster."""

    def __init__(self, *, store: Store, record: Recorder, manage_without_queue_name: bool = False,
                 interval: float = 1.0) -> None:
        self.store, self.record, self.interval = store, record, interval
        self.webhook = PodWebhook(local_queue=lambda ns, name: store.get(LOCAL_QUEUES, ns, name) is not None,
                                  manage_without_queue_name=manage_without_queue_name)
        self._wake = asyncio.Event()
        self._said: dict[str, str] = {}  # workload uid -> the last Pending message recorded
        store.add_listener(self._on_event)

    def _on_event(self, event: Event) -> None:
        if event.resource in WATCHED:
            self._wake.set()

    async def run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval)
            self._wake.clear()
            try:
                self.run_once()
            except Exception:  # the controllers go on, as Kueue's reconcilers retry
                log.exception("kueue pass failed")
            await asyncio.sleep(0)

    def run_once(self) -> None:
        self._make_workloads()
        self._admit()
        self._start_and_finish()
        self._queue_status()

    # ---- 1. workloads --------------------------------------------------------------------------------------
    def _make_workloads(self) -> None:
        groups: dict[tuple[str, str], list[Obj]] = defaultdict(list)
        for pod in self.store.objects("pods"):
            if not workloads.managed(pod):
                continue
            namespace = pod["metadata"]["namespace"]
            group = workloads.group_of(pod)
            if not group:
                name = workloads.single_name(pod)
                missing = self.store.get(workloads.RESOURCE, namespace, name) is None
                if webhook.GATE in _gates(pod) and missing:
                    self._create(workloads.build(name, namespace, [pod], group=False))
                continue
            groups[(namespace, group)].append(pod)
        for (namespace, group), members in groups.items():
            if self.store.get(workloads.RESOURCE, namespace, group) is not None:
                continue
            active = [p for p in members if workloads.runnable(p)]
            if len(active) >= workloads.total_count(members[0]) > 0:
                self._create(workloads.build(group, namespace, active, group=True))
            elif active:
                self._say(f"group/{namespace}/{group}", members[-1], "Warning", "ErrWorkloadCompose",
                          f"'{group}' group has fewer runnable pods than expected")

    def _create(self, workload: Obj) -> None:
        with contextlib.suppress(AlreadyExists):
            created = self.store.create(workloads.RESOURCE, workload)
            self.record(created, reason="CreatedWorkload",
                        message=f"Created Workload: {created['metadata']['namespace']}/"
                                f"{created['metadata']['name']}", component="pod-kueue-controller")

    # ---- 2. admission --------------------------------------------------------------------------------------
    def _admit(self) -> None:
        flavors = {f["metadata"]["name"]: f for f in self.store.objects(FLAVORS)}
        queues = {q["metadata"]["name"]: q for q in self.store.objects(CLUSTER_QUEUES)}
        used: dict[str, quota.Usage] = defaultdict(dict)
        pending: dict[str, list[Obj]] = defaultdict(list)
        for workload in self.store.objects(workloads.RESOURCE):
            if workloads.holds_quota(workload):
                queue = ((workload.get("status") or {}).get("admission") or {}).get("clusterQueue", "")
                for key, amount in quota.reserved(workload).items():
                    used[queue][key] = used[queue].get(key, Fraction(0)) + amount
                continue
            if workloads.is_true(workload, "QuotaReserved") or workloads.is_true(workload, "Finished"):
                continue
            target = self._cluster_queue(workload)
            if isinstance(target, tuple):
                self._pending(workload, "Inadmissible", target[0])
                continue
            if target not in queues:
                self._pending(workload, "Inadmissible", f"ClusterQueue {target} doesn't exist")
                continue
            pending[target].append(workload)
        for name, waiting in pending.items():
            queue = queues[name]
            strict = (queue.get("spec") or {}).get("queueingStrategy") == "StrictFIFO"
            blocked = False
            for workload in sorted(waiting, key=lambda w: w["metadata"].get("creationTimestamp", "")):
                namespace = self.store.get("namespaces", None, workload["metadata"]["namespace"]) or {}
                labels = (namespace.get("metadata") or {}).get("labels") or {}
                if not quota.selector_matches((queue.get("spec") or {}).get("namespaceSelector"), labels):
                    self._pending(workload, "Inadmissible",
                                  "Workload namespace doesn't match ClusterQueue selector")
                    continue
                outcome = quota.assign(workload, queue, flavors, used[name]) if not blocked else \
                    "Workload is blocked by a workload ahead of it in a StrictFIFO ClusterQueue"
                if isinstance(outcome, str):
                    self._pending(workload, "Pending", outcome)
                    blocked = blocked or strict
                    continue
                for assignment in outcome:
                    for resource, amount in assignment.usage.items():
                        key = (assignment.flavors[resource], resource)
                        used[name][key] = used[name].get(key, Fraction(0)) + amount
                self._admitted(workload, name, outcome)

    def _cluster_queue(self, workload: Obj) -> str | tuple[str]:
        namespace = workload["metadata"]["namespace"]
        name = (workload.get("spec") or {}).get("queueName", "")
        local = self.store.get(LOCAL_QUEUES, namespace, name)
        if local is None:
            return (f"LocalQueue {name} doesn't exist",)
        return str((local.get("spec") or {}).get("clusterQueue") or "")

    def _pending(self, workload: Obj, reason: str, message: str) -> None:
        if workloads.condition(workload, "QuotaReserved").get("message") == message:
            return
        stamp = now_iso()

        def change(obj: Obj) -> None:
            _set_condition(obj, "QuotaReserved", False, reason, message, stamp)

        with contextlib.suppress(NotFound):
            updated = self.store.mutate(workloads.RESOURCE, workload["metadata"]["namespace"],
                                        workload["metadata"]["name"], change)
            self._say(updated["metadata"]["uid"], updated, "Normal", "Pending", message)

    def _admitted(self, workload: Obj, queue: str, assignments: list[quota.PodSetAssignment]) -> None:
        stamp = now_iso()

        def change(obj: Obj) -> None:
            obj.setdefault("status", {})["admission"] = {
                "clusterQueue": queue, "podSetAssignments": [a.to_dict() for a in assignments]}
            _set_condition(obj, "QuotaReserved", True, "QuotaReserved",
                           f"Quota reserved in ClusterQueue {queue}", stamp)
            _set_condition(obj, "Admitted", True, "Admitted", "The workload is admitted", stamp)

        with contextlib.suppress(NotFound):
            updated = self.store.mutate(workloads.RESOURCE, workload["metadata"]["namespace"],
                                        workload["metadata"]["name"], change)
            self.record(updated, reason="QuotaReserved", message=f"Quota reserved in ClusterQueue {queue}",
                        component=COMPONENT)
            self.record(updated, reason="Admitted", message=f"Admitted by ClusterQueue {queue}",
                        component=COMPONENT)

    # ---- 3 and 4. ungating, finishing ----------------------------------------------------------------------
    def _start_and_finish(self) -> None:
        flavors = {f["metadata"]["name"]: f for f in self.store.objects(FLAVORS)}
        by_owner: dict[str, list[Obj]] = defaultdict(list)
        for pod in self.store.objects("pods"):
            if workloads.managed(pod):
                by_owner[pod["metadata"]["uid"]].append(pod)
        for workload in self.store.objects(workloads.RESOURCE):
            pods = [p for ref in workload["metadata"].get("ownerReferences") or [] for p in by_owner.get(
                ref.get("uid", ""), [])]
            if not workloads.is_true(workload, "Admitted") or workloads.is_true(workload, "Finished"):
                continue
            group = workload["metadata"].get("annotations", {}).get(workloads.IS_GROUP) == "true"
            for pod in pods:
                if webhook.GATE in _gates(pod):
                    role = pod["metadata"].get("annotations", {}).get(webhook.ROLE_HASH, "") if group else ""
                    self._ungate(pod, quota.admitted_node_labels(workload, flavors, role or "main"),
                                 workload["status"]["admission"]["clusterQueue"])
            total = workloads.total_count(pods[0]) if group and pods else 1
            done = workloads.finished(pods, total=total, group=group)
            if done is not None:
                self._finish(workload, *done)

    def _ungate(self, pod: Obj, node_labels: Mapping[str, str], queue: str) -> None:
        def change(obj: Obj) -> None:
            spec = obj["spec"]
            gates = [g for g in spec.get("schedulingGates") or [] if g.get("name") != webhook.GATE]
            if gates:
                spec["schedulingGates"] = gates
            else:
                spec.pop("schedulingGates", None)
            if node_labels:
                spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **node_labels}

        with contextlib.suppress(NotFound):
            updated = self.store.mutate("pods", pod["metadata"]["namespace"], pod["metadata"]["name"], change)
            self.record(updated, reason="Started", message=f"Admitted by clusterQueue {queue}",
                        component="pod-kueue-controller")

    def _finish(self, workload: Obj, succeeded: bool, message: str) -> None:
        stamp = now_iso()

        def change(obj: Obj) -> None:
            _set_condition(obj, "Finished", True, "Succeeded" if succeeded else "Failed", message, stamp)

        with contextlib.suppress(NotFound):
            self.store.mutate(workloads.RESOURCE, workload["metadata"]["namespace"],
                              workload["metadata"]["name"], change)

    # ---- 5. queue status -----------------------------------------------------------------------------------
    def _queue_status(self) -> None:
        counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
        usage: dict[str, dict[tuple[str, str], Fraction]] = defaultdict(dict)
        for workload in self.store.objects(workloads.RESOURCE):
            if workloads.is_true(workload, "Finished"):
                continue
            admitted = workloads.is_true(workload, "Admitted")
            queue_name = (workload.get("spec") or {}).get("queueName", "")
            queue_key = f"{workload['metadata']['namespace']}/{queue_name}"
            counts[("lq", queue_key)][int(admitted)] += 1
            target = self._cluster_queue(workload)
            if isinstance(target, str):
                counts[("cq", target)][int(admitted)] += 1
            if admitted:
                for key, amount in quota.reserved(workload).items():
                    bucket = usage[str(target)]
                    bucket[key] = bucket.get(key, Fraction(0)) + amount
        for local in self.store.objects(LOCAL_QUEUES):
            meta = local["metadata"]
            waiting, running = counts[("lq", f"{meta['namespace']}/{meta['name']}")]
            self._status(LOCAL_QUEUES, local, {"pendingWorkloads": waiting, "admittedWorkloads": running,
                                               "reservingWorkloads": running})
        for queue in self.store.objects(CLUSTER_QUEUES):
            name = queue["metadata"]["name"]
            waiting, running = counts[("cq", name)]
            flavors: dict[str, list[Obj]] = defaultdict(list)
            for (flavor, resource), amount in sorted(usage[name].items()):
                flavors[flavor].append({"name": resource, "total": format_quantity(amount)})
            self._status(CLUSTER_QUEUES, queue, {
                "pendingWorkloads": waiting, "admittedWorkloads": running, "reservingWorkloads": running,
                "flavorsUsage": [{"name": f, "resources": r} for f, r in flavors.items()],
                "conditions": [{"type": "Active", "status": "True", "reason": "Ready",
                                "message": "Can admit new workloads"}]})

    def _status(self, resource: str, obj: Obj, wanted: Obj) -> None:
        status = obj.get("status") or {}
        if all(status.get(k) == v for k, v in wanted.items()):
            return

        def change(current: Obj) -> None:
            current.setdefault("status", {}).update(wanted)

        with contextlib.suppress(NotFound):
            self.store.mutate(resource, obj["metadata"].get("namespace"), obj["metadata"]["name"], change)

    def _say(self, key: str, obj: Obj, kind: str, reason: str, message: str) -> None:
        if self._said.get(key) == message:
            return
        self._said[key] = message
        self.record(obj, reason=reason, message=message, type=kind, component=COMPONENT)


def _gates(pod: Mapping[str, Any]) -> list[str]:
    return [str(g.get("name")) for g in (pod.get("spec") or {}).get("schedulingGates") or []]


def _set_condition(obj: Obj, kind: str, value: bool, reason: str, message: str, stamp: str) -> None:
    conditions: list[Obj] = obj.setdefault("status", {}).setdefault("conditions", [])
    text = "True" if value else "False"
    generation = int(obj["metadata"].get("generation", 1))
    for cond in conditions:
        if cond.get("type") == kind:
            if cond.get("status") != text:
                cond["lastTransitionTime"] = stamp
            cond.update(status=text, reason=reason, message=message, observedGeneration=generation)
            return
    conditions.append({"type": kind, "status": text, "reason": reason, "message": message,
                       "lastTransitionTime": stamp, "observedGeneration": generation})
