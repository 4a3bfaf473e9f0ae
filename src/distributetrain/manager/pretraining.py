"""PreTraining, the design's first phase: inventory the live cluster, plan, create the job's Secret (and
NetworkPolicy), then the workers pinned to their planned nodes; wait by watch until the whole gang is Running
and Ready; if it is not within the schedule timeout, delete the gang, re-plan and retry with backoff, never
leaving a partial gang holding GPUs. Then the hostfile ConfigMap from the workers' pod IPs, and the chief
last, watched until it runs.

A job of the same name found in the cluster is adopted when its chief still runs with its whole gang (a
restarted manager), refused when another live manager owns it, and otherwise deleted before starting afresh.
`PreTraining.run` does no cleanup of its own on failure: its callers run it under cleanup.guard.

Its other mode is a gang the manager does not place (capacity.py decides, groupstart.py runs it): for a Kueue
queue, or for a node pool that scales up when the free GPUs do not cover the request.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from distributetrain import naming, podstatus
from distributetrain.errors import (
    ApiError,
    CannotPlace,
    DeadlineExceeded,
    InvalidInput,
    PreflightFailed,
    ScheduleTimeout,
    StartFailed,
)
from distributetrain.hostfile import HostSlots
from distributetrain.kube.gateway import Kube
from distributetrain.kube.watch import Watched
from distributetrain.manager import capacity, cleanup, groupstart, manifests, placing, sshkeys
from distributetrain.manager.startup import Outcome, StartWatch
from distributetrain.observe import chieflog, joblog
from distributetrain.observe.joblog import Reporter
from distributetrain.placement import checks, fit, planner
from distributetrain.placement.inventory import NodeGpus
from distributetrain.placement.namespacefit import NamespacePolicies
from distributetrain.request.jobspec import JobSpec, ManagerIdentity

# the label the Job controller puts on its pods (the Job's uid)
JOB_UID_LABEL = "batch.kubernetes.io/controller-uid"
GPU_WAIT_MAX_INTERVAL = 30.0
# after the workers' sshd (--ssh-timeout), how long the chief's pre-flight may take to say its verdict: its
# own bound (the launcher's --preflight-timeout, 120 s) and the grace to stop it
PREFLIGHT_WAIT = 180.0
PREFLIGHT_POLL = 1.0  # how often the chief's log is read for the verdict meanwhile


@dataclass(frozen=True)
class StartedJob:
    """What PreTraining left running: the plan, the pods' names, and when they were created."""

    job: str
    namespace: str
    plan: planner.Plan | None      # None when an earlier run's job was adopted
    workers: tuple[str, ...]
    chief: str
    attempts: int
    adopted: bool = False
    timings: Mapping[str, float] = field(default_factory=dict)  # seconds since PreTraining started


class PreTraining:
    """PreTraining of one job, from one manager process."""

    def __init__(self, kube: Kube, spec: JobSpec, *, owner: ManagerIdentity | None = None,
                 reporter: Reporter | None = None, started_at: float | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        """`started_at` (epoch seconds): when the manager started, if before this process (Manager.sh runs
        the two phases as two processes); the active deadline counts from it."""
        self.kube = kube
        self.spec = spec
        self.owner = owner
        self.reporter = reporter or Reporter()
        self.run_id = uuid.uuid4().hex
        self.clock = clock
        self._sleep = sleep
        self._started = clock() - (max(0.0, time.time() - started_at) if started_at is not None else 0.0)
        # when the active deadline passes (monotonic), None without one; PostTraining keeps to it as well
        self.deadline = None if spec.active_deadline is None else self._started + spec.active_deadline
        self.touched = False  # whether this run created or adopted anything (and may therefore clean up)
        # what a worker and the chief ask of a node besides GPUs (the template, cpu, memory, /dev/shm)
        self.demands = manifests.pod_demands(spec)
        self.claim: dict[str, Any] | None = None  # the --volume-claim, read before anything is created
        # the namespace's LimitRanges, quotas, Pod Security level and UID range, read before the first plan
        self.policies: NamespacePolicies | None = None
        self.excluded: set[str] = set()  # nodes the chief's pre-flight blamed: no plan of this run uses them

    def run(self) -> StartedJob:
        """The phase: adopt, or plan and create the gang and the chief; return what runs."""
        spec = self.spec
        adopted = self._adopt_or_clean()
        if adopted is not None:
            return adopted
        plan, gang = self._plan_or_gang()
        keys = sshkeys.generate(f"{spec.job_name}@distributetrain")
        self.touched = True
        secret = self._create(manifests.ssh_secret(spec, keys, owner=self.owner))["metadata"]["name"]
        made = f"Secret {secret} (the job's ssh key pair)"
        if spec.network_policy:
            policy = self._create(manifests.network_policy(spec, owner=self.owner))["metadata"]["name"]
            made += f" and NetworkPolicy {policy}"
        if spec.disruption_budget:
            shape = gang.plan if gang is not None else plan
            assert shape is not None
            budget = self._create(manifests.disruption_budget(spec, pods=len(shape.allocation),
                                                              owner=self.owner))["metadata"]["name"]
            made += (f"; PodDisruptionBudget {budget} (no voluntary eviction of the job's pods: a drain of "
                     "their nodes waits until the job ends)")
        self.reporter.say(f"created {made}")
        if gang is not None:
            return self._run_gang(gang)
        assert plan is not None
        timings: dict[str, float] = {}
        attempt = 0
        # pre-flight checks that failed, each followed by a re-plan without the nodes blamed
        failed_checks = 0
        while True:
            names = []
            for index, entry in enumerate(plan.workers):
                worker = self._create(manifests.worker_pod(spec, index=index, entry=entry, owner=self.owner,
                                                           read_only_claim=self.read_only_claim,
                                                           policies=self.policies))
                names.append(worker["metadata"]["name"])
                self.reporter.say(f"worker {names[-1]} created on {entry.node} with "
                                  f"{joblog.gpus_text(entry.gpus)}")
                self.reporter.pod_created(worker)
            created_at = self.clock()
            timings["workers_created"] = created_at - self._started
            failure, ready = self._wait_for_pods(names, naming.ROLE_WORKER, podstatus.is_ready)
            created = list(names)
            if failure is None:
                timings["workers_ready"] = self.clock() - self._started
                if names:
                    self.reporter.say(f"{len(names)} worker(s) Running and Ready "
                                      f"{self.clock() - created_at:.2f}s after their creation")
                    self.reporter.pods_ready([ready[n] for n in names])
                hosts = [HostSlots(str(podstatus.pod_ipv4(ready[n])), podstatus.gpus(ready[n]))
                         for n in names]
                pods_by_ip = {str(podstatus.pod_ipv4(ready[n])): n for n in names}
                nodes_by_ip = {ip: podstatus.node(ready[n]) or "" for ip, n in pods_by_ip.items()}
                hostfile = self._create(manifests.hostfile_configmap(spec, hosts, owner=self.owner,
                                                                     names=pods_by_ip, nodes=nodes_by_ip))
                self.reporter.say(f"hostfile ConfigMap {hostfile['metadata']['name']} written: "
                                  f"{joblog.hostfile_text(hosts) or '(no workers)'}")
                self.reporter.hostfile_written(hostfile, hosts)
                chief = self._create(manifests.chief_pod(spec, entry=plan.chief, owner=self.owner,
                                                         read_only_claim=self.read_only_claim,
                                                         policies=self.policies))
                timings["chief_created"] = self.clock() - self._started
                self.reporter.say(f"chief {chief['metadata']['name']} created on {plan.chief.node} with "
                                  f"{joblog.gpus_text(plan.chief.gpus)}; horovodrun starts all {spec.gpus} "
                                  "process(es) from it")
                self.reporter.pod_created(chief)
                # the chief belongs to the gang: its GPUs may have been taken since the plan, too
                created.append(chief["metadata"]["name"])
                failure, pods = self._wait_for_pods(created[-1:], naming.ROLE_CHIEF, _started)
                if failure is None:
                    timings["chief_started"] = self.clock() - self._started
                    self.reporter.say(
                        f"chief {created[-1]} is {podstatus.phase(pods[created[-1]])}, "
                        f"{timings['chief_started'] - timings['chief_created']:.2f}s after its creation; "
                        "its launcher checks every worker's sshd, then starts horovodrun")
                    self.reporter.chief_started(pods[created[-1]])
                    if not self.checks_preflight:
                        break
                    verdict = self._await_preflight(created[-1])
                    if verdict is None or verdict.passed:
                        timings["preflight_ended"] = self.clock() - self._started
                        break
                    failed_checks += 1
                    plan = self._exclude(verdict, created, failed_checks=failed_checks, attempt=attempt)
                    continue
            self.reporter.say(f"attempt {attempt + 1}: the gang did not start: {failure}; deleting the gang "
                              "so no GPU stays held")
            self.reporter.gang_failed(failure, created)
            self._delete_gang(created)
            if attempt >= spec.retries:
                raise ScheduleTimeout(
                    f"job {spec.job_name}: the workers and the chief did not all start, {attempt + 1} "
                    f"time(s): {failure}. Check the reason above, then raise --schedule-timeout (binding), "
                    "--start-timeout (image pull and start) or --retries, or ask for fewer GPUs")
            # jittered: two managers that collided on the same GPUs must not retry in lockstep
            pause = self._bounded(spec.backoff * 2 ** attempt * (0.5 + random.random()))
            self.reporter.say(f"re-planning in {pause:.1f}s (retry {attempt + 1} of {spec.retries})")
            self._sleep(pause)
            attempt += 1
            plan = self._replanned(self.plan(attempt=attempt + failed_checks))
        chief_name = created[-1]
        return StartedJob(job=spec.job_name, namespace=spec.namespace, plan=plan, workers=tuple(names),
                        chief=chief_name, attempts=attempt + 1, timings=timings)

    @property
    def checks_preflight(self) -> bool:
        """The chief runs the pre-flight check: the gang counts as started once it passed."""
        return self.spec.preflight or self.spec.min_busbw is not None

    def _replanned(self, plan: planner.Plan) -> planner.Plan:
        if self.spec.disruption_budget:  # the gang may have another number of pods now
            self.kube.patch("poddisruptionbudgets", self.spec.namespace,
                            naming.disruption_budget_name(self.spec.job_name),
                            {"spec": {"minAvailable": len(plan.allocation)}})
        return plan

    def _await_preflight(self, chief: str) -> chieflog.PreflightVerdict | None:
        """The chief's pre-flight verdict, read from its log while it runs (the launcher checks the workers'
        sshd, then runs the check, each bounded); None when the chief ended without one (PostTraining
        reports how) or said none within the bound (PostTraining watches on)."""
        spec = self.spec
        until = self._bounded_deadline(self.clock() + spec.ssh_timeout + PREFLIGHT_WAIT)
        watched = Watched(self.kube, "pods", spec.namespace,
                          f"{naming.job_selector(spec.job_name)},{naming.ROLE_LABEL}={naming.ROLE_CHIEF}")
        while True:
            for pods in watched.changes(deadline=min(until, self.clock() + PREFLIGHT_POLL)):
                if chief not in pods or podstatus.is_terminated(pods[chief]):
                    break
            pod = watched.objects.get(chief)
            try:
                text = self.kube.read_log(spec.namespace, chief, naming.CHIEF_CONTAINER) if pod else b""
            except ApiError as err:  # read again at the next look; the pod's own end still ends the wait
                self.reporter.say(f"reading the chief's log for its pre-flight verdict: {err}")
                text = b""
            verdict = chieflog.read_preflight(text.splitlines())
            if verdict is not None and not verdict.passed:
                # this chief is deleted next: its log, the check's lines, goes into the manager's own
                for line in text.splitlines():
                    self.reporter.chief_line(line)
            if verdict is not None or pod is None or podstatus.is_terminated(pod):
                return verdict
            if self.clock() >= until:
                self.reporter.say(f"the chief {chief} said no pre-flight verdict within "
                                  f"{spec.ssh_timeout + PREFLIGHT_WAIT:g}s; supervising the job as it is")
                return None

    def _exclude(self, verdict: chieflog.PreflightVerdict, created: list[str], *, failed_checks: int,
                 attempt: int) -> planner.Plan:
        """After a failed pre-flight: exclude the nodes it blamed, delete the gang and plan again without
        them; or, with no node to exclude, no check left or no plan left, PreflightFailed (exit 76; the
        caller's guard deletes what is left)."""
        spec = self.spec
        blamed = verdict.blame.nodes
        self.excluded.update(blamed)
        excluded = ", ".join(sorted(self.excluded)) or "none"
        job = f"job {spec.job_name}"
        if not blamed:
            raise PreflightFailed(f"{job}: {verdict.why}; the check named no node to exclude, so a re-plan "
                                  "would not help (see the chief's log above); nothing was kept")
        if failed_checks >= spec.preflight_attempts:
            raise PreflightFailed(
                f"{job}: the pre-flight check failed {failed_checks} time(s), excluding node(s) {excluded}; "
                f"the last: {verdict.why}. Check the network of those nodes (or cordon them), lower "
                "--min-busbw if every link is that slow, or raise --preflight-attempts; nothing was kept")
        self.reporter.preflight_excluded(
            f"the pre-flight check blamed node(s) {', '.join(blamed)}: {verdict.why}; deleting the gang and "
            f"re-planning without node(s) {excluded} (check {failed_checks + 1} of at most "
            f"{spec.preflight_attempts} next)", blamed, created)
        self._delete_gang(created)
        try:
            return self._replanned(self.plan(attempt=attempt + failed_checks))
        except CannotPlace as err:
            raise PreflightFailed(
                f"{job}: no plan is left without the node(s) the pre-flight check excluded ({excluded}): "
                f"{err}. Fix the network of those nodes, lower --min-busbw, or ask for fewer GPUs") from err

    def _plan_or_gang(self) -> tuple[planner.Plan | None, capacity.GangPlan | None]:
        """The default flow's plan; or, for a Kueue queue or a node pool that scales up (capacity.py), a
        gang made at once for others to place."""
        chooser = capacity.Chooser(self.kube, self.spec, self.reporter, survey=self._unplaced_rows)
        queue = chooser.queue()
        if queue is not None:
            if self.spec.volume_claim and self.claim is None:
                self.claim = self._read_claim(self.spec.volume_claim)
            self.policies = placing.namespace_policies(self.kube, self.spec.namespace)
            for line in self.policies.describe():
                self.reporter.say(f"namespace {self.spec.namespace}: {line}")
            return None, self._fits(chooser.for_queue(queue))
        try:
            return self.plan(attempt=0), None
        except (CannotPlace, fit.UnknownResource) as refused:
            return None, self._fits(chooser.for_scale_up(refused))

    def _fits(self, gang: capacity.GangPlan) -> capacity.GangPlan:
        """A gang made at once is shaped to the namespace as the default flow's is, and refused before
        anything is created where the namespace's LimitRanges, Pod Security or quotas never admit it."""
        if self.policies is None:
            self.policies = placing.namespace_policies(self.kube, self.spec.namespace)
        fit.check_namespace(self.gang(gang.plan), self.policies, network_policy=self.spec.network_policy)
        return gang

    def _unplaced_rows(self) -> tuple[NodeGpus, ...]:
        """The inventory for a gang's shape: a GPU resource no node has yet is not a typo there."""
        return placing.survey(self.kube, self.spec, demands=self.demands, owner=self.owner,
                              resource_known=False)

    def _run_gang(self, gang: capacity.GangPlan) -> StartedJob:
        started = groupstart.GroupStart(self, gang, chief_started=_started).run()
        return StartedJob(job=self.spec.job_name, namespace=self.spec.namespace, plan=gang.plan,
                          workers=started.workers, chief=started.chief, attempts=started.attempts,
                          timings=started.timings)

    @property
    def read_only_claim(self) -> bool:
        return self.claim is not None and checks.claim_read_only(self.claim)

    def plan(self, *, attempt: int, wait: bool = True) -> planner.Plan:
        """Inventory the live cluster and plan; with --wait-for-gpus (and `wait`), wait for room, creating
        nothing. Before the first plan, and after each, what a real cluster would refuse later is refused
        now (exit 2): an IPv6-only pod network, a missing volume claim or one the plan's nodes cannot
        share."""
        spec = self.spec
        wait_until = self.clock() + (spec.wait_for_gpus if wait else 0.0)
        interval = 2.0
        shown: list[str] = []
        if spec.volume_claim and self.claim is None:
            self.claim = self._read_claim(spec.volume_claim)
        while True:
            self.policies = placing.namespace_policies(self.kube, spec.namespace)  # quota used: read anew
            if not shown:
                for line in self.policies.describe():
                    self.reporter.say(f"namespace {spec.namespace}: {line}")
                self.reporter.say(f"network: {manifests.egress_text(spec)}")
            self._check_deadline("planning")
            rows = placing.survey(self.kube, spec, demands=self.demands, owner=self.owner)
            table = joblog.inventory_lines(rows, resource=spec.resource)
            if table != shown:  # waiting for GPUs: the same table again says nothing new
                for line in table:
                    self.reporter.say(line)
                shown = table
            try:
                plan = fit.place(rows, spec.gpus, policy=spec.placement_policy,
                                 topology_key=spec.topology_key, avoid=self.excluded,
                                 one_pod_fabric=spec.recovery == naming.RECOVERY_ELASTIC)
                fit.check_namespace(self.gang(plan), self.policies, network_policy=spec.network_policy)
            except CannotPlace as err:
                if self.clock() + interval > wait_until:
                    waited = f" (after waiting {spec.wait_for_gpus:g}s)" if spec.wait_for_gpus else ""
                    raise CannotPlace(f"{err}{waited}; nothing was created") from err
                self.reporter.say(f"waiting for GPUs to free up: {err}")
                self._sleep(self._bounded(interval))
                interval = min(GPU_WAIT_MAX_INTERVAL, interval * 2)
                continue
            split = ", ".join(joblog.entry_text(e) for e in plan.allocation)
            self.reporter.say(f"plan (attempt {attempt + 1}): {spec.gpus} GPU(s) as {split}; chief "
                              f"{plan.chief.gpus} on {plan.chief.node}")
            if self.claim is not None:
                problem = checks.claim_problem(self.claim, nodes=[e.node for e in plan.allocation])
                if problem:
                    left = "nothing was created" if attempt == 0 else "the job's objects are deleted"
                    raise InvalidInput(f"volume_claim: {problem}; {left}")
            self.reporter.planned(plan, attempt)
            return plan

    def gang(self, plan: planner.Plan) -> list[tuple[str, dict[str, Any]]]:
        """The pods `plan` would create, as they would be created (shaped to the namespace), each named."""
        return manifests.gang(self.spec, plan.workers, plan.chief, owner=self.owner,
                              read_only_claim=self.read_only_claim, policies=self.policies)

    def _read_claim(self, name: str) -> dict[str, Any]:
        """The job's PersistentVolumeClaim, read by name (RBAC: get persistentvolumeclaims)."""
        claim = self.kube.get("persistentvolumeclaims", self.spec.namespace, name)
        if claim is None:
            raise InvalidInput(f"volume_claim: PersistentVolumeClaim {self.spec.namespace}/{name} does not "
                               "exist; create it (ReadWriteMany or ReadOnlyMany for a job on several nodes) "
                               "or fix --volume-claim; nothing was created")
        return claim

    def _wait_for_pods(self, names: list[str], role: str, ok: Callable[[podstatus.Pod], bool]
                       ) -> tuple[str | None, dict[str, dict[str, Any]]]:
        """(None, pods) once every named pod is `ok`; (why not, pods) when one ends or vanishes, is not bound
        within the schedule timeout, or not started within the start timeout once bound (startup.py). A pod
        that can never start (a bad image) raises StartFailed: no re-plan would help."""
        if not names:
            return None, {}
        watch = StartWatch(names, ok, created=self.clock(), schedule_timeout=self.spec.schedule_timeout,
                           start_timeout=self.spec.start_timeout, deadline=self.deadline)
        selector = f"{naming.job_selector(self.spec.job_name)},{naming.ROLE_LABEL}={role}"
        watched = Watched(self.kube, "pods", self.spec.namespace, selector)
        while True:
            outcome = None
            for pods in watched.changes(deadline=watch.wake_at()):
                outcome = self._look(watch, pods)
                if outcome is not None:
                    break
            else:
                self._check_deadline(f"waiting for the {role} pods")
                # a clock ran out or a progress line is due with no change seen: judge a fresh list, not the
                # watch's picture, so one missed event can never stall a gang until --start-timeout
                outcome = self._look(watch, watched.relist())
            if outcome is None:
                continue
            if outcome.final:
                raise StartFailed(f"job {self.spec.job_name}: {outcome.failure}; fix the image or the pod "
                                  "template and run the job again; the job's objects are deleted")
            return outcome.failure, dict(watched.objects)

    def _look(self, watch: StartWatch, pods: Mapping[str, dict[str, Any]]) -> Outcome | None:
        now = self.clock()
        outcome = watch.observe(pods, now)
        line = watch.progress(pods, now) if outcome is None else None
        if line:
            self.reporter.say(line)
        return outcome

    # ---- objects ----------------------------------------------------------------------------------------
    def _create(self, body: dict[str, Any]) -> dict[str, Any]:
        return placing.create_owned(self.kube, body, run_id=self.run_id, job=self.spec.job_name)

    def _delete_gang(self, names: list[str]) -> None:
        """Delete the gang (and its hostfile) and wait until its pods are gone, so the re-plan sees their GPUs
        free."""
        for name in names:
            self.kube.delete("pods", self.spec.namespace, name)
        hostfile = naming.hostfile_configmap_name(self.spec.job_name)
        self.kube.delete("configmaps", self.spec.namespace, hostfile)
        watched = Watched(self.kube, "pods", self.spec.namespace, naming.job_selector(self.spec.job_name))
        for pods in watched.changes(deadline=self.clock() + 90.0):
            if not any(n in pods for n in names):
                return
        raise ApiError(f"the gang's pods {', '.join(names)} were deleted but did not go away within 90s")

    def _adopt_or_clean(self) -> StartedJob | None:
        """Objects of an earlier run with this job name: adopt them when their chief is there and an earlier
        pod of this manager's own Job made it (the manager pod was replaced mid-job: the training goes on, or
        its result is reported), or when their chief still runs with its whole gang (a manager restarted by
        hand); otherwise delete them and start afresh."""
        spec = self.spec
        found = cleanup.find_job_objects(self.kube, job=spec.job_name, namespace=spec.namespace)
        if not any(found.values()):
            return None
        objects = [o for items in found.values() for o in items]
        self._refuse_if_running_elsewhere(objects)
        self.touched = True
        pods = {podstatus.name(p): p for p in found["pods"]}
        chief_name = naming.chief_name(spec.job_name)
        chief = pods.get(chief_name)
        live = [p for p in pods.values() if not podstatus.is_terminated(p) and not podstatus.is_deleting(p)]
        held = sum(podstatus.gpus(p) for p in live)
        whole = chief is not None and held == podstatus.expected_processes(chief)
        ours = chief is not None and self._owned_by_my_job(chief)
        # a gang made at once (groupstart.py) whose hostfile is still empty never got going: start afresh
        unstarted = any(c.get("immutable") is False and not (c.get("data") or {}).get(naming.HOSTFILE_KEY)
                        for c in found["configmaps"]) and chief is not None and podstatus.env(
            chief, naming.ENV_HOSTFILE_WAIT) is not None
        if chief is not None and (ours or (chief in live and whole)) and not unstarted:
            workers = tuple(sorted(n for n, p in pods.items() if podstatus.role(p) == naming.ROLE_WORKER))
            state = "running" if chief in live else f"ended ({podstatus.describe(chief)})"
            since = f"an earlier pod of Job {self.owner.job_name}" if ours and self.owner else \
                "an earlier manager"
            self.reporter.say(f"adopting the job {spec.job_name}, {state}: chief {chief_name} and "
                              f"{len(workers)} worker(s) from {since}")
            return StartedJob(job=spec.job_name, namespace=spec.namespace, plan=None, workers=workers,
                              chief=chief_name, attempts=0, adopted=True)
        count = sum(len(v) for v in found.values())
        self.reporter.say(f"found {count} object(s) of an earlier, unfinished or finished run of job "
                          f"{spec.job_name}; deleting them before starting")
        cleanup.delete_job(self.kube, job=spec.job_name, namespace=spec.namespace, keep_chief=False,
                           reporter=self.reporter)
        return None

    def _owned_by_my_job(self, obj: dict[str, Any]) -> bool:
        uid = self.owner.job_uid if self.owner else None
        return uid is not None and any(ref.get("uid") == uid
                                       for ref in (obj.get("metadata") or {}).get("ownerReferences") or [])

    def _refuse_if_running_elsewhere(self, objects: list[dict[str, Any]]) -> None:
        """Objects owned by another manager that still runs belong to a live job: never touch them. Another
        manager is its pod (owner kind Pod), or a pod of its Job that has not ended (owner kind Job: the Job
        controller labels its pods with the Job's uid, so the pods say it; no right on Jobs is needed)."""
        mine = {self.owner.uid, self.owner.job_uid} - {None} if self.owner else set()
        for obj in objects:
            for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
                if ref.get("kind") not in ("Pod", "Job") or ref.get("uid") in mine:
                    continue
                if ref.get("kind") == "Job":
                    pods, _ = self.kube.list("pods", self.spec.namespace,
                                             label_selector=f"{JOB_UID_LABEL}={ref.get('uid')}")
                    other = next((p for p in pods if _running(p)), None)
                else:
                    found = self.kube.get("pods", self.spec.namespace, str(ref.get("name")))
                    same = found is not None and found["metadata"].get("uid") == ref.get("uid")
                    other = found if same and found is not None and _running(found) else None
                if other is not None:
                    raise InvalidInput(
                        f"job_name: job {self.spec.job_name!r} in namespace {self.spec.namespace} is run by "
                        f"manager {ref.get('kind')} {ref.get('name')}, which is still running; choose "
                        "another --job-name, or stop that manager first; nothing was created")

    # ---- deadlines ---------------------------------------------------------------------------------------
    def _check_deadline(self, doing: str) -> None:
        if self.deadline is not None and self.clock() >= self.deadline:
            raise DeadlineExceeded(f"job {self.spec.job_name}: the active deadline of "
                                   f"{self.spec.active_deadline:g}s passed while {doing}")

    def _bounded_deadline(self, until: float) -> float:
        return until if self.deadline is None else min(until, self.deadline)

    def _bounded(self, pause: float) -> float:
        if self.deadline is None:
            return pause
        return max(0.0, min(pause, self.deadline - self.clock()))


def _running(pod: dict[str, Any]) -> bool:
    """A manager pod that has neither ended nor is being deleted."""
    return not (podstatus.is_terminated(pod) or podstatus.is_deleting(pod))


def _started(pod: podstatus.Pod) -> bool:
    """The chief started (or already ran to its end). A pod Failed by the node itself (OutOfnvidia.com/gpu at
    admission, NodeLost) never ran: that is a placement failure, retried with the gang."""
    if podstatus.is_deleting(pod):
        return False
    phase = podstatus.phase(pod)
    if phase == "Failed":
        return not (pod.get("status") or {}).get("reason") and podstatus.exit_code(pod) is not None
    return phase in ("Running", "Succeeded")
