"""What the job looks like from outside (pure): its phase and when each was reached, its GPUs and pods, the
re-plans and restarts, the training's progress. observer.py keeps one `JobState` current as the manager
works and writes it to a file; metrics.py serves it to Prometheus, and `pod_metadata` is what the manager
shows on its own pod (the phase label, annotations).

The phases (naming.PHASES): Planning (inventory, plan, waiting for GPUs), Scheduling (the gang's pods are
created and start), Launching (the chief runs: its launcher checks every worker's sshd, runs the pre-flight
check and starts horovodrun), Running (the user's command runs), then Succeeded or Failed. A re-plan goes
back to Planning; Succeeded and Failed are final.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from distributetrain import naming, podstatus
from distributetrain.observe import progress
from distributetrain.observe.progress import Progress

PLANNING, SCHEDULING, LAUNCHING, RUNNING, SUCCEEDED, FAILED = naming.PHASES
FINAL = frozenset({SUCCEEDED, FAILED})
ANNOTATION_MAX = 1024  # annotations stay readable in `kubectl describe`; a 1,000-node plan is cut


@dataclass(frozen=True)
class PodState:
    """A job pod that holds (or is about to hold) GPUs."""

    name: str
    role: str
    node: str
    gpus: int
    ready: bool = False


@dataclass(frozen=True)
class RankState:
    """One training rank as its heartbeats show it (manager/watchdog.py): where it runs, its step time and
    its compute time per step (before the all-reduce; None: its script does not report one)."""

    rank: int
    pod: str
    node: str
    step_seconds: float | None = None
    compute_seconds: float | None = None


@dataclass(frozen=True)
class JobState:
    """The job as the manager last saw it. Times are Unix seconds."""

    job: str
    namespace: str
    started_at: float                  # when the manager started (Manager.sh's start, for both phases)
    gpus: int = 0                      # requested
    phase: str = PLANNING
    reached: tuple[tuple[str, float], ...] = ()  # each phase, when first reached
    plan: str = ""                     # `5 on node-1, 1 on node-3 (chief)`
    pods: tuple[PodState, ...] = ()
    replans: int = 0
    restarts: int = 0
    first_step_at: float | None = None
    progress: Progress | None = None
    exit_code: int | None = None
    fabric: str = ""                   # the fabric kind the plan's pods cross nodes over (efa, ib); "" TCP
    transports: tuple[tuple[str, str], ...] = ()  # (pod, the transport NCCL chose there), as first reported
    ranks: tuple[RankState, ...] = ()  # every rank's latest step time, from the heartbeats

    @property
    def held(self) -> int:
        return sum(p.gpus for p in self.pods)

    @property
    def skew(self) -> float | None:
        """The slowest rank's compute time over the median rank's when every rank with a step time reports
        one (under synchronous all-reduce the wall step times are all alike: the fast ranks wait for the
        slow one), else the same of the step times; None without two ranks' times."""
        timed = [r for r in self.ranks if r.step_seconds is not None]
        computed = [r.compute_seconds for r in timed if r.compute_seconds is not None]
        times = sorted(computed if timed and len(computed) == len(timed)
                       else [r.step_seconds for r in timed if r.step_seconds is not None])
        if len(times) < 2:
            return None
        middle = len(times) // 2
        median = times[middle] if len(times) % 2 else (times[middle - 1] + times[middle]) / 2
        return times[-1] / median if median > 0 else None

    @property
    def workers(self) -> int:
        return sum(1 for p in self.pods if p.role == naming.ROLE_WORKER)

    @property
    def workers_ready(self) -> int:
        return sum(1 for p in self.pods if p.role == naming.ROLE_WORKER and p.ready)

    def since_start(self, phase: str) -> float | None:
        """Seconds from the manager's start to when `phase` was first reached; None if never."""
        for name, at in self.reached:
            if name == phase:
                return max(0.0, at - self.started_at)
        return None


def replace(state: JobState, **changes: Any) -> JobState:
    """`state` with some fields changed."""
    return dataclasses.replace(state, **changes)


def enter(state: JobState, phase: str, now: float) -> JobState:
    """The job in `phase` from `now` on; a final phase stays final."""
    if phase not in naming.PHASES:
        raise ValueError(f"phase {phase!r} is not one of {', '.join(naming.PHASES)}")
    if state.phase in FINAL or state.phase == phase:
        return state
    reached = state.reached if any(n == phase for n, _ in state.reached) else (*state.reached, (phase, now))
    return dataclasses.replace(state, phase=phase, reached=reached)


def with_pod(state: JobState, pod: PodState) -> JobState:
    """`pod` added, or updated in place."""
    others = tuple(p for p in state.pods if p.name != pod.name)
    if len(others) == len(state.pods):
        return dataclasses.replace(state, pods=(*state.pods, pod))
    return dataclasses.replace(state, pods=tuple(pod if p.name == pod.name else p for p in state.pods))


def ready(state: JobState, names: Iterable[str]) -> JobState:
    wanted = set(names)
    return dataclasses.replace(state, pods=tuple(
        dataclasses.replace(p, ready=True) if p.name in wanted else p for p in state.pods))


def without_pods(state: JobState, names: Iterable[str] | None = None) -> JobState:
    """The named pods gone (all of them when None): their GPUs are no longer held."""
    if names is None:
        return dataclasses.replace(state, pods=())
    gone = set(names)
    return dataclasses.replace(state, pods=tuple(p for p in state.pods if p.name not in gone))


def with_transport(state: JobState, host: str, transport: str) -> JobState:
    """NCCL on pod `host` named its transport (the first it names is kept)."""
    if any(h == host for h, _ in state.transports):
        return state
    return dataclasses.replace(state, transports=(*state.transports, (host, transport)))


def with_progress(state: JobState, report: Progress, now: float) -> JobState:
    """The training reported progress: the first report with a step is the first training step."""
    first = state.first_step_at
    if first is None and report.step is not None and report.step >= 1:
        first = now
    return dataclasses.replace(state, progress=progress.merge(state.progress, report), first_step_at=first)


# ---- what the manager pod shows ----------------------------------------------------------------------------

def pod_metadata(state: JobState) -> dict[str, Any]:
    """The manager pod's phase label and annotations for this state: a merge patch's `metadata`."""
    annotations = {
        naming.JOB_ANNOTATION: state.job,
        naming.JOB_GPUS_ANNOTATION: f"{state.gpus} requested, {state.held} held",
        naming.PHASE_TIMES_ANNOTATION: phase_times(state),
    }
    if state.plan:
        annotations[naming.PLAN_ANNOTATION] = _cut(state.plan)
    if state.progress is not None:
        annotations[naming.PROGRESS_ANNOTATION] = progress.text(state.progress)
    return {"labels": {naming.PHASE_LABEL: state.phase}, "annotations": annotations}


def phase_times(state: JobState) -> str:
    """`Planning +0.0s, Scheduling +0.4s, Launching +2.6s, Running +3.0s`: when each phase was reached,
    counted from the manager's start."""
    return ", ".join(f"{name} +{max(0.0, at - state.started_at):.1f}s" for name, at in state.reached)


def plan_text(allocation: Iterable[tuple[str, int]], chief_node: str) -> str:
    """`5 on node-1, 1 on node-3 (chief)`."""
    return ", ".join(f"{gpus} on {node}" + (" (chief)" if node == chief_node else "")
                     for node, gpus in allocation)


def _cut(text: str) -> str:
    return text if len(text) <= ANNOTATION_MAX else text[:ANNOTATION_MAX - 3] + "..."


# ---- the state file ---------------------------------------------------------------------------------------

def dumps(state: JobState) -> str:
    data = dataclasses.asdict(state)
    return json.dumps(data, separators=(",", ":"))


def loads(text: str) -> JobState:
    """The state a file holds; ValueError when it is not one."""
    try:
        data = json.loads(text)
        pods = tuple(PodState(**p) for p in data.pop("pods"))
        ranks = tuple(RankState(**r) for r in data.pop("ranks", ()))
        reached = tuple((str(n), float(t)) for n, t in data.pop("reached"))
        transports = tuple((str(h), str(t)) for h, t in data.pop("transports", ()))
        report = data.pop("progress")
        if report is not None:
            report["extra"] = tuple((str(k), float(v)) for k, v in report["extra"])
            report = Progress(**report)
        return JobState(pods=pods, reached=reached, progress=report, transports=transports, ranks=ranks,
                        **data)
    except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as err:
        raise ValueError(f"not a job state: {err}") from err


def initial(*, job: str, namespace: str, gpus: int = 0, started_at: float | None = None,
            phase: str = PLANNING, now: float | None = None) -> JobState:
    now = time.time() if now is None else now
    start = now if started_at is None else started_at
    return JobState(job=job, namespace=namespace, started_at=start, gpus=gpus, phase=phase,
                    reached=((phase, now),))


def pod_state(pod: Mapping[str, Any], *, ready_: bool = False) -> PodState:
    """A job pod (as the API returns it) as the state keeps it."""
    return PodState(name=podstatus.name(pod), role=podstatus.role(pod),
                    node=podstatus.node(pod) or podstatus.planned_node(pod) or "",
                    gpus=podstatus.gpus(pod), ready=ready_)
