"""PreTraining of a gang the manager does not place itself (capacity.py): for a node pool that scales up, or
for a Kueue queue. The default flow (pretraining.py: plan, pin, workers first, chief last) stays as it is;
this is its other mode.

Every pod is created at once, none pinned: the autoscaler adds nodes for all of them in one scale-up (its
simulation packs pending pods together), and Kueue admits them as one pod group (it waits until all
`pod-group-total-count` members exist: a chief created after its workers would never let the group be
admitted). So the chief starts before its workers' addresses are known: its hostfile ConfigMap is created
empty, its launcher waits for it (DT_HOSTFILE_WAIT), and the manager writes the workers' `IP slots=N` lines
once they run, then annotates the chief's pod so that its kubelet refreshes the volume at once instead of at
its next periodic sync, 60-90 s later (hostfilepush.py).

1. with a ProvisioningRequest class (scale-up), its PodTemplates and the request first; the pods follow
   once it is Provisioned, consuming it;
2. the empty hostfile, the workers and the chief;
3. the wait, on startup.py's two clocks: --schedule-timeout until every pod is bound (the node pool's
   scale-up, the queue's admission; progress every 30 s: "2 of 3 pod(s) bound to their nodes, waiting for
   node-pool scale-up"), --start-timeout for the image pull and start;
4. the hostfile, from the workers' pod IPs.
A gang not bound within --schedule-timeout is not retried (the pool or the queue had all that time): it is
deleted and the job ends (exit 71) with what the autoscaler or the queue said. A gang bound that fails to
start is deleted and created again, as in the default flow.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from distributetrain import naming, podstatus
from distributetrain.errors import Forbidden, ScheduleTimeout, StartFailed
from distributetrain.hostfile import HostSlots
from distributetrain.kube.gateway import Kube
from distributetrain.kube.watch import Watched
from distributetrain.manager import manifests
from distributetrain.manager.capacity import MODE_QUEUE, GangPlan
from distributetrain.manager.hostfilepush import HostfilePush
from distributetrain.manager.startup import Outcome, StartWatch
from distributetrain.observe import joblog
from distributetrain.observe.joblog import Reporter
from distributetrain.placement.namespacefit import NamespacePolicies
from distributetrain.placement.planner import Entry
from distributetrain.request.jobspec import JobSpec, ManagerIdentity

Pod = Mapping[str, Any]


class Phase(Protocol):
    """What this mode uses of the PreTraining that runs it (pretraining.py): its connection, request, owner
    and clocks, and its helpers for creating an owned object, deleting a gang and watching pods."""

    kube: Kube
    spec: JobSpec
    reporter: Reporter
    owner: ManagerIdentity | None
    run_id: str
    deadline: float | None
    policies: NamespacePolicies | None  # the namespace's, which the gang's pods are shaped to
    _started: float

    @property
    def read_only_claim(self) -> bool: ...

    def clock(self) -> float: ...

    def _sleep(self, seconds: float) -> None: ...

    def _create(self, body: dict[str, Any]) -> dict[str, Any]: ...

    def _delete_gang(self, names: list[str]) -> None: ...

    def _look(self, watch: StartWatch, pods: Mapping[str, dict[str, Any]]) -> Outcome | None: ...

    def _check_deadline(self, doing: str) -> None: ...

    def _bounded(self, pause: float) -> float: ...

    def _bounded_deadline(self, until: float) -> float: ...
NOT_ADMITTED = "not bound to a node within --schedule-timeout"


@dataclass(frozen=True)
class Started:
    """The gang running: workers' and chief's names, the tries it took, when each step was done."""

    workers: tuple[str, ...]
    chief: str
    attempts: int
    timings: Mapping[str, float]


class GroupStart:
    """One gang made at once, for the PreTraining that chose it: its connection, request, owner, clocks and
    helpers (create an owned object, delete a gang, look at pods on startup.py's clocks) are that phase's;
    `chief_started` says the chief has started."""

    def __init__(self, pre: Phase, gang: GangPlan, *, chief_started: Callable[[Pod], bool]) -> None:
        self.pre, self.gang, self.chief_started = pre, gang, chief_started
        self.kube, self.spec, self.reporter = pre.kube, pre.spec, pre.reporter
        self.queued = gang.mode == MODE_QUEUE

    def run(self) -> Started:
        spec, plan = self.spec, self.gang.plan
        sizes = ", ".join(str(e.gpus) for e in plan.allocation)
        where = f"LocalQueue {self.gang.queue}" if self.queued else "the node pool's scale-up"
        self.reporter.say(f"gang of {len(plan.allocation)} pod(s) with {sizes} GPU(s), created at once for "
                          f"{where}; the chief gets its hostfile once the workers run")
        timings: dict[str, float] = {}
        attempt = 0
        while True:
            names, failure, final = self._attempt(attempt, timings)
            if failure is None:
                return Started(tuple(names[:-1]), names[-1], attempt + 1, timings)
            self.reporter.say(f"attempt {attempt + 1}: the gang did not start: {failure}; deleting the "
                              "gang so no GPU stays held")
            self.reporter.gang_failed(failure, names)
            self._delete(names, attempt)
            if final or attempt >= spec.retries:
                raise ScheduleTimeout(f"job {spec.job_name}: {failure}. "
                                      f"{self._advice(failure)}; nothing of the job is left")
            pause = self.pre._bounded(spec.backoff * 2 ** attempt * (0.5 + random.random()))
            self.reporter.say(f"creating the gang again in {pause:.1f}s (retry {attempt + 1} of "
                              f"{spec.retries})")
            self.pre._sleep(pause)
            attempt += 1

    # ---- one try -------------------------------------------------------------------------------------------
    def _attempt(self, attempt: int, timings: dict[str, float]) -> tuple[list[str], str | None, bool]:
        """(the pods made, None) once the gang runs; else (the pods made, why not, whether trying again
        is pointless: the pool or the queue had the whole --schedule-timeout)."""
        spec, pre = self.spec, self.pre
        provisioning = None
        if self.gang.provisioning_class:
            provisioning, failure = self._provision(attempt)
            if failure is not None:
                return [], failure, True
        marks = manifests.Gang(
            pods=len(self.gang.plan.allocation),
            hostfile_wait=spec.start_timeout + manifests.RECOVERY_MARGIN,
            queue=self.gang.queue, group=naming.pod_group_name(spec.job_name, pre.run_id, attempt)
            if self.queued else None, topology_key=spec.topology_key if self.queued else None,
            provisioning=provisioning)
        hostfile = pre._create(manifests.hostfile_configmap(spec, [], owner=pre.owner, mutable=True))
        names = []
        for index, entry in enumerate(self.gang.plan.workers):
            worker = pre._create(manifests.worker_pod(spec, index=index, entry=entry, owner=pre.owner,
                                                      read_only_claim=pre.read_only_claim,
                                                      policies=pre.policies, gang=marks))
            names.append(worker["metadata"]["name"])
            self.reporter.pod_created(worker)
        chief = pre._create(manifests.chief_pod(spec, entry=self.gang.plan.chief, owner=pre.owner,
                                                read_only_claim=pre.read_only_claim, policies=pre.policies,
                                                gang=marks))
        names.append(chief["metadata"]["name"])
        self.reporter.pod_created(chief)
        created_at = pre.clock()
        timings["workers_created"] = timings["chief_created"] = created_at - pre._started
        self.reporter.say(f"created {len(names) - 1} worker(s) and chief {names[-1]}, pending: "
                          f"{self._waiting_for()}")
        failure, pods = self._wait(names, group=marks.group)
        if failure is not None:
            return names, failure, failure.startswith(NOT_ADMITTED)
        timings["workers_ready"] = timings["chief_started"] = pre.clock() - pre._started
        placed = ", ".join(f"{n} on {podstatus.node(pods[n])}" for n in names)
        self.reporter.say(f"the gang runs, {pre.clock() - created_at:.2f}s after its creation: {placed}")
        self.reporter.pods_ready([pods[n] for n in names[:-1]])
        self.reporter.chief_started(pods[names[-1]])
        self._write_hostfile(hostfile["metadata"]["name"], [pods[n] for n in names[:-1]])
        return names, None, False

    def _waiting_for(self) -> str:
        if self.queued:
            return f"Kueue admits the pod group from LocalQueue {self.gang.queue}"
        return "the node pool adds nodes (cluster-autoscaler or Karpenter acts on pending pods)"

    def _wait(self, names: list[str], *, group: str | None) -> tuple[str | None, dict[str, Any]]:
        """Every worker Running and Ready, the chief running; or why not (startup.py's two clocks)."""
        chief = names[-1]

        def ok(pod: Pod) -> bool:
            return self.chief_started(pod) if podstatus.name(pod) == chief else podstatus.is_ready(pod)

        def hint(pods: Mapping[str, Pod]) -> str:
            return self._queue_state(group) if self.queued else "waiting for node-pool scale-up"

        pre = self.pre
        watch = StartWatch(names, ok, created=pre.clock(), schedule_timeout=self.spec.schedule_timeout,
                           start_timeout=self.spec.start_timeout, deadline=pre.deadline, unbound_hint=hint)
        watched = Watched(self.kube, "pods", self.spec.namespace, naming.job_selector(self.spec.job_name))
        while True:
            outcome: Outcome | None = None
            for pods in watched.changes(deadline=watch.wake_at()):
                outcome = pre._look(watch, pods)
                if outcome is not None:
                    break
            else:
                pre._check_deadline("waiting for the gang's pods")
                outcome = pre._look(watch, watched.snapshot())
            if outcome is None:
                continue
            if outcome.final:
                raise StartFailed(f"job {self.spec.job_name}: {outcome.failure}; fix the image or the pod "
                                  "template and run the job again; the job's objects are deleted")
            failure = outcome.failure
            if failure is not None and failure.startswith(NOT_ADMITTED) and self.queued:
                failure = f"{failure}; {self._queue_state(group)}"
            return failure, dict(watched.objects)

    def _queue_state(self, group: str | None) -> str:
        """What Kueue says of the group: its Workload's QuotaReserved condition."""
        where = f"LocalQueue {self.gang.queue}"
        try:
            workload = self.kube.get("workloads", self.spec.namespace, str(group)) if group else None
        except Forbidden as err:
            return f"waiting in {where} (its Workload {group} cannot be read: {err.reason or 'Forbidden'})"
        if workload is None:
            return f"waiting in {where}: no Workload {group} yet (the pod group is not complete)"
        for cond in (workload.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "QuotaReserved" and cond.get("status") != "True":
                return (f"waiting in {where}: Workload {group} not admitted: {cond.get('reason')}: "
                        f"{cond.get('message')}")
        return f"admitted from {where} (Workload {group}), waiting for the scheduler"

    def _write_hostfile(self, name: str, workers: list[Pod]) -> None:
        hosts = [HostSlots(str(podstatus.pod_ipv4(w)), podstatus.gpus(w)) for w in workers]
        pairs = list(zip(hosts, workers, strict=True))
        # `nodes`: the chief's pre-flight names the node of a pod it blames
        body = manifests.hostfile_configmap(self.spec, hosts, owner=self.pre.owner, mutable=True,
                                            names={h.host: podstatus.name(w) for h, w in pairs},
                                            nodes={h.host: str(podstatus.node(w)) for h, w in pairs})
        push = HostfilePush(self.kube, namespace=self.spec.namespace, job=self.spec.job_name,
                            reporter=self.reporter)
        written = push.write(body["data"])
        lines = joblog.hostfile_text(hosts) or "(no workers)"
        seen = ("once its kubelet next syncs the pod" if push.refused else
                "now: its pod was annotated, so its kubelet refreshes the volume")
        self.reporter.say(f"hostfile ConfigMap {name} written: {lines}; the chief's launcher reads it {seen}")
        self.reporter.hostfile_written(written, hosts)

    # ---- a ProvisioningRequest -----------------------------------------------------------------------------
    def _provision(self, attempt: int) -> tuple[tuple[str, str] | None, str | None]:
        """The gang's PodTemplates and ProvisioningRequest, then the wait for Provisioned=True: ((name,
        class), None), or (None, why not) at the schedule timeout or when the autoscaler says Failed."""
        spec, pre, cls = self.spec, self.pre, str(self.gang.provisioning_class)
        shapes: dict[tuple[str, int], int] = {}
        for role, entry in [*((naming.ROLE_WORKER, e) for e in self.gang.plan.workers),
                            (naming.ROLE_CHIEF, self.gang.plan.chief)]:
            shapes[(role, entry.gpus)] = shapes.get((role, entry.gpus), 0) + 1
        templates = []
        for (role, gpus), count in shapes.items():
            pod = _pod_of(spec, role, gpus, pre.policies)
            made = pre._create(manifests.pod_template(spec, pod, gpus=gpus, owner=pre.owner))
            templates.append((made["metadata"]["name"], count))
        name = naming.provisioning_request_name(spec.job_name, attempt)
        pre._create(manifests.provisioning_request(spec, name=name, cls=cls, templates=templates,
                                                   owner=pre.owner))
        self.reporter.say(f"ProvisioningRequest {name} ({cls}) asks for the gang's nodes all at once")
        until = pre.clock() + spec.schedule_timeout
        said = ""
        watched = Watched(self.kube, "provisioningrequests", spec.namespace,
                          naming.job_selector(spec.job_name))
        for requests in watched.changes(deadline=pre._bounded_deadline(until)):
            state = _conditions(requests.get(name) or {})
            if state.get("Provisioned", ("",))[0] == "True":
                self.reporter.say(f"ProvisioningRequest {name} is Provisioned: the nodes come up for the "
                                  "gang, which is created now")
                return (name, cls), None
            if state.get("Failed", ("",))[0] == "True":
                return None, f"ProvisioningRequest {name} Failed: {state['Failed'][1]}"
            text = "; ".join(f"{k}={v[0]} {v[1]}" for k, v in sorted(state.items()))
            if text and text != said:
                self.reporter.say(f"ProvisioningRequest {name}: {text}")
                said = text
        pre._check_deadline("waiting for the ProvisioningRequest")
        return None, (f"{NOT_ADMITTED} ({spec.schedule_timeout:g}s): ProvisioningRequest {name} was not "
                      f"Provisioned: {said or 'no condition yet'}")

    # ---- cleanup -------------------------------------------------------------------------------------------
    def _delete(self, names: list[str], attempt: int) -> None:
        """The gang (and its hostfile), and the ProvisioningRequest with its PodTemplates."""
        if self.gang.provisioning_class:
            namespace = self.spec.namespace
            self.kube.delete("provisioningrequests", namespace,
                             naming.provisioning_request_name(self.spec.job_name, attempt))
            for template in self.kube.list("podtemplates", namespace,
                                           label_selector=naming.job_selector(self.spec.job_name))[0]:
                self.kube.delete("podtemplates", namespace, template["metadata"]["name"])
        self.pre._delete_gang(names)

    def _advice(self, failure: str) -> str:
        if "ProvisioningRequest" in failure:
            return ("the autoscaler did not provision the gang's nodes all at once: check the node pools' "
                    f"maximum sizes and the cloud's quota (kubectl describe provisioningrequests -n "
                    f"{self.spec.namespace}), raise --schedule-timeout, or use --provisioning-class none")
        if NOT_ADMITTED in failure and self.queued:
            return (f"Kueue did not admit the gang: check its ClusterQueue's quota (kubectl get "
                    f"clusterqueues, kubectl describe workloads -n {self.spec.namespace}), raise "
                    "--schedule-timeout to wait longer in the queue, or ask for fewer GPUs")
        if NOT_ADMITTED in failure:
            return ("the node pool did not bring up the nodes: check its maximum size and the cloud's quota "
                    "(kubectl get events --field-selector reason=NotTriggerScaleUp, kubectl get configmap "
                    "-n kube-system cluster-autoscaler-status -o yaml), raise --schedule-timeout, or ask for "
                    "fewer GPUs")
        return "check the reason above, then raise --start-timeout or --retries"


def _conditions(obj: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    return {str(c.get("type")): (str(c.get("status")), f"{c.get('reason', '')}: {c.get('message', '')}")
            for c in (obj.get("status") or {}).get("conditions") or []}


def _pod_of(spec: Any, role: str, gpus: int, policies: NamespacePolicies | None) -> dict[str, Any]:
    """A pod of `role` with `gpus` GPUs as the gang has it (shaped to the namespace), for its PodTemplate."""
    entry = Entry("", gpus)
    if role == naming.ROLE_WORKER:
        return manifests.worker_pod(spec, index=0, entry=entry, owner=None, policies=policies)
    return manifests.chief_pod(spec, entry=entry, owner=None, policies=policies)
