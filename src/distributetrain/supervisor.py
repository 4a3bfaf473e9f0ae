"""PostTraining: follow the chief's log, watch the chief and the workers, end the job cleanly; and the one
cleanup every path uses, which only ever touches objects carrying the job's labels."""

from __future__ import annotations

import logging
import re
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TextIO

from distributetrain import joblog, naming, podstatus
from distributetrain.errors import (
    ApiError,
    ChiefLost,
    DeadlineExceeded,
    Forbidden,
    NotFound,
    ScheduleTimeout,
    WorkerFailed,
)
from distributetrain.k8s import Kube
from distributetrain.watching import Snapshot, Watched

log = logging.getLogger(__name__)

# What a job may own, in the order cleanup deletes them: pods first, so GPUs are released soonest.
JOB_KINDS = ("pods", "networkpolicies", "configmaps", "secrets")
# a chief that ended for one of these reasons did not run to the end of training: the pod was lost
LOST_REASONS = frozenset({"NodeLost", "Evicted", "Shutdown", "Terminated", "UnexpectedAdmissionError"})
CLEANUP_WAIT = 90.0
# the launcher's own words when a rank fails (launcher.run): "rank N on HOST exited with CODE"
RANK_FAILED = re.compile(rb"rank (\d+) on (\S+) exited with (-?\d+)")


class Reporter:
    """The manager's own log: what it decides and why, one timestamped line each; and the chief's lines,
    passed through unchanged. Tests subclass it to act at a given moment (e.g. right after a plan)."""

    def __init__(self, stream: TextIO | None = None, chief_stream: TextIO | None = None) -> None:
        self.stream = stream
        self.chief_stream = chief_stream
        self._lock = threading.Lock()

    def say(self, message: str) -> None:
        now = time.time()  # milliseconds: the phases of a job's start-up take fractions of a second
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z"
        with self._lock:
            out = self.stream or sys.stderr
            out.write(f"{stamp} distributetrain: {message}\n")
            out.flush()

    def chief_line(self, line: bytes) -> None:
        with self._lock:
            out = self.chief_stream or sys.stdout
            out.write(line.decode("utf-8", "replace") + "\n")
            out.flush()

    def planned(self, plan: object, attempt: int) -> None:
        """Called after each plan, before anything of it is created."""


class LogFollower(threading.Thread):
    """Copies the chief's log into the manager's, resuming after a cut stream without repeating a line."""

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
        while not self.stop.is_set():
            try:
                stream = self.kube.follow_log(self.namespace, self.pod, naming.CHIEF_CONTAINER)
                for number, line in enumerate(stream):
                    if number >= self.lines:
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


def supervise(kube: Kube, *, job: str, namespace: str, keep_chief: bool, reporter: Reporter,
              workers: Sequence[str] | None = None, deadline: float | None = None,
              schedule_timeout: float = 300.0, clock: Callable[[], float] = time.monotonic) -> int:
    """Watch the job until the chief ends; return its exit code after deleting everything but the chief
    (and the chief too unless `keep_chief`). Raise WorkerFailed, ChiefLost, ScheduleTimeout or
    DeadlineExceeded at once when those happen (the caller cleans up). `workers`: the worker pods launch
    created; None (a job launched by another process) reads them from the cluster and checks that their GPUs
    and the chief's add up to the chief's process count."""
    chief_name = naming.chief_name(job)
    watched = Watched(kube, "pods", namespace, naming.job_selector(job))
    first = watched.relist()
    if chief_name not in first:
        raise ChiefLost(f"job {job} in namespace {namespace} has no chief pod {chief_name}; nothing to wait "
                        f"for (see: distributetrain status {job})")
    if workers is None:
        workers = sorted(n for n, p in first.items() if podstatus.role(p) == naming.ROLE_WORKER)
        held = sum(podstatus.gpus(first[n]) for n in [*workers, chief_name])
        expected = expected_processes(first[chief_name])
        if expected is not None and held < expected:
            present = ", ".join(workers) or "none"
            raise WorkerFailed(f"job {job}: its pods hold {held} GPU(s) but the chief runs {expected} "
                               f"processes: worker pod(s) are missing (present: {present})")
    named = [joblog.pod_text(first[n]) if n in first else n for n in workers]
    reporter.say(f"supervising job {job}: chief {joblog.pod_text(first[chief_name])}, workers "
                 f"{joblog.listing(named) or '(none: the chief runs every process)'}")
    follower = LogFollower(kube, namespace, chief_name, reporter.chief_line)
    follower.start()
    chief_deadline = clock() + schedule_timeout
    code: int | None = None
    try:
        while code is None:
            started = follower.started.is_set()
            limit = deadline if started else _earliest(deadline, chief_deadline)
            for snapshot in watched.changes(deadline=limit):
                code = _judge(snapshot, chief_name, workers, follower)
                if code is not None or follower.started.is_set() != started:
                    break  # ended, or the chief started: watch on under the job's own deadline
            else:
                if deadline is not None and clock() >= deadline:
                    raise DeadlineExceeded(f"job {job}: the active deadline passed while training ran; the "
                                           "job was stopped (raise --active-deadline if it needs longer)")
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
    reporter.say(f"chief {chief_name} ended with exit code {code}" + (f" ({blamed})" if blamed else "")
                 + "; releasing the workers")
    delete_job(kube, job=job, namespace=namespace, keep_chief=keep_chief, reporter=reporter)
    return code


def failed_rank(lines: Iterable[bytes], pods: Mapping[str, podstatus.Pod]) -> str | None:
    """The rank the chief's launcher reported failed, named as the user knows it: the pod holding that
    address, its role and node (the launcher itself only knows the pod IP)."""
    for line in reversed(list(lines)):
        match = RANK_FAILED.search(line)
        if match is None:
            continue
        rank, host, code = int(match[1]), match[2].decode("utf-8", "replace"), match[3].decode()
        for name, pod in sorted(pods.items()):
            if podstatus.pod_ip(pod) == host:
                return (f"rank {rank} on {podstatus.role(pod) or 'pod'} {name}, node {podstatus.node(pod)}, "
                        f"{host}, exited with {code}")
        return f"rank {rank} on {host} exited with {code}"
    return None


def expected_processes(chief: podstatus.Pod) -> int | None:
    """The chief's horovodrun -np (its DT_NUM_PROCESSES), None when it does not say."""
    for container in (chief.get("spec") or {}).get("containers") or []:
        for env in container.get("env") or []:
            if env.get("name") == naming.ENV_NUM_PROCESSES and str(env.get("value", "")).isdigit():
                return int(env["value"])
    return None


def _earliest(a: float | None, b: float) -> float:
    return b if a is None else min(a, b)


def _judge(snapshot: Snapshot, chief_name: str, workers: Iterable[str],
           follower: LogFollower) -> int | None:
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
    for name in workers:
        pod = snapshot.get(name)
        if pod is None:
            raise WorkerFailed(f"worker pod {name} disappeared while training ran (deleted, or its node was "
                               "removed); the job was stopped")
        if podstatus.is_terminated(pod) or podstatus.is_deleting(pod):
            raise WorkerFailed(f"worker failed, the job was stopped: {podstatus.describe(pod)}")
    if podstatus.phase(chief) == "Running":
        follower.started.set()
    return None


def delete_job(kube: Kube, *, job: str, namespace: str, keep_chief: bool, reporter: Reporter | None = None,
               wait: float = CLEANUP_WAIT, clock: Callable[[], float] = time.monotonic) -> int:
    """Delete every object with the job's labels (the chief too unless `keep_chief`) and wait until its pods
    are gone, so their GPUs are free when this returns. Returns how many objects were deleted."""
    selector = naming.job_selector(job)
    chief_name = naming.chief_name(job)
    deleted = 0
    for kind in JOB_KINDS:
        items, _ = kube.list(kind, namespace, label_selector=selector)
        for item in items:
            meta = item.get("metadata") or {}
            if kind == "pods" and keep_chief and meta.get("name") == chief_name:
                continue
            if kube.delete(kind, namespace, str(meta.get("name")), uid=meta.get("uid")):
                deleted += 1
    watched = Watched(kube, "pods", namespace, selector)
    until = clock() + wait
    for snapshot in watched.changes(deadline=until):
        left = [n for n in snapshot if not (keep_chief and n == chief_name)]
        if not left:
            break
    else:
        left = [n for n in watched.objects if not (keep_chief and n == chief_name)]
        if left:
            message = f"job {job}: pods {', '.join(sorted(left))} were deleted but still terminate"
            if reporter:
                reporter.say(message)
            log.warning(message)
    if reporter and deleted:
        kept = f"; kept {chief_name} for its log" if keep_chief else ""
        reporter.say(f"deleted {deleted} object(s) of job {job}{kept}")
    return deleted
