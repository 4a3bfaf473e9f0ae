"""How a gang of new pods is getting on, on two clocks (pure; pretraining.py and the keeper feed it pods).

Scheduling and starting are different waits with different causes, so each has its own clock:
- `schedule_timeout`, from creation until every pod is bound to its node: a pod the scheduler cannot place
  (its GPUs taken since the plan) is a placement failure; the gang is deleted and re-planned.
- `start_timeout`, from the moment a pod is bound until it runs (workers: Ready): pulling a 6-8 GB training
  image onto a fresh node takes minutes, and must not be mistaken for a placement failure.

Some waits never end by themselves, and end the job at once, with the kubelet's own words: an image
reference the runtime cannot parse (InvalidImageName), a container whose configuration cannot be built
(CreateContainerConfigError: a missing Secret or ConfigMap key), an image that keeps failing to pull
(ErrImagePull/ImagePullBackOff for longer than PULL_FAILURE_GRACE: a typo in the name or tag, a missing pull
Secret). A re-plan would fail the same way on any node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from distributetrain import podstatus

Pod = Mapping[str, Any]

# the kubelet's waiting reasons that no retry fixes (pkg/kubelet/images and kuberuntime, Kubernetes 1.30+)
FATAL_WAITING = frozenset({"InvalidImageName", "CreateContainerConfigError", "ErrImageNeverPull"})
PULL_FAILING = frozenset({"ErrImagePull", "ImagePullBackOff"})
# the kubelet retries a failed pull after 10 s, then 20 s...: 30 s of failing is at least two failed pulls
PULL_FAILURE_GRACE = 30.0
PROGRESS_EVERY = 30.0


@dataclass(frozen=True)
class Outcome:
    """How the wait ended: `failure` None when every pod started; `final` when no re-plan can help."""

    failure: str | None
    final: bool = False


def waiting(pod: Pod) -> list[tuple[str, str, str]]:
    """(container, reason, message) of every container (init ones first) waiting with a reason."""
    status = pod.get("status") or {}
    out = []
    for item in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        state = (item.get("state") or {}).get("waiting") or {}
        if state.get("reason"):
            out.append((str(item.get("name")), str(state["reason"]), str(state.get("message") or "")))
    return out


def is_bound(pod: Pod) -> bool:
    return bool(podstatus.node(pod))


@dataclass
class StartWatch:
    """The wait for `names` to be `ok`, from `created` (monotonic seconds): fed snapshots and the time, it
    says how the wait ended (`observe`), when to look again without a change (`wake_at`) and what to say
    meanwhile (`progress`)."""

    names: Sequence[str]
    ok: Callable[[Pod], bool]
    created: float
    schedule_timeout: float
    start_timeout: float
    deadline: float | None = None  # the job's active deadline, which no wait outlives
    # what unbound pods wait for, for the progress line (a node-pool scale-up, a Kueue admission)
    unbound_hint: Callable[[Mapping[str, Pod]], str] | None = None
    bound_at: dict[str, float] = field(default_factory=dict)
    pull_failing_since: dict[str, float] = field(default_factory=dict)
    said_at: float | None = None

    def observe(self, pods: Mapping[str, Pod], now: float) -> Outcome | None:
        """The outcome, or None while the wait goes on."""
        missing = [n for n in self.names if n not in pods]
        if missing:
            return Outcome(f"pod(s) {', '.join(missing)} disappeared")
        for name in self.names:
            pod = pods[name]
            if is_bound(pod):
                self.bound_at.setdefault(name, now)
            fatal = self._fatal(pod, now)
            if fatal:
                return Outcome(fatal, final=True)
        if all(self.ok(pods[n]) for n in self.names):
            return Outcome(None)
        ended = [pods[n] for n in self.names if not self.ok(pods[n]) and (
            podstatus.is_terminated(pods[n]) or podstatus.is_deleting(pods[n]))]
        if ended:
            return Outcome("; ".join(podstatus.describe(p) for p in ended))
        unbound = [n for n in self.names if n not in self.bound_at]
        if unbound and now >= self.created + self.schedule_timeout:
            late = "; ".join(podstatus.describe(pods[n]) for n in unbound)
            return Outcome(f"not bound to a node within --schedule-timeout ({self.schedule_timeout:g}s): "
                           f"{late}")
        slow = [n for n, at in self.bound_at.items()
                if not self.ok(pods[n]) and now >= at + self.start_timeout]
        if slow:
            late = "; ".join(podstatus.describe(pods[n]) for n in slow)
            return Outcome(f"bound but not started within --start-timeout ({self.start_timeout:g}s): {late}")
        return None

    def _fatal(self, pod: Pod, now: float) -> str | None:
        name = podstatus.name(pod)
        failing = False
        for container, reason, message in waiting(pod):
            if reason in FATAL_WAITING:
                return f"pod {name}: container {container}: {reason}: {message}".rstrip(": ")
            if reason in PULL_FAILING:
                failing = True
                since = self.pull_failing_since.setdefault(name, now)
                if now - since >= PULL_FAILURE_GRACE:
                    return (f"pod {name} on node {podstatus.node(pod)}: container {container}: the image "
                            f"could not be pulled for {now - since:.0f}s ({reason}: {message})").rstrip(": ")
        if not failing:
            self.pull_failing_since.pop(name, None)
        return None

    def wake_at(self) -> float:
        """When the wait must look again even if nothing changes: a clock running out, a pull failing long
        enough, the next progress line."""
        times = [self.created + self.schedule_timeout, (self.said_at or self.created) + PROGRESS_EVERY]
        times += [at + self.start_timeout for at in self.bound_at.values()]
        times += [since + PULL_FAILURE_GRACE for since in self.pull_failing_since.values()]
        if self.deadline is not None:
            times.append(self.deadline)
        return min(times)

    def progress(self, pods: Mapping[str, Pod], now: float) -> str | None:
        """A line for the log every PROGRESS_EVERY seconds while pods are slow: how many are bound, which
        are starting (pulling their image) and for how long."""
        if now < (self.said_at or self.created) + PROGRESS_EVERY:
            return None
        self.said_at = now
        waiting_for = [n for n in self.names if n in pods and not self.ok(pods[n])]
        if not waiting_for:
            return None
        bound = sum(1 for n in self.names if n in self.bound_at)
        hint = self.unbound_hint(pods) if self.unbound_hint is not None and bound < len(self.names) else ""
        starting = [f"{n} on {podstatus.node(pods[n])} for {now - self.bound_at[n]:.0f}s"
                    f"{' (' + ', '.join(r for _, r, _ in waiting(pods[n])) + ')' if waiting(pods[n]) else ''}"
                    for n in waiting_for if n in self.bound_at]
        line = f"{bound} of {len(self.names)} pod(s) bound to their nodes" + (f", {hint}" if hint else "")
        if starting:
            line += f"; starting (image pull, container start; --start-timeout {self.start_timeout:g}s): " + \
                ", ".join(starting)
        return line
