"""The job seen from kubectl and Prometheus: a Reporter that, besides writing the manager's log, turns each
step it is told of into Kubernetes Events, the manager pod's phase label and annotations, and the state the
metrics server serves (docs/observability.md).

The phases call the Reporter's hooks (joblog.Reporter: no-ops there); this class keeps a jobstate.JobState
current from them and from the chief's log (the launcher starting the user's command, the training's
progress lines) and hands Events, metadata and the state to a publisher.Publisher, which sends them in the
background. Nothing here raises into the job: Events, labels and metrics are optional by failure.
"""

from __future__ import annotations

import datetime
import functools
import itertools
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO, TypeVar, cast

from distributetrain import podstatus
from distributetrain.errors import Interrupted
from distributetrain.hostfile import HostSlots
from distributetrain.kube.gateway import Kube
from distributetrain.observe import chieflog, events, joblog, jobstate, progress
from distributetrain.observe.events import ObjectRef
from distributetrain.observe.jobstate import JobState
from distributetrain.observe.publisher import Publisher
from distributetrain.placement.planner import Plan
from distributetrain.request.jobspec import ManagerIdentity

F = TypeVar("F", bound=Callable[..., None])


def _never_raises(hook: F) -> F:
    """A hook that fails (a bug here, a surprising object) is said once in the log; the job goes on. A signal
    that lands while a hook runs (signals.py raises it as Interrupted wherever the main thread is) is not a
    failure of the hook: it goes on up, so the job is cleaned up and ends as the signal asks."""
    @functools.wraps(hook)
    def guarded(self: Observer, *args: Any, **kwargs: Any) -> None:
        try:
            hook(self, *args, **kwargs)
        except Interrupted:
            raise
        except Exception as err:
            if not self._hook_failed:
                self._hook_failed = True
                self.say(f"could not record the step {hook.__name__} ({type(err).__name__}: {err}); the job "
                         "goes on; further such failures are not logged")
    return cast(F, guarded)


class Observer(joblog.Reporter):
    """The manager's log, and the job's Events, pod metadata and metrics state."""

    def __init__(self, kube: Kube | None, state: JobState, *, manager: ManagerIdentity | None = None,
                 state_file: Path | None = None, stream: TextIO | None = None,
                 chief_stream: TextIO | None = None, patch_interval: float = 5.0,
                 clock: Callable[[], float] = time.time) -> None:
        """`state`: the job as far as known (jobstate.initial, or the state file PreTraining left);
        `manager`: the manager's own pod (its Events and metadata), None outside a cluster."""
        super().__init__(stream, chief_stream)
        self.state = state
        self.manager = manager
        self._clock = clock
        self._state_lock = threading.Lock()
        self._why = ""          # why the last gang did not start: the re-plan's Event says it
        self._hook_failed = False
        self._sequence = itertools.count(1)  # the follower's thread records events too
        self._networks = chieflog.NetworksSeen()  # NCCL's network lines per pod, from the chief's log
        target = manager.ref(state.namespace)[:3] if manager is not None else None
        self.publisher = Publisher(kube, say=self.say, target=target, state_file=state_file,
                                   patch_interval=patch_interval)
        self.publisher.start()
        self._publish(urgent=True)

    def close(self, timeout: float = 5.0) -> None:
        """Publish the final state and wait (at most `timeout`) until it is sent."""
        self._publish(urgent=True)
        self.publisher.close(timeout)

    # ---- the hooks --------------------------------------------------------------------------------------
    @_never_raises
    def planned(self, plan: object, attempt: int) -> None:
        if not isinstance(plan, Plan):
            return
        split = jobstate.plan_text([(e.node, e.gpus) for e in plan.allocation], plan.chief.node)
        kind = next((e.fabric.kind for e in plan.allocation if e.fabric is not None), "")
        text = (f"{self.state.gpus} GPU(s) as {', '.join(f'{e.gpus} on {e.node}' for e in plan.allocation)}; "
                f"chief {plan.chief.gpus} on {plan.chief.node}")
        with self._state_lock:
            self.state = jobstate.enter(self.state, jobstate.PLANNING, self._clock())
            replans = self.state.replans + (1 if attempt else 0)
            self.state = jobstate.replace(self.state, plan=split, replans=replans, fabric=kind)
        if attempt:
            self._job_event(events.REPLANNED, f"attempt {attempt + 1}: {text}; the previous gang did not "
                                              f"start: {self._why or 'see the manager log'}")
        else:
            self._job_event(events.PLANNED, text)
        self._publish(urgent=True)

    @_never_raises
    def pod_created(self, pod: Mapping[str, Any]) -> None:
        role = podstatus.role(pod)
        with self._state_lock:
            self.state = jobstate.with_pod(self.state, jobstate.pod_state(pod))
            self.state = jobstate.enter(self.state, jobstate.SCHEDULING, self._clock())
        where = podstatus.node(pod) or podstatus.planned_node(pod) or "its node"
        reason = events.CHIEF_CREATED if role == "chief" else events.WORKER_CREATED
        self._event(ObjectRef.of(pod), reason, f"created for job {self.state.job}, pinned to {where} with "
                                               f"{joblog.gpus_text(podstatus.gpus(pod))}")
        self._publish(urgent=True)

    @_never_raises
    def pods_ready(self, pods: Sequence[Mapping[str, Any]]) -> None:
        with self._state_lock:
            self.state = jobstate.ready(self.state, [podstatus.name(p) for p in pods])
        for pod in pods:
            self._event(ObjectRef.of(pod), events.WORKER_READY,
                        f"Running and Ready on {podstatus.node(pod)} at {podstatus.pod_ip(pod)} (its sshd's "
                        "port answers)")
        self._publish(urgent=False)

    @_never_raises
    def hostfile_written(self, configmap: Mapping[str, Any], hosts: Sequence[HostSlots]) -> None:
        self._event(ObjectRef.of(configmap), events.HOSTFILE_WRITTEN,
                    f"the workers' hostfile: {joblog.hostfile_text(hosts) or '(no workers)'}")

    @_never_raises
    def chief_started(self, pod: Mapping[str, Any]) -> None:
        with self._state_lock:
            self.state = jobstate.ready(self.state, [podstatus.name(pod)])
            self.state = jobstate.enter(self.state, jobstate.LAUNCHING, self._clock())
        self._event(ObjectRef.of(pod), events.CHIEF_STARTED,
                    f"running on {podstatus.node(pod)}: its launcher checks every worker's sshd, then starts "
                    f"horovodrun over {self.state.gpus} process(es)")
        self._publish(urgent=True)

    @_never_raises
    def gang_failed(self, why: str, names: Sequence[str]) -> None:
        self._why = why
        with self._state_lock:
            self.state = jobstate.without_pods(self.state, names)
            self.state = jobstate.enter(self.state, jobstate.PLANNING, self._clock())
        self._job_event(events.GANG_FAILED, f"the gang did not start: {why}; deleting "
                                            f"{joblog.listing(list(names))} so no GPU stays held",
                        type=events.WARNING)
        self._publish(urgent=True)

    @_never_raises
    def preflight_excluded(self, why: str, nodes: Sequence[str], names: Sequence[str]) -> None:
        super().preflight_excluded(why, nodes, names)
        self._why = f"its pre-flight check blamed node(s) {', '.join(nodes)}"
        with self._state_lock:
            self.state = jobstate.without_pods(self.state, names)
            self.state = jobstate.enter(self.state, jobstate.PLANNING, self._clock())
        self._job_event(events.PREFLIGHT_EXCLUDED, why, type=events.WARNING)
        self._publish(urgent=True)

    @_never_raises
    def restarted(self, why: str) -> None:
        with self._state_lock:
            self.state = jobstate.replace(self.state, restarts=self.state.restarts + 1)
        self._job_event(events.RESTARTED, why, type=events.WARNING)
        self._publish(urgent=True)

    @_never_raises
    def supervising(self, pods: Sequence[Mapping[str, Any]]) -> None:
        with self._state_lock:
            for pod in pods:
                self.state = jobstate.with_pod(self.state, jobstate.pod_state(pod, ready_=podstatus.is_ready(
                    pod) or podstatus.phase(pod) == "Running"))
            if self.state.phase in (jobstate.PLANNING, jobstate.SCHEDULING):
                self.state = jobstate.enter(self.state, jobstate.LAUNCHING, self._clock())
            if not self.state.gpus:
                self.state = jobstate.replace(self.state, gpus=self.state.held)
        self._publish(urgent=True)

    def chief_line(self, line: bytes) -> None:
        super().chief_line(line)
        self._read_chief_line(line)

    @_never_raises
    def _read_chief_line(self, line: bytes) -> None:
        net = chieflog.parse_nccl_net(line)
        if net is not None:
            self._nccl_network(net)
            return
        report = progress.parse(line)
        if report is not None and report.rank is not None:
            return  # a rank's heartbeat: the watchdog's (manager/watchdog.py), not the job's progress
        launched = report is None and progress.LAUNCHED.match(line) is not None
        if report is None and not launched:
            return
        now = self._clock()
        with self._state_lock:
            before = self.state
            if report is not None:
                self.state = jobstate.with_progress(self.state, report, now)
            if self.state.phase == jobstate.LAUNCHING:
                self.state = jobstate.enter(self.state, jobstate.RUNNING, now)
            state = self.state
        if state.phase != before.phase:
            self._job_event(events.TRAINING_STARTED, f"the chief's launcher started the training over "
                                                     f"{state.gpus} process(es)")
        self._publish(urgent=state.phase != before.phase)

    def _nccl_network(self, net: chieflog.NcclNet) -> None:
        """NCCL named its transport on a pod: said once per pod in the log, an Event per transport (a Warning
        when it is not the fabric the job asked for), and the metric's label."""
        with self._state_lock:
            seen = self._networks.add(net)
            if seen.transport is None or any(h == seen.host for h, _ in self.state.transports):
                return
            first = all(t != seen.transport for _, t in self.state.transports)
            self.state = jobstate.with_transport(self.state, seen.host, seen.transport)
            kind = self.state.fabric
        mismatch = chieflog.fabric_mismatch(seen, kind) if kind else None
        asked = f"the fabric {kind} was asked" if kind else "no fabric was asked (TCP)"
        self.say(f"NCCL transport on pod {seen.host}: {seen.text()}; {asked}"
                 + (f"; {mismatch}" if mismatch else ""))
        if first or mismatch:
            self._job_event(events.NCCL_TRANSPORT,
                            f"NCCL chose {seen.text()} on pod {seen.host}; {asked}"
                            + (f": {mismatch}" if mismatch else ""),
                            type=events.WARNING if mismatch else events.NORMAL)
        self._publish(urgent=False)

    @_never_raises
    def pod_failed(self, pod: Mapping[str, Any] | None, why: str) -> None:
        ref = ObjectRef.of(pod) if pod is not None else None
        if ref is not None:
            self._event(ref, events.WORKER_FAILED, why, type=events.WARNING)
        self._job_event(events.WORKER_FAILED, f"{why}; stopping the job", type=events.WARNING)

    @_never_raises
    def hung(self, pods: Sequence[Mapping[str, Any]], why: str) -> None:
        super().hung(pods, why)
        for pod in pods:
            self._event(ObjectRef.of(pod), events.TRAINING_HUNG, why, type=events.WARNING)
        self._job_event(events.TRAINING_HUNG, why, type=events.WARNING)

    @_never_raises
    def straggling(self, pod: Mapping[str, Any] | None, why: str) -> None:
        super().straggling(pod, why)
        if pod is not None:
            self._event(ObjectRef.of(pod), events.STRAGGLER, why, type=events.WARNING)
        self._job_event(events.STRAGGLER, why, type=events.WARNING)

    @_never_raises
    def ranks(self, ranks: Sequence[jobstate.RankState]) -> None:
        with self._state_lock:
            if tuple(ranks) == self.state.ranks:
                return
            self.state = jobstate.replace(self.state, ranks=tuple(ranks))
        self._publish(urgent=False)

    @_never_raises
    def finished(self, code: int, detail: str) -> None:
        with self._state_lock:
            self.state = jobstate.replace(self.state, exit_code=code)
            self.state = jobstate.enter(self.state, jobstate.FAILED if code else jobstate.SUCCEEDED,
                                        self._clock())
            done = self.state.progress
        latest = f"; {progress.text(done)}" if done is not None else ""
        if code:
            self._job_event(events.TRAINING_FAILED, f"the training failed with exit code {code}"
                            + (f" ({detail})" if detail else "") + latest, type=events.WARNING)
        else:
            self._job_event(events.TRAINING_SUCCEEDED, f"the training succeeded{latest}")
        self._publish(urgent=True)

    @_never_raises
    def cleaned_up(self, deleted: int, kept: str | None) -> None:
        with self._state_lock:
            self.state = jobstate.without_pods(self.state)
        self._job_event(events.CLEANED_UP, f"deleted {deleted} object(s) of job {self.state.job}"
                        + (f"; kept {kept} for its log" if kept else "") + "; every GPU is released")
        self._publish(urgent=True)

    @_never_raises
    def failed(self, error: BaseException) -> None:
        why = (str(error) or type(error).__name__).splitlines()[0]
        code = getattr(error, "exit_code", 1)
        with self._state_lock:
            self.state = jobstate.replace(self.state, exit_code=code)
            self.state = jobstate.enter(self.state, jobstate.FAILED, self._clock())
        self._job_event(events.JOB_FAILED, f"exit code {code}: {why}", type=events.WARNING)
        self._publish(urgent=True)

    # ---- sending ----------------------------------------------------------------------------------------
    def _job_event(self, reason: str, message: str, *, type: str = events.NORMAL) -> None:
        """An Event on the manager's Job, or its own pod; none outside a cluster (nothing to hang it on)."""
        manager = self.manager
        if manager is not None:
            kind, namespace, name, uid = manager.ref(self.state.namespace)
            self._event(ObjectRef(kind, namespace, name, uid, "batch/v1" if kind == "Job" else "v1"), reason,
                        message, type=type)

    def _event(self, ref: ObjectRef, reason: str, message: str, *, type: str = events.NORMAL) -> None:
        instance = self.manager.name if self.manager is not None else socket.gethostname()
        self.publisher.event(events.event(ref, reason=reason, message=message, type=type, instance=instance,
                                          now=datetime.datetime.now(datetime.UTC),
                                          sequence=next(self._sequence)))

    def _publish(self, *, urgent: bool) -> None:
        with self._state_lock:
            state = self.state
        self.publisher.metadata(jobstate.pod_metadata(state), urgent=urgent)
        self.publisher.state(jobstate.dumps(state), urgent=urgent)
