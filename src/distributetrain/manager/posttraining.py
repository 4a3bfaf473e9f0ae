"""PostTraining: follow the chief's log into the manager's, watch the chief and the workers, and when the
chief ends, release the workers (cleanup.delete_job) and return its exit code.

`supervise` is the phase; `run_posttraining` runs it on its own, under the cleanup guard, for a job started
by another process (DistributeTrain_PostTraining.py, `distributetrain wait`). It needs only the job's name and
namespace, whether to keep the chief, and when the manager started: the rest (the workers, the processes the
chief runs, the active deadline) it reads from the job's pods.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence

from distributetrain import naming, podstatus
from distributetrain.errors import (
    EXIT_HUNG,
    ApiError,
    ChiefLost,
    DeadlineExceeded,
    Forbidden,
    Hung,
    NotFound,
    ScheduleTimeout,
    WorkerFailed,
)
from distributetrain.kube.gateway import Kube
from distributetrain.kube.watch import Snapshot, Watched
from distributetrain.manager import cleanup
from distributetrain.manager.keeper import Keeper, keeper_for
from distributetrain.manager.watchdog import (
    CHECK_EVERY,
    COMPUTE,
    DEFAULT_STRAGGLERS,
    Hang,
    RankSeen,
    Straggler,
    StragglerRule,
    Watchdog,
)
from distributetrain.observe import chieflog, joblog
from distributetrain.observe.joblog import Reporter
from distributetrain.observe.jobstate import RankState
from distributetrain.request.jobspec import JobSpec, ManagerIdentity

log = logging.getLogger(__name__)

# a chief that ended for one of these reasons did not run to the end of training: the pod was lost
LOST_REASONS = frozenset({"NodeLost", "Evicted", "Shutdown", "Terminated", "UnexpectedAdmissionError"})
# how long the chief of a job started elsewhere may take to start (JobSpec's schedule timeout default)
CHIEF_START_TIMEOUT = 300.0
# after a hang, how long the kept chief may take to end once the workers are gone (its ranks' connections
# break at once; a launcher that does not end by then is deleted too)
HUNG_CHIEF_END = 60.0


class LogFollower(threading.Thread):
    """Copies the chief's log into the manager's, resuming after a cut stream by time (joblog.LogCursor):
    nothing lost or repeated, even if the kubelet rotated the log meanwhile."""

    def __init__(self, kube: Kube, namespace: str, pod: str, sink: Callable[[bytes], None]) -> None:
        super().__init__(name=f"log-{pod}", daemon=True)
        self.kube, self.namespace, self.pod, self.sink = kube, namespace, pod, sink
        self.started = threading.Event()   # the chief's container runs: its log exists
        self.finished = threading.Event()  # the chief's container ended: read to the end, then stop
        self.stop = threading.Event()      # give up now
        self.lines = 0
        self.tail: deque[bytes] = deque(maxlen=50)  # the chief's last lines: the launcher's verdict is there
        self.error: ApiError | None = None  # a refusal (403) that retrying cannot fix; fails the job

    def run(self) -> None:
        # signals belong to the main thread, whose blocking calls they must interrupt to start the cleanup
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
        while not self.started.wait(0.5):
            if self.stop.is_set():
                return
        cursor = joblog.LogCursor()
        while not self.stop.is_set():
            try:
                stream = self.kube.follow_log(self.namespace, self.pod, naming.CHIEF_CONTAINER,
                                              timestamps=True, since_time=cursor.since_time())
                cursor.restart()
                for stamped in stream:
                    stamp, line = joblog.split_stamp(stamped)
                    if cursor.admit(stamp):
                        self.sink(line)
                        self.tail.append(line)
                        self.lines += 1
            except NotFound:
                return
            except Forbidden as err:
                self.error = err
                return
            except ApiError as err:
                log.info("chief log stream: %s; reconnecting", err)
            if self.finished.is_set():
                return
            self.stop.wait(0.5)


def run_posttraining(kube: Kube, *, job: str, namespace: str, keep_chief: bool, started_at: float | None,
                     reporter: Reporter | None = None, clock: Callable[[], float] = time.monotonic,
                     request: Callable[[], JobSpec] | None = None,
                     owner: ManagerIdentity | None = None, hang_timeout: float | None = None,
                     on_hang: str | None = None, stragglers: StragglerRule = DEFAULT_STRAGGLERS) -> int:
    """PostTraining in a process of its own, under the cleanup guard: supervise the job named `job`, reading
    its workers from the cluster. `started_at` (epoch seconds): when the manager started; the active
    deadline, as the job's pods carry it, counts from then (None: the pods' own deadline only). `request`:
    the job's request, read only for a job that replaces lost workers (the Keeper builds them)."""
    reporter = reporter or Reporter()
    with cleanup.guard(kube, job=job, namespace=namespace, reporter=reporter,
                       durable=owner is not None and owner.durable):
        return supervise(kube, job=job, namespace=namespace, keep_chief=keep_chief, reporter=reporter,
                         started_at=started_at, clock=clock, request=request, owner=owner,
                         hang_timeout=hang_timeout, on_hang=on_hang, stragglers=stragglers)


def supervise(kube: Kube, *, job: str, namespace: str, keep_chief: bool, reporter: Reporter,
              workers: Sequence[str] | None = None, deadline: float | None = None,
              started_at: float | None = None, schedule_timeout: float = CHIEF_START_TIMEOUT,
              clock: Callable[[], float] = time.monotonic, request: Callable[[], JobSpec] | None = None,
              owner: ManagerIdentity | None = None, hang_timeout: float | None = None,
              on_hang: str | None = None, stragglers: StragglerRule = DEFAULT_STRAGGLERS) -> int:
    """Watch the job until the chief ends; return its exit code after deleting everything but the chief
    (and the chief too unless `keep_chief`). Raise WorkerFailed, ChiefLost, ScheduleTimeout or
    DeadlineExceeded at once when those happen (the caller's guard cleans up). `workers`: the worker pods
    PreTraining created; None (a job started by another process) reads them from the cluster and checks that
    their GPUs and the chief's add up to the chief's process count. `deadline` (monotonic): when the active
    deadline passes; without it, `started_at` and the chief's activeDeadlineSeconds give it. A chief that says
    its job survives lost workers (naming.RECOVERY_ANNOTATION) gets a Keeper, built from `request`,
    which replaces them instead. The watchdog (watchdog.py) reads every rank's heartbeat from the chief's
    log: a rank without progress for `hang_timeout` (None: derived from the step time) is hung, and
    `on_hang` (fail, restart, replace; None: by the job's mode) says what then; a rank slower than the
    others by `stragglers`' rule is reported, and its worker replaced when the rule says so (elastic)."""
    chief_name = naming.chief_name(job)
    watched = Watched(kube, "pods", namespace, naming.job_selector(job))
    first = watched.relist()
    if chief_name not in first:
        raise ChiefLost(f"job {job} in namespace {namespace} has no chief pod {chief_name}; nothing to wait "
                        f"for (see: distributetrain status {job})")
    seconds = podstatus.active_deadline(first[chief_name])
    if deadline is None and started_at is not None and seconds is not None:
        deadline = clock() - max(0.0, time.time() - started_at) + seconds
    keeper = keeper_for(kube, first, chief_name, request=request, reporter=reporter, owner=owner,
                                clock=clock)
    if workers is None:
        workers = sorted(n for n, p in first.items() if podstatus.role(p) == naming.ROLE_WORKER)
        held = sum(podstatus.gpus(first[n]) for n in [*workers, chief_name])
        expected = podstatus.expected_processes(first[chief_name])
        ended = podstatus.is_terminated(first[chief_name])  # adopted after its end: only its result is owed
        if keeper is None and not ended and expected is not None and held < expected:
            present = ", ".join(workers) or "none"
            raise WorkerFailed(f"job {job}: its pods hold {held} GPU(s) but the chief runs {expected} "
                               f"processes: worker pod(s) are missing (present: {present})")
    named = [joblog.pod_text(first[n]) if n in first else n for n in workers]
    reporter.say(f"supervising job {job}: chief {joblog.pod_text(first[chief_name])}, workers "
                 f"{joblog.listing(named) or '(none: the chief runs every process)'}")
    reporter.supervising([first[n] for n in [chief_name, *workers] if n in first])
    watchdog = Watchdog(timeout=hang_timeout, clock=clock, stragglers=stragglers)
    action = on_hang or ("fail" if keeper is None else "replace" if keeper.recovery.elastic else "restart")
    sink = reporter.chief_line if keeper is None else keeper.tee(reporter.chief_line)
    follower = LogFollower(kube, namespace, chief_name, _both(sink, watchdog.line))
    follower.start()
    chief_deadline = clock() + schedule_timeout
    code: int | None = None
    try:
        while code is None:
            started = follower.started.is_set()
            limit = deadline if started else _earliest(deadline, chief_deadline)
            wake = keeper.wake_at() if keeper else None
            until = limit if wake is None else _earliest(limit, wake)
            if started:  # the watchdog looks every CHECK_EVERY seconds, pod events or not
                until = _earliest(until, clock() + CHECK_EVERY)
            for snapshot in watched.changes(deadline=until):
                code = _judge(snapshot, chief_name, workers, follower, reporter.pod_failed, keeper)
                if code is not None or follower.started.is_set() != started:
                    break  # ended, or the chief started: watch on under the job's own deadline
                if keeper is not None and _sooner(keeper.wake_at(), until):
                    break  # the keeper has something to do before the watch would end
            else:
                if keeper is not None and wake is not None and clock() >= wake and (
                        limit is None or clock() < limit):
                    keeper.tick()
                    continue
                if deadline is not None and clock() >= deadline:
                    raise DeadlineExceeded(f"job {job}: the active deadline passed while training ran; the "
                                           "job was stopped (raise --active-deadline if it needs longer)")
                hang = _due(watchdog, clock(), watched.objects, reporter, keeper)
                if hang is not None:
                    names = act_on_hang(hang, action, watchdog=watchdog, pods=watched.objects,
                                         reporter=reporter, keeper=keeper)
                    if names is None:
                        why = describe_hang(hang, watched.objects)  # while its pods are there to name
                        follower.finished.set()
                        _end_hung(kube, watched, job=job, namespace=namespace, keep_chief=keep_chief,
                                  reporter=reporter, clock=clock,
                                  stuck=[podstatus.name(p) for p in _pods_of(hang, watched.objects)])
                        raise Hung(f"job {job}: {why}; the job was stopped (--on-hang {action})")
                    continue
                if started or clock() < chief_deadline:
                    continue
                chief = watched.objects.get(chief_name) or {}
                raise ScheduleTimeout(f"job {job}: the chief did not start within {schedule_timeout:g}s: "
                                      f"{podstatus.describe(chief)}")
        follower.finished.set()
        follower.started.set()
        follower.join(timeout=30)
    finally:
        follower.stop.set()
    if follower.error is not None:
        raise follower.error  # the training's log could not be read: a setup error the user must see
    blamed = failed_rank(follower.tail, watched.objects) if code else None
    culprit = watchdog.blame(_failed_rank_number(follower.tail)) if code else None
    if culprit is not None:
        # the rank horovodrun reported only timed out waiting (Gloo's 30 s): the one that stopped first is
        # the culprit, and the job ends as a hung one
        why = describe_hang(culprit, watched.objects)
        stuck = _pods_of(culprit, watched.objects)
        reporter.hung(stuck, f"the training hung: {why}")
        blamed = f"{why}; {blamed or 'another rank failed'} waiting for it"
        code = EXIT_HUNG
        for pod in stuck:  # no grace: a hung process cannot checkpoint
            if podstatus.name(pod) != chief_name:
                kube.delete("pods", namespace, podstatus.name(pod), grace_seconds=0)
    recovered = keeper.summary() if keeper is not None else ""
    reporter.say(f"chief {chief_name} ended with exit code {code}" + (f" ({blamed})" if blamed else "")
                 + (f", {recovered}" if recovered else "") + "; releasing the workers")
    reporter.finished(code, blamed or "")
    cleanup.delete_job(kube, job=job, namespace=namespace, keep_chief=keep_chief, reporter=reporter)
    return code


def _both(first: Callable[[bytes], None], second: Callable[[bytes], None]) -> Callable[[bytes], None]:
    def sink(line: bytes) -> None:
        first(line)
        second(line)
    return sink


def _due(watchdog: Watchdog, now: float, pods: Mapping[str, podstatus.Pod], reporter: Reporter,
         keeper: Keeper | None) -> Hang | None:
    """The watchdog's periodic look: the ranks' step times to the metrics, stragglers reported (and
    replaced), a hang."""
    wake = watchdog.wake_at()
    if wake is None or now < wake:
        return None
    rows = []
    for seen in watchdog.snapshot():
        found = _pod_of(seen, pods)
        pod, node = (seen.host or seen.said or "", "")
        if found is not None:
            pod, node = found[0], podstatus.node(found[1]) or ""
        rows.append(RankState(seen.rank, pod, node, seen.step_seconds, seen.compute_seconds))
    reporter.ranks(rows)
    for slow in watchdog.stragglers():
        found = _pod_of(slow.rank, pods)
        reporter.straggling(found[1] if found else None, describe_straggler(slow, pods))
        if watchdog.rule.replace and keeper is not None and keeper.recovery.elastic:
            if found is None or podstatus.role(found[1]) != naming.ROLE_WORKER:
                reporter.say(f"--replace-stragglers: rank {slow.rank.rank} runs in the chief, which is not "
                             "replaced; the job trains on at its pace")
            elif keeper.remove_stuck([found[0]], "--replace-stragglers"):
                watchdog.reset()  # the ranks re-form without it: a fresh watch
                return None
    return watchdog.check()


def describe_straggler(slow: Straggler, pods: Mapping[str, podstatus.Pod]) -> str:
    """`straggler: rank 1 on worker train-worker-0, node node-2 computes a step in 0.081s ...`."""
    found = _pod_of(slow.rank, pods)
    where = slow.rank.host or slow.rank.said or "an unknown host"
    if found is not None:
        where = f"{podstatus.role(found[1]) or 'pod'} {found[0]}, node {podstatus.node(found[1])}"
    pace = slow.pace
    what = ("computes a step (forward and backward, before the all-reduce) in" if pace.measure == COMPUTE
            else "takes")
    return (f"straggler: rank {slow.rank.rank} on {where} {what} {pace.seconds:.4g}s a step, "
            f"{pace.ratio:.1f} times the other ranks' median {pace.others:.4g}s, for {slow.reports} "
            "heartbeats in a row")


def _pods_of(hang: Hang, pods: Mapping[str, podstatus.Pod]) -> list[podstatus.Pod]:
    found = [_pod_of(r, pods) for r in hang.ranks]
    return [p[1] for p in found if p is not None]


def _pod_of(seen: RankSeen, pods: Mapping[str, podstatus.Pod]) -> tuple[str, podstatus.Pod] | None:
    """The pod a rank runs in: by its host's address (the hostfile), else by the pod name it gave."""
    for host in seen.hosts:
        for name, pod in sorted(pods.items()):
            if podstatus.pod_ip(pod) == host or name == host:
                return name, pod
    return None


def describe_hang(hang: Hang, pods: Mapping[str, podstatus.Pod]) -> str:
    """`rank 1 on worker train-worker-0, node node-2, 10.0.0.7, silent since step 412 for 31s (...)`."""
    parts = []
    for seen in hang.ranks:
        found = _pod_of(seen, pods)
        where = seen.host or seen.said or "an unknown host"
        if found is not None:
            name, pod = found
            address = podstatus.pod_ip(pod)
            where = f"{podstatus.role(pod) or 'pod'} {name}, node {podstatus.node(pod)}, {address}"
        parts.append(f"rank {seen.rank} on {where}, last step {seen.step}")
    how = {"silent": "fell silent (its processes stopped: frozen, or its node or network lost) while the "
                     "others waited for it",
           "stall inspector": "named by Horovod's stall inspector as missing from a collective",
           "stopped first": "stopped making progress first"}[hang.how]
    return (f"{'; '.join(parts)}: {how}; no step for {hang.stalled_for:.0f}s (hang timeout "
            f"{hang.timeout:g}s)")


def act_on_hang(hang: Hang, action: str, *, watchdog: Watchdog, pods: Mapping[str, podstatus.Pod],
                 reporter: Reporter, keeper: Keeper | None) -> list[str] | None:
    """Report the hang and, for restart and replace, hand the stuck workers to the keeper; the workers
    removed, or None when the job must end (fail, or nothing a keeper could remove: the chief's rank)."""
    why = describe_hang(hang, pods)
    stuck = _pods_of(hang, pods)
    reporter.hung(stuck, f"the training hung: {why}; --on-hang {action}")
    if action == "fail" or keeper is None:
        return None
    removed = keeper.remove_stuck([podstatus.name(p) for p in stuck], f"--on-hang {action}")
    if not removed:
        return None
    watchdog.reset()  # the ranks re-form (elastic) or relaunch: a fresh watch
    return removed


def _end_hung(kube: Kube, watched: Watched, *, job: str, namespace: str, keep_chief: bool,
              reporter: Reporter, clock: Callable[[], float], stuck: Sequence[str] = ()) -> None:
    """End a hung job as a failed training ends: everything deleted but the chief, kept for its log once it
    ended (its ranks fail as soon as the workers are gone); a chief that does not end is deleted too. The
    stuck workers go without a grace period: a hung process cannot checkpoint, and its notice would only
    hold the job for the pod's grace (60 s)."""
    chief_name = naming.chief_name(job)
    for name in stuck:
        if name != chief_name:
            kube.delete("pods", namespace, name, grace_seconds=0)
    if keep_chief:
        cleanup.delete_job(kube, job=job, namespace=namespace, keep_chief=True)
        until = clock() + HUNG_CHIEF_END
        for snapshot in watched.changes(deadline=until):
            chief = snapshot.get(chief_name)
            if chief is None or podstatus.is_terminated(chief):
                break
        else:
            reporter.say(f"the chief {chief_name} did not end within {HUNG_CHIEF_END:g}s of its workers' "
                         "deletion; deleting it too")
            keep_chief = False
    cleanup.delete_job(kube, job=job, namespace=namespace, keep_chief=keep_chief, reporter=reporter)


def _failed_rank_number(lines: Iterable[bytes]) -> int | None:
    for line in reversed(list(lines)):
        failed = chieflog.parse_rank_failed(line)
        if failed is not None:
            return failed.rank
    return None


def failed_rank(lines: Iterable[bytes], pods: Mapping[str, podstatus.Pod]) -> str | None:
    """The rank the chief's launcher reported failed, named as the user knows it: the pod holding that
    address, its role and node (the launcher itself only knows the pod IP)."""
    for line in reversed(list(lines)):
        failed = chieflog.parse_rank_failed(line)
        if failed is None:
            continue
        rank, host, code = failed.rank, failed.host, failed.exit_code
        for name, pod in sorted(pods.items()):
            if podstatus.pod_ip(pod) == host or name == host:  # elastic Horovod names a worker by its pod
                return (f"rank {rank} on {podstatus.role(pod) or 'pod'} {name}, node {podstatus.node(pod)}, "
                        f"{host}, exited with {code}")
        return f"rank {rank} on {host} exited with {code}"
    return None


def _earliest(a: float | None, b: float) -> float:
    return b if a is None else min(a, b)


def _sooner(when: float | None, than: float | None) -> bool:
    return when is not None and (than is None or when < than)


def _judge(snapshot: Snapshot, chief_name: str, workers: Iterable[str], follower: LogFollower,
           failed: Callable[[podstatus.Pod | None, str], None], keeper: Keeper | None = None
           ) -> int | None:
    """The chief's exit code once it ended; None while the job runs; raise on a lost pod."""
    if follower.error is not None:
        raise follower.error
    chief = snapshot.get(chief_name)
    if chief is None:
        raise ChiefLost(f"the chief pod {chief_name} was deleted while the job ran")
    status = chief.get("status") or {}
    if podstatus.is_terminated(chief):
        code = podstatus.exit_code(chief, naming.CHIEF_CONTAINER)
        if status.get("reason") == "DeadlineExceeded":
            raise DeadlineExceeded(f"the chief's active deadline passed: {podstatus.describe(chief)}")
        if code is None or status.get("reason") in LOST_REASONS:
            raise ChiefLost(f"the chief was lost before training finished: {podstatus.describe(chief)}")
        return code
    if podstatus.is_deleting(chief):
        raise ChiefLost(f"the chief pod {chief_name} is being deleted by someone else")
    if keeper is not None:
        keeper.observe(snapshot)  # a lost worker is replaced, not the end of the job
        workers = ()
    for name in workers:
        pod = snapshot.get(name)
        if pod is None:
            failed(None, f"worker pod {name} disappeared while training ran")
            raise WorkerFailed(f"worker pod {name} disappeared while training ran (deleted, or its node was "
                               "removed); the job was stopped")
        if podstatus.is_terminated(pod) or podstatus.is_deleting(pod):
            failed(pod, podstatus.describe(pod))
            raise WorkerFailed(f"worker failed, the job was stopped: {podstatus.describe(pod)}")
    if podstatus.phase(chief) == "Running":
        follower.started.set()
    return None
