"""The keeper: holds a running job at its size, for PostTraining (posttraining.supervise calls it where it
would otherwise fail on a lost worker). Elastic jobs (`--min-gpus`) and restart jobs (`--restarts`).

A worker lost (its pod deleted or ended, its node NotReady): its line leaves the hostfile ConfigMap at once,
so the chief's host discovery stops offering it; the missing GPUs are planned again over what is free now
(the exact planner; a NotReady node is not eligible) and replacement workers are created; each joins the
hostfile once Running and Ready. An elastic job trains on meanwhile if it keeps at least --min-gpus, and grows
up to --max-gpus when GPUs free up; a restart job waits for the whole hostfile, then its chief's launcher
relaunches the training from the last checkpoint (at most --restarts times). Short of room for longer than
--replace-timeout (elastic: below its minimum), the job fails as a non-recovering one does: WorkerFailed,
exit 70, everything deleted by the caller's guard. The decisions are recovery.py's; this module does the I/O.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from distributetrain import naming, podstatus
from distributetrain.errors import CannotPlace, InvalidInput, WorkerFailed
from distributetrain.kube.gateway import Kube
from distributetrain.kube.watch import Snapshot
from distributetrain.manager import manifests, placing
from distributetrain.manager.hostfilepush import HostfilePush
from distributetrain.manager.recovery import (
    Member,
    Recovery,
    elastic_size,
    gpus_to_add,
    hostfile_entries,
    lost_reason,
    next_index,
    node_is_ready,
    resumed_epoch,
)
from distributetrain.manager.startup import StartWatch
from distributetrain.observe import joblog
from distributetrain.observe.joblog import Reporter
from distributetrain.placement import checks, fit, inventory, planner
from distributetrain.placement.inventory import NodeGpus
from distributetrain.placement.namespacefit import NamespacePolicies
from distributetrain.request.jobspec import JobSpec, ManagerIdentity

FIRST_LOOK = 2.0  # seconds before looking for room again after a plan found none; doubles to grow_interval


def keeper_for(kube: Kube, pods: Snapshot, chief_name: str, *, request: Callable[[], JobSpec] | None,
               reporter: Reporter, owner: ManagerIdentity | None,
               clock: Callable[[], float] = time.monotonic) -> Keeper | None:
    """The keeper of a job whose chief says it survives lost workers (naming.RECOVERY_ANNOTATION); None for
    any other job. `request` builds the job's request, which replacements are made from."""
    mode = podstatus.annotation(pods[chief_name], naming.RECOVERY_ANNOTATION)
    if not mode:
        return None
    if request is None:
        raise InvalidInput(f"job {chief_name.removesuffix('-chief')} is {mode}: its supervisor replaces lost "
                           "workers and needs the job's request; supervise it with the same request as "
                           "`launch` (Manager.sh does), not `distributetrain wait`")
    spec = request()
    if mode == naming.RECOVERY_ELASTIC:
        how = (f"training goes on with at least {spec.min_gpus} of {spec.gpus} GPU(s)"
               + (f", growing up to {spec.max_gpus}" if spec.max_gpus else ""))
    else:
        how = f"then the training resumes from its last checkpoint (at most {spec.restarts} restart(s))"
    reporter.say(f"{mode} job: a lost worker is replaced on the best free GPUs; {how}")
    return Keeper(kube, spec, pods=pods, reporter=reporter, owner=owner, clock=clock)


@dataclass(frozen=True)
class Pending:
    """A replacement worker created and not yet Ready, and the wait for it on startup.py's two clocks."""

    node: str
    gpus: int
    watch: StartWatch


class Keeper:
    """Keeps one running job at its size; see the module's docstring."""

    def __init__(self, kube: Kube, spec: JobSpec, *, pods: Snapshot, reporter: Reporter,
                 owner: ManagerIdentity | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        recovery = Recovery.of(mode=spec.recovery, gpus=spec.gpus, min_gpus=spec.min_gpus,
                               max_gpus=spec.max_gpus, restarts=spec.restarts,
                               replace_timeout=spec.replace_timeout, grow_interval=spec.grow_interval)
        if recovery is None:
            raise ValueError(f"job {spec.job_name} neither elastic nor restartable: nothing to keep")
        self.kube, self.spec, self.recovery, self.reporter, self.owner = kube, spec, recovery, reporter, owner
        self._clock = clock
        self.chief = naming.chief_name(spec.job_name)
        self.chief_gpus = podstatus.gpus(pods[self.chief]) if self.chief in pods else 0
        self.members: dict[str, Member] = {}
        self.pending: dict[str, Pending] = {}
        self.names: set[str] = set()  # every worker the job ever had: a name is never reused
        self._seen: set[str] = set()  # replacements seen in a snapshot at least once
        self._last: Snapshot = {}  # the latest snapshot, for the time-driven checks
        for name, pod in sorted(pods.items()):
            if podstatus.role(pod) != naming.ROLE_WORKER:
                continue
            self.names.add(name)
            ip = podstatus.pod_ipv4(pod)
            if ip and lost_reason(pod) is None:
                self.members[name] = Member(name, podstatus.node(pod) or "", ip, podstatus.gpus(pod))
        self.short_since: float | None = None   # when the job fell short of what it must hold
        self.next_look: float | None = None     # when to look for free GPUs next
        self.look_every = FIRST_LOOK
        self.restarts_used = 0
        self.recovering = False                 # restart mode: a relaunch is owed
        self.history: list[str] = []            # what each recovery came to, for the final line
        self.avoid: set[str] = set()            # nodes of workers that hung: no replacement goes there
        self.policies: NamespacePolicies | None = None  # the namespace's, read at each look
        self._lock = threading.Lock()           # chief_line runs in the log follower's thread
        self.demands = manifests.pod_demands(spec, (naming.ROLE_WORKER,))
        self.run_id = uuid.uuid4().hex  # this keeper's creates: a retried POST that succeeded is adopted
        claim = kube.get("persistentvolumeclaims", spec.namespace, spec.volume_claim) if spec.volume_claim \
            else None
        self.claim = claim
        self._hostfile_text: tuple[str, str] | None = None
        self.push = HostfilePush(kube, namespace=spec.namespace, job=spec.job_name, reporter=reporter)
        if self.holding < recovery.target:  # a worker was lost before PostTraining started
            self.next_look = clock()
        elif recovery.elastic and recovery.maximum > self.holding:
            self.next_look = clock() + recovery.grow_interval

    # ---- what the job holds ------------------------------------------------------------------------------
    @property
    def training(self) -> int:
        """GPUs in the hostfile: the chief's and the Ready workers'."""
        return self.chief_gpus + sum(m.gpus for m in self.members.values())

    @property
    def holding(self) -> int:
        """GPUs the job holds or is starting: training plus replacements not yet Ready."""
        return self.training + sum(p.gpus for p in self.pending.values())

    def workers(self) -> list[str]:
        return sorted([*self.members, *self.pending])

    # ---- events -------------------------------------------------------------------------------------------
    def observe(self, snapshot: Snapshot) -> None:
        """One snapshot of the job's pods: lost members out of the hostfile, Ready replacements in."""
        now = self._clock()
        self._last = snapshot
        lost = {}
        for name, member in list(self.members.items()):
            pod = snapshot.get(name)
            node_ready = None
            if pod is not None and not podstatus.is_ready(pod) and not podstatus.is_terminated(pod):
                node_ready = self._node_ready(member.node)
            reason = lost_reason(pod, node_ready=node_ready)
            if reason is not None:
                lost[name] = (member, reason)
        for name in lost:
            del self.members[name]
            self.kube.delete("pods", self.spec.namespace, name)
        joined = []
        for name, wanted in list(self.pending.items()):
            pod = snapshot.get(name)
            if pod is None and name not in self._seen:
                continue  # created since this snapshot was taken: its ADDED event is on its way
            self._seen.add(name)
            outcome = wanted.watch.observe({name: pod} if pod is not None else {}, now)
            if outcome is not None and outcome.failure is not None:
                self._drop_pending(name, f"did not start: {outcome.failure}")
            elif pod is not None and podstatus.is_ready(pod) and podstatus.pod_ipv4(pod):
                del self.pending[name]
                member = Member(name, podstatus.node(pod) or wanted.node, str(podstatus.pod_ipv4(pod)),
                                wanted.gpus)
                self.members[name] = member
                joined.append(member)
        if lost or joined:
            self.write_hostfile()
        if lost:
            self._lost(lost, now)
        for member in joined:
            self._joined(member, now)
        self._update_shortfall(now)

    def remove_stuck(self, names: Sequence[str], why: str) -> list[str]:
        """The watchdog's restart and replace (manager/watchdog.py): delete these hung workers and keep
        their nodes out of every later plan. Their loss is then the keeper's as any lost worker's: out of
        the hostfile, replaced elsewhere; a restart job relaunches from its checkpoint. Returns the workers
        removed (a name that is not a member, e.g. the chief, is not)."""
        removed = [n for n in names if n in self.members]
        for name in removed:
            self.avoid.add(self.members[name].node)
            # no grace: a hung process cannot checkpoint, and the others fail at once without their peer
            self.kube.delete("pods", self.spec.namespace, name, grace_seconds=0)
        if removed:
            self.reporter.say(f"{why}: deleted worker(s) {', '.join(removed)}; node(s) "
                              f"{', '.join(sorted(self.avoid))} kept out of the re-plan")
        return removed

    def tick(self) -> None:
        """The time-driven part: replacements that never got Ready, the wait for room, looking for GPUs."""
        now = self._clock()
        for name, wanted in list(self.pending.items()):
            pod = self._last.get(name)
            if pod is None:
                continue  # not seen yet (its ADDED event is on its way), or gone: observe() drops it
            outcome = wanted.watch.observe({name: pod}, now)
            if outcome is not None and outcome.failure is not None:
                self._drop_pending(name, f"did not start: {outcome.failure}")
        self._update_shortfall(now)
        if self.next_look is not None and now >= self.next_look:
            self.look()

    def wake_at(self) -> float | None:
        """When tick() has something to do (monotonic), None: only pod events matter now."""
        times = [t for t in (self.next_look, self._deadline()) if t is not None]
        times += [p.watch.wake_at() for p in self.pending.values()]
        return min(times) if times else None

    def tee(self, sink: Callable[[bytes], None]) -> Callable[[bytes], None]:
        """`sink`, and this keeper reading the same chief's line."""
        def both(line: bytes) -> None:
            sink(line)
            self.chief_line(line)
        return both

    def chief_line(self, line: bytes) -> None:
        """The chief's log, read for what a recovery came to: Horovod re-formed (elastic), resumed from
        which epoch (restart)."""
        size = elastic_size(line)
        if size is not None:
            with self._lock:
                note = f"training runs on {size[0]} of {self.recovery.target} GPU(s) from epoch {size[1]}"
                self.history.append(note)
            self.reporter.say(note)
            return
        epoch = resumed_epoch(line)
        if epoch is not None and self.restarts_used:
            with self._lock:
                where = f"from epoch {epoch}" if epoch else "from the start (no checkpoint yet)"
                note = f"restart {self.restarts_used}: the training resumed {where}"
                self.history.append(note)
            self.reporter.say(note)

    def summary(self) -> str:
        """For the manager's last line: how many restarts, from which epochs; or how the size went."""
        with self._lock:
            if self.recovery.elastic:
                # Horovod's first formation is not a reset: each later one is a worker lost or joined
                resets = len([h for h in self.history if h.startswith("training runs")]) - 1
                return f"{resets} elastic reset(s)" if resets > 0 else "no elastic reset"
            resumed = [h.split(": ", 1)[1] for h in self.history if h.startswith("restart ")]
        if not self.restarts_used:
            return "no restart"
        return f"after {self.restarts_used} restart(s)" + (f" ({'; '.join(resumed)})" if resumed else "")

    # ---- the hostfile -----------------------------------------------------------------------------------
    def write_hostfile(self) -> None:
        hosts, names = hostfile_entries(self.members.values())
        nodes = {m.ip: m.node for m in self.members.values()}
        body = manifests.hostfile_configmap(self.spec, hosts, owner=self.owner, names=names, nodes=nodes)
        # a merge patch keeps a key it does not name: the `IP NODE` lines follow the workers, none included
        body["data"].setdefault(naming.NODES_KEY, "")
        text = (body["data"][naming.HOSTFILE_KEY], body["data"].get(naming.HOSTNAMES_KEY, ""))
        if text == self._hostfile_text:
            return
        self.push.write(body["data"])  # and the chief's kubelet refreshes its volume now (hostfilepush.py)
        self._hostfile_text = text

    # ---- losing and replacing ---------------------------------------------------------------------------
    def _lost(self, lost: Mapping[str, tuple[Member, str]], now: float) -> None:
        recovery = self.recovery
        names = ", ".join(f"{m.name} on {m.node} ({reason})" for m, reason in lost.values())
        if recovery.elastic:
            self.reporter.say(f"worker {names} lost: removed from the hostfile; Horovod goes on with "
                              f"{self.training} of {recovery.target} GPU(s) (at least {recovery.minimum})")
        else:
            if not self.recovering:
                self.restarts_used += 1
                if self.restarts_used > recovery.restarts:
                    raise WorkerFailed(f"worker {names} lost; the training was relaunched "
                                       f"{recovery.restarts} time(s) already, the most --restarts allows; "
                                       "the job was stopped")
                self.recovering = True
                self.reporter.restarted(f"worker {names} lost: the training is relaunched once it is "
                                        f"replaced (restart {self.restarts_used} of {recovery.restarts})")
            self.reporter.say(f"worker {names} lost: removed from the hostfile; once it is replaced the "
                              "chief relaunches the training from its last checkpoint (restart "
                              f"{self.restarts_used} of {recovery.restarts})")
        self.next_look = now
        self.look_every = FIRST_LOOK

    def _joined(self, member: Member, now: float) -> None:
        most = self.recovery.maximum
        self.reporter.say(f"worker {member.name} Ready on {member.node} ({member.ip}, "
                          f"{joblog.gpus_text(member.gpus)}): added to the hostfile; the job holds "
                          f"{self.training} of {self.recovery.target} GPU(s)"
                          + (f" (up to {most})" if most > self.recovery.target else ""))
        if self.recovering and self.training >= self.recovery.target:
            self.recovering = False
            self.reporter.say(f"every lost worker replaced: the chief's launcher relaunches the training "
                              f"(restart {self.restarts_used} of {self.recovery.restarts})")

    def _drop_pending(self, name: str, why: str) -> None:
        self.pending.pop(name, None)
        self.kube.delete("pods", self.spec.namespace, name)
        self.reporter.say(f"replacement worker {name} {why}; deleted it, will plan again")
        self.next_look = self._clock() + self.look_every

    def _update_shortfall(self, now: float) -> None:
        short = self._must_hold() > self.training
        if short and self.short_since is None:
            self.short_since = now
        elif not short:
            self.short_since = None
        deadline = self._deadline()
        if deadline is not None and now >= deadline:
            needed = self._must_hold()
            raise WorkerFailed(
                f"job {self.spec.job_name}: {self.training} GPU(s) train but the job needs {needed} "
                f"({'--min-gpus' if self.recovery.elastic else 'every GPU, for a relaunch'}) and no room "
                f"freed within --replace-timeout {self.recovery.replace_timeout:g}s; the job was stopped")
        growable = self.recovery.elastic and self.holding < self.recovery.maximum
        if self.next_look is None and (self.holding < self.recovery.target or growable):
            self.next_look = now + (self.look_every if self.holding < self.recovery.target
                                    else self.recovery.grow_interval)

    def _must_hold(self) -> int:
        return self.recovery.minimum if self.recovery.elastic else self.recovery.target

    def _deadline(self) -> float | None:
        return None if self.short_since is None else self.short_since + self.recovery.replace_timeout

    def look(self) -> None:
        """Plan the GPUs the job should add now over what is free, and create the workers."""
        now = self._clock()
        self.next_look = None
        spec = self.spec
        rows = [r for r in placing.survey(self.kube, spec, demands=self.demands, owner=self.owner)
                if r.node not in self.avoid]  # a node whose worker hung is not trusted again
        # a replacement is shaped to the namespace as the first gang was (limits, OpenShift's UID)
        self.policies = placing.namespace_policies(self.kube, spec.namespace)
        allow = self._allowed_nodes()
        free = {n: g for n, g in inventory.free_gpus(rows).items() if allow is None or n in allow}
        add = gpus_to_add(self.recovery, running=self.holding, free=sum(free.values()))
        short = self.recovery.target - self.holding
        if add <= 0:
            if short > 0:
                self.reporter.say(f"waiting for room to replace {short} GPU(s): {sum(free.values())} free "
                                  f"for a worker on eligible nodes; looking again in {self.look_every:g}s")
            self._look_later(now, short > 0)
            return
        try:
            plan = fit.place(rows, add, policy=spec.placement_policy, topology_key=spec.topology_key,
                             allow=allow, domain=self._home_domain(rows))
        except CannotPlace as err:
            self.reporter.say(f"cannot place {add} GPU(s) for the job yet: {err}")
            self._look_later(now, short > 0)
            return
        why = "replace the lost worker(s)" if short > 0 else f"grow toward {self.recovery.maximum}"
        split = ", ".join(joblog.entry_text(e) for e in plan.allocation)
        self.reporter.say(f"plan to {why}: {add} GPU(s) as {split}")
        for entry in plan.allocation:
            self._create_worker(entry)
        self.look_every = FIRST_LOOK
        if self.recovery.elastic and self.holding < self.recovery.maximum:
            self.next_look = now + self.recovery.grow_interval

    def _look_later(self, now: float, short: bool) -> None:
        if short:
            self.next_look = now + self.look_every
            self.look_every = min(self.recovery.grow_interval, self.look_every * 2)
        elif self.recovery.elastic and self.holding < self.recovery.maximum:
            self.next_look = now + self.recovery.grow_interval

    def _allowed_nodes(self) -> set[str] | None:
        """Where a replacement may go: a ReadWriteOnce claim keeps the job on the nodes it is on; else
        anywhere (None)."""
        if self.claim is not None and not (set(checks.claim_modes(self.claim)) & checks.SHARED_MODES):
            return {m.node for m in self.members.values()} | {self._chief_node()}
        return None

    def _home_domain(self, rows: Sequence[NodeGpus]) -> str | None:
        """With --topology-key, replacements stay in the chief's domain."""
        key = self.spec.topology_key
        if not key:
            return None
        return next((r.labels.get(key) for r in rows if r.node == self._chief_node()), None)

    def _chief_node(self) -> str:
        chief = self.kube.get("pods", self.spec.namespace, self.chief) or {}
        return podstatus.node(chief) or ""

    def _create_worker(self, entry: planner.Entry) -> None:
        read_only = self.claim is not None and checks.claim_read_only(self.claim)
        for _ in range(5):
            index = next_index(self.names)
            body = manifests.worker_pod(self.spec, index=index, entry=entry, owner=self.owner,
                                        read_only_claim=read_only, policies=self.policies)
            name = body["metadata"]["name"]
            self.names.add(name)
            try:
                placing.create_owned(self.kube, body, run_id=self.run_id, job=self.spec.job_name)
            except placing.NameTaken:
                continue  # a namesake from an earlier run of the job: take the next number
            watch = StartWatch((name,), podstatus.is_ready, created=self._clock(),
                               schedule_timeout=self.spec.schedule_timeout,
                               start_timeout=self.spec.start_timeout)
            self.pending[name] = Pending(entry.node, entry.gpus, watch)
            self.reporter.say(f"worker {name} created on {entry.node} with {joblog.gpus_text(entry.gpus)}")
            return
        raise WorkerFailed(f"job {self.spec.job_name}: could not name a replacement worker (5 names taken)")

    def _node_ready(self, node: str) -> bool | None:
        """Whether `node` is Ready (one list with a field selector: the ClusterRole lists nodes)."""
        if not node:
            return None
        items, _ = self.kube.list("nodes", field_selector=f"metadata.name={node}", from_cache=True)
        return node_is_ready(items[0]) if items else False
